package client

import (
	"context"
	"errors"

	"felix.dev/felix/broker/auth"
	"felix.dev/felix/broker/record"
	"felix.dev/felix/broker/wire"
)

// ErrNoAcks is returned by the per-record acknowledgement and dead-letter
// calls when the connection did not negotiate wire.FeatureAcks (an older
// broker): nothing was sent.
var ErrNoAcks = errors.New("client: the broker does not serve per-record acknowledgement or dead-letter logs")

// ackCall sends one ack or dead-letter request and decodes its answer. A
// request sent but not answered fails with ErrUnknownOutcome when it may
// write (writes). op names the operation a refusal is about.
func ackCall[T any](ctx context.Context, c *Client, shard record.ShardID, t, want wire.MsgType, body []byte, encErr error,
	writes bool, op auth.Operation, decode func([]byte) (T, error)) (T, error) {
	var zero T
	if !c.hello.Features.Has(wire.FeatureAcks) {
		return zero, ErrNoAcks
	}
	if encErr != nil {
		return zero, encErr
	}
	f, sent, err := c.roundTrip(ctx, t, body)
	if err != nil {
		if sent && writes {
			return zero, &UnknownOutcomeError{Err: err}
		}
		return zero, err
	}
	ok, err := answer(c, f, want, decode)
	return ok, authError(err, op, shard)
}

// GroupAckConfig switches group to per-record acknowledgement on shard
// (or changes its settings), by member, its owner at generation; see
// wire.GroupAckConfigRequest. Settings above the broker's limit fail
// matching wire.ErrGroupLimit. Sending the same settings twice is
// harmless, so a call whose outcome is unknown may be sent again.
func (c *Client) GroupAckConfig(ctx context.Context, r wire.GroupAckConfigRequest) (wire.GroupAckConfigOK, error) {
	body, err := wire.EncodeGroupAckConfig(r)
	return ackCall(ctx, c, r.Shard, wire.MsgGroupAckConfig, wire.MsgGroupAckConfigOK, body, err, true, auth.OpRead, wire.DecodeGroupAckConfigOK)
}

// GroupFetch returns records for member to process, with their delivery
// counts; see wire.GroupFetchRequest. A full window with nothing due fails
// matching wire.ErrGroupLimit. The deliveries of an answer that is lost
// are counted and come again after the ack wait, so a fetch whose outcome
// is unknown may be sent again.
func (c *Client) GroupFetch(ctx context.Context, r wire.GroupFetchRequest) (wire.GroupFetchOK, error) {
	body, err := wire.EncodeGroupFetch(r)
	return ackCall(ctx, c, r.Shard, wire.MsgGroupFetch, wire.MsgGroupFetchOK, body, err, true, auth.OpRead, wire.DecodeGroupFetchOK)
}

// GroupAck acknowledges offsets (processed) for member at generation and
// returns the group's committed offset after it. Acknowledging an offset
// twice is harmless, so an ack whose outcome is unknown may be sent again.
func (c *Client) GroupAck(ctx context.Context, shard record.ShardID, group, member string, generation uint64, offsets []uint64) (wire.GroupAckOK, error) {
	body, err := wire.EncodeGroupAck(wire.GroupAckRequest{Shard: shard, Group: group, Member: member, Generation: generation, Offsets: offsets})
	return ackCall(ctx, c, shard, wire.MsgGroupAck, wire.MsgGroupAckOK, body, err, true, auth.OpRead, wire.DecodeGroupAckOK)
}

// GroupNak asks for offsets to be redelivered at member's next fetch. It
// writes nothing.
func (c *Client) GroupNak(ctx context.Context, shard record.ShardID, group, member string, generation uint64, offsets []uint64) (wire.GroupNakOK, error) {
	body, err := wire.EncodeGroupNak(wire.GroupNakRequest{Shard: shard, Group: group, Member: member, Generation: generation, Offsets: offsets})
	return ackCall(ctx, c, shard, wire.MsgGroupNak, wire.MsgGroupNakOK, body, err, false, auth.OpRead, wire.DecodeGroupNakOK)
}

// DeadLetterRead reads shard's dead-letter log from from, at most max
// entries (0: the broker's default).
func (c *Client) DeadLetterRead(ctx context.Context, shard record.ShardID, from uint64, max uint32) (wire.DeadLetterReadOK, error) {
	body, err := wire.EncodeDeadLetterRead(wire.DeadLetterReadRequest{Shard: shard, From: from, MaxRecords: max})
	return ackCall(ctx, c, shard, wire.MsgDeadLetterRead, wire.MsgDeadLetterReadOK, body, err, false, auth.OpRead, wire.DecodeDeadLetterReadOK)
}

// DeadLetterRedrive appends the record dead-lettered at entry of shard's
// dead-letter log to the data log, exactly once: a redrive of an entry
// redriven before answers with the first redrive's offset (Already), so a
// redrive whose outcome is unknown may be sent again.
func (c *Client) DeadLetterRedrive(ctx context.Context, shard record.ShardID, entry uint64) (wire.DeadLetterRedriveOK, error) {
	body, err := wire.EncodeDeadLetterRedrive(wire.DeadLetterRedriveRequest{Shard: shard, Entry: entry})
	return ackCall(ctx, c, shard, wire.MsgDeadLetterRedrive, wire.MsgDeadLetterRedriveOK, body, err, true, auth.OpAppend, wire.DecodeDeadLetterRedriveOK)
}

// DeadLetterTrim drops the entries of shard's dead-letter log below floor
// (a conditional trim on the log's tail, done by the leader); it returns
// the log's floor after it. A trim is harmless to resend.
func (c *Client) DeadLetterTrim(ctx context.Context, shard record.ShardID, floor uint64) (wire.DeadLetterTrimOK, error) {
	body, err := wire.EncodeDeadLetterTrim(wire.DeadLetterTrimRequest{Shard: shard, Floor: floor})
	return ackCall(ctx, c, shard, wire.MsgDeadLetterTrim, wire.MsgDeadLetterTrimOK, body, err, true, auth.OpTrim, wire.DecodeDeadLetterTrimOK)
}

// GroupAckConfig is Client.GroupAckConfig sent to the shard's leader,
// resent within Attempts and ctx when its outcome is unknown.
func (c *Cluster) GroupAckConfig(ctx context.Context, r wire.GroupAckConfigRequest) (wire.GroupAckConfigOK, error) {
	var out wire.GroupAckConfigOK
	err := c.do(ctx, r.Shard, opIdemWrite, func(cl *Client) (err error) {
		out, err = cl.GroupAckConfig(ctx, r)
		return err
	})
	return out, err
}

// GroupFetch is Client.GroupFetch sent to the shard's leader, resent
// within Attempts and ctx when its outcome is unknown.
func (c *Cluster) GroupFetch(ctx context.Context, r wire.GroupFetchRequest) (wire.GroupFetchOK, error) {
	var out wire.GroupFetchOK
	err := c.do(ctx, r.Shard, opIdemWrite, func(cl *Client) (err error) {
		out, err = cl.GroupFetch(ctx, r)
		return err
	})
	return out, err
}

// GroupAck is Client.GroupAck sent to the shard's leader, resent within
// Attempts and ctx when its outcome is unknown.
func (c *Cluster) GroupAck(ctx context.Context, shard record.ShardID, group, member string, generation uint64, offsets []uint64) (wire.GroupAckOK, error) {
	var out wire.GroupAckOK
	err := c.do(ctx, shard, opIdemWrite, func(cl *Client) (err error) {
		out, err = cl.GroupAck(ctx, shard, group, member, generation, offsets)
		return err
	})
	return out, err
}

// GroupNak is Client.GroupNak sent to the shard's leader.
func (c *Cluster) GroupNak(ctx context.Context, shard record.ShardID, group, member string, generation uint64, offsets []uint64) (wire.GroupNakOK, error) {
	var out wire.GroupNakOK
	err := c.do(ctx, shard, opRead, func(cl *Client) (err error) {
		out, err = cl.GroupNak(ctx, shard, group, member, generation, offsets)
		return err
	})
	return out, err
}

// DeadLetterRead is Client.DeadLetterRead sent to the shard's leader.
func (c *Cluster) DeadLetterRead(ctx context.Context, shard record.ShardID, from uint64, max uint32) (wire.DeadLetterReadOK, error) {
	var out wire.DeadLetterReadOK
	err := c.do(ctx, shard, opRead, func(cl *Client) (err error) {
		out, err = cl.DeadLetterRead(ctx, shard, from, max)
		return err
	})
	return out, err
}

// DeadLetterRedrive is Client.DeadLetterRedrive sent to the shard's
// leader, resent within Attempts and ctx when its outcome is unknown (a
// resend is answered with the first redrive's offset).
func (c *Cluster) DeadLetterRedrive(ctx context.Context, shard record.ShardID, entry uint64) (wire.DeadLetterRedriveOK, error) {
	var out wire.DeadLetterRedriveOK
	err := c.do(ctx, shard, opIdemWrite, func(cl *Client) (err error) {
		out, err = cl.DeadLetterRedrive(ctx, shard, entry)
		return err
	})
	return out, err
}

// DeadLetterTrim is Client.DeadLetterTrim sent to the shard's leader,
// resent within Attempts and ctx when its outcome is unknown.
func (c *Cluster) DeadLetterTrim(ctx context.Context, shard record.ShardID, floor uint64) (wire.DeadLetterTrimOK, error) {
	var out wire.DeadLetterTrimOK
	err := c.do(ctx, shard, opIdemWrite, func(cl *Client) (err error) {
		out, err = cl.DeadLetterTrim(ctx, shard, floor)
		return err
	})
	return out, err
}
