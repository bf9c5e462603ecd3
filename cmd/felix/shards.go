package main

import (
	"context"
	"errors"
	"fmt"
	"strings"

	"github.com/spf13/cobra"

	"felix.dev/felix/broker/wire"
)

// shardLine is one line of `felix shards`.
type shardLine struct {
	Stream        string   `json:"stream"`
	Shard         uint32   `json:"shard"`
	Leader        string   `json:"leader"`
	LeaderAddress string   `json:"leaderAddress"`
	Epoch         uint64   `json:"epoch"`
	Replicas      []string `json:"replicas"`
}

// shardLines renders the shards of m with their leaders' addresses.
func shardLines(m wire.MetadataOK) []shardLine {
	addr := make(map[string]string, len(m.Brokers))
	for _, b := range m.Brokers {
		addr[b.Name] = b.Address
	}
	out := make([]shardLine, 0, len(m.Shards))
	for _, s := range m.Shards {
		reps := s.Replicas
		if reps == nil {
			reps = []string{}
		}
		out = append(out, shardLine{Stream: s.Shard.Stream, Shard: s.Shard.Shard, Leader: s.Leader,
			LeaderAddress: addr[s.Leader], Epoch: s.Epoch, Replicas: reps})
	}
	return out
}

// metadataOf asks the broker or cluster of f for the metadata of streams.
func (f *shardFlags) metadataOf(cmd *cobra.Command, streams ...string) (wire.MetadataOK, error) {
	c, err := f.dial(cmd)
	if err != nil {
		return wire.MetadataOK{}, err
	}
	defer func() { _ = c.Close() }()
	ctx, cancel := context.WithTimeout(cmd.Context(), f.timeout)
	defer cancel()
	m, err := c.Metadata(ctx, streams...)
	if err != nil {
		return m, f.report(cmd, err)
	}
	return m, nil
}

func newShardsCmd() *cobra.Command {
	var f shardFlags
	cmd := &cobra.Command{
		Use:   "shards --bootstrap HOST:PORT --stream S",
		Short: "Print the shards of a stream: leader, epoch and replicas",
		Long: `Print the shards of a stream as the cluster's assignments say: the broker
that leads each (and the address clients reach it on), the leader's epoch,
and the replica set. Any broker of the cluster answers (the Metadata
request); the principal needs Describe on the stream. A standalone broker
knows no shards and prints nothing.`,
		Example: `  felix shards --bootstrap 127.0.0.2 --stream events
  FELIX_BOOTSTRAP=demo.default.svc:7100 felix shards --stream events -o table
  felix shards --cluster demo -n default --tls-dir ./alice --stream events   # addresses through the kubeconfig`,
		Args: noArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if err := f.check(cmd); err != nil {
				return err
			}
			m, err := f.metadataOf(cmd, f.stream)
			if err != nil {
				return err
			}
			p := newPrinter(cmd, f.output, "STREAM", "SHARD", "LEADER", "ADDRESS", "EPOCH", "REPLICAS")
			for _, l := range shardLines(m) {
				if err := p.print(l, l.Stream, l.Shard, l.Leader, l.LeaderAddress, l.Epoch, strings.Join(l.Replicas, ",")); err != nil {
					return err
				}
			}
			return p.flush()
		},
	}
	f.register(cmd)
	_ = cmd.Flags().MarkHidden("shard")
	return cmd
}

func newStreamsCmd() *cobra.Command {
	var f shardFlags
	cmd := &cobra.Command{
		Use:   "streams --bootstrap HOST:PORT",
		Short: "Print the streams the caller may describe, with their shard counts",
		Long: `Print every stream of the cluster the principal may Describe, with its
number of shards and how many of them have a leader. Streams it may not
Describe are left out.`,
		Example: `  felix streams --bootstrap 127.0.0.2 -o table
  felix streams --cluster demo -n default --tls-dir ./alice -o table   # addresses through the kubeconfig`,
		Args: noArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if f.output != "json" && f.output != "table" {
				return usageErr(cmd, fmt.Errorf("unknown output format %q (want json or table)", f.output))
			}
			if f.stream != "" {
				return usageErr(cmd, errors.New("streams takes no --stream; use felix shards --stream"))
			}
			m, err := f.metadataOf(cmd)
			if err != nil {
				return err
			}
			type streamLine struct {
				Stream string `json:"stream"`
				Shards int    `json:"shards"`
				Led    int    `json:"led"`
			}
			var lines []*streamLine
			by := map[string]*streamLine{}
			for _, s := range m.Shards {
				l := by[s.Shard.Stream]
				if l == nil {
					l = &streamLine{Stream: s.Shard.Stream}
					by[l.Stream] = l
					lines = append(lines, l)
				}
				l.Shards++
				if s.Leader != "" {
					l.Led++
				}
			}
			p := newPrinter(cmd, f.output, "STREAM", "SHARDS", "LED")
			for _, l := range lines {
				if err := p.print(l, l.Stream, l.Shards, l.Led); err != nil {
					return err
				}
			}
			return p.flush()
		},
	}
	f.register(cmd)
	_ = cmd.Flags().MarkHidden("shard")
	_ = cmd.Flags().MarkHidden("stream")
	return cmd
}
