package client

import (
	"context"
	"errors"

	"felix.dev/felix/broker/auth"
	"felix.dev/felix/broker/record"
	"felix.dev/felix/broker/wire"
)

// ErrNoGroups is returned by the group calls when the connection did not
// negotiate wire.FeatureGroups (an older broker): nothing was sent.
var ErrNoGroups = errors.New("client: the broker does not serve consumer groups")

// groupCall sends one group request and decodes its answer. A request
// sent but not answered fails with ErrUnknownOutcome when it may write
// (writes).
func groupCall[T any](ctx context.Context, c *Client, shard record.ShardID, t, want wire.MsgType, body []byte, encErr error,
	writes bool, decode func([]byte) (T, error)) (T, error) {
	var zero T
	if !c.hello.Features.Has(wire.FeatureGroups) {
		return zero, ErrNoGroups
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
	return ok, authError(err, auth.OpRead, shard)
}

// GroupClaim asks for the ownership of shard for group by member; see
// wire.GroupClaimRequest. A shard another member owns with a running
// lease fails matching wire.ErrGroupFenced (the *wire.Error names the
// owner). Claiming a shard member owns already renews its lease, so a
// claim whose outcome is unknown may be sent again.
func (c *Client) GroupClaim(ctx context.Context, shard record.ShardID, group, member string) (wire.GroupClaimOK, error) {
	body, err := wire.EncodeGroupClaim(wire.GroupClaimRequest{Shard: shard, Group: group, Member: member})
	return groupCall(ctx, c, shard, wire.MsgGroupClaim, wire.MsgGroupClaimOK, body, err, true, wire.DecodeGroupClaimOK)
}

// GroupHeartbeat renews member's lease on shard, which it owns at
// generation; a member that no longer owns it fails matching
// wire.ErrGroupFenced. It writes nothing.
func (c *Client) GroupHeartbeat(ctx context.Context, shard record.ShardID, group, member string, generation uint64) (wire.GroupHeartbeatOK, error) {
	body, err := wire.EncodeGroupHeartbeat(wire.GroupHeartbeatRequest{Shard: shard, Group: group, Member: member, Generation: generation})
	return groupCall(ctx, c, shard, wire.MsgGroupHeartbeat, wire.MsgGroupHeartbeatOK, body, err, false, wire.DecodeGroupHeartbeatOK)
}

// GroupCommit records next as group's committed offset on shard (the next
// data-log offset to process), by member at generation. A member that no
// longer owns the shard at generation fails matching wire.ErrGroupFenced:
// the leader appends the commit only on the tail of its fold of the group
// log, so a commit is never accepted from a superseded owner. Committing
// the same offset twice is harmless, so a commit whose outcome is unknown
// may be sent again.
func (c *Client) GroupCommit(ctx context.Context, shard record.ShardID, group, member string, generation, next uint64) (wire.GroupCommitOK, error) {
	body, err := wire.EncodeGroupCommit(wire.GroupCommitRequest{Shard: shard, Group: group, Member: member, Generation: generation, Offset: next})
	return groupCall(ctx, c, shard, wire.MsgGroupCommit, wire.MsgGroupCommitOK, body, err, true, wire.DecodeGroupCommitOK)
}

// GroupLeave releases member's ownership of shard at generation, so
// another member may claim it at once. A leave resent after it landed
// fails matching wire.ErrGroupFenced with an empty owner.
func (c *Client) GroupLeave(ctx context.Context, shard record.ShardID, group, member string, generation uint64) (wire.GroupLeaveOK, error) {
	body, err := wire.EncodeGroupLeave(wire.GroupLeaveRequest{Shard: shard, Group: group, Member: member, Generation: generation})
	return groupCall(ctx, c, shard, wire.MsgGroupLeave, wire.MsgGroupLeaveOK, body, err, true, wire.DecodeGroupLeaveOK)
}

// GroupDescribe returns the consumer groups of shard (group alone, or
// every group when group is empty) with their owners, generations,
// committed offsets and lag behind the data log's tail.
func (c *Client) GroupDescribe(ctx context.Context, shard record.ShardID, group string) (wire.GroupDescribeOK, error) {
	body, err := wire.EncodeGroupDescribe(wire.GroupDescribeRequest{Shard: shard, Group: group})
	return groupCall(ctx, c, shard, wire.MsgGroupDescribe, wire.MsgGroupDescribeOK, body, err, false, wire.DecodeGroupDescribeOK)
}

// GroupClaim is Client.GroupClaim sent to the shard's leader, resent
// within Attempts and ctx when its outcome is unknown (a claim by the
// owner is answered with its generation).
func (c *Cluster) GroupClaim(ctx context.Context, shard record.ShardID, group, member string) (wire.GroupClaimOK, error) {
	var out wire.GroupClaimOK
	err := c.do(ctx, shard, opIdemWrite, func(cl *Client) (err error) {
		out, err = cl.GroupClaim(ctx, shard, group, member)
		return err
	})
	return out, err
}

// GroupHeartbeat is Client.GroupHeartbeat sent to the shard's leader.
func (c *Cluster) GroupHeartbeat(ctx context.Context, shard record.ShardID, group, member string, generation uint64) (wire.GroupHeartbeatOK, error) {
	var out wire.GroupHeartbeatOK
	err := c.do(ctx, shard, opRead, func(cl *Client) (err error) {
		out, err = cl.GroupHeartbeat(ctx, shard, group, member, generation)
		return err
	})
	return out, err
}

// GroupCommit is Client.GroupCommit sent to the shard's leader, resent
// within Attempts and ctx when its outcome is unknown.
func (c *Cluster) GroupCommit(ctx context.Context, shard record.ShardID, group, member string, generation, next uint64) (wire.GroupCommitOK, error) {
	var out wire.GroupCommitOK
	err := c.do(ctx, shard, opIdemWrite, func(cl *Client) (err error) {
		out, err = cl.GroupCommit(ctx, shard, group, member, generation, next)
		return err
	})
	return out, err
}

// GroupLeave is Client.GroupLeave sent to the shard's leader, resent
// within Attempts and ctx when its outcome is unknown.
func (c *Cluster) GroupLeave(ctx context.Context, shard record.ShardID, group, member string, generation uint64) (wire.GroupLeaveOK, error) {
	var out wire.GroupLeaveOK
	err := c.do(ctx, shard, opIdemWrite, func(cl *Client) (err error) {
		out, err = cl.GroupLeave(ctx, shard, group, member, generation)
		return err
	})
	return out, err
}

// GroupDescribe is Client.GroupDescribe sent to the shard's leader.
func (c *Cluster) GroupDescribe(ctx context.Context, shard record.ShardID, group string) (wire.GroupDescribeOK, error) {
	var out wire.GroupDescribeOK
	err := c.do(ctx, shard, opRead, func(cl *Client) (err error) {
		out, err = cl.GroupDescribe(ctx, shard, group)
		return err
	})
	return out, err
}
