package replica

import (
	"context"
	"fmt"
	"sync/atomic"

	"felix.dev/felix/broker/record"
	"felix.dev/felix/broker/replication"
)

// Bounds of one AppendReplicated call, below the store's default limits
// (logstore.DefaultMaxBatchRecords, DefaultMaxBatchBytes; recsBytes
// over-estimates the store's encoding).
const (
	chunkMaxRecords = 2048
	chunkMaxBytes   = 2 << 20
)

// persistDone is the persister's answer for one Ready: its Writes are
// durable (err == nil), or the store failed and the shard must stop. A
// refusal for want of space is not an answer: the persister holds the
// Ready and writes it again once space returns (space.go).
type persistDone struct {
	rd  replication.Ready
	err error
}

// waitFn waits until a submitted store write is durable.
type waitFn = func(context.Context) error

// submitted is a batch of Readies whose writes are queued in the store:
// they are durable once every wait returns nil (err: the submission
// itself failed). A submitted with barrier set carries no Readies: the
// completer closes barrier once it has answered everything before it
// (see persistLoop).
type submitted struct {
	batch   []replication.Ready
	waits   []waitFn
	err     error
	barrier chan struct{}
}

// persistLoop makes the Writes of the Readies on s.toPersist durable, in
// order, and answers each on s.persisted. It does not wait for the store:
// appends are queued (Log.SubmitReplicated) behind the ones before them,
// so the store writes the next batch while it syncs the previous one, and
// a completer goroutine answers each batch when its writes are durable.
// Readies waiting together are submitted together (one store append for
// consecutive appends to a log). A truncation or reset first waits for
// every append queued before it.
//
// When the store refuses a write for want of space, the completer tells
// this loop (stall), which then submits nothing until the completer has
// written again, synchronously and once space is back, every batch
// submitted before (the barrier), so the store never sees a write ahead
// of one it refused. After a failure nothing more is submitted. It closes
// done when s.toPersist is closed and everything submitted is answered,
// or after a failure.
func (s *shard) persistLoop(done chan<- struct{}) {
	defer close(done)
	subs := make(chan submitted, maxPersisting+1) // never full: one per Ready at most, and one barrier
	completed := make(chan struct{})
	stall := make(chan struct{}, 1)
	var failed atomic.Bool
	go s.completeLoop(subs, &failed, stall, completed)
	defer func() {
		close(subs)
		<-completed
	}()
	// last holds, per log, the wait of the last append submitted: the
	// store completes a log's appends in order, and fails every one queued
	// behind a failed one, so it covers them all.
	var last [len(record.LogKinds)]waitFn
	// barrier waits until the completer has answered every batch
	// submitted so far, which leaves no append to wait for; it reports
	// false after a failure.
	barrier := func() bool {
		b := make(chan struct{})
		subs <- submitted{barrier: b}
		<-b
		last = [len(record.LogKinds)]waitFn{}
		return !failed.Load()
	}
	var ws []replication.LogWrite
	for {
		var rd replication.Ready
		select {
		case <-stall:
			if !barrier() {
				return
			}
			continue
		case r, ok := <-s.toPersist:
			if !ok {
				return
			}
			rd = r
		}
		batch := []replication.Ready{rd}
		ws = append(ws[:0], rd.Writes...)
	more:
		for len(batch) < maxPersisting {
			select {
			case rd, ok := <-s.toPersist:
				if !ok {
					break more
				}
				batch = append(batch, rd)
				ws = append(ws, rd.Writes...)
			default:
				break more
			}
		}
		select {
		case <-stall:
			if !barrier() {
				return
			}
		default:
		}
		if failed.Load() {
			return
		}
		sub := submitted{batch: batch}
		var touched [len(record.LogKinds)]bool
		sub.err = s.submitWrites(ws, &last, &touched)
		for l, t := range touched {
			if t && last[l] != nil {
				sub.waits = append(sub.waits, last[l])
			}
		}
		subs <- sub
		if sub.err != nil {
			// The completer decides: a refusal for want of space is
			// written again, anything else fails the shard.
			if !barrier() {
				return
			}
		}
	}
}

// completeLoop answers each submitted batch, in order, once its writes are
// durable; after a failure it answers the rest with the failure.
//
// A refusal for want of space starts a hold: the waiting client calls are
// refused with StorageFull, persistLoop is told to stop submitting, and
// the refused batch and every batch submitted behind it are held,
// unanswered, until persistLoop's barrier arrives. Then, once every held
// submission is settled, their writes are applied again in order when the
// store takes writes (persistWhenRoom), and only then are their Readies
// answered.
func (s *shard) completeLoop(subs <-chan submitted, failed *atomic.Bool, stall chan<- struct{}, done chan<- struct{}) {
	defer close(done)
	var ferr error
	var held []submitted
	for sub := range subs {
		if sub.barrier != nil {
			if len(held) > 0 && ferr == nil {
				ferr = s.rewrite(held)
				if ferr != nil {
					failed.Store(true)
				}
			}
			if len(held) > 0 {
				s.holding.Store(false)
			}
			for _, h := range held {
				s.answer(h.batch, ferr)
			}
			held = nil
			close(sub.barrier)
			continue
		}
		if len(held) > 0 {
			held = append(held, sub)
			continue
		}
		err := ferr
		if err == nil {
			err = sub.err
		}
		for _, w := range sub.waits {
			if err != nil {
				break
			}
			err = w(s.m.ctx)
		}
		if ferr == nil && isFull(err) {
			s.m.o.Logger.Info("store refused a write for want of space: holding the shard's writes until space returns",
				"shard", s.id.String(), "err", err.Error())
			s.holding.Store(true)
			s.refuseWaiting(err)
			held = append(held, sub)
			select {
			case stall <- struct{}{}:
			default:
			}
			continue
		}
		if err != nil && ferr == nil {
			ferr = err
			failed.Store(true)
		}
		s.answer(sub.batch, err)
	}
}

// answer hands the persister's answer for each Ready of batch to the run
// goroutine.
func (s *shard) answer(batch []replication.Ready, err error) {
	for _, rd := range batch {
		s.persisted <- persistDone{rd: rd, err: err} // never blocks: room for every Ready in flight
	}
}

// rewrite writes the held batches again once their submissions are
// settled and the store takes writes; nothing else is submitted
// meanwhile.
func (s *shard) rewrite(held []submitted) error {
	for _, h := range held {
		for _, w := range h.waits {
			_ = w(s.m.ctx) // settled, whatever the outcome: the rewrite decides
		}
	}
	var ws []replication.LogWrite
	for _, h := range held {
		ws = append(ws, writesOf(h.batch)...)
	}
	if err := s.persistWhenRoom(ws); err != nil {
		return err
	}
	s.m.o.Logger.Info("storage space is back: the shard's held writes are durable", "shard", s.id.String())
	return nil
}

// submitWrites queues writes in order: appends with Log.SubmitReplicated
// (last[l] and touched[l] record each log's last one), truncations and
// resets after waiting for every append queued before them.
func (s *shard) submitWrites(ws []replication.LogWrite, last *[len(record.LogKinds)]waitFn, touched *[len(record.LogKinds)]bool) error {
	drain := func() error {
		for l, w := range last {
			if w != nil {
				if err := w(s.m.ctx); err != nil {
					return err
				}
				last[l] = nil
			}
		}
		return nil
	}
	for i := 0; i < len(ws); {
		w := ws[i]
		if w.Op != replication.WriteAppend {
			if err := drain(); err != nil {
				return err
			}
			if err := s.persist(ws[i : i+1]); err != nil {
				return err
			}
			i++
			continue
		}
		recs, j := appendRun(ws, i)
		err := s.chunks(w.Log, recs, func(chunk []record.Record) error {
			wait, err := s.logs[w.Log].SubmitReplicated(s.m.ctx, chunk)
			if err == nil {
				last[w.Log], touched[w.Log] = wait, true
			}
			return err
		})
		if err != nil {
			return err
		}
		i = j
	}
	return nil
}

// cacheWrites applies writes to the recent-record caches, in order, when
// the run goroutine takes them from a Ready: the caches hold the core's
// view of each log (records still being persisted included; the core reads
// through them only below what is persisted).
func (s *shard) cacheWrites(ws []replication.LogWrite) {
	for _, w := range ws {
		switch w.Op {
		case replication.WriteTruncate:
			s.recent[w.Log].truncate(w.Offset)
		case replication.WriteReset:
			s.recent[w.Log].reset()
		case replication.WriteAppend:
			s.recent[w.Log].add(w.Records)
		}
	}
}

// persist applies writes in order and waits until they are durable:
// truncations (TruncateFrom), resets (ResetAt) and appends
// (AppendReplicated). It runs on the persister goroutine, or on the run
// goroutine while the persister is idle.
func (s *shard) persist(ws []replication.LogWrite) error {
	for i := 0; i < len(ws); {
		w := ws[i]
		switch w.Op {
		case replication.WriteTruncate:
			if err := s.logs[w.Log].TruncateFrom(w.Offset); err != nil {
				return fmt.Errorf("truncate %s/%s at %d: %w", s.id, w.Log, w.Offset, err)
			}
			i++
		case replication.WriteReset:
			// The leader's first stored offset is above what this log can
			// match: drop every record, start empty at Offset.
			if err := s.logs[w.Log].ResetAt(w.Offset); err != nil {
				return fmt.Errorf("reset %s/%s at %d: %w", s.id, w.Log, w.Offset, err)
			}
			s.m.o.Logger.Info("log reset to start at the leader's first stored offset",
				"shard", s.id.String(), "log", w.Log.String(), "offset", w.Offset)
			i++
		case replication.WriteAppend:
			recs, j := appendRun(ws, i)
			if err := s.chunks(w.Log, recs, func(chunk []record.Record) error {
				return s.logs[w.Log].AppendReplicated(s.m.ctx, chunk)
			}); err != nil {
				return err
			}
			i = j
		default:
			return fmt.Errorf("unknown write op %d", w.Op)
		}
	}
	return nil
}

// appendRun gathers the consecutive appends to one log starting at ws[i]
// (contiguous by construction) and returns their records and the index
// after them.
func appendRun(ws []replication.LogWrite, i int) ([]record.Record, int) {
	recs := ws[i].Records
	j := i + 1
	for j < len(ws) && ws[j].Op == replication.WriteAppend && ws[j].Log == ws[i].Log {
		if j == i+1 {
			recs = append([]record.Record(nil), recs...)
		}
		recs = append(recs, ws[j].Records...)
		j++
	}
	return recs, j
}

// chunks cuts recs into pieces within the store's limits and hands each to
// write, in order.
func (s *shard) chunks(l record.LogKind, recs []record.Record, write func([]record.Record) error) error {
	for len(recs) > 0 {
		n, size := 0, 0
		for n < len(recs) && n < chunkMaxRecords {
			b := recsBytes(recs[n : n+1])
			if n > 0 && size+b > chunkMaxBytes {
				break
			}
			size += b
			n++
		}
		if err := write(recs[:n]); err != nil {
			return fmt.Errorf("append %s/%s at %d: %w", s.id, l, recs[0].Offset, err)
		}
		recs = recs[n:]
	}
	return nil
}

func recsBytes(recs []record.Record) int {
	n := 0
	for i := range recs {
		n += 48 + len(recs[i].Payload)
		for _, h := range recs[i].Headers {
			n += 8 + len(h.Key) + len(h.Value)
		}
	}
	return n
}
