package main

import (
	"context"

	"github.com/spf13/cobra"
)

func newDescribeCmd() *cobra.Command {
	var f shardFlags
	cmd := &cobra.Command{
		Use:   "describe --broker HOST:PORT --stream S --shard N",
		Short: "Print a shard's base, floor, tail and committed positions",
		Long: `Print a shard's positions: base (its first offset ever), floor (the first
offset a reader may start at), tail (the next offset to be written) and
committed (every offset below it is acknowledged).`,
		Example: `  felix describe --broker 127.0.0.1:7100 --stream orders --shard 0
  felix describe --broker 127.0.0.1:7100 --stream orders --shard 0 -o table
  FELIX_TLS_DIR=./alice FELIX_BOOTSTRAP=127.0.0.5,127.0.0.6 felix describe --stream orders --shard 0`,
		Args: noArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if err := f.check(cmd); err != nil {
				return err
			}
			c, err := f.dial(cmd)
			if err != nil {
				return err
			}
			defer func() { _ = c.Close() }()
			ctx, cancel := context.WithTimeout(cmd.Context(), f.timeout)
			defer cancel()
			d, err := c.Describe(ctx, f.shardID())
			if err != nil {
				return f.report(cmd, err)
			}
			p := newPrinter(cmd, f.output, "STREAM", "SHARD", "BASE", "FLOOR", "TAIL", "COMMITTED")
			if err := p.print(struct {
				Stream    string `json:"stream"`
				Shard     uint32 `json:"shard"`
				Base      uint64 `json:"base"`
				Floor     uint64 `json:"floor"`
				Tail      uint64 `json:"tail"`
				Committed uint64 `json:"committed"`
			}{f.stream, f.shard, d.Base, d.Floor, d.Tail, d.Committed},
				f.stream, f.shard, d.Base, d.Floor, d.Tail, d.Committed); err != nil {
				return err
			}
			return p.flush()
		},
	}
	f.register(cmd)
	return cmd
}
