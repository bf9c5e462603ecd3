package server

import (
	"context"
	"errors"
	"felix.dev/felix/broker/producer"
	"fmt"
	"slices"
	"time"

	"felix.dev/felix/broker/auth"
	"felix.dev/felix/broker/logstore"
	"felix.dev/felix/broker/record"
	"felix.dev/felix/broker/wire"
)

// readAnswerReserve is budget charged to a read on top of its byte bound,
// for per-record framing overhead.
const readAnswerReserve = 64 << 10

// dispatch handles one frame read after the handshake; frameHeld is what
// the frame holds of the server's frame budget. It reports false when the
// connection must stop reading.
func (c *conn) dispatch(f wire.Frame, frameHeld frameHold) bool {
	if c.serveReplication(f, frameHeld) {
		return true
	}
	start := time.Now()
	o := &c.s.opts
	if o.Role == RolePeer && !f.Type.ReservedReplication() {
		o.Metrics.requestRefused(RefusedPeerPort)
		c.reqWG.Add(1)
		c.unanswered.Add(1)
		c.fail(f.ReqID, opName(f.Type), start, charge{frame: frameHeld},
			&wire.Error{Code: wire.CodeNotAuthorized, Message: "the peer port serves only replication; send client requests to the client port"})
		return true
	}
	want := int64(wire.FrameHeaderSize + len(f.Body))
	var readReq wire.ReadRequest
	if f.Type == wire.MsgRead {
		var err error
		if readReq, err = wire.DecodeRead(f.Body); err == nil {
			err = checkReadOffset(readReq)
		}
		if err == nil {
			err = c.authorize(auth.OpRead, readReq.Shard.Stream)
		}
		if err != nil {
			c.reqWG.Add(1)
			c.unanswered.Add(1)
			c.fail(f.ReqID, "read", start, charge{frame: frameHeld}, err)
			return true
		}
		readReq.MaxBytes = c.clampReadBytes(readReq.MaxBytes)
		want += int64(readReq.MaxBytes) + readAnswerReserve
	}
	want += recordAnswerCharge(f.Type)
	// Backpressure: stop reading this connection while its unanswered
	// requests hold the in-flight budget.
	connHeld, err := c.budget.acquire(c.waitCtx, want)
	if err != nil {
		frameHeld.release()
		return false
	}
	held := charge{conn: connHeld, frame: frameHeld}
	c.reqWG.Add(1)
	c.unanswered.Add(1)
	switch f.Type {
	case wire.MsgAppend:
		req, err := wire.DecodeAppendFor(f.Body, c.feats)
		if err == nil {
			err = c.authorize(auth.OpAppend, req.Shard.Stream)
		}
		if err == nil {
			err = c.checkAppend(req)
		}
		if err != nil {
			c.fail(f.ReqID, "append", start, held, err)
			return true
		}
		c.enqueue(req.Shard, &pending{reqID: f.ReqID, start: start, held: held, app: &req})
	case wire.MsgTrim:
		req, err := wire.DecodeTrim(f.Body)
		if err == nil {
			err = c.authorize(auth.OpTrim, req.Shard.Stream)
		}
		if err == nil && recordBytes(record.Record{Headers: req.Headers}) > o.MaxRecordBytes {
			err = &wire.Error{Code: wire.CodeRecordTooLarge, Message: "trim headers over the record limit", Limit: uint64(o.MaxRecordBytes)}
		}
		if err != nil {
			c.fail(f.ReqID, "trim", start, held, err)
			return true
		}
		c.enqueue(req.Shard, &pending{reqID: f.ReqID, start: start, held: held, trim: &req})
	case wire.MsgRead:
		go c.handleRead(f.ReqID, readReq, start, held)
	case wire.MsgDescribe:
		req, err := wire.DecodeDescribe(f.Body)
		if err == nil {
			err = c.authorize(auth.OpDescribe, req.Shard.Stream)
		}
		if err != nil {
			c.fail(f.ReqID, "describe", start, held, err)
			return true
		}
		go c.handleDescribe(f.ReqID, req, start, held)
	case wire.MsgMetadata:
		if !c.feats.Has(wire.FeatureMetadata) {
			c.fail(f.ReqID, "unknown", start, held, &wire.Error{Code: wire.CodeBadRequest, Message: "Metadata needs the metadata feature, which this connection did not negotiate"})
			return true
		}
		req, err := wire.DecodeMetadata(f.Body)
		for _, s := range req.Streams {
			if err == nil {
				err = c.authorize(auth.OpDescribe, s)
			}
		}
		if err != nil {
			c.fail(f.ReqID, "metadata", start, held, err)
			return true
		}
		go c.handleMetadata(f.ReqID, req, start, held)
	case wire.MsgCounterAdd, wire.MsgCounterGet, wire.MsgCounterSnapshot:
		c.dispatchCounter(f, start, held)
	case wire.MsgGroupClaim, wire.MsgGroupHeartbeat, wire.MsgGroupCommit, wire.MsgGroupLeave, wire.MsgGroupDescribe:
		c.dispatchGroup(f, start, held)
	case wire.MsgGroupAckConfig, wire.MsgGroupFetch, wire.MsgGroupAck, wire.MsgGroupNak, wire.MsgDeadLetterRead, wire.MsgDeadLetterRedrive,
		wire.MsgDeadLetterTrim:
		c.dispatchAcks(f, start, held)
	case wire.MsgHello:
		c.fail(f.ReqID, "hello", start, held, &wire.Error{Code: wire.CodeBadRequest, Message: "Hello after the handshake"})
	default:
		msg := fmt.Sprintf("unknown message type %s", f.Type)
		if f.Type.ReservedReplication() {
			msg = fmt.Sprintf("message type %s is reserved for replication, which this broker does not serve", f.Type)
		}
		c.fail(f.ReqID, "unknown", start, held, &wire.Error{Code: wire.CodeBadRequest, Message: msg})
	}
	return true
}

// authorize asks the Authorizer whether the connection's principal may
// perform op on stream; a refusal is a NotAuthorized wire error, counted
// and logged (principal, operation, stream; never a payload).
func (c *conn) authorize(op auth.Operation, stream string) error {
	err := c.s.opts.Authorizer.Authorize(c.principal, op, stream)
	if err == nil {
		return nil
	}
	c.s.opts.Metrics.requestRefused(RefusedNotAuthorized)
	c.log.V(1).Info("request not authorized", "principal", c.principal.String(), "op", op.String(), "stream", stream)
	return &wire.Error{Code: wire.CodeNotAuthorized, Message: err.Error()}
}

// checkReadOffset refuses an explicit start offset that is one of the
// store's reserved markers (logstore.FromEarliest, FromLatest): the wire's
// from field is the only way to ask for earliest or latest, and no real
// offset reaches those values.
func checkReadOffset(r wire.ReadRequest) error {
	if r.From == wire.FromOffset && r.Offset >= min(logstore.FromEarliest, logstore.FromLatest) {
		return &wire.Error{Code: wire.CodeBadRequest,
			Message: fmt.Sprintf("read offset %d is reserved; use from=earliest or from=latest", r.Offset)}
	}
	return nil
}

// DefaultReadBytes is a read's byte bound when the request leaves it 0.
const DefaultReadBytes = 1 << 20

// clampReadBytes applies the default and the cap (half a frame) to a read's
// byte bound.
func (c *conn) clampReadBytes(n uint32) uint32 {
	if n == 0 {
		n = DefaultReadBytes
	}
	return min(n, c.s.opts.MaxFrameSize/2)
}

// recordAnswerCharge is what a request whose answer carries records
// bounded by MaxAnswerBytes (GroupFetch, DeadLetterRead) is charged on top
// of its frame, before it runs, as a read is charged its byte bound: a
// connection cannot make the broker build and hold more such answers than
// its in-flight budget. Zero for every other request.
func recordAnswerCharge(t wire.MsgType) int64 {
	switch t {
	case wire.MsgGroupFetch, wire.MsgDeadLetterRead:
		return MaxAnswerBytes + readAnswerReserve
	}
	return 0
}

// recordBytes is what the limits count of a record: payload plus headers.
func recordBytes(r record.Record) int {
	n := len(r.Payload)
	for _, h := range r.Headers {
		n += len(h.Key) + len(h.Value)
	}
	return n
}

// storeBytes over-estimates the store's encoding of recs, so merged
// appends never exceed the store's batch byte limit.
func storeBytes(recs []record.Record) int {
	n := 17
	for _, r := range recs {
		n += 32 + recordBytes(r) + 8*len(r.Headers)
	}
	return n
}

// producerHeaderBytes is what the producer header adds to the first record
// of an idempotent append.
const producerHeaderBytes = len(producer.HeaderKey) + producer.HeaderValueSize

// checkAppend applies the connection limits to an append before it is
// queued; nothing of a refused batch is written.
func (c *conn) checkAppend(req wire.AppendRequest) error {
	o := &c.s.opts
	if len(req.Records) == 0 {
		return &wire.Error{Code: wire.CodeBadRequest, Message: "empty append"}
	}
	if len(req.Records) > o.MaxBatchRecords {
		return &wire.Error{Code: wire.CodeRecordTooLarge, Limit: uint64(o.MaxBatchRecords),
			Message: fmt.Sprintf("%d records in one append, limit %d", len(req.Records), o.MaxBatchRecords)}
	}
	for i, r := range req.Records {
		if _, ok := producer.Find(r.Headers); ok {
			return &wire.Error{Code: wire.CodeBadRequest,
				Message: fmt.Sprintf("record %d carries the header %q, which is reserved for the broker", i, producer.HeaderKey)}
		}
		n := recordBytes(r)
		if i == 0 && req.Producer != nil {
			n += producerHeaderBytes
		}
		if n > o.MaxRecordBytes {
			return &wire.Error{Code: wire.CodeRecordTooLarge, Limit: uint64(o.MaxRecordBytes),
				Message: fmt.Sprintf("record %d is %d bytes, limit %d", i, n, o.MaxRecordBytes)}
		}
	}
	if n := storeBytes(req.Records); n > o.MaxBatchBytes {
		return &wire.Error{Code: wire.CodeRecordTooLarge, Limit: uint64(o.MaxBatchBytes),
			Message: fmt.Sprintf("append of about %d bytes, limit %d", n, o.MaxBatchBytes)}
	}
	return nil
}

// fail answers reqID with the error mapped to its wire code.
func (c *conn) fail(reqID uint32, op string, start time.Time, held charge, err error) {
	e := mapError(err)
	body, encErr := wire.EncodeErrorFor(e, c.feats)
	if encErr != nil {
		body, _ = wire.EncodeError(&wire.Error{Code: wire.CodeUnavailable, Message: "cannot encode error"}, c.feats)
	}
	c.s.opts.Metrics.request(op, e.Code.String(), time.Since(start))
	c.unanswered.Add(-1)
	c.answer(wire.MsgError, reqID, body, held)
	c.reqWG.Done()
}

// ok answers reqID with a success message.
func (c *conn) ok(t wire.MsgType, reqID uint32, op string, start time.Time, held charge, body []byte) {
	c.s.opts.Metrics.request(op, "ok", time.Since(start))
	c.unanswered.Add(-1)
	c.answer(t, reqID, body, held)
	c.reqWG.Done()
}

// mapError maps storage and server errors to wire errors.
func mapError(err error) *wire.Error {
	var we *wire.Error
	switch {
	case errors.As(err, &we):
		return we
	case errors.Is(err, logstore.ErrBadRecord), errors.Is(err, logstore.ErrFloorAboveTrim),
		errors.Is(err, logstore.ErrBeyondTail), errors.Is(err, logstore.ErrBaseMismatch):
		return &wire.Error{Code: wire.CodeBadRequest, Message: err.Error()}
	case errors.Is(err, record.ErrClosed), errors.Is(err, context.Canceled), errors.Is(err, context.DeadlineExceeded):
		return &wire.Error{Code: wire.CodeUnavailable, Message: err.Error()}
	}
	return wire.ErrorFrom(err)
}

func (c *conn) handleDescribe(reqID uint32, req wire.DescribeRequest, start time.Time, held charge) {
	l, err := c.s.shards.DataLog(req.Shard)
	if err != nil {
		c.fail(reqID, "describe", start, held, err)
		return
	}
	info := l.Describe()
	c.ok(wire.MsgDescribeOK, reqID, "describe", start, held, wire.EncodeDescribeOKFor(wire.DescribeOK{
		Base: info.Base, Floor: info.ReadableStart(), Tail: info.Tail, Committed: info.Committed,
		Fenced: info.Fenced, Retention: info.Retention.Enabled()}, c.feats))
}

func (c *conn) handleRead(reqID uint32, req wire.ReadRequest, start time.Time, held charge) {
	o := &c.s.opts
	l, err := c.s.shards.DataLog(req.Shard)
	if err != nil {
		c.fail(reqID, "read", start, held, err)
		return
	}
	opts := logstore.ReadOptions{MaxRecords: o.MaxReadRecords, MaxBytes: int(req.MaxBytes), WithTrimTag: c.feats.Has(wire.FeatureTrimTag)}
	if req.MaxRecords > 0 && int(req.MaxRecords) < o.MaxReadRecords {
		opts.MaxRecords = int(req.MaxRecords)
	}
	from := req.Offset
	switch req.From {
	case wire.FromEarliest:
		from = logstore.FromEarliest
	case wire.FromLatest:
		from = logstore.FromLatest
	}
	res, err := readCommitted(l, from, opts)
	if err == nil && len(res.Records) == 0 && req.WaitMillis > 0 {
		wait := min(time.Duration(req.WaitMillis)*time.Millisecond, o.MaxReadWait)
		ctx, cancel := context.WithTimeout(c.waitCtx, wait)
		for err == nil && len(res.Records) == 0 {
			if l.WaitCommitted(ctx, res.Next) != nil {
				break // waited long enough, or draining: answer what we have
			}
			res, err = readCommitted(l, res.Next, opts)
		}
		cancel()
	}
	if c.certExpired() {
		err = errCertExpired
	}
	if err != nil {
		c.fail(reqID, "read", start, held, err)
		return
	}
	body, err := wire.EncodeReadOK(wire.ReadOK{Next: res.Next, Records: stripProducer(res.Records)})
	if err != nil {
		c.fail(reqID, "read", start, held, err)
		return
	}
	c.ok(wire.MsgReadOK, reqID, "read", start, held, body)
}

// readCommitted reads only committed records: clients never see a record
// that is not acknowledged under the shard's ack mode. A log that is a
// ReadGate is asked first: a leader that does not know its committed end
// yet must refuse, not answer "nothing committed".
func readCommitted(l Log, from uint64, opts logstore.ReadOptions) (logstore.ReadResult, error) {
	if g, ok := l.(ReadGate); ok {
		if err := g.Readable(); err != nil {
			return logstore.ReadResult{}, err
		}
	}
	info := l.Describe()
	if info.Committed == 0 {
		// Nothing committed (UpTo 0 would mean the durable tail).
		if from != logstore.FromEarliest && from != logstore.FromLatest && from > info.Tail {
			return logstore.ReadResult{}, fmt.Errorf("server: read from %d above tail %d: %w", from, info.Tail, logstore.ErrBeyondTail)
		}
		switch from {
		case logstore.FromEarliest, logstore.FromLatest:
			from = info.Base
		}
		return logstore.ReadResult{Next: from}, nil
	}
	opts.UpTo = info.Committed
	return l.Read(from, opts)
}

// stripProducer hides the broker's producer header from readers. Records
// that carry it are copied, never changed in place (they may be shared
// with a cache).
func stripProducer(recs []record.Record) []record.Record {
	var out []record.Record
	for i, r := range recs {
		if _, ok := producer.Find(r.Headers); !ok {
			continue
		}
		if out == nil {
			out = slices.Clone(recs)
		}
		out[i].Headers = producer.Strip(r.Headers)
	}
	if out == nil {
		return recs
	}
	return out
}
