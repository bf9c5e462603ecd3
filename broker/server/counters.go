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

// counterShard is one shard's fold and producer table. mu is held for a
// whole request, append and acknowledgement included: a shard's counter
// requests are applied one at a time, so the value an add writes is the
// value its fold gives [the log is the truth; the state is its fold].
type counterShard struct {
	mu    sync.Mutex
	state *counter.State
	table *producer.Table
	gen   uint64
	built bool
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

// appendCounterEntry appends one counter-log entry at the fold's tail (a
// conditional append [TR-1]: nothing else may have landed since the fold)
// and folds it. On an unknown outcome the fold is dropped, to be rebuilt
// from the log. Called with cs.mu held.
func (cs *counterShard) appendCounterEntry(s *Server, l Log, rec record.Record) (logstore.AppendResult, error) {
	tail := cs.state.Next()
	rec.Kind, rec.Epoch = record.KindData, s.opts.Epoch
	expect := &tail
	if s.opts.twin.unconditionalCounterAppend {
		expect = nil // twin: the counter log's tail check off
	}
	res, err := l.Append(s.storeCtx, []record.Record{rec}, expect)
	if err != nil {
		cs.built = false
		var om *record.OffsetMismatchError
		if errors.As(err, &om) {
			return res, &wire.Error{Code: wire.CodeUnavailable,
				Message: fmt.Sprintf("counter log tail moved from %d to %d under this leader; nothing written, retry", om.Expected, om.Tail)}
		}
		return res, err
	}
	rec.Offset = res.First
	if err := cs.state.Apply(rec); err != nil {
		cs.built = false
		return res, fmt.Errorf("server: folding the counter entry just written at %d: %w", res.First, err)
	}
	cs.state.AdvanceTo(res.Tail)
	return res, nil
}

// counterAdd applies one add; see wire.CounterAddRequest.
func (c *conn) counterAdd(req wire.CounterAddRequest) (wire.CounterAddOK, error) {
	s := c.s
	l, err := s.counterLog(req.Shard)
	if err != nil {
		return wire.CounterAddOK{}, err
	}
	cs := s.counterShard(req.Shard)
	cs.mu.Lock()
	defer cs.mu.Unlock()
	if err := cs.ensure(s, l); err != nil {
		return wire.CounterAddOK{}, err
	}
	now := s.opts.Now().UnixNano()
	var (
		id  producer.ID
		seq uint64
	)
	if req.Producer != nil {
		// Keyed by principal and id, as data-log producers are [TR-8].
		id, seq = producer.Scoped(c.principal.String(), producer.ID(req.Producer.ID)), req.Producer.Seq
		d := cs.table.Propose(id, seq, now)
		switch d.Verdict {
		case producer.Append:
		case producer.Duplicate:
			return cs.duplicate(l, id, seq, d)
		case producer.OutOfSequence:
			return wire.CounterAddOK{}, &wire.Error{Code: wire.CodeOutOfSequence, Next: d.Next,
				Message: fmt.Sprintf("%s counter log: producer %s sent sequence %d, expected %d", req.Shard, producer.ID(req.Producer.ID), seq, d.Next)}
		case producer.Full:
			return wire.CounterAddOK{}, &wire.Error{Code: wire.CodeUnavailable,
				Message: fmt.Sprintf("%s counter log: the leader keeps state for as many producers as it may; retry later", req.Shard)}
		default: // InFlight, Uncertain: cannot happen under cs.mu, answered as retryable
			return wire.CounterAddOK{}, &wire.Error{Code: wire.CodeUnavailable,
				Message: fmt.Sprintf("%s counter log: producer sequence %d: %s; retry", req.Shard, seq, d.Verdict)}
		}
	}
	abort := func() {
		if req.Producer != nil {
			cs.table.Abort(id, seq)
		}
	}
	value, err := cs.state.Check(req.Key, req.Delta)
	if err != nil {
		abort()
		return wire.CounterAddOK{}, s.counterError(err)
	}
	payload, err := counter.EncodeAdd(counter.Add{Key: req.Key, Delta: req.Delta, Value: value})
	if err != nil {
		abort()
		return wire.CounterAddOK{}, &wire.Error{Code: wire.CodeBadRequest, Message: err.Error()}
	}
	rec := record.Record{Payload: payload, Timestamp: now}
	if req.Producer != nil {
		rec.Headers = []record.Header{producer.Header(id, seq, 1)}
	}
	res, err := cs.appendCounterEntry(s, l, rec)
	if err != nil {
		if req.Producer != nil && refusedBeforeWrite(err) {
			abort()
		}
		return wire.CounterAddOK{}, err
	}
	if req.Producer != nil {
		cs.table.Done(id, seq, res.First, res.Tail)
	}
	cs.autoSnapshot(c, l, req.Shard)
	return wire.CounterAddOK{Value: value, Offset: res.First}, nil
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
