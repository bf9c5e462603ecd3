package client

import (
	"context"

	"felix.dev/felix/broker/auth"
	"felix.dev/felix/broker/record"
	"felix.dev/felix/broker/wire"
)

// PendingAppend is an append that was sent and whose answer has not been
// taken yet (AppendAsync). It is used by one goroutine at a time.
type PendingAppend struct {
	w     *waiter
	shard record.ShardID
	done  bool
	ok    wire.AppendOK
	err   error
}

// AppendAsync sends an append as Append does and returns without waiting
// for the answer, so one goroutine can keep many appends in flight on the
// connection (as a pipelining producer does). Appends sent one after the
// other from one goroutine reach the broker in that order. ctx bounds only
// the sending; Wait takes its own. An error from AppendAsync means nothing
// was sent.
func (c *Client) AppendAsync(ctx context.Context, shard record.ShardID, recs []record.Record, expectTail *uint64) (*PendingAppend, error) {
	w, err := c.send(ctx, appendFrame(wire.AppendRequest{Shard: shard, ExpectTail: expectTail, Records: recs}))
	if err != nil {
		return nil, err
	}
	return &PendingAppend{w: w, shard: shard}, nil
}

// Wait returns the append's outcome, as Append would have: the answer, the
// broker's error, or an error matching ErrUnknownOutcome if the answer did
// not come (ctx ended, or the connection broke; the client then stops
// waiting for it). Later calls return the same without waiting.
func (p *PendingAppend) Wait(ctx context.Context) (wire.AppendOK, error) {
	if !p.done {
		p.done = true
		p.ok, p.err = p.w.appendOutcome(ctx)
		p.err = authError(p.err, auth.OpAppend, p.shard)
	}
	return p.ok, p.err
}

// appendOutcome waits for an append's answer: what Append returns.
func (w *waiter) appendOutcome(ctx context.Context) (wire.AppendOK, error) {
	f, _, err := w.wait(ctx)
	if err != nil {
		return wire.AppendOK{}, &UnknownOutcomeError{Err: err}
	}
	return answer(w.c, f, wire.MsgAppendOK, wire.DecodeAppendOK)
}
