package server

import (
	"time"

	"felix.dev/felix/broker/auth"
	"felix.dev/felix/broker/wire"
)

// dispatchGroup decodes, authorizes and serves a group request
// (wire.FeatureGroups). Every group request needs Read on the stream: a
// consumer group is how readers share a stream, and its commits and claims
// only record what they read (they never change the data log). Each is
// served on its own goroutine; a shard's group requests are applied one
// at a time.
func (c *conn) dispatchGroup(f wire.Frame, start time.Time, held charge) {
	op := opName(f.Type)
	if !c.feats.Has(wire.FeatureGroups) {
		c.fail(f.ReqID, op, start, held, &wire.Error{Code: wire.CodeBadRequest,
			Message: f.Type.String() + " needs the groups feature, which this connection did not negotiate"})
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
	switch f.Type {
	case wire.MsgGroupClaim:
		req, err := wire.DecodeGroupClaim(f.Body)
		if err == nil {
			err = c.authorize(auth.OpRead, req.Shard.Stream)
		}
		if refuse(err) {
			return
		}
		go func() {
			ok, err := c.groupClaim(req)
			answer(wire.MsgGroupClaimOK, wire.EncodeGroupClaimOK(ok), err)
		}()
	case wire.MsgGroupHeartbeat:
		req, err := wire.DecodeGroupHeartbeat(f.Body)
		if err == nil {
			err = c.authorize(auth.OpRead, req.Shard.Stream)
		}
		if refuse(err) {
			return
		}
		go func() {
			ok, err := c.groupHeartbeat(req)
			answer(wire.MsgGroupHeartbeatOK, wire.EncodeGroupHeartbeatOK(ok), err)
		}()
	case wire.MsgGroupCommit:
		req, err := wire.DecodeGroupCommit(f.Body)
		if err == nil {
			err = c.authorize(auth.OpRead, req.Shard.Stream)
		}
		if refuse(err) {
			return
		}
		go func() {
			ok, err := c.groupCommit(req)
			answer(wire.MsgGroupCommitOK, wire.EncodeGroupCommitOK(ok), err)
		}()
	case wire.MsgGroupLeave:
		req, err := wire.DecodeGroupLeave(f.Body)
		if err == nil {
			err = c.authorize(auth.OpRead, req.Shard.Stream)
		}
		if refuse(err) {
			return
		}
		go func() {
			ok, err := c.groupLeave(req)
			answer(wire.MsgGroupLeaveOK, wire.EncodeGroupLeaveOK(ok), err)
		}()
	case wire.MsgGroupDescribe:
		req, err := wire.DecodeGroupDescribe(f.Body)
		if err == nil {
			err = c.authorize(auth.OpRead, req.Shard.Stream)
		}
		if refuse(err) {
			return
		}
		go func() {
			ok, err := c.groupDescribe(req)
			var body []byte
			if err == nil {
				body, err = wire.EncodeGroupDescribeOK(ok)
			}
			if err == nil && c.certExpired() {
				err = errCertExpired
			}
			answer(wire.MsgGroupDescribeOK, body, err)
		}()
	}
}
