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
// durable (err == nil), or the store failed and the shard must stop.
type persistDone struct {
	rd  replication.Ready
	err error
}

// waitFn waits until a submitted store write is durable.
type waitFn = func(context.Context) error

// submitted is a batch of Readies whose writes are queued in the store:
// they are durable once every wait returns nil (err: the submission
// itself failed).
type submitted struct {
	batch []replication.Ready
	waits []waitFn
	err   error
}

// persistLoop makes the Writes of the Readies on s.toPersist durable, in
// order, and answers each on s.persisted. It does not wait for the store:
// appends are queued (Log.SubmitReplicated) behind the ones before them,
// so the store writes the next batch while it syncs the previous one, and
// a completer goroutine answers each batch when its writes are durable.
// Readies waiting together are submitted together (one store append for
// consecutive appends to a log). A truncation or reset first waits for
// every append queued before it. After a failure nothing more is
// submitted. It closes done when s.toPersist is closed and everything
// submitted is answered, or after a failure.
func (s *shard) persistLoop(done chan<- struct{}) {
	defer close(done)
	subs := make(chan submitted, maxPersisting) // never full: one per Ready at most
	completed := make(chan struct{})
	var failed atomic.Bool
	go s.completeLoop(subs, &failed, completed)
	defer func() {
		close(subs)
		<-completed
	}()
	// last holds, per log, the wait of the last append submitted: the
	// store completes a log's appends in order, and fails every one queued
	// behind a failed one, so it covers them all.
	var last [len(record.LogKinds)]waitFn
	var ws []replication.LogWrite
	for rd := range s.toPersist {
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
			return
		}
	}
}

// completeLoop answers each submitted batch, in order, once its writes are
// durable; after a failure it answers the rest with the failure.
func (s *shard) completeLoop(subs <-chan submitted, failed *atomic.Bool, done chan<- struct{}) {
	defer close(done)
	var ferr error
	for sub := range subs {
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
		if err != nil && ferr == nil {
			ferr = err
			failed.Store(true)
		}
		for _, rd := range sub.batch {
			s.persisted <- persistDone{rd: rd, err: err} // never blocks: room for every Ready in flight
		}
	}
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
