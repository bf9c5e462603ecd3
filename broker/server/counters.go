package server

import (
	"cmp"
	"errors"
	"fmt"
	"slices"
	"sync"
	"time"

	"felix.dev/felix/broker/counter"
	"felix.dev/felix/broker/logstore"
	"felix.dev/felix/broker/producer"
	"felix.dev/felix/broker/record"
	"felix.dev/felix/broker/wire"
)

// CounterShards is an optional interface of Shards: it serves each shard's
// counter log (record.LogCounter) under the same rules as DataLog (the
// same refusals, the same replicated append path). A Shards without it
// answers every counter request Unavailable.
type CounterShards interface {
	CounterLog(shard record.ShardID) (Log, error)
}

// DefaultCounterSnapshotEvery is how many adds to a shard's counters the
// server lets pass between two automatic snapshots (each followed by a
// conditional trim of the counter log below it).
const DefaultCounterSnapshotEvery = 4096

// counterTrimHeader names the trims the server makes of counter logs.
const counterTrimHeader = "felix.counter-snapshot"

// counterBatchAdds is the most adds the server appends to one counter log
// as one batch (one conditional append, one acknowledgement).
const counterBatchAdds = 64

// counterQueueAdds bounds the adds waiting for a shard's counter log; an
// add beyond it is answered Unavailable (retryable).
const counterQueueAdds = 4096

// counterShard is one shard's fold and producer table. mu is held by the
// one goroutine that reads or writes the counter log, append and
// acknowledgement included, so the value an add writes is the value its
// fold gives [the log is the truth; the state is its fold]. Adds do not
// each take mu for a write of their own: they queue (group commit), and
// whoever holds mu appends every queued add, up to counterBatchAdds, as
// one conditional append of consecutive records and answers each.
type counterShard struct {
	mu    sync.Mutex
	state *counter.State
	table *producer.Table
	gen   uint64
	built bool

	qmu   sync.Mutex
	queue []*pendingAdd // adds waiting for mu, oldest first
}

// pendingAdd is one queued add and, once done is closed, its answer.
type pendingAdd struct {
	c    *conn
	req  wire.CounterAddRequest
	id   producer.ID // the scoped producer, when req.Producer is set
	ok   wire.CounterAddOK
	err  error
	done chan struct{}
}

func (p *pendingAdd) answer(ok wire.CounterAddOK, err error) {
	p.ok, p.err = ok, err
	close(p.done)
}

func (p *pendingAdd) answered() bool {
	select {
	case <-p.done:
		return true
	default:
		return false
	}
}

func (s *Server) counterShard(id record.ShardID) *counterShard {
	return s.counters.get(id, func() *counterShard {
		return &counterShard{table: producer.NewTable(s.opts.Idempotence)}
	})
}

// counterLog returns the shard's counter log, or the refusal.
func (s *Server) counterLog(shard record.ShardID) (Log, error) {
	cl, ok := s.shards.(CounterShards)
	if !ok {
		return nil, &wire.Error{Code: wire.CodeUnavailable, Message: "this broker serves no counter logs"}
	}
	return cl.CounterLog(shard)
}

// ensure makes cs the fold of l's committed entries under l's current
// generation, rebuilding it from the log when the generation changed or
// an earlier request left it unknown. Called with cs.mu held.
func (cs *counterShard) ensure(s *Server, l Log) error {
	gen, err := logGeneration(l)
	if err != nil {
		return err
	}
	if cs.built && cs.gen == gen {
		return nil
	}
	cs.built = false
	st, err := refold(s, l, "counter", func(from uint64, trimmed bool) *counter.State {
		return counter.NewState(s.opts.CounterLimits, from, trimmed)
	})
	if err != nil {
		return err
	}
	cs.table.Reset()
	marks := st.Marks()
	sortMarks(marks)
	for _, m := range marks {
		cs.table.Observe(m.Producer, m.Seq, m.Offset, m.Offset+1, m.Timestamp)
	}
	cs.state, cs.gen, cs.built = st, gen, true
	return nil
}

// counterError maps the fold's refusals to wire errors.
func (s *Server) counterError(err error) error {
	lim := s.opts.CounterLimits.WithDefaults()
	switch {
	case errors.Is(err, counter.ErrEmptyKey):
		return &wire.Error{Code: wire.CodeBadRequest, Message: err.Error()}
	case errors.Is(err, counter.ErrTooManyKeys):
		return &wire.Error{Code: wire.CodeCounterLimit, Message: err.Error(), Limit: uint64(lim.MaxKeys)}
	case errors.Is(err, counter.ErrKeyTooLong):
		return &wire.Error{Code: wire.CodeCounterLimit, Message: err.Error(), Limit: uint64(lim.MaxKeyBytes)}
	case errors.Is(err, counter.ErrOverflow):
		return &wire.Error{Code: wire.CodeCounterLimit, Message: err.Error()}
	}
	return err
}

// appendCounterEntry appends one counter-log entry at the fold's tail;
// see appendCounterEntries.
func (cs *counterShard) appendCounterEntry(s *Server, l Log, rec record.Record) (logstore.AppendResult, error) {
	return cs.appendCounterEntries(s, l, []record.Record{rec})
}

// appendCounterEntries appends counter-log entries as one batch at the
// fold's tail, the first at the tail and each next one after it (a
// conditional append [TR-1]: nothing else may have landed since the
// fold), and folds them in order. On a failure or an unknown outcome the
// fold is dropped, to be rebuilt from the log. Called with cs.mu held.
func (cs *counterShard) appendCounterEntries(s *Server, l Log, recs []record.Record) (logstore.AppendResult, error) {
	tail := cs.state.Next()
	for i := range recs {
		recs[i].Kind, recs[i].Epoch = record.KindData, s.opts.Epoch
	}
	expect := &tail
	if s.opts.twin.unconditionalCounterAppend {
		expect = nil // twin: the counter log's tail check off
	}
	res, err := l.Append(s.storeCtx, recs, expect)
	if err != nil {
		cs.built = false
		var om *record.OffsetMismatchError
		if errors.As(err, &om) {
			return res, &wire.Error{Code: wire.CodeUnavailable,
				Message: fmt.Sprintf("counter log tail moved from %d to %d under this leader; nothing written, retry", om.Expected, om.Tail)}
		}
		return res, err
	}
	for i := range recs {
		recs[i].Offset = res.First + uint64(i)
		if err := cs.state.Apply(recs[i]); err != nil {
			cs.built = false
			return res, fmt.Errorf("server: folding the counter entry just written at %d: %w", recs[i].Offset, err)
		}
	}
	cs.state.AdvanceTo(res.Tail)
	return res, nil
}

// counterAdd applies one add; see wire.CounterAddRequest. The add queues
// on its shard; the goroutine holding the shard's mu (this one, once it
// gets it, unless another already answered the add) appends the queued
// adds together (addBatch).
func (c *conn) counterAdd(req wire.CounterAddRequest) (wire.CounterAddOK, error) {
	s := c.s
	if _, err := s.counterLog(req.Shard); err != nil {
		return wire.CounterAddOK{}, err
	}
	p := &pendingAdd{c: c, req: req, done: make(chan struct{})}
	if req.Producer != nil {
		// Keyed by principal and id, as data-log producers are [TR-8].
		p.id = producer.Scoped(c.principal.String(), producer.ID(req.Producer.ID))
	}
	cs := s.counterShard(req.Shard)
	cs.qmu.Lock()
	if len(cs.queue) >= counterQueueAdds {
		cs.qmu.Unlock()
		return wire.CounterAddOK{}, &wire.Error{Code: wire.CodeUnavailable,
			Message: fmt.Sprintf("%s counter log: %d adds already waiting; retry", req.Shard, counterQueueAdds)}
	}
	cs.queue = append(cs.queue, p)
	cs.qmu.Unlock()

	cs.mu.Lock()
	defer cs.mu.Unlock()
	for !p.answered() {
		cs.qmu.Lock()
		n := min(len(cs.queue), counterBatchAdds)
		batch := slices.Clone(cs.queue[:n])
		cs.queue = slices.Delete(cs.queue, 0, n)
		cs.qmu.Unlock()
		cs.addBatch(c, req.Shard, batch)
	}
	return p.ok, p.err
}

// addBatch applies queued adds as one append and answers them. Each add
// is decided in order as if alone: a duplicate is answered with its
// original answer, a refused one (producer out of sequence, a limit) with
// its refusal, and the rest take consecutive records at the fold's tail,
// each carrying the value the adds before it give (counter.Pending). An
// idempotent producer has at most one add in an append: its later adds
// go back to the head of the queue, unanswered, for the next batch, so
// each of its adds has its own outcome as on the one-at-a-time path. The
// append is conditional on the fold's tail [TR-1]; if it fails every add
// in it gets that error, the fold is dropped, and the producers' adds
// certainly not written are aborted. c is the
// connection running the batch (its log takes the auto-snapshot's
// messages). Called with cs.mu held.
func (cs *counterShard) addBatch(c *conn, shard record.ShardID, batch []*pendingAdd) {
	s := c.s
	fail := func(err error) {
		for _, p := range batch {
			if !p.answered() {
				p.answer(wire.CounterAddOK{}, err)
			}
		}
	}
	l, err := s.counterLog(shard)
	if err != nil {
		fail(err)
		return
	}
	if err := cs.ensure(s, l); err != nil {
		fail(err)
		return
	}
	now := s.opts.Now().UnixNano()
	pending := cs.state.Pending()
	var (
		recs     []record.Record
		writers  []*pendingAdd // writers[i] wrote recs[i]
		values   []int64
		inBatch  = map[producer.ID]bool{} // producers with an add in recs
		deferred []*pendingAdd
	)
	for _, p := range batch {
		req := p.req
		if req.Producer != nil {
			if inBatch[p.id] {
				// One add per producer per append: a later one (or a
				// retry of the one in flight) waits for the next batch,
				// so it is decided once this one's outcome is known.
				deferred = append(deferred, p)
				continue
			}
			seq := req.Producer.Seq
			d := cs.table.Propose(p.id, seq, now)
			switch d.Verdict {
			case producer.Append:
			case producer.Duplicate:
				p.answer(cs.duplicate(l, p.id, seq, d))
				continue
			case producer.OutOfSequence:
				p.answer(wire.CounterAddOK{}, &wire.Error{Code: wire.CodeOutOfSequence, Next: d.Next,
					Message: fmt.Sprintf("%s counter log: producer %s sent sequence %d, expected %d", shard, producer.ID(req.Producer.ID), seq, d.Next)})
				continue
			case producer.Full:
				p.answer(wire.CounterAddOK{}, &wire.Error{Code: wire.CodeUnavailable,
					Message: fmt.Sprintf("%s counter log: the leader keeps state for as many producers as it may; retry later", shard)})
				continue
			default: // InFlight (a retry of an add of an earlier batch), Uncertain: retryable
				p.answer(wire.CounterAddOK{}, &wire.Error{Code: wire.CodeUnavailable,
					Message: fmt.Sprintf("%s counter log: producer sequence %d: %s; retry", shard, seq, d.Verdict)})
				continue
			}
		}
		abort := func() {
			if req.Producer != nil {
				cs.table.Abort(p.id, req.Producer.Seq)
			}
		}
		value, err := pending.Check(req.Key, req.Delta)
		if err != nil {
			abort()
			p.answer(wire.CounterAddOK{}, s.counterError(err))
			continue
		}
		payload, err := counter.EncodeAdd(counter.Add{Key: req.Key, Delta: req.Delta, Value: value})
		if err != nil {
			abort()
			p.answer(wire.CounterAddOK{}, &wire.Error{Code: wire.CodeBadRequest, Message: err.Error()})
			continue
		}
		pending.Put(req.Key, value)
		rec := record.Record{Payload: payload, Timestamp: now}
		if req.Producer != nil {
			rec.Headers = []record.Header{producer.Header(p.id, req.Producer.Seq, 1)}
		}
		recs = append(recs, rec)
		writers = append(writers, p)
		values = append(values, value)
		if req.Producer != nil {
			inBatch[p.id] = true
		}
	}
	if len(deferred) > 0 {
		// Ahead of the adds queued since, to keep each producer's order.
		cs.qmu.Lock()
		cs.queue = append(deferred, cs.queue...)
		cs.qmu.Unlock()
	}
	if len(recs) == 0 {
		return
	}
	res, err := cs.appendCounterEntries(s, l, recs)
	if err != nil {
		for _, p := range writers {
			if p.req.Producer != nil && refusedBeforeWrite(err) {
				cs.table.Abort(p.id, p.req.Producer.Seq)
			}
			p.answer(wire.CounterAddOK{}, err)
		}
		return
	}
	for i, p := range writers {
		off := res.First + uint64(i)
		if p.req.Producer != nil {
			cs.table.Done(p.id, p.req.Producer.Seq, off, off+1)
		}
		p.answer(wire.CounterAddOK{Value: values[i], Offset: off}, nil)
	}
	cs.autoSnapshot(c, l, shard)
}

// duplicate answers a retried add with its original answer: from the
// producer's mark, else from the add entry itself in the log.
func (cs *counterShard) duplicate(l Log, id producer.ID, seq uint64, d producer.Decision) (wire.CounterAddOK, error) {
	if m, ok := cs.state.Mark(id); ok && m.Seq == seq {
		return wire.CounterAddOK{Value: m.Value, Offset: m.Offset}, nil
	}
	res, err := readCommitted(l, d.First, logstore.ReadOptions{MaxRecords: 1, MaxBytes: 1})
	if err == nil && len(res.Records) == 1 && res.Records[0].Offset == d.First {
		if e, derr := counter.DecodeEntry(res.Records[0].Payload); derr == nil && e.Add != nil {
			return wire.CounterAddOK{Value: e.Add.Value, Offset: d.First}, nil
		}
	}
	return wire.CounterAddOK{}, &wire.Error{Code: wire.CodeOutOfSequence, Next: seq + 1,
		Message: fmt.Sprintf("counter add %d of this producer was applied at %d, which is no longer readable", seq, d.First)}
}

// counterGet reads one counter.
func (c *conn) counterGet(req wire.CounterGetRequest) (wire.CounterGetOK, error) {
	if req.Key == "" {
		return wire.CounterGetOK{}, &wire.Error{Code: wire.CodeBadRequest, Message: counter.ErrEmptyKey.Error()}
	}
	l, err := c.s.counterLog(req.Shard)
	if err != nil {
		return wire.CounterGetOK{}, err
	}
	cs := c.s.counterShard(req.Shard)
	cs.mu.Lock()
	defer cs.mu.Unlock()
	if err := cs.ensure(c.s, l); err != nil {
		return wire.CounterGetOK{}, err
	}
	return wire.CounterGetOK{Value: cs.state.Value(req.Key), Through: cs.state.Next()}, nil
}

// counterSnapshot appends a snapshot of the shard's counters and, with
// trim, trims the counter log below it.
func (c *conn) counterSnapshot(req wire.CounterSnapshotRequest) (wire.CounterSnapshotOK, error) {
	l, err := c.s.counterLog(req.Shard)
	if err != nil {
		return wire.CounterSnapshotOK{}, err
	}
	cs := c.s.counterShard(req.Shard)
	cs.mu.Lock()
	defer cs.mu.Unlock()
	if err := cs.ensure(c.s, l); err != nil {
		return wire.CounterSnapshotOK{}, err
	}
	return cs.snapshot(c.s, l, req.Trim)
}

// snapshot writes the snapshot entry and, with trim, the conditional trim
// to it [TR-2]: the trim lands only if the tail is still right after the
// snapshot, so no entry after the snapshot is ever trimmed. Called with
// cs.mu held.
func (cs *counterShard) snapshot(s *Server, l Log, trim bool) (wire.CounterSnapshotOK, error) {
	snap := cs.state.Snapshot()
	payload, err := counter.EncodeSnapshot(snap)
	if err != nil {
		return wire.CounterSnapshotOK{}, err
	}
	res, err := cs.appendCounterEntry(s, l, record.Record{Payload: payload, Timestamp: s.opts.Now().UnixNano()})
	if err != nil {
		return wire.CounterSnapshotOK{}, err
	}
	out := wire.CounterSnapshotOK{Offset: res.First, Floor: l.Describe().ReadableStart(), Keys: uint32(len(snap.Values))}
	if !trim {
		return out, nil
	}
	tr, err := l.Trim(s.storeCtx, logstore.TrimRequest{Floor: res.First, ExpectTail: res.Tail, Timestamp: s.opts.Now().UnixNano(),
		Headers: []record.Header{{Key: counterTrimHeader, Value: []byte(fmt.Sprint(res.First))}}})
	if err != nil {
		cs.built = false
		return out, err
	}
	cs.state.AdvanceTo(tr.Tail)
	out.Floor = tr.Floor
	return out, nil
}

// autoSnapshot snapshots and trims the counter log every
// Options.CounterSnapshotEvery adds. A failure is logged, not returned:
// the add it follows was applied, and the next add tries again. Called
// with cs.mu held.
func (cs *counterShard) autoSnapshot(c *conn, l Log, shard record.ShardID) {
	every := c.s.opts.CounterSnapshotEvery
	if every < 0 || cs.state.SinceSnapshot() < uint64(every) {
		return
	}
	start := time.Now()
	if _, err := cs.snapshot(c.s, l, true); err != nil {
		c.log.Error(err, "automatic counter snapshot failed", "shard", shard.String())
		return
	}
	c.log.V(1).Info("counter log snapshotted and trimmed", "shard", shard.String(), "took", time.Since(start).String())
}

// sortMarks orders marks by timestamp, so a rebuilt producer table
// evicts the least recently written first.
func sortMarks(ms []counter.Mark) {
	slices.SortFunc(ms, func(a, b counter.Mark) int { return cmp.Compare(a.Timestamp, b.Timestamp) })
}
