package server

import (
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"time"

	"felix.dev/felix/broker/group"
	"felix.dev/felix/broker/logstore"
	"felix.dev/felix/broker/record"
	"felix.dev/felix/broker/wire"
)

// GroupShards is an optional interface of Shards: it serves each shard's
// group log (record.LogGroup) under the same rules as DataLog (the same
// refusals, the same replicated append path). A Shards without it answers
// every group request Unavailable.
type GroupShards interface {
	GroupLog(shard record.ShardID) (Log, error)
}

// DefaultGroupLease is how long the leader keeps a member's ownership of a
// shard alive without a heartbeat, claim or commit from it; after it runs
// out another member's claim takes the shard over.
const DefaultGroupLease = 10 * time.Second

// DefaultGroupSnapshotEvery is how many group-log entries the server lets
// pass between two automatic snapshots of a shard's groups (each followed
// by a conditional trim of the group log below it).
const DefaultGroupSnapshotEvery = 4096

// groupTrimHeader names the trims the server makes of group logs.
const groupTrimHeader = "felix.group-snapshot"

// groupShard is one shard's fold of its group log and the leases of its
// owners. mu is held for a whole request, append and acknowledgement
// included: a shard's group requests are applied one at a time.
//
// Leases are the leader's memory, not the log's: a fold rebuilt (a new
// leader, a new replication generation, an unknown outcome) starts every
// owner's lease afresh at full length, so after a leadership change an
// owner that stopped heartbeating loses the shard at most two leases after
// its last heartbeat. The log alone decides which commits are accepted.
type groupShard struct {
	mu     sync.Mutex
	state  *group.State
	leases map[string]time.Time // group -> the owner's lease end
	// due is, per group acknowledging per record, when each outstanding
	// offset is due again (acks.go).
	due   map[string]map[uint64]time.Time
	gen   uint64
	built bool
	// lastLags is GroupLags' last reading of the fold, answered while a
	// request holds mu (grouplags.go).
	lastLags atomic.Pointer[[]GroupLag]
}

func (s *Server) groupShard(id record.ShardID) *groupShard {
	return s.groups.get(id, func() *groupShard { return &groupShard{} })
}

// groupLog returns the shard's group log, or the refusal.
func (s *Server) groupLog(shard record.ShardID) (Log, error) {
	gl, ok := s.shards.(GroupShards)
	if !ok {
		return nil, &wire.Error{Code: wire.CodeUnavailable, Message: "this broker serves no group logs"}
	}
	return gl.GroupLog(shard)
}

// errGroupTailMoved: the group log's tail is not where the fold ended; the
// fold is dropped, to be rebuilt from the log.
var errGroupTailMoved = errors.New("server: the group log's tail moved under this leader")

// ensure makes gs the fold of l's committed entries under l's current
// generation, rebuilding it from the log when the generation changed or an
// earlier request left it unknown. A rebuild starts every owner's lease
// at now. Called with gs.mu held.
func (gs *groupShard) ensure(s *Server, l Log) error {
	gen, err := logGeneration(l)
	if err != nil {
		return err
	}
	if gs.built && gs.gen == gen {
		return nil
	}
	gs.built = false
	st, err := refold(s, l, "group", func(from uint64, trimmed bool) *group.State { return group.NewState(s.opts.GroupLimits, from, trimmed) })
	if err != nil {
		return err
	}
	now := s.opts.Now()
	gs.leases = map[string]time.Time{}
	for _, g := range st.Groups() {
		if in, _ := st.Group(g); in.Owner != "" {
			gs.leases[g] = now.Add(s.opts.GroupLease)
		}
	}
	gs.state, gs.gen, gs.built = st, gen, true
	gs.resetDue(now)
	return nil
}

// appendEntry appends one group-log entry at the fold's tail (a
// conditional append [TR-1]: nothing else may have landed since the fold)
// and folds it. A tail that moved is errGroupTailMoved; on it, and on any
// other failure, the fold is dropped, to be rebuilt from the log. Called
// with gs.mu held.
func (gs *groupShard) appendEntry(s *Server, l Log, payload []byte) (logstore.AppendResult, error) {
	tail := gs.state.Next()
	rec := record.Record{Kind: record.KindData, Epoch: s.opts.Epoch, Payload: payload, Timestamp: s.opts.Now().UnixNano()}
	expect := &tail
	if s.opts.twin.unconditionalGroupAppend {
		expect = nil // twin: [TR-9] off
	}
	res, err := l.Append(s.storeCtx, []record.Record{rec}, expect)
	if err != nil {
		gs.built = false
		var om *record.OffsetMismatchError
		if errors.As(err, &om) {
			return res, fmt.Errorf("%w: from %d to %d; nothing written", errGroupTailMoved, om.Expected, om.Tail)
		}
		return res, err
	}
	rec.Offset = res.First
	if err := gs.state.Apply(rec); err != nil {
		gs.built = false
		return res, fmt.Errorf("server: folding the group entry just written at %d: %w", res.First, err)
	}
	gs.state.AdvanceTo(res.Tail)
	return res, nil
}

// groupError maps the fold's refusals to wire errors.
func (s *Server) groupError(err error) error {
	lim := s.opts.GroupLimits.WithDefaults()
	var fe *group.FencedError
	switch {
	case errors.As(err, &fe):
		return &wire.Error{Code: wire.CodeGroupFenced, Message: err.Error(), Owner: fe.Owner, Generation: fe.Generation}
	case errors.Is(err, group.ErrEmptyName):
		return &wire.Error{Code: wire.CodeBadRequest, Message: err.Error()}
	case errors.Is(err, group.ErrTooManyGroups):
		return &wire.Error{Code: wire.CodeGroupLimit, Message: err.Error(), Limit: uint64(lim.MaxGroups)}
	case errors.Is(err, group.ErrNameTooLong):
		return &wire.Error{Code: wire.CodeGroupLimit, Message: err.Error(), Limit: uint64(lim.MaxNameBytes)}
	case errors.Is(err, group.ErrInFlightLimit):
		return &wire.Error{Code: wire.CodeGroupLimit, Message: err.Error(), Limit: uint64(lim.MaxInFlight)}
	case errors.Is(err, group.ErrNotAckMode), errors.Is(err, group.ErrBadAckConfig):
		return &wire.Error{Code: wire.CodeBadRequest, Message: err.Error()}
	case errors.Is(err, errGroupTailMoved):
		return &wire.Error{Code: wire.CodeUnavailable, Message: err.Error() + "; retry"}
	}
	return err
}

// withGroupShard runs fn on the shard's fold, built, with gs.mu held [TR-9]. When
// fn's append finds the group log's tail moved (another writer appended
// since the fold: a former leader's fold, or a second server on the same
// store), the fold is rebuilt from the log and fn runs once more, so its
// checks see the log as it is: a request the log now refuses is refused.
func (s *Server) withGroupShard(shard record.ShardID, fn func(gs *groupShard, l Log) error) error {
	l, err := s.groupLog(shard)
	if err != nil {
		return err
	}
	gs := s.groupShard(shard)
	gs.mu.Lock()
	defer gs.mu.Unlock()
	for attempt := 0; ; attempt++ {
		if err := gs.ensure(s, l); err != nil {
			return err
		}
		err := fn(gs, l)
		if attempt == 0 && errors.Is(err, errGroupTailMoved) {
			continue
		}
		return s.groupError(err)
	}
}

// leaseMillis is the lease length on the wire.
func (s *Server) leaseMillis() uint32 { return uint32(s.opts.GroupLease / time.Millisecond) }

// groupClaim serves a GroupClaim; see wire.GroupClaimRequest.
func (c *conn) groupClaim(req wire.GroupClaimRequest) (wire.GroupClaimOK, error) {
	s := c.s
	var out wire.GroupClaimOK
	err := s.withGroupShard(req.Shard, func(gs *groupShard, l Log) error {
		cl, held, err := gs.state.CheckClaim(req.Group, req.Member)
		if err != nil {
			return err
		}
		now := s.opts.Now()
		in, _ := gs.state.Group(req.Group)
		if in.Owner == req.Member {
			// Already the owner: the claim renews the lease, nothing is
			// written.
			gs.leases[req.Group] = now.Add(s.opts.GroupLease)
			out = wire.GroupClaimOK{Generation: in.Generation, Committed: in.Committed, LeaseMillis: s.leaseMillis()}
			return nil
		}
		if held && now.Before(gs.leases[req.Group]) {
			return &group.FencedError{Group: req.Group, Member: req.Member, Owner: in.Owner, Generation: in.Generation}
		}
		p, err := group.EncodeClaim(cl)
		if err != nil {
			return &wire.Error{Code: wire.CodeBadRequest, Message: err.Error()}
		}
		if _, err := gs.appendEntry(s, l, p); err != nil {
			return err
		}
		gs.leases[req.Group] = now.Add(s.opts.GroupLease)
		out = wire.GroupClaimOK{Generation: cl.Generation, Committed: in.Committed, LeaseMillis: s.leaseMillis()}
		if in.Owner != "" {
			c.log.V(1).Info("group shard taken over after its owner's lease ran out", "shard", req.Shard.String(),
				"group", req.Group, "from", in.Owner, "to", req.Member, "generation", cl.Generation)
		}
		gs.autoSnapshot(s, l, req.Shard)
		return nil
	})
	if err == nil {
		s.observeGroupLag(req.Shard, req.Group, out.Committed)
	}
	return out, err
}

// groupHeartbeat serves a GroupHeartbeat: the owner's lease is renewed.
func (c *conn) groupHeartbeat(req wire.GroupHeartbeatRequest) (wire.GroupHeartbeatOK, error) {
	s := c.s
	var committed uint64
	err := s.withGroupShard(req.Shard, func(gs *groupShard, _ Log) error {
		if err := gs.state.CheckOwner(req.Group, req.Member, req.Generation); err != nil {
			return err
		}
		gs.leases[req.Group] = s.opts.Now().Add(s.opts.GroupLease)
		in, _ := gs.state.Group(req.Group)
		committed = in.Committed
		return nil
	})
	if err != nil {
		return wire.GroupHeartbeatOK{}, err
	}
	s.observeGroupLag(req.Shard, req.Group, committed)
	return wire.GroupHeartbeatOK{LeaseMillis: s.leaseMillis()}, nil
}

// groupCommit serves a GroupCommit: a commit entry appended on the fold's
// tail, only by the owner at the current generation.
func (c *conn) groupCommit(req wire.GroupCommitRequest) (wire.GroupCommitOK, error) {
	s := c.s
	var out wire.GroupCommitOK
	err := s.withGroupShard(req.Shard, func(gs *groupShard, l Log) error {
		if err := gs.state.CheckOwner(req.Group, req.Member, req.Generation); err != nil {
			return err
		}
		if in, _ := gs.state.Group(req.Group); in.Ack != nil {
			return fmt.Errorf("%w: group %q acknowledges per record; its committed offset moves with its acknowledgements", group.ErrNotAckMode, req.Group)
		}
		p, err := group.EncodeCommit(group.Commit{Group: req.Group, Member: req.Member, Generation: req.Generation, Offset: req.Offset})
		if err != nil {
			return &wire.Error{Code: wire.CodeBadRequest, Message: err.Error()}
		}
		res, err := gs.appendEntry(s, l, p)
		if err != nil {
			return err
		}
		gs.leases[req.Group] = s.opts.Now().Add(s.opts.GroupLease)
		out.Entry = res.First
		gs.autoSnapshot(s, l, req.Shard)
		return nil
	})
	if err == nil {
		s.observeGroupLag(req.Shard, req.Group, req.Offset)
	}
	return out, err
}

// groupLeave serves a GroupLeave: a release entry, by the owner at the
// current generation.
func (c *conn) groupLeave(req wire.GroupLeaveRequest) (wire.GroupLeaveOK, error) {
	s := c.s
	var out wire.GroupLeaveOK
	err := s.withGroupShard(req.Shard, func(gs *groupShard, l Log) error {
		if err := gs.state.CheckOwner(req.Group, req.Member, req.Generation); err != nil {
			return err
		}
		p, err := group.EncodeRelease(group.Release{Group: req.Group, Member: req.Member, Generation: req.Generation})
		if err != nil {
			return &wire.Error{Code: wire.CodeBadRequest, Message: err.Error()}
		}
		res, err := gs.appendEntry(s, l, p)
		if err != nil {
			return err
		}
		delete(gs.leases, req.Group)
		out.Entry = res.First
		gs.autoSnapshot(s, l, req.Shard)
		return nil
	})
	return out, err
}

// groupDescribe serves a GroupDescribe: the groups folded from the group
// log, with their lag behind the data log's tail.
func (c *conn) groupDescribe(req wire.GroupDescribeRequest) (wire.GroupDescribeOK, error) {
	s := c.s
	dl, err := s.shards.DataLog(req.Shard)
	if err != nil {
		return wire.GroupDescribeOK{}, err
	}
	var out wire.GroupDescribeOK
	err = s.withGroupShard(req.Shard, func(gs *groupShard, _ Log) error {
		out = wire.GroupDescribeOK{Tail: dl.Describe().Tail, Through: gs.state.Next()}
		now := s.opts.Now()
		names := gs.state.Groups()
		if req.Group != "" {
			names = []string{req.Group}
		}
		for _, g := range names {
			in, ok := gs.state.Group(g)
			if !ok {
				continue
			}
			st := wire.GroupState{Group: g, Owner: in.Owner, Generation: in.Generation, Committed: in.Committed}
			if out.Tail > in.Committed {
				st.Lag = out.Tail - in.Committed
			}
			if end, ok := gs.leases[g]; ok && in.Owner != "" && end.After(now) {
				st.LeaseMillis = uint32(end.Sub(now) / time.Millisecond)
			}
			out.Groups = append(out.Groups, st)
		}
		return nil
	})
	if err == nil {
		for _, g := range out.Groups {
			s.opts.Metrics.groupLag(req.Shard, g.Group, g.Lag)
		}
	}
	return out, err
}

// observeGroupLag sets the lag metric of the group on the shard from the
// data log's tail now.
func (s *Server) observeGroupLag(shard record.ShardID, g string, committed uint64) {
	if s.opts.Metrics == nil {
		return
	}
	dl, err := s.shards.DataLog(shard)
	if err != nil {
		return
	}
	var lag uint64
	if tail := dl.Describe().Tail; tail > committed {
		lag = tail - committed
	}
	s.opts.Metrics.groupLag(shard, g, lag)
}

// autoSnapshot snapshots and trims the group log every
// Options.GroupSnapshotEvery entries. The snapshot is a conditional append
// on the fold's tail, the trim a conditional trim right after it [TR-2].
// A failure is logged, not returned: the request it follows was applied.
// Called with gs.mu held.
func (gs *groupShard) autoSnapshot(s *Server, l Log, shard record.ShardID) {
	every := s.opts.GroupSnapshotEvery
	if every < 0 || gs.state.SinceSnapshot() < uint64(every) {
		return
	}
	p, err := group.EncodeSnapshot(gs.state.Snapshot())
	if err == nil {
		var res logstore.AppendResult
		if res, err = gs.appendEntry(s, l, p); err == nil {
			var tr logstore.TrimResult
			tr, err = l.Trim(s.storeCtx, logstore.TrimRequest{Floor: res.First, ExpectTail: res.Tail, Timestamp: s.opts.Now().UnixNano(),
				Headers: []record.Header{{Key: groupTrimHeader, Value: []byte(fmt.Sprint(res.First))}}})
			if err != nil {
				gs.built = false
			} else {
				gs.state.AdvanceTo(tr.Tail)
			}
		}
	}
	if err != nil {
		s.log.Error(err, "automatic group snapshot failed", "shard", shard.String())
	}
}
