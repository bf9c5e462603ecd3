package main

import (
	"context"
	"errors"
	"fmt"

	"github.com/spf13/cobra"

	"felix.dev/felix/broker/record"
	"felix.dev/felix/broker/wire"
)

// groupClient is what the group commands send through: one broker's
// connection or a routing client.
type groupClient interface {
	GroupClaim(ctx context.Context, shard record.ShardID, group, member string) (wire.GroupClaimOK, error)
	GroupCommit(ctx context.Context, shard record.ShardID, group, member string, generation, next uint64) (wire.GroupCommitOK, error)
	GroupLeave(ctx context.Context, shard record.ShardID, group, member string, generation uint64) (wire.GroupLeaveOK, error)
	GroupDescribe(ctx context.Context, shard record.ShardID, group string) (wire.GroupDescribeOK, error)
}

// groupLine is one line of felix groups: a group on a shard.
type groupLine struct {
	Stream     string `json:"stream"`
	Shard      uint32 `json:"shard"`
	Group      string `json:"group"`
	Owner      string `json:"owner"`
	Generation uint64 `json:"generation"`
	Committed  uint64 `json:"committed"`
	Tail       uint64 `json:"tail"`
	Lag        uint64 `json:"lag"`
	LeaseMs    uint32 `json:"lease_ms"`
}

// dialGroups dials as the other client commands do and returns the group
// calls of the client.
func dialGroups(cmd *cobra.Command, f *shardFlags) (groupClient, shardClient, error) {
	c, err := f.dial(cmd)
	if err != nil {
		return nil, nil, err
	}
	gc, ok := c.(groupClient)
	if !ok {
		_ = c.Close()
		return nil, nil, errors.New("the client does not serve group requests")
	}
	return gc, c, nil
}

func newGroupsCmd() *cobra.Command {
	var (
		f     shardFlags
		group string
	)
	cmd := &cobra.Command{
		Use:   "groups --stream S [--shard N] [--group G]",
		Short: "Print the consumer groups of a stream: owner, generation, committed offset and lag per shard",
		Long: `Print the consumer groups of a stream, one line per group and shard, as
each shard's leader folds them from the shard's group log: the member that
owns the shard for the group (empty when it is free), the generation of
its claim, the committed offset (the next offset of the data log the group
processes), the data log's tail, the lag (tail minus committed) and what
remains of the owner's lease on the leader, in milliseconds. Without
--shard every shard the cluster's metadata lists is asked (shard 0 of a
standalone broker). Needs Read on the stream. See docs/clients.md, section
Consumer groups.`,
		Example: `  felix groups --bootstrap 127.0.0.2 --stream orders -o table
  felix groups --broker 127.0.0.1:7100 --stream orders --shard 0 --group billing`,
		Args: noArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if err := f.check(cmd); err != nil {
				return err
			}
			gc, c, err := dialGroups(cmd, &f)
			if err != nil {
				return err
			}
			defer func() { _ = c.Close() }()
			ctx, cancel := context.WithTimeout(cmd.Context(), f.timeout)
			defer cancel()
			shards := []uint32{f.shard}
			if !cmd.Flags().Changed("shard") {
				m, err := c.Metadata(ctx, f.stream)
				if err != nil {
					return f.report(cmd, err)
				}
				var listed []uint32
				for _, s := range m.Shards {
					if s.Shard.Stream == f.stream {
						listed = append(listed, s.Shard.Shard)
					}
				}
				if len(listed) > 0 {
					shards = listed
				}
			}
			p := newPrinter(cmd, f.output, "STREAM", "SHARD", "GROUP", "OWNER", "GENERATION", "COMMITTED", "TAIL", "LAG", "LEASE_MS")
			for _, idx := range shards {
				shard := record.ShardID{Stream: f.stream, Shard: idx}
				d, err := gc.GroupDescribe(ctx, shard, group)
				if err != nil {
					return f.report(cmd, err)
				}
				for _, g := range d.Groups {
					l := groupLine{Stream: f.stream, Shard: idx, Group: g.Group, Owner: g.Owner, Generation: g.Generation,
						Committed: g.Committed, Tail: d.Tail, Lag: g.Lag, LeaseMs: g.LeaseMillis}
					if err := p.print(l, l.Stream, l.Shard, l.Group, l.Owner, l.Generation, l.Committed, l.Tail, l.Lag, l.LeaseMs); err != nil {
						return err
					}
				}
			}
			return p.flush()
		},
	}
	f.register(cmd)
	cmd.Flags().StringVar(&group, "group", "", "print only the group G")
	return cmd
}

func newGroupCmd() *cobra.Command {
	cmd := &cobra.Command{
		Use:   "group",
		Short: "Set a consumer group's committed offset on a shard",
		Long: `Consumer groups share a stream: one member of a group owns each shard at a
time and commits the offsets it processed to the shard's group log. See
docs/clients.md, section Consumer groups; felix groups prints them.`,
	}
	cmd.AddCommand(newGroupCommitCmd())
	return cmd
}

func newGroupCommitCmd() *cobra.Command {
	var (
		f      shardFlags
		group  string
		member string
		offset uint64
	)
	cmd := &cobra.Command{
		Use:   "commit --stream S --shard N --group G --offset O",
		Short: "Set the committed offset of a group on a shard (the shard must be free)",
		Long: `Set the committed offset of group G on a shard to O (the next data-log
offset the group processes), as an operator: claim the shard for the
group as member M, commit O, and release the shard. The claim is refused
with GroupFenced while a member of the group owns the shard with a
running lease: stop the group's members first (or wait for their
leases). Needs Read on the stream.

Prints {"group":G,"generation":N,"committed":O,"entry":E}: the generation
of the claim and the commit's offset in the group log.`,
		Example: `  felix group commit --broker 127.0.0.1:7100 --stream orders --shard 0 --group billing --offset 1200`,
		Args:    noArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if err := checkCounterFlags(cmd, &f, "group", "offset"); err != nil {
				return err
			}
			gc, c, err := dialGroups(cmd, &f)
			if err != nil {
				return err
			}
			defer func() { _ = c.Close() }()
			ctx, cancel := context.WithTimeout(cmd.Context(), f.timeout)
			defer cancel()
			shard := f.shardID()
			cl, err := gc.GroupClaim(ctx, shard, group, member)
			if err != nil {
				return f.report(cmd, err)
			}
			res, err := gc.GroupCommit(ctx, shard, group, member, cl.Generation, offset)
			if err != nil {
				return f.report(cmd, err)
			}
			if _, err := gc.GroupLeave(ctx, shard, group, member, cl.Generation); err != nil {
				return f.report(cmd, fmt.Errorf("committed, but the release failed (the shard stays claimed until the lease runs out): %w", err))
			}
			p := newPrinter(cmd, f.output, "GROUP", "GENERATION", "COMMITTED", "ENTRY")
			if err := p.print(struct {
				Group      string `json:"group"`
				Generation uint64 `json:"generation"`
				Committed  uint64 `json:"committed"`
				Entry      uint64 `json:"entry"`
			}{group, cl.Generation, offset, res.Entry}, group, cl.Generation, offset, res.Entry); err != nil {
				return err
			}
			return p.flush()
		},
	}
	f.register(cmd)
	cmd.Flags().StringVar(&group, "group", "", "the group's name G (required)")
	cmd.Flags().StringVar(&member, "member", "felix-cli", "the member name M the claim is made as")
	cmd.Flags().Uint64Var(&offset, "offset", 0, "the offset O to commit (required)")
	return cmd
}
