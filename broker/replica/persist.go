package replica

import (
	"fmt"

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

// persistLoop makes the Writes of the Readies on s.toPersist durable, in
// order, and answers each on s.persisted. Readies waiting together are
// written together (one store append, one sync, for consecutive appends to
// a log). After a failure it writes nothing more. It closes done when
// s.toPersist is closed and drained, or after a failure.
func (s *shard) persistLoop(done chan<- struct{}) {
	defer close(done)
	var batch []replication.Ready
	var ws []replication.LogWrite
	for rd := range s.toPersist {
		batch, ws = append(batch[:0], rd), append(ws[:0], rd.Writes...)
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
		err := s.persist(ws)
		for _, rd := range batch {
			s.persisted <- persistDone{rd: rd, err: err} // never blocks: room for every Ready in flight
		}
		if err != nil {
			return
		}
	}
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

// persist applies writes in order: truncations (TruncateFrom), resets
// (ResetAt) and appends (AppendReplicated). Consecutive appends to one log
// are contiguous by construction; they are written together, in chunks
// the store accepts. It runs on the persister goroutine, or on the run
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
			recs := w.Records
			j := i + 1
			for j < len(ws) && ws[j].Op == replication.WriteAppend && ws[j].Log == w.Log {
				if j == i+1 {
					recs = append([]record.Record(nil), recs...)
				}
				recs = append(recs, ws[j].Records...)
				j++
			}
			if err := s.appendChunks(w.Log, recs); err != nil {
				return err
			}
			i = j
		default:
			return fmt.Errorf("unknown write op %d", w.Op)
		}
	}
	return nil
}

// appendChunks writes recs to log l in chunks within the store's limits.
func (s *shard) appendChunks(l record.LogKind, recs []record.Record) error {
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
		if err := s.logs[l].AppendReplicated(s.m.ctx, recs[:n]); err != nil {
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
