package main

import (
	"context"
	"fmt"

	"github.com/spf13/cobra"

	"felix.dev/felix/broker/wire"
)

func newTrimCmd() *cobra.Command {
	var f shardFlags
	var floor, expectTail uint64
	var headers []string
	cmd := &cobra.Command{
		Use:   "trim --broker HOST:PORT --stream S --shard N --floor F --expect-tail T [--header k=v ...]",
		Short: "Trim a shard's head, conditional on its tail",
		Long: `Ask for a head trim: reads below the floor F are then refused with
CursorTooOld. The trim is a record appended under the same tail check as a
conditional append: it lands only if the shard's next offset is T, else
OffsetMismatch names the current tail. Its headers are what a reader
refused with CursorTooOld is told (trimHeaders). A trim at or below the
current floor writes nothing but still checks the tail.

Prints {"tail":T,"floor":F}: the tail after the trim and the floor in effect.`,
		Example: `  felix trim --broker 127.0.0.1:7100 --stream orders --shard 0 --floor 500 --expect-tail 512 --header epoch=2`,
		Args:    noArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if err := f.check(cmd); err != nil {
				return err
			}
			for _, name := range []string{"floor", "expect-tail"} {
				if !cmd.Flags().Changed(name) {
					return usageErr(cmd, fmt.Errorf("--%s is required", name))
				}
			}
			hs, err := parseHeaders(cmd, headers)
			if err != nil {
				return err
			}
			c, err := f.dial(cmd)
			if err != nil {
				return err
			}
			defer func() { _ = c.Close() }()
			ctx, cancel := context.WithTimeout(cmd.Context(), f.timeout)
			defer cancel()
			res, err := c.Trim(ctx, wire.TrimRequest{Shard: f.shardID(), Floor: floor, ExpectTail: expectTail, Headers: hs})
			if err != nil {
				return f.report(cmd, err)
			}
			p := newPrinter(cmd, f.output, "TAIL", "FLOOR")
			if err := p.print(struct {
				Tail  uint64 `json:"tail"`
				Floor uint64 `json:"floor"`
			}{res.Tail, res.Floor}, res.Tail, res.Floor); err != nil {
				return err
			}
			return p.flush()
		},
	}
	f.register(cmd)
	cmd.Flags().Uint64Var(&floor, "floor", 0, "the new floor F (required)")
	cmd.Flags().Uint64Var(&expectTail, "expect-tail", 0, "trim only if the shard's next offset is T (required)")
	cmd.Flags().StringArrayVar(&headers, "header", nil, "header k=v carried by the trim (repeatable)")
	return cmd
}
