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

// persist applies writes in order: truncations (TruncateFrom), resets
// (ResetAt) and appends (AppendReplicated), each log's recent-record cache
// kept in step. Consecutive appends to one log are
// contiguous by construction; they are written together, in chunks the
// store accepts.
func (s *shard) persist(ws []replication.LogWrite) error {
	for i := 0; i < len(ws); {
		w := ws[i]
		switch w.Op {
		case replication.WriteTruncate:
			s.recent[w.Log].truncate(w.Offset)
			if err := s.logs[w.Log].TruncateFrom(w.Offset); err != nil {
				return fmt.Errorf("truncate %s/%s at %d: %w", s.id, w.Log, w.Offset, err)
			}
			i++
		case replication.WriteReset:
			// The leader's first stored offset is above what this log can
			// match: drop every record, start empty at Offset.
			s.recent[w.Log].reset()
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
			s.recent[l].reset()
			return fmt.Errorf("append %s/%s at %d: %w", s.id, l, recs[0].Offset, err)
		}
		s.recent[l].add(recs[:n])
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
