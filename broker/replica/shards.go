package replica

import (
	"context"
	"errors"
	"fmt"

	"felix.dev/felix/broker/logstore"
	"felix.dev/felix/broker/record"
	"felix.dev/felix/broker/replication"
	"felix.dev/felix/broker/server"
	"felix.dev/felix/broker/wire"
)

// shardsView is the server.Shards of the replicated mode.
type shardsView struct{ m *Manager }

// DataLog returns the shard's data log if this broker leads it; otherwise
// it refuses: ShardUnknown (no replica here), NotLeader with the leader's
// client address (a follower that knows its leader), Unavailable (no
// leader known, a leader still recovering, or a replica that failed).
func (v shardsView) DataLog(id record.ShardID) (server.Log, error) {
	return v.leaderLog(id, record.LogData)
}

// CounterLog implements server.CounterShards: the shard's counter log,
// served and refused exactly as DataLog serves the data log. Its appends
// and trims go through the same replicated proposals, under the stream's
// ack mode.
func (v shardsView) CounterLog(id record.ShardID) (server.Log, error) {
	return v.leaderLog(id, record.LogCounter)
}

// GroupLog implements server.GroupShards: the shard's group log, served
// and refused exactly as DataLog serves the data log.
func (v shardsView) GroupLog(id record.ShardID) (server.Log, error) {
	return v.leaderLog(id, record.LogGroup)
}

// DeadLetterLog implements server.DeadLetterShards: the shard's
// dead-letter log, served and refused exactly as DataLog serves the data
// log.
func (v shardsView) DeadLetterLog(id record.ShardID) (server.Log, error) {
	return v.leaderLog(id, record.LogDeadLetter)
}

// leaderLog returns log l of the shard if this broker leads it.
func (v shardsView) leaderLog(id record.ShardID, l record.LogKind) (server.Log, error) {
	s, err := v.m.shard(id)
	if err != nil {
		return nil, err
	}
	if e := s.failed.Load(); e != nil {
		return nil, &wire.Error{Code: wire.CodeUnavailable, Message: fmt.Sprintf("replica of %s failed: %v", id, *e)}
	}
	st := s.status.Load()
	switch st.Role {
	case replication.RoleLeader:
		return &dataLog{s: s, log: s.logs[l], kind: l}, nil
	case replication.RoleRecovering:
		return nil, &wire.Error{Code: wire.CodeUnavailable, Message: fmt.Sprintf("%s: leader recovering at epoch %d", id, st.Epoch)}
	}
	return nil, s.notLeader(st.Leader, st.Epoch)
}

// notLeader refuses a client: NotLeader with a hint when a leader is
// known, Unavailable otherwise.
func (s *shard) notLeader(leader replication.NodeID, epoch uint64) error {
	if leader == "" || leader == s.m.o.Self {
		return &wire.Error{Code: wire.CodeUnavailable, Message: fmt.Sprintf("%s: no leader known at epoch %d", s.id, epoch)}
	}
	hint := ""
	if s.m.o.ClientAddr != nil {
		if a, err := s.m.o.ClientAddr(leader); err == nil {
			hint = a
		}
	}
	return &wire.Error{Code: wire.CodeNotLeader, Message: fmt.Sprintf("%s: leader is %s", s.id, leader), Leader: hint, Epoch: epoch}
}

// ackErr maps a refused proposal to the error a client sees.
func (s *shard) ackErr(err error) error {
	var nl *replication.NotLeaderError
	switch {
	case errors.As(err, &nl):
		return s.notLeader(nl.Leader, nl.Epoch)
	case errors.Is(err, replication.ErrRecovering):
		return &wire.Error{Code: wire.CodeUnavailable, Message: err.Error()}
	case errors.Is(err, replication.ErrFenced):
		return &wire.Error{Code: wire.CodeFenced, Message: err.Error() + " (not acknowledged; it may or may not survive)",
			Epoch: s.status.Load().Epoch}
	}
	return err
}

// dataLog is one of a leader's logs (the data log, or the counter log) as
// the server serves it.
type dataLog struct {
	s    *shard
	log  *logstore.Log
	kind record.LogKind
}

func (d *dataLog) mode() replication.AckMode { return replication.AckMode(d.s.mode.Load()) }

// Append proposes recs under the stream's ack mode and, when expectTail is
// set, the tail check [TR-1]; it returns once acknowledged under the mode.
func (d *dataLog) Append(ctx context.Context, recs []record.Record, expectTail *uint64) (logstore.AppendResult, error) {
	wait, err := d.SubmitAppend(ctx, recs, expectTail)
	if err != nil {
		return logstore.AppendResult{}, err
	}
	return wait(ctx)
}

// SubmitAppend proposes recs as Append does without waiting for the
// acknowledgement (server.Submitter): appends submitted one after the
// other from one goroutine are applied in that order.
func (d *dataLog) SubmitAppend(ctx context.Context, recs []record.Record, expectTail *uint64) (server.AppendWait, error) {
	if err := d.s.m.o.Store.SpaceErr(); err != nil {
		// A leader short of space proposes nothing it could not persist
		// itself: StorageFull, and the shard keeps running.
		return nil, err
	}
	now := d.s.m.o.Now().UnixNano()
	batch := make([]record.Record, len(recs))
	for i, r := range recs {
		if r.Kind == 0 {
			r.Kind = record.KindData
		}
		if r.Kind != record.KindData {
			return nil, fmt.Errorf("replica: append of a %s record: %w", r.Kind, logstore.ErrBadRecord)
		}
		if r.Timestamp == 0 {
			r.Timestamp = now
		}
		r.Floor = 0
		batch[i] = r
	}
	p := replication.Proposal{Log: d.kind, Records: batch, Mode: d.mode()}
	if expectTail != nil {
		p.ExpectTail, p.ExpectedTail = true, *expectTail
	}
	wait, err := d.s.submit(ctx, p)
	if err != nil {
		return nil, d.s.ackErr(err)
	}
	return func(ctx context.Context) (logstore.AppendResult, error) {
		a, err := wait(ctx)
		if err == nil {
			err = a.Err
		}
		if err != nil {
			return logstore.AppendResult{}, d.s.ackErr(err)
		}
		return logstore.AppendResult{First: a.First, Last: a.End - 1, Tail: a.End}, nil
	}, nil
}

// Trim proposes a KindTrim record under the tail check [TR-2]. A floor at
// or below the current floor proposes no record but still checks the tail
// against the leader's tail (the core's), answering NoOp [TR-3]. A floor
// above the offset the trim would land at is refused with
// logstore.ErrFloorAboveTrim once the tail check passed, as the store does.
func (d *dataLog) Trim(ctx context.Context, req logstore.TrimRequest) (logstore.TrimResult, error) {
	floor := d.log.Describe().Floor
	checkOnly := req.Floor <= floor || req.Floor > req.ExpectTail
	p := replication.Proposal{Log: d.kind, Mode: d.mode(), ExpectTail: true, ExpectedTail: req.ExpectTail}
	if !checkOnly {
		ts := req.Timestamp
		if ts == 0 {
			ts = d.s.m.o.Now().UnixNano()
		}
		p.Records = []record.Record{{Kind: record.KindTrim, Floor: req.Floor, Headers: req.Headers, Timestamp: ts}}
	}
	a, err := d.s.propose(ctx, p)
	if err == nil {
		err = a.Err
	}
	if err != nil {
		return logstore.TrimResult{}, d.s.ackErr(err)
	}
	switch {
	case req.Floor <= floor:
		return logstore.TrimResult{Tail: a.End, Floor: floor, NoOp: true}, nil
	case checkOnly:
		return logstore.TrimResult{}, fmt.Errorf("replica: trim floor %d above the trim's own offset %d: %w",
			req.Floor, req.ExpectTail, logstore.ErrFloorAboveTrim)
	}
	return logstore.TrimResult{Tail: a.End, Floor: req.Floor, Offset: a.First}, nil
}

// readable refuses reads, with Unavailable (retryable), until this leader's
// fence commit has been applied to its logs [TR-4]. Until then its floor is
// the one it knew as a follower: a trim the previous leader committed and
// acknowledged may not have moved it yet.
func (s *shard) readable() error {
	st := s.status.Load()
	if st.Role != replication.RoleLeader || s.serving.Load() != st.Epoch {
		return &wire.Error{Code: wire.CodeUnavailable,
			Message: fmt.Sprintf("%s: leader of epoch %d has not committed its fence yet", s.id, st.Epoch)}
	}
	return nil
}

// Generation implements server.Generational: the epoch this replica leads
// with its fence committed and applied [TR-4], or Unavailable before
// then. A new leader's log holds, below its fence, every batch a previous
// leader acknowledged, so the producer table the server rebuilds from it
// answers their retries with their original offsets.
func (d *dataLog) Generation() (uint64, error) {
	if err := d.s.readable(); err != nil {
		return 0, err
	}
	return d.s.serving.Load(), nil
}

// Readable implements server.ReadGate: Unavailable until this leader's
// fence is committed and applied [TR-4]. Until then its committed mark can
// be below records the previous leader acknowledged (a follower learns the
// mark a pass after the acknowledgement), so "nothing committed" from it
// would be a wrong answer, not an empty log.
func (d *dataLog) Readable() error { return d.s.readable() }

var _ server.ReadGate = (*dataLog)(nil)

// Read serves data records; for Quorum and All streams only committed
// ones. A new leader refuses reads until its fence is committed [TR-4].
func (d *dataLog) Read(from uint64, opts logstore.ReadOptions) (logstore.ReadResult, error) {
	if err := d.s.readable(); err != nil {
		return logstore.ReadResult{}, err
	}
	if d.mode() != replication.AckLeader {
		c := d.log.Describe().Committed
		if opts.UpTo == 0 || opts.UpTo > c {
			opts.UpTo = c
		}
		if opts.UpTo == 0 {
			// Nothing committed on a log based at 0 (UpTo 0 would mean
			// the durable tail): an empty answer that stays put.
			if from == logstore.FromEarliest || from == logstore.FromLatest {
				from = 0
			}
			return logstore.ReadResult{Next: from}, nil
		}
	}
	return d.log.Read(from, opts)
}

// Describe returns the log's positions. For a Leader-mode stream the
// committed position offered to readers is the leader's durable tail:
// every durable record there was acknowledged.
func (d *dataLog) Describe() logstore.Info {
	info := d.log.Describe()
	if d.mode() == replication.AckLeader && info.Durable > info.Committed {
		info.Committed = info.Durable
	}
	return info
}

// WaitCommitted waits for a record at or above from to become readable
// under the stream's mode.
func (d *dataLog) WaitCommitted(ctx context.Context, from uint64) error {
	if d.mode() == replication.AckLeader {
		return d.log.Wait(ctx, from)
	}
	return d.log.WaitCommitted(ctx, from)
}
