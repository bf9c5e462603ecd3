package client

import (
	"context"
	"errors"

	"felix.dev/felix/broker/record"
	"felix.dev/felix/broker/wire"
)

// ClusterPendingAppend is an append sent through a Cluster whose answer
// has not been taken yet (Cluster.AppendAsync). It is used by one
// goroutine at a time.
type ClusterPendingAppend struct {
	c     *Cluster
	shard record.ShardID
	addr  string  // the broker it was sent to
	cl    *Client // the pooled connection it was sent on
	p     *PendingAppend

	// idem is closed when an idempotent append finished in the
	// background; idemOK and idemErr are then its outcome.
	idem    chan struct{}
	idemOK  wire.AppendOK
	idemErr error

	done bool
	ok   wire.AppendOK
	err  error
}

// AppendAsync sends an append to the shard's leader, over the Cluster's
// pooled connection to it, and returns without waiting for the answer
// (Client.AppendAsync): one goroutine can keep many appends in flight,
// on one shard or spread over several, each going to its own shard's
// leader.
//
// Sending is routed and retried as Append's first try is: to the leader
// the metadata or a leader hint names, again after a dial failure or a
// connection that broke before the append went out, within
// ClusterOptions.Attempts and ctx, learning the metadata again between
// tries. ctx bounds only the sending; Wait takes its own. An error from
// AppendAsync means nothing was sent. recs may be reused once it
// returns.
//
// Order: appends sent one after the other to one shard (from one
// goroutine) reach its leader in that order, so those that succeed land
// in that order. A leader change breaks the sequence: the appends already
// sent to the old leader each fail, and the ones sent after the Cluster
// learned the new leader may land; a caller that needs no gap stops at
// the first error and re-reads (or uses expectTail).
//
// Outcome (Wait): nothing is sent again once it went out. Each request
// gets its own error: NotLeader and ShardUnknown (nothing was written;
// the Cluster follows the hint, or learns the metadata again before the
// next send), Unavailable, Fenced, a broken connection or an ended
// ctx (the error matches ErrUnknownOutcome: it may have landed [FD-1]),
// and any other refusal as Client.AppendAsync returns it.
//
// With ClusterOptions.Idempotent the append is Append's idempotent one,
// run in the background after the shard's previous AppendAsync finished:
// one append per shard is in flight (no pipelining), its unknown outcome
// is sent again under the same producer sequence, and ctx bounds the
// whole append, not only the sending. recs must then stay unchanged
// until Wait returns.
func (c *Cluster) AppendAsync(ctx context.Context, shard record.ShardID, recs []record.Record, expectTail *uint64) (*ClusterPendingAppend, error) {
	if c.o.Idempotent {
		return c.appendAsyncIdempotent(ctx, shard, recs, expectTail), nil
	}
	c.refreshIfStale(ctx, shard.Stream)
	pa := &ClusterPendingAppend{c: c, shard: shard}
	err := c.doAt(ctx, shard, opWrite, func(addr string, cl *Client) error {
		p, err := cl.AppendAsync(ctx, shard, recs, expectTail)
		if err != nil {
			return err
		}
		pa.addr, pa.cl, pa.p = addr, cl, p
		return nil
	})
	if err != nil {
		return nil, err
	}
	return pa, nil
}

// Wait returns the append's outcome (see AppendAsync): the answer, the
// broker's error, or an error matching ErrUnknownOutcome if the answer
// did not come or may not tell. Later calls return the same without
// waiting.
func (p *ClusterPendingAppend) Wait(ctx context.Context) (wire.AppendOK, error) {
	if p.done {
		return p.ok, p.err
	}
	p.done = true
	if p.idem != nil {
		select {
		case <-p.idem:
			p.ok, p.err = p.idemOK, p.idemErr
		case <-ctx.Done():
			p.err = &UnknownOutcomeError{Err: ctx.Err()}
		}
		return p.ok, p.err
	}
	p.ok, p.err = p.p.Wait(ctx)
	if p.err != nil {
		p.err = p.c.afterAsync(p.shard, p.addr, p.cl, p.err)
	}
	return p.ok, p.err
}

// afterAsync learns from the failure err of an asynchronous append sent
// to addr over cl what Append's retry loop would (a leader hint, a broken
// connection, metadata to learn again) and returns the error for the
// caller: the append is not sent again.
func (c *Cluster) afterAsync(shard record.ShardID, addr string, cl *Client, err error) error {
	what, out := c.classify(shard, addr, cl, false, opWrite, err)
	var we *wire.Error
	stale := what == retryLater || errors.Is(err, ErrClosed) ||
		(errors.As(err, &we) && (we.Code == wire.CodeUnavailable || we.Code == wire.CodeFenced))
	if stale {
		c.log.V(1).Info("asynchronous append failed; metadata to learn again", "shard", shard.String(), "broker", addr, "error", err.Error())
		c.mu.Lock()
		c.stale[shard.Stream] = true
		c.mu.Unlock()
	}
	return out
}

// refreshIfStale learns stream's metadata again when an asynchronous
// append's answer marked it out of date; one caller does, the others
// route by what is known meanwhile.
func (c *Cluster) refreshIfStale(ctx context.Context, stream string) {
	c.mu.Lock()
	stale := c.stale[stream]
	delete(c.stale, stream)
	c.mu.Unlock()
	if !stale {
		return
	}
	if _, err := c.refresh(ctx, []string{stream}); err != nil {
		c.log.V(1).Info("metadata refresh failed", "stream", stream, "error", err.Error())
	}
}

// appendAsyncIdempotent runs an idempotent Append in the background once
// the shard's previous asynchronous append finished, so the shard's
// sequence numbers go out in the order of the calls.
func (c *Cluster) appendAsyncIdempotent(ctx context.Context, shard record.ShardID, recs []record.Record, expectTail *uint64) *ClusterPendingAppend {
	pa := &ClusterPendingAppend{c: c, shard: shard, idem: make(chan struct{})}
	c.mu.Lock()
	prev := c.tails[shard]
	c.tails[shard] = pa.idem
	c.mu.Unlock()
	go func() {
		defer func() {
			c.mu.Lock()
			if c.tails[shard] == pa.idem {
				delete(c.tails, shard)
			}
			c.mu.Unlock()
			close(pa.idem)
		}()
		if prev != nil {
			select {
			case <-prev:
			case <-ctx.Done():
				pa.idemErr = ctx.Err() // not sent
				return
			}
		}
		pa.idemOK, pa.idemErr = c.appendIdempotent(ctx, shard, recs, expectTail)
	}()
	return pa
}
