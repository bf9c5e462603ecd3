package replica

import (
	"errors"
	"fmt"
	"time"

	"felix.dev/felix/broker/record"
	"felix.dev/felix/broker/replication"
)

// spaceRetryInterval is how often a shard whose store refused its writes
// for want of space asks the store whether it takes writes again.
const spaceRetryInterval = 50 * time.Millisecond

// A store that refuses a write with record.ErrStorageFull (below its
// free-space floor, or after ENOSPC) has written nothing it will keep of
// that write, and takes writes again by itself once space returns. So a
// shard does not fail on it: the Readies whose writes were refused stay in
// flight (the core is not told they are durable, so a follower answers no
// Append that needs them and a leader counts none of them), the shard's
// waiting client calls are refused with StorageFull, and the writes are
// applied again, in order, once the store takes writes (persistWhenRoom).

// isFull reports whether err is a refusal for want of space.
func isFull(err error) bool { return errors.Is(err, record.ErrStorageFull) }

// persistWhenRoom persists ws after a refusal for want of space: it waits
// until the store takes writes again, then applies ws in order, skipping
// the appended records each log already holds (what an earlier attempt
// stored), and starts over after each new refusal. Every write submitted
// for this shard before must have been answered. It returns nil once ws
// is durable, another store error, or the reason the wait ended (the
// shard stopping).
func (s *shard) persistWhenRoom(ws []replication.LogWrite) error {
	for {
		if err := s.waitForRoom(); err != nil {
			return err
		}
		err := s.persistMissing(ws)
		if !isFull(err) {
			return err
		}
	}
}

// waitForRoom polls the store until it takes writes again, or the shard
// stops.
func (s *shard) waitForRoom() error {
	for s.m.o.Store.SpaceErr() != nil {
		select {
		case <-s.m.o.After(spaceRetryInterval):
		case <-s.stopping:
			return fmt.Errorf("replica: %s: %w", s.id, record.ErrClosed)
		case <-s.m.ctx.Done():
			return fmt.Errorf("replica: %s: %w", s.id, record.ErrClosed)
		}
	}
	return nil
}

// persistMissing applies ws as persist does, except that an append's
// records below its log's current tail are skipped: an earlier attempt
// stored them. Applied in order this converges on what ws describes:
// truncations at or above the tail do nothing, and the records of an
// append that a later truncation in ws removes are written again only to
// be removed by it.
func (s *shard) persistMissing(ws []replication.LogWrite) error {
	for i := 0; i < len(ws); i++ {
		w := ws[i]
		if w.Op != replication.WriteAppend {
			if err := s.persist(ws[i : i+1]); err != nil {
				return err
			}
			continue
		}
		// Appends are written one by one so the tail read is current.
		tail := s.logs[w.Log].Describe().Tail
		recs := w.Records
		for len(recs) > 0 && recs[0].Offset < tail {
			recs = recs[1:]
		}
		if len(recs) == 0 {
			continue
		}
		w.Records, w.Offset = recs, recs[0].Offset
		if err := s.persist([]replication.LogWrite{w}); err != nil {
			return err
		}
	}
	return nil
}

// refuseWaiting answers every client call waiting on this shard with err
// (a refusal for want of space): its records were not acknowledged, and
// may or may not survive (they may have been shipped, and are written
// once space returns). The core's later Ack for such a call finds no
// waiter.
func (s *shard) refuseWaiting(err error) {
	err = fmt.Errorf("replica: %s: the leader cannot persist (not acknowledged; it may or may not survive): %w", s.id, err)
	s.wmu.Lock()
	defer s.wmu.Unlock()
	for id, w := range s.waiters {
		delete(s.waiters, id)
		w.ch <- replication.Ack{ID: id, Err: err} // buffered, one answer per waiter
	}
}

// writesOf returns the writes of a batch of Readies, in order.
func writesOf(batch []replication.Ready) []replication.LogWrite {
	var ws []replication.LogWrite
	for _, rd := range batch {
		ws = append(ws, rd.Writes...)
	}
	return ws
}
