package server

import (
	"context"
	"fmt"
	"sync"

	"felix.dev/felix/broker/logstore"
	"felix.dev/felix/broker/record"
	"felix.dev/felix/broker/wire"
)

// Log is what the server needs from one shard log. *logstore.Log satisfies
// it (and Submitter), as does the replicated data log of broker/replica.
type Log interface {
	// Append writes recs as one batch at the tail, conditional on
	// expectTail when set [TR-1], and returns once acknowledged.
	Append(ctx context.Context, recs []record.Record, expectTail *uint64) (logstore.AppendResult, error)
	// Read returns data records from from (or logstore.FromEarliest /
	// FromLatest) within opts.
	Read(from uint64, opts logstore.ReadOptions) (logstore.ReadResult, error)
	// Trim appends a conditional head trim [TR-2] [TR-3].
	Trim(ctx context.Context, req logstore.TrimRequest) (logstore.TrimResult, error)
	// Describe returns the log's positions.
	Describe() logstore.Info
	// WaitCommitted blocks until an offset at or above from is committed.
	WaitCommitted(ctx context.Context, from uint64) error
}

// ReadGate is an optional interface of Log: a log that cannot yet tell
// which of its records are committed (a replicated leader before its
// fence commits [TR-4], whose committed mark may still be below records a
// previous leader acknowledged) refuses reads with a retryable error. The
// server asks it before every read, so an empty answer always means the
// reader reached the committed end and never "not known yet".
type ReadGate interface {
	Readable() error
}

// Submitter is an optional interface of Log: a log that can take an
// append without the caller waiting for its acknowledgement. SubmitAppend
// places recs after every append submitted before it on the same log (the
// order of SubmitAppend calls is the order in which appends are applied,
// and a conditional append's expectTail is checked against the tail those
// earlier appends leave). An error from SubmitAppend means nothing was
// submitted. Otherwise the returned function waits for the outcome, which
// is what Append would have returned; it is called exactly once.
//
// The server pipelines appends on one connection through it: a replicated
// log acknowledges an append after a network round trip, and waiting for
// each before submitting the next would leave one append in flight per
// connection.
type Submitter interface {
	SubmitAppend(ctx context.Context, recs []record.Record, expectTail *uint64) (AppendWait, error)
}

// AppendWait waits for the outcome of a submitted append; ctx bounds the
// wait only (the append may still be applied after ctx ends). It is an
// alias, so *logstore.Log's SubmitAppend satisfies Submitter.
type AppendWait = func(ctx context.Context) (logstore.AppendResult, error)

// Shards resolves a shard to the log the server serves for it. It returns
// an error matching record.ErrShardUnknown for a shard this broker does not
// hold, or a *wire.Error (NotLeader, Fenced, Unavailable) to refuse it.
type Shards interface {
	DataLog(shard record.ShardID) (Log, error)
}

// DefaultMaxShards bounds the shards a standalone broker creates.
const DefaultMaxShards = 4096

// StoreShardsOptions configures NewStoreShards.
type StoreShardsOptions struct {
	// MaxShards bounds the data logs the store may hold: an append that
	// would create one more is refused with Unavailable and counted in
	// felix_broker_shard_creations_refused_total. Zero means
	// DefaultMaxShards; negative means no bound.
	MaxShards int
	// Metrics counts the refusals; nil counts nothing.
	Metrics *Metrics
}

// StoreShards is NewStoreShards with the default options.
func StoreShards(s *logstore.Store) Shards { return NewStoreShards(s, StoreShardsOptions{}) }

// NewStoreShards serves every shard's data log from one log store: the
// standalone mode, where each shard has one replica (this broker). A shard
// the store does not hold reads, describes and trims as an empty shard at
// base 0 without being created; its first append creates it, up to
// o.MaxShards. So requests that only look never leave a log behind.
func NewStoreShards(s *logstore.Store, o StoreShardsOptions) Shards {
	if o.MaxShards == 0 {
		o.MaxShards = DefaultMaxShards
	}
	ss := &storeShards{s: s, o: o, created: make(chan struct{})}
	for _, id := range s.Logs() {
		switch id.Log {
		case record.LogData:
			ss.count++
		case record.LogCounter:
			ss.counters++
		case record.LogGroup:
			ss.groups++
		case record.LogDeadLetter:
			ss.deadLetters++
		}
	}
	return ss
}

type storeShards struct {
	s *logstore.Store
	o StoreShardsOptions

	mu    sync.Mutex // serialises creations; guards count and created
	count int        // data logs in the store
	// counters is the counter logs in the store, bounded by MaxShards
	// apart from the data logs.
	counters int
	// groups is the group logs in the store, bounded the same way.
	groups int
	// deadLetters is the dead-letter logs in the store, bounded the same
	// way.
	deadLetters int
	created     chan struct{}
	parked      int // WaitCommitted calls waiting for a creation (tests observe it)
}

func (s *storeShards) DataLog(shard record.ShardID) (Log, error) {
	id := record.LogID{ShardID: shard, Log: record.LogData}
	if l, ok := s.s.Lookup(id); ok {
		return l, nil
	}
	return &absentLog{s: s, id: id}, nil
}

// CounterLog implements CounterShards: the shard's counter log, served as
// DataLog serves the data log (absent until its first append creates it).
func (s *storeShards) CounterLog(shard record.ShardID) (Log, error) {
	id := record.LogID{ShardID: shard, Log: record.LogCounter}
	if l, ok := s.s.Lookup(id); ok {
		return l, nil
	}
	return &absentLog{s: s, id: id}, nil
}

// GroupLog implements GroupShards: the shard's group log, served as
// DataLog serves the data log (absent until its first append creates it).
func (s *storeShards) GroupLog(shard record.ShardID) (Log, error) {
	id := record.LogID{ShardID: shard, Log: record.LogGroup}
	if l, ok := s.s.Lookup(id); ok {
		return l, nil
	}
	return &absentLog{s: s, id: id}, nil
}

// DeadLetterLog implements DeadLetterShards: the shard's dead-letter log,
// served as DataLog serves the data log (absent until its first append
// creates it).
func (s *storeShards) DeadLetterLog(shard record.ShardID) (Log, error) {
	id := record.LogID{ShardID: shard, Log: record.LogDeadLetter}
	if l, ok := s.s.Lookup(id); ok {
		return l, nil
	}
	return &absentLog{s: s, id: id}, nil
}

// create returns the log id, creating it if it still does not exist and
// the bound allows.
func (s *storeShards) create(id record.LogID) (*logstore.Log, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if l, ok := s.s.Lookup(id); ok {
		return l, nil
	}
	count := &s.count
	switch id.Log {
	case record.LogCounter:
		count = &s.counters
	case record.LogGroup:
		count = &s.groups
	case record.LogDeadLetter:
		count = &s.deadLetters
	}
	if s.o.MaxShards > 0 && *count >= s.o.MaxShards {
		s.o.Metrics.shardRefused()
		return nil, &wire.Error{Code: wire.CodeUnavailable,
			Message: fmt.Sprintf("%s: not created: this broker holds %d %s logs, its limit (--max-shards)", id.ShardID, *count, id.Log)}
	}
	l, err := s.s.CreateLog(id, logstore.LogOptions{})
	if err != nil {
		return nil, err
	}
	*count++
	close(s.created)
	s.created = make(chan struct{})
	return l, nil
}

// wait returns a channel closed at the next creation of any log.
func (s *storeShards) wait() <-chan struct{} {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.created
}

// absentLog is a shard the store does not hold (yet): it answers as the
// empty shard at base 0 would, and turns into the real log once one
// exists. Only an append creates it.
type absentLog struct {
	s  *storeShards
	id record.LogID
}

func (a *absentLog) real() (*logstore.Log, bool) { return a.s.s.Lookup(a.id) }

func (a *absentLog) Append(ctx context.Context, recs []record.Record, expectTail *uint64) (logstore.AppendResult, error) {
	l, err := a.s.create(a.id)
	if err != nil {
		return logstore.AppendResult{}, err
	}
	return l.Append(ctx, recs, expectTail)
}

// SubmitAppend implements Submitter, creating the log as Append does.
func (a *absentLog) SubmitAppend(ctx context.Context, recs []record.Record, expectTail *uint64) (AppendWait, error) {
	l, err := a.s.create(a.id)
	if err != nil {
		return nil, err
	}
	return l.SubmitAppend(ctx, recs, expectTail)
}

func (a *absentLog) Read(from uint64, opts logstore.ReadOptions) (logstore.ReadResult, error) {
	if l, ok := a.real(); ok {
		return l.Read(from, opts)
	}
	switch {
	case from == logstore.FromEarliest || from == logstore.FromLatest:
		from = 0
	case from > 0:
		return logstore.ReadResult{}, fmt.Errorf("server: read from %d above tail 0: %w", from, logstore.ErrBeyondTail)
	}
	return logstore.ReadResult{Next: from}, nil
}

// Trim answers as the empty log's trim would: the tail must be 0, and a
// floor of 0 is a no-op [TR-3]; nothing is created.
func (a *absentLog) Trim(ctx context.Context, req logstore.TrimRequest) (logstore.TrimResult, error) {
	if l, ok := a.real(); ok {
		return l.Trim(ctx, req)
	}
	if req.ExpectTail != 0 {
		return logstore.TrimResult{}, &record.OffsetMismatchError{Expected: req.ExpectTail, Tail: 0}
	}
	if req.Floor > 0 {
		return logstore.TrimResult{}, fmt.Errorf("server: trim floor %d above the trim's own offset 0 in %s: %w", req.Floor, a.id, logstore.ErrFloorAboveTrim)
	}
	return logstore.TrimResult{NoOp: true}, nil
}

func (a *absentLog) Describe() logstore.Info {
	if l, ok := a.real(); ok {
		return l.Describe()
	}
	return logstore.Info{ID: a.id}
}

// WaitCommitted waits for the log to be created, then for the offset.
func (a *absentLog) WaitCommitted(ctx context.Context, from uint64) error {
	for {
		ch := a.s.wait()
		if l, ok := a.real(); ok {
			return l.WaitCommitted(ctx, from)
		}
		if err := a.s.waitCreated(ctx, ch); err != nil {
			return err
		}
	}
}

// waitCreated waits for ch (from wait) or ctx, counted in parked.
func (s *storeShards) waitCreated(ctx context.Context, ch <-chan struct{}) error {
	s.mu.Lock()
	s.parked++
	s.mu.Unlock()
	defer func() {
		s.mu.Lock()
		s.parked--
		s.mu.Unlock()
	}()
	select {
	case <-ch:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}

// parkedReads is how many reads wait for a log to be created.
func (s *storeShards) parkedReads() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.parked
}
