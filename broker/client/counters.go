package client

import (
	"context"
	"errors"

	"felix.dev/felix/broker/auth"
	"felix.dev/felix/broker/record"
	"felix.dev/felix/broker/wire"
)

// ErrNoCounters is returned by the counter calls when the connection did
// not negotiate wire.FeatureCounters (an older broker): nothing was sent.
var ErrNoCounters = errors.New("client: the broker does not serve counters")

// CounterAdd adds delta to the counter key of shard and returns the value
// after the add and the add's offset in the shard's counter log. With p
// set the add is idempotent: resending the same key and delta under the
// same p after ErrUnknownOutcome or Unavailable is answered with the first
// answer and applied once (the counter log keeps its own producer
// sequences, apart from the data log's). Without p an add sent but not
// answered fails with ErrUnknownOutcome and must not be resent blindly.
// An add beyond the shard's bounds fails matching wire.ErrCounterLimit.
func (c *Client) CounterAdd(ctx context.Context, shard record.ShardID, key string, delta int64, p *wire.Producer) (wire.CounterAddOK, error) {
	if !c.hello.Features.Has(wire.FeatureCounters) {
		return wire.CounterAddOK{}, ErrNoCounters
	}
	body, err := wire.EncodeCounterAdd(wire.CounterAddRequest{Shard: shard, Key: key, Delta: delta, Producer: p})
	if err != nil {
		return wire.CounterAddOK{}, err
	}
	f, sent, err := c.roundTrip(ctx, wire.MsgCounterAdd, body)
	if err != nil {
		if sent {
			return wire.CounterAddOK{}, &UnknownOutcomeError{Err: err}
		}
		return wire.CounterAddOK{}, err
	}
	ok, err := answer(c, f, wire.MsgCounterAddOK, wire.DecodeCounterAddOK)
	return ok, authError(err, auth.OpAppend, shard)
}

// CounterGet reads the counter key of shard: its value (0 if never added
// to) as folded from every committed counter-log entry below Through.
func (c *Client) CounterGet(ctx context.Context, shard record.ShardID, key string) (wire.CounterGetOK, error) {
	if !c.hello.Features.Has(wire.FeatureCounters) {
		return wire.CounterGetOK{}, ErrNoCounters
	}
	body, err := wire.EncodeCounterGet(wire.CounterGetRequest{Shard: shard, Key: key})
	if err != nil {
		return wire.CounterGetOK{}, err
	}
	f, _, err := c.roundTrip(ctx, wire.MsgCounterGet, body)
	if err != nil {
		return wire.CounterGetOK{}, err
	}
	ok, err := answer(c, f, wire.MsgCounterGetOK, wire.DecodeCounterGetOK)
	return ok, authError(err, auth.OpRead, shard)
}

// CounterSnapshot asks the shard's leader to append a snapshot of all its
// counters to the counter log and, with trim, to trim the log below it
// (a conditional trim [TR-2]). Snapshotting twice is harmless, so a
// snapshot sent but not answered may be sent again.
func (c *Client) CounterSnapshot(ctx context.Context, shard record.ShardID, trim bool) (wire.CounterSnapshotOK, error) {
	if !c.hello.Features.Has(wire.FeatureCounters) {
		return wire.CounterSnapshotOK{}, ErrNoCounters
	}
	body, err := wire.EncodeCounterSnapshot(wire.CounterSnapshotRequest{Shard: shard, Trim: trim})
	if err != nil {
		return wire.CounterSnapshotOK{}, err
	}
	f, _, err := c.roundTrip(ctx, wire.MsgCounterSnapshot, body)
	if err != nil {
		return wire.CounterSnapshotOK{}, err
	}
	ok, err := answer(c, f, wire.MsgCounterSnapshotOK, wire.DecodeCounterSnapshotOK)
	return ok, authError(err, auth.OpTrim, shard)
}

// CounterAdd is Client.CounterAdd sent to the shard's leader, always
// idempotent: the Cluster keeps a producer per shard for its counter adds
// (apart from its appends' producers) and resends an add whose outcome is
// unknown, within Attempts and ctx, as appendIdempotent does; the leader
// applies it once. One add per shard is in flight at a time.
func (c *Cluster) CounterAdd(ctx context.Context, shard record.ShardID, key string, delta int64) (wire.CounterAddOK, error) {
	var out wire.CounterAddOK
	err := c.idempotent(ctx, shard, c.counterProducer(shard), "counter add", func(cl *Client, p wire.Producer) (err error) {
		out, err = cl.CounterAdd(ctx, shard, key, delta, &p)
		return err
	})
	return out, err
}

// CounterGet is Client.CounterGet sent to the shard's leader.
func (c *Cluster) CounterGet(ctx context.Context, shard record.ShardID, key string) (wire.CounterGetOK, error) {
	var out wire.CounterGetOK
	err := c.do(ctx, shard, opRead, func(cl *Client) (err error) {
		out, err = cl.CounterGet(ctx, shard, key)
		return err
	})
	return out, err
}

// CounterSnapshot is Client.CounterSnapshot sent to the shard's leader; it
// is retried like a read, since a second snapshot changes no counter.
func (c *Cluster) CounterSnapshot(ctx context.Context, shard record.ShardID, trim bool) (wire.CounterSnapshotOK, error) {
	var out wire.CounterSnapshotOK
	err := c.do(ctx, shard, opRead, func(cl *Client) (err error) {
		out, err = cl.CounterSnapshot(ctx, shard, trim)
		return err
	})
	return out, err
}

// counterProducer returns the shard's counter-add producer.
func (c *Cluster) counterProducer(shard record.ShardID) *shardProducer {
	c.mu.Lock()
	defer c.mu.Unlock()
	sp := c.counterProducers[shard]
	if sp == nil {
		sp = &shardProducer{}
		c.counterProducers[shard] = sp
	}
	return sp
}
