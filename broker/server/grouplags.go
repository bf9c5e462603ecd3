package server

import (
	"errors"
	"sync"
	"time"

	"felix.dev/felix/broker/record"
)

// GroupLag is one consumer group's position on a shard: its committed
// offset and how far it is behind the shard's data log.
type GroupLag struct {
	Group     string
	Committed uint64
	// Lag is the data log's tail minus Committed, zero when caught up
	// (as GroupDescribe answers it).
	Lag uint64
}

// ErrGroupsBusy is GroupLags' answer for a shard whose group fold was busy
// with a request at every try and that it never read before.
var ErrGroupsBusy = errors.New("server: the shard's group fold is busy with a request; no earlier reading")

// groupLagTries and groupLagPause bound how long GroupLags tries for a
// shard's fold before it answers from its last reading.
const (
	groupLagTries = 5
	groupLagPause = time.Millisecond
)

// GroupLags returns the consumer groups of a shard this server leads, in
// the fold's order, each with its committed offset and its lag behind the
// data log's tail now: what the leader's report carries
// (controlplane.ReportOptions.Groups). It never waits for a group request
// in flight (one holds the shard's fold through a replicated append, and
// the report writer must not wait on replication): when the fold stays
// busy for a few tries it answers the committed offsets of its last
// reading of the shard with lags against the tail now, ErrGroupsBusy
// without one. A fold not built yet (a new leader before the shard's
// first group request) is built from the group log, as a request would.
// Each group's felix_broker_group_lag_records is set from the answer, so
// the metric follows the tail for a group whose consumer stopped sending
// requests. A shard this server does not lead is the refusal DataLog or
// the group log gives.
func (s *Server) GroupLags(shard record.ShardID) ([]GroupLag, error) {
	l, err := s.groupLog(shard)
	if err != nil {
		return nil, err
	}
	dl, err := s.shards.DataLog(shard)
	if err != nil {
		return nil, err
	}
	gs := s.groupShard(shard)
	var out []GroupLag
	if tryLockBriefly(&gs.mu) {
		out, err = gs.readLags(s, l)
		gs.mu.Unlock()
		if err != nil {
			return nil, err
		}
	} else if last := gs.lastLags.Load(); last != nil {
		out = append([]GroupLag(nil), *last...)
	} else {
		return nil, ErrGroupsBusy
	}
	tail := dl.Describe().Tail
	for i := range out {
		out[i].Lag = 0
		if tail > out[i].Committed {
			out[i].Lag = tail - out[i].Committed
		}
		s.opts.Metrics.groupLag(shard, out[i].Group, out[i].Lag)
	}
	return out, nil
}

// readLags reads the committed offset of each group of the fold, built
// first if need be, and keeps the reading for a busy GroupLags. Called
// with gs.mu held.
func (gs *groupShard) readLags(s *Server, l Log) ([]GroupLag, error) {
	if err := gs.ensure(s, l); err != nil {
		return nil, err
	}
	names := gs.state.Groups()
	out := make([]GroupLag, 0, len(names))
	for _, g := range names {
		if in, ok := gs.state.Group(g); ok {
			out = append(out, GroupLag{Group: g, Committed: in.Committed})
		}
	}
	kept := append([]GroupLag(nil), out...)
	gs.lastLags.Store(&kept)
	return out, nil
}

// tryLockBriefly takes mu if it comes free within a few short pauses.
func tryLockBriefly(mu *sync.Mutex) bool {
	for i := range groupLagTries {
		if mu.TryLock() {
			return true
		}
		if i < groupLagTries-1 {
			time.Sleep(groupLagPause)
		}
	}
	return false
}
