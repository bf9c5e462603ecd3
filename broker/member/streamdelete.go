package member

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

	felixv1 "felix.dev/felix/api/v1alpha1"
	"felix.dev/felix/broker/controlplane"
	"felix.dev/felix/broker/logstore"
	"felix.dev/felix/broker/record"
)

// Stream deletion. While a FelixStream is being deleted (the operator's
// finalizer holds it), the leader of each of its shards trims the shard's
// data log to its tail: a committed, replicated trim, so every replica
// (and any later leader) keeps no readable record of the stream, and
// maintenance deletes the segments below the floor. The leader reports
// the floor (status.report.floor); the operator removes the finalizer
// once every shard's report shows the trim as the last committed record.
// The log itself stays in the store (the store cannot drop a log), empty
// of readable records; a stream recreated under the same name starts
// from it at an epoch above the old one (docs/operator.md).

// trimTimeout bounds one deletion trim.
const trimTimeout = 10 * time.Second

// deletionFloors are the floors this broker trimmed shards to for their
// stream's deletion, by shard name, added to the shards' reports.
type deletionFloors struct {
	mu     sync.Mutex
	floors map[string]uint64
}

func (d *deletionFloors) get(shard string) (uint64, bool) {
	d.mu.Lock()
	defer d.mu.Unlock()
	f, ok := d.floors[shard]
	return f, ok
}

func (d *deletionFloors) set(shard string, floor uint64) {
	d.mu.Lock()
	defer d.mu.Unlock()
	if d.floors == nil {
		d.floors = map[string]uint64{}
	}
	d.floors[shard] = floor
}

func (d *deletionFloors) drop(shard string) {
	d.mu.Lock()
	defer d.mu.Unlock()
	delete(d.floors, shard)
}

// withFloor adds the deletion floor of shard, if any, to a report.
func (d *deletionFloors) withFloor(shard string, rep felixv1.ShardReport) felixv1.ShardReport {
	if d == nil {
		return rep
	}
	if f, ok := d.get(shard); ok {
		rep.Floor = int64(f)
	}
	return rep
}

// emptyForDeletion trims the data log of a shard this broker leads to its
// tail, once per tail: a trim is done again only when records were
// written after the last one. Not leading (yet) is no error: the next
// pass tries again.
func (s *assignmentSync) emptyForDeletion(ctx context.Context, a controlplane.Assignment, id record.ShardID) error {
	if a.Leader != s.self || a.LeaderIncarnation != s.cp.Incarnation() || a.Epoch <= 0 || s.floors == nil {
		return nil
	}
	dl, err := s.mgr.Shards().DataLog(id)
	if err != nil {
		return nil // recovering, or not the leader at this epoch yet
	}
	info := dl.Describe()
	if f, ok := s.floors.get(a.Shard); ok && info.Tail <= f+1 {
		return nil // the trim is the last record
	}
	if info.Tail == info.Base {
		s.floors.set(a.Shard, info.Tail)
		return nil // never written: nothing to trim
	}
	tctx, cancel := context.WithTimeout(ctx, trimTimeout)
	defer cancel()
	res, err := dl.Trim(tctx, logstore.TrimRequest{Floor: info.Tail, ExpectTail: info.Tail, Epoch: uint64(a.Epoch)})
	switch {
	case errors.Is(err, record.ErrOffsetMismatch):
		return nil // an append came in between: the next pass trims again
	case err != nil:
		return fmt.Errorf("trim for stream deletion: %w", err)
	}
	s.floors.set(a.Shard, res.Floor)
	s.log.Info("shard trimmed for its stream's deletion", "shard", a.Shard, "floor", res.Floor)
	return nil
}
