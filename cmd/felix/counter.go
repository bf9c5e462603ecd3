package main

import (
	"context"
	"errors"
	"fmt"

	"github.com/spf13/cobra"

	"felix.dev/felix/broker/record"
	"felix.dev/felix/broker/wire"
)

// counterAdder is what `felix counter add` sends through: a routing
// client, whose counter adds are always idempotent.
type counterAdder interface {
	CounterAdd(ctx context.Context, shard record.ShardID, key string, delta int64) (wire.CounterAddOK, error)
}

// counterClient is what `felix counter get` and `snapshot` send through:
// one broker's connection or a routing client.
type counterClient interface {
	CounterGet(ctx context.Context, shard record.ShardID, key string) (wire.CounterGetOK, error)
	CounterSnapshot(ctx context.Context, shard record.ShardID, trim bool) (wire.CounterSnapshotOK, error)
}

func newCounterCmd() *cobra.Command {
	cmd := &cobra.Command{
		Use:   "counter",
		Short: "Add to, read and snapshot a shard's counters",
		Long: `Counters are named int64 values kept per shard in the shard's counter
log, replicated like its data log. See docs/clients.md, section Counters.`,
	}
	cmd.AddCommand(newCounterAddCmd(), newCounterGetCmd(), newCounterSnapshotCmd())
	return cmd
}

func newCounterAddCmd() *cobra.Command {
	var (
		f     shardFlags
		key   string
		delta int64
	)
	cmd := &cobra.Command{
		Use:   "add --stream S --shard N --key K --delta D",
		Short: "Add D to the counter K of a shard and print its new value",
		Long: `Add D (an int64, negative to subtract) to the counter K of a shard. The
add is appended to the shard's counter log like an append to its data log
(acknowledged under the stream's ack mode) and is idempotent: an add
whose answer is lost is sent again, within --timeout, and applied once.

Prints {"key":K,"value":V,"offset":O}: the value after the add and the
add's offset in the counter log. A new key beyond the shard's cap, a key
too long or an overflow fails with CounterLimit.`,
		Example: `  felix counter add --broker 127.0.0.1:7100 --stream orders --shard 0 --key shipped --delta 1
  FELIX_BOOTSTRAP=127.0.0.5,127.0.0.6 felix counter add --stream orders --shard 3 --key refunds --delta -2`,
		Args: noArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if err := checkCounterFlags(cmd, &f, "key", "delta"); err != nil {
				return err
			}
			f.idempotent = true // a routing client: the add is resent after an unknown outcome
			c, err := f.dial(cmd)
			if err != nil {
				return err
			}
			defer func() { _ = c.Close() }()
			ca, ok := c.(counterAdder)
			if !ok {
				return errors.New("counter add: the client does not route counter adds")
			}
			ctx, cancel := context.WithTimeout(cmd.Context(), f.timeout)
			defer cancel()
			res, err := ca.CounterAdd(ctx, f.shardID(), key, delta)
			if err != nil {
				return f.report(cmd, err)
			}
			p := newPrinter(cmd, f.output, "KEY", "VALUE", "OFFSET")
			if err := p.print(struct {
				Key    string `json:"key"`
				Value  int64  `json:"value"`
				Offset uint64 `json:"offset"`
			}{key, res.Value, res.Offset}, key, res.Value, res.Offset); err != nil {
				return err
			}
			return p.flush()
		},
	}
	f.register(cmd)
	cmd.Flags().StringVar(&key, "key", "", "the counter's name K (required)")
	cmd.Flags().Int64Var(&delta, "delta", 0, "what to add, D (required; negative subtracts)")
	return cmd
}

func newCounterGetCmd() *cobra.Command {
	var (
		f   shardFlags
		key string
	)
	cmd := &cobra.Command{
		Use:   "get --stream S --shard N --key K",
		Short: "Print the value of the counter K of a shard",
		Long: `Print the value of the counter K of a shard (0 for a counter never added
to), as the shard's leader folds it from every committed entry of the
counter log below "through".

Prints {"key":K,"value":V,"through":T}.`,
		Example: `  felix counter get --broker 127.0.0.1:7100 --stream orders --shard 0 --key shipped`,
		Args:    noArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if err := checkCounterFlags(cmd, &f, "key"); err != nil {
				return err
			}
			cc, closeFn, err := dialCounters(cmd, &f)
			if err != nil {
				return err
			}
			defer closeFn()
			ctx, cancel := context.WithTimeout(cmd.Context(), f.timeout)
			defer cancel()
			res, err := cc.CounterGet(ctx, f.shardID(), key)
			if err != nil {
				return f.report(cmd, err)
			}
			p := newPrinter(cmd, f.output, "KEY", "VALUE", "THROUGH")
			if err := p.print(struct {
				Key     string `json:"key"`
				Value   int64  `json:"value"`
				Through uint64 `json:"through"`
			}{key, res.Value, res.Through}, key, res.Value, res.Through); err != nil {
				return err
			}
			return p.flush()
		},
	}
	f.register(cmd)
	cmd.Flags().StringVar(&key, "key", "", "the counter's name K (required)")
	return cmd
}

func newCounterSnapshotCmd() *cobra.Command {
	var (
		f      shardFlags
		noTrim bool
	)
	cmd := &cobra.Command{
		Use:   "snapshot --stream S --shard N [--no-trim]",
		Short: "Snapshot a shard's counters into its counter log and trim the log below it",
		Long: `Append a snapshot of every counter of a shard to the shard's counter log,
then trim the log below the snapshot with a conditional trim (it lands
only if nothing was appended after the snapshot). Folding starts at the
snapshot from then on. The broker also does this by itself every 4096
adds to a shard. Needs the Trim grant on the stream.

Prints {"offset":O,"floor":F,"keys":N}: the snapshot's offset in the
counter log, the log's floor afterwards, and the counters it holds.`,
		Example: `  felix counter snapshot --broker 127.0.0.1:7100 --stream orders --shard 0`,
		Args:    noArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if err := checkCounterFlags(cmd, &f); err != nil {
				return err
			}
			cc, closeFn, err := dialCounters(cmd, &f)
			if err != nil {
				return err
			}
			defer closeFn()
			ctx, cancel := context.WithTimeout(cmd.Context(), f.timeout)
			defer cancel()
			res, err := cc.CounterSnapshot(ctx, f.shardID(), !noTrim)
			if err != nil {
				return f.report(cmd, err)
			}
			p := newPrinter(cmd, f.output, "OFFSET", "FLOOR", "KEYS")
			if err := p.print(struct {
				Offset uint64 `json:"offset"`
				Floor  uint64 `json:"floor"`
				Keys   uint32 `json:"keys"`
			}{res.Offset, res.Floor, res.Keys}, res.Offset, res.Floor, res.Keys); err != nil {
				return err
			}
			return p.flush()
		},
	}
	f.register(cmd)
	cmd.Flags().BoolVar(&noTrim, "no-trim", false, "append the snapshot without trimming the counter log below it")
	return cmd
}

// checkCounterFlags checks the shared flags and that each of required
// was given.
func checkCounterFlags(cmd *cobra.Command, f *shardFlags, required ...string) error {
	if err := f.check(cmd); err != nil {
		return err
	}
	for _, name := range required {
		if !cmd.Flags().Changed(name) {
			return usageErr(cmd, fmt.Errorf("--%s is required", name))
		}
	}
	return nil
}

// dialCounters dials as the other client commands do and returns the
// counter calls of the client.
func dialCounters(cmd *cobra.Command, f *shardFlags) (counterClient, func(), error) {
	c, err := f.dial(cmd)
	if err != nil {
		return nil, nil, err
	}
	cc, ok := c.(counterClient)
	if !ok {
		_ = c.Close()
		return nil, nil, errors.New("the client does not serve counter requests")
	}
	return cc, func() { _ = c.Close() }, nil
}
