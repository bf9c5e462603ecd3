package server

import (
	"fmt"
	"slices"
	"sync"

	"felix.dev/felix/broker/logstore"
	"felix.dev/felix/broker/producer"
	"felix.dev/felix/broker/record"
	"felix.dev/felix/broker/wire"
)

// Generational is an optional interface of Log, for logs whose writer can
// change (a replicated shard's leader). Generation names the leadership
// the log is served under now (the epoch whose fence this leader has
// committed): when it changes, the server rebuilds the shard's producer
// table from the log before it decides about any idempotent append. It
// returns an error (Unavailable) while the log may not be read, so no
// decision is made from a log that may lag what a previous leader
// acknowledged. A log without it (standalone) has one generation, 0.
type Generational interface {
	Generation() (uint64, error)
}

// DefaultIdempotenceScanRecords bounds how far back from its tail a
// shard's log is read to rebuild its producer table.
const DefaultIdempotenceScanRecords = 1 << 16

// idemShard is one shard's table. mu is held from the decision until the
// batch is submitted, so a producer's batches reach the log in the order
// they were decided.
type idemShard struct {
	mu    sync.Mutex
	table *producer.Table
	gen   uint64
	built bool
}

func (s *Server) idemShard(id record.ShardID) *idemShard {
	return s.idem.get(id, func() *idemShard {
		return &idemShard{table: producer.NewTable(s.opts.Idempotence)}
	})
}

// rebuild reads the last o.IdempotenceScanRecords records of l (committed
// ones only) and rebuilds the table from the producer headers in them.
func (st *idemShard) rebuild(l Log, gen uint64, scan uint64) error {
	st.table.Reset()
	st.built = false
	info := l.Describe()
	from := info.ReadableStart()
	if info.Tail > scan && info.Tail-scan > from {
		from = info.Tail - scan
	}
	end := info.Committed
	for from < end {
		res, err := readCommitted(l, from, logstore.ReadOptions{MaxRecords: 4096, MaxBytes: 8 << 20})
		if err != nil {
			return fmt.Errorf("server: rebuilding the producer table from %d: %w", from, err)
		}
		st.table.ObserveRecords(res.Records)
		if res.Next <= from {
			break
		}
		from = res.Next
	}
	st.gen, st.built = gen, true
	return nil
}

// applyIdempotent applies one idempotent append: the shard's producer
// table decides whether it is new (written, with the producer header on
// its first record), a retry of a batch written before (answered with the
// original offsets, nothing written) or refused.
func (c *conn) applyIdempotent(shard record.ShardID, p *pending) {
	fail := func(err error) { c.fail(p.reqID, "append", p.start, p.held, err) }
	l, err := c.s.shards.DataLog(shard)
	if err != nil {
		fail(err)
		return
	}
	req := p.app
	// Keyed by principal and id, so that no principal can pose as another's
	// producer [TR-8].
	id, seq := producer.Scoped(c.principal.String(), producer.ID(req.Producer.ID)), req.Producer.Seq
	shown := producer.ID(req.Producer.ID)
	c.submitted <- struct{}{}
	st := c.s.idemShard(shard)
	st.mu.Lock()
	// The generation is read under the table's lock, so two appends never
	// decide from tables built for different leaderships.
	gen, err := logGeneration(l)
	if err != nil {
		st.mu.Unlock()
		<-c.submitted
		fail(err)
		return
	}
	if !st.built || st.gen != gen {
		if err := st.rebuild(l, gen, uint64(c.s.opts.IdempotenceScanRecords)); err != nil {
			st.mu.Unlock()
			<-c.submitted
			fail(&wire.Error{Code: wire.CodeUnavailable, Message: err.Error()})
			return
		}
	}
	d := st.table.Propose(id, seq, c.s.opts.Now().UnixNano())
	if d.Verdict != producer.Append {
		st.mu.Unlock()
		<-c.submitted
		c.log.V(1).Info("idempotent append not written", "shard", shard.String(), "producer", shown.String(), "seq", seq, "verdict", d.Verdict.String())
		switch d.Verdict {
		case producer.Duplicate:
			c.ok(wire.MsgAppendOK, p.reqID, "append", p.start, p.held, wire.EncodeAppendOK(wire.AppendOK{First: d.First, Tail: d.Tail}))
		case producer.OutOfSequence:
			fail(&wire.Error{Code: wire.CodeOutOfSequence, Next: d.Next,
				Message: fmt.Sprintf("%s: producer %s sent sequence %d, expected %d", shard, shown, seq, d.Next)})
		case producer.InFlight, producer.Uncertain:
			fail(&wire.Error{Code: wire.CodeUnavailable,
				Message: fmt.Sprintf("%s: producer %s sequence %d: outcome of an earlier attempt not known yet (%s); retry", shard, shown, seq, d.Verdict)})
		default: // Full
			fail(&wire.Error{Code: wire.CodeUnavailable,
				Message: fmt.Sprintf("%s: the leader keeps state for as many producers as it may (all wrote lately); retry later", shard)})
		}
		return
	}
	recs := make([]record.Record, len(req.Records))
	copy(recs, req.Records)
	for i := range recs {
		recs[i].Epoch = c.s.opts.Epoch
	}
	recs[0].Headers = append(slices.Clip(recs[0].Headers), producer.Header(id, seq, uint32(len(recs))))
	done := func(res logstore.AppendResult, err error, written bool) {
		st.mu.Lock()
		if st.built && st.gen == gen {
			switch {
			case err == nil:
				st.table.Done(id, seq, res.First, res.Tail)
			case written:
				st.table.Failed(id, seq)
			default:
				st.table.Abort(id, seq)
			}
		}
		st.mu.Unlock()
		<-c.submitted
		c.appended([]*pending{p}, res, err)
	}
	sub, async := l.(Submitter)
	if !async {
		res, err := l.Append(c.s.storeCtx, recs, req.ExpectTail)
		st.mu.Unlock()
		done(res, err, err != nil && !refusedBeforeWrite(err))
		return
	}
	wait, err := sub.SubmitAppend(c.s.storeCtx, recs, req.ExpectTail)
	st.mu.Unlock()
	if err != nil {
		done(logstore.AppendResult{}, err, false)
		return
	}
	go func() {
		res, err := wait(c.s.storeCtx)
		done(res, err, err != nil && !refusedBeforeWrite(err))
	}()
}

// refusedBeforeWrite reports whether a failed append certainly wrote
// nothing: a refusal decided before the batch was proposed or stored.
func refusedBeforeWrite(err error) bool {
	e := mapError(err)
	switch e.Code {
	case wire.CodeOffsetMismatch, wire.CodeRecordTooLarge, wire.CodeBadRequest, wire.CodeNotLeader, wire.CodeShardUnknown, wire.CodeNotAuthorized:
		return true
	}
	return false
}
