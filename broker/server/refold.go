package server

import (
	"fmt"

	"felix.dev/felix/broker/logstore"
	"felix.dev/felix/broker/record"
	"felix.dev/felix/broker/wire"
)

// logFold is the fold of one of a shard's logs (counters, groups, dead
// letters) that the leader keeps and rebuilds from the log.
type logFold interface {
	// Apply folds the next record, in offset order; an error means the
	// log does not fold (a loud Corrupt).
	Apply(r record.Record) error
	// AdvanceTo moves the fold past offsets no record was read at.
	AdvanceTo(next uint64)
}

// logGeneration is l's replication generation: the epoch its leader
// serves with its fence committed (Generational), 0 for a log without
// one (standalone). A fold built under one generation is rebuilt under
// the next.
func logGeneration(l Log) (uint64, error) {
	if g, ok := l.(Generational); ok {
		return g.Generation()
	}
	return 0, nil
}

// refold builds a fold of l's committed records from its readable start:
// start makes the empty fold (from is the readable start; trimmed says the
// log was trimmed, so it must start with a snapshot), which is fed every
// record in pages. A log with entries not yet committed is refused with
// Unavailable (one whose outcome is open may still commit); a record
// that does not fold is logged and refused as Corrupt at its offset. what
// names the log in messages ("counter", "group", "dead-letter").
func refold[F logFold](s *Server, l Log, what string, start func(from uint64, trimmed bool) F) (F, error) {
	var zero F
	info := l.Describe()
	if info.Committed < info.Tail {
		return zero, &wire.Error{Code: wire.CodeUnavailable, Message: fmt.Sprintf("server: the %s log has entries not committed yet; retry", what)}
	}
	from := info.ReadableStart()
	st := start(from, from > info.Base)
	for from < info.Tail {
		res, err := readCommitted(l, from, logstore.ReadOptions{MaxRecords: 4096, MaxBytes: 8 << 20})
		if err != nil {
			return zero, fmt.Errorf("server: folding the %s log of %s from %d: %w", what, info.ID, from, err)
		}
		for _, r := range res.Records {
			if err := st.Apply(r); err != nil {
				s.log.Error(err, what+" log does not fold; it is not served", "log", info.ID.String(), "offset", r.Offset)
				return zero, &wire.Error{Code: wire.CodeCorrupt, Offset: r.Offset,
					Message: fmt.Sprintf("%s: %s log does not fold: %v", info.ID, what, err)}
			}
		}
		if res.Next <= from {
			break
		}
		from = res.Next
		st.AdvanceTo(from)
	}
	return st, nil
}
