package server

import (
	"time"

	"felix.dev/felix/broker/auth"
	"felix.dev/felix/broker/wire"
)

// dispatchCounter decodes, authorizes and serves a counter request
// (wire.FeatureCounters). An add needs Append (write) on the stream, a get
// Read, a snapshot Trim (it trims the counter log). Each is served on its
// own goroutine; a shard's counter requests are applied one at a time.
func (c *conn) dispatchCounter(f wire.Frame, start time.Time, held charge) {
	op := opName(f.Type)
	if !c.feats.Has(wire.FeatureCounters) {
		c.fail(f.ReqID, op, start, held, &wire.Error{Code: wire.CodeBadRequest,
			Message: f.Type.String() + " needs the counters feature, which this connection did not negotiate"})
		return
	}
	switch f.Type {
	case wire.MsgCounterAdd:
		req, err := wire.DecodeCounterAdd(f.Body)
		if err == nil {
			err = c.authorize(auth.OpAppend, req.Shard.Stream)
		}
		if err != nil {
			c.fail(f.ReqID, op, start, held, err)
			return
		}
		go func() {
			ok, err := c.counterAdd(req)
			c.counterAnswer(f.ReqID, op, start, held, wire.MsgCounterAddOK, wire.EncodeCounterAddOK(ok), err)
		}()
	case wire.MsgCounterGet:
		req, err := wire.DecodeCounterGet(f.Body)
		if err == nil {
			err = c.authorize(auth.OpRead, req.Shard.Stream)
		}
		if err != nil {
			c.fail(f.ReqID, op, start, held, err)
			return
		}
		go func() {
			ok, err := c.counterGet(req)
			if err == nil && c.certExpired() {
				err = errCertExpired
			}
			c.counterAnswer(f.ReqID, op, start, held, wire.MsgCounterGetOK, wire.EncodeCounterGetOK(ok), err)
		}()
	case wire.MsgCounterSnapshot:
		req, err := wire.DecodeCounterSnapshot(f.Body)
		if err == nil {
			err = c.authorize(auth.OpTrim, req.Shard.Stream)
		}
		if err != nil {
			c.fail(f.ReqID, op, start, held, err)
			return
		}
		go func() {
			ok, err := c.counterSnapshot(req)
			c.counterAnswer(f.ReqID, op, start, held, wire.MsgCounterSnapshotOK, wire.EncodeCounterSnapshotOK(ok), err)
		}()
	}
}

// counterAnswer answers a counter request with body, or with err.
func (c *conn) counterAnswer(reqID uint32, op string, start time.Time, held charge, t wire.MsgType, body []byte, err error) {
	if err != nil {
		c.fail(reqID, op, start, held, err)
		return
	}
	c.ok(t, reqID, op, start, held, body)
}
