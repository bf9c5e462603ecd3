package server

import (
	"time"

	"felix.dev/felix/broker/auth"
	"felix.dev/felix/broker/wire"
)

// dispatchAcks decodes, authorizes and serves a per-record acknowledgement
// or dead-letter request (wire.FeatureAcks). The group requests and a
// dead-letter read need Read on the stream, as the group requests do; a
// redrive appends to the data log, so it needs Append; a dead-letter trim
// needs Trim. Each is served on
// its own goroutine; a shard's group requests are applied one at a time,
// and so are its dead-letter requests.
func (c *conn) dispatchAcks(f wire.Frame, start time.Time, held charge) {
	op := opName(f.Type)
	if !c.feats.Has(wire.FeatureAcks) {
		c.fail(f.ReqID, op, start, held, &wire.Error{Code: wire.CodeBadRequest,
			Message: f.Type.String() + " needs the acks feature, which this connection did not negotiate"})
		return
	}
	refuse := func(err error) bool {
		if err != nil {
			c.fail(f.ReqID, op, start, held, err)
			return true
		}
		return false
	}
	answer := func(t wire.MsgType, body []byte, err error) {
		if err != nil {
			c.fail(f.ReqID, op, start, held, err)
			return
		}
		c.ok(t, f.ReqID, op, start, held, body)
	}
	s := c.s
	switch f.Type {
	case wire.MsgGroupAckConfig:
		req, err := wire.DecodeGroupAckConfig(f.Body)
		if err == nil {
			err = c.authorize(auth.OpRead, req.Shard.Stream)
		}
		if refuse(err) {
			return
		}
		go func() {
			ok, err := s.groupAckConfig(req)
			answer(wire.MsgGroupAckConfigOK, wire.EncodeGroupAckConfigOK(ok), err)
		}()
	case wire.MsgGroupFetch:
		req, err := wire.DecodeGroupFetch(f.Body)
		if err == nil {
			err = c.authorize(auth.OpRead, req.Shard.Stream)
		}
		if refuse(err) {
			return
		}
		go func() {
			ok, err := s.groupFetch(req)
			var body []byte
			if err == nil {
				body, err = wire.EncodeGroupFetchOK(ok)
			}
			if err == nil && c.certExpired() {
				err = errCertExpired
			}
			answer(wire.MsgGroupFetchOK, body, err)
		}()
	case wire.MsgGroupAck:
		req, err := wire.DecodeGroupAck(f.Body)
		if err == nil {
			err = c.authorize(auth.OpRead, req.Shard.Stream)
		}
		if refuse(err) {
			return
		}
		go func() {
			ok, err := s.groupAck(req)
			answer(wire.MsgGroupAckOK, wire.EncodeGroupAckOK(ok), err)
		}()
	case wire.MsgGroupNak:
		req, err := wire.DecodeGroupNak(f.Body)
		if err == nil {
			err = c.authorize(auth.OpRead, req.Shard.Stream)
		}
		if refuse(err) {
			return
		}
		go func() {
			ok, err := s.groupNak(req)
			answer(wire.MsgGroupNakOK, wire.EncodeGroupNakOK(ok), err)
		}()
	case wire.MsgDeadLetterRead:
		req, err := wire.DecodeDeadLetterRead(f.Body)
		if err == nil {
			err = c.authorize(auth.OpRead, req.Shard.Stream)
		}
		if refuse(err) {
			return
		}
		go func() {
			ok, err := s.deadLetterRead(req)
			var body []byte
			if err == nil {
				body, err = wire.EncodeDeadLetterReadOK(ok)
			}
			if err == nil && c.certExpired() {
				err = errCertExpired
			}
			answer(wire.MsgDeadLetterReadOK, body, err)
		}()
	case wire.MsgDeadLetterRedrive:
		req, err := wire.DecodeDeadLetterRedrive(f.Body)
		if err == nil {
			err = c.authorize(auth.OpAppend, req.Shard.Stream)
		}
		if refuse(err) {
			return
		}
		go func() {
			ok, err := s.deadLetterRedrive(req)
			answer(wire.MsgDeadLetterRedriveOK, wire.EncodeDeadLetterRedriveOK(ok), err)
		}()
	case wire.MsgDeadLetterTrim:
		req, err := wire.DecodeDeadLetterTrim(f.Body)
		if err == nil {
			err = c.authorize(auth.OpTrim, req.Shard.Stream)
		}
		if refuse(err) {
			return
		}
		go func() {
			ok, err := s.deadLetterTrim(req)
			answer(wire.MsgDeadLetterTrimOK, wire.EncodeDeadLetterTrimOK(ok), err)
		}()
	}
}
