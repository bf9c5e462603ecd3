package server

import (
	"context"

	"felix.dev/felix/broker/logstore"
	"felix.dev/felix/broker/record"
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

// StoreShards serves every shard's data log from one log store, creating
// logs on first use: the standalone mode, where each shard has one replica.
func StoreShards(s *logstore.Store) Shards { return storeShards{s} }

type storeShards struct{ s *logstore.Store }

func (s storeShards) DataLog(shard record.ShardID) (Log, error) {
	l, err := s.s.Log(record.LogID{ShardID: shard, Log: record.LogData})
	if err != nil {
		return nil, err
	}
	return l, nil
}
