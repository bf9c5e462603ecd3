package main

import (
	"context"
	"encoding/base64"
	"errors"
	"strconv"
	"time"
	"unicode/utf8"

	"github.com/spf13/cobra"

	"felix.dev/felix/broker/deadletter"
	"felix.dev/felix/broker/record"
	"felix.dev/felix/broker/wire"
)

// deadLetterClient is what the dead-letter commands send through: one
// broker's connection or a routing client.
type deadLetterClient interface {
	DeadLetterRead(ctx context.Context, shard record.ShardID, from uint64, max uint32) (wire.DeadLetterReadOK, error)
	DeadLetterRedrive(ctx context.Context, shard record.ShardID, entry uint64) (wire.DeadLetterRedriveOK, error)
	DeadLetterTrim(ctx context.Context, shard record.ShardID, floor uint64) (wire.DeadLetterTrimOK, error)
}

// deadLetterLine is one line of felix deadletter read: a dead-lettered
// record, with the original record's fields as felix read prints them.
type deadLetterLine struct {
	Entry         uint64            `json:"entry"`
	Group         string            `json:"group"`
	Offset        uint64            `json:"offset"`
	Epoch         uint64            `json:"epoch"`
	Timestamp     string            `json:"timestamp"`
	Deliveries    uint32            `json:"deliveries"`
	Reason        string            `json:"reason"`
	Headers       map[string]string `json:"headers"`
	Payload       *string           `json:"payload,omitempty"`
	PayloadBase64 string            `json:"payloadBase64,omitempty"`
	Redriven      bool              `json:"redriven"`
	DataOffset    *uint64           `json:"data_offset,omitempty"`
}

// dialDeadLetters dials as the other client commands do and returns the
// dead-letter calls of the client.
func dialDeadLetters(cmd *cobra.Command, f *shardFlags) (deadLetterClient, func(), error) {
	c, err := f.dial(cmd)
	if err != nil {
		return nil, nil, err
	}
	dc, ok := c.(deadLetterClient)
	if !ok {
		_ = c.Close()
		return nil, nil, errors.New("the client does not serve dead-letter requests")
	}
	return dc, func() { _ = c.Close() }, nil
}

func newDeadLetterCmd() *cobra.Command {
	cmd := &cobra.Command{
		Use:   "deadletter",
		Short: "Read a shard's dead-letter log, redrive its records into the data log, trim it",
		Long: `A consumer group that acknowledges each record gives up on a record after
its maximum number of deliveries: the shard's leader appends it to the
shard's dead-letter log with its original offset, epoch, timestamp,
headers and payload, the group, the delivery count and the reason. See
docs/clients.md, section Per-record acknowledgement and the dead-letter
log.`,
	}
	cmd.AddCommand(newDeadLetterReadCmd(), newDeadLetterRedriveCmd(), newDeadLetterTrimCmd())
	return cmd
}

func newDeadLetterReadCmd() *cobra.Command {
	var (
		f    shardFlags
		from uint64
		max  uint32
	)
	cmd := &cobra.Command{
		Use:   "read --stream S --shard N [--from E] [--max M]",
		Short: "Print the records of a shard's dead-letter log",
		Long: `Print the dead-lettered records of a shard from entry E of its dead-letter
log, at most M, one line each: the entry (its offset in the dead-letter
log, what felix deadletter redrive takes), the group that gave up on it,
the original offset, epoch and timestamp, the delivery count, the reason
(max-deliveries), the original headers and payload (as felix read prints
them), and whether it was redriven and to which offset of the data log.
Needs Read on the stream.`,
		Example: `  felix deadletter read --broker 127.0.0.1:7100 --stream orders --shard 0
  felix deadletter read --bootstrap 127.0.0.2 --stream orders --shard 3 --from 100 -o table`,
		Args: noArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if err := checkCounterFlags(cmd, &f); err != nil {
				return err
			}
			dc, closeFn, err := dialDeadLetters(cmd, &f)
			if err != nil {
				return err
			}
			defer closeFn()
			ctx, cancel := context.WithTimeout(cmd.Context(), f.timeout)
			defer cancel()
			res, err := dc.DeadLetterRead(ctx, f.shardID(), from, max)
			if err != nil {
				return f.report(cmd, err)
			}
			p := newPrinter(cmd, f.output, "ENTRY", "GROUP", "OFFSET", "EPOCH", "TIMESTAMP", "DELIVERIES", "REASON", "HEADERS", "PAYLOAD", "REDRIVEN_TO")
			for _, d := range res.Entries {
				l := deadLetterLine{Entry: d.Entry, Group: d.Group, Offset: d.Offset, Epoch: d.Epoch,
					Timestamp: time.Unix(0, d.Timestamp).UTC().Format(time.RFC3339Nano), Deliveries: d.Deliveries,
					Reason: deadletter.Reason(d.Reason).String(), Headers: headersJSON(d.Headers), Redriven: d.Redriven}
				text := string(d.Payload)
				if utf8.Valid(d.Payload) {
					l.Payload = &text
				} else {
					l.PayloadBase64 = base64.StdEncoding.EncodeToString(d.Payload)
					text = "base64:" + l.PayloadBase64
				}
				to := "-"
				if d.Redriven {
					at := d.DataOffset
					l.DataOffset = &at
					to = strconv.FormatUint(at, 10)
				}
				if err := p.print(l, l.Entry, l.Group, l.Offset, l.Epoch, l.Timestamp, l.Deliveries, l.Reason, headersText(d.Headers), text, to); err != nil {
					return err
				}
			}
			return p.flush()
		},
	}
	f.register(cmd)
	cmd.Flags().Uint64Var(&from, "from", 0, "the dead-letter entry E to start from")
	cmd.Flags().Uint32Var(&max, "max", 0, "print at most M entries (0: the broker's limit, 1000)")
	return cmd
}

func newDeadLetterRedriveCmd() *cobra.Command {
	var (
		f     shardFlags
		entry uint64
	)
	cmd := &cobra.Command{
		Use:   "redrive --stream S --shard N --entry E",
		Short: "Append a dead-lettered record to the data log again, exactly once",
		Long: `Append the record dead-lettered at entry E of a shard's dead-letter log to
the shard's data log, with its original headers and payload plus the
header felix.redriven-from (E). A record is redriven once: redriving it
again appends nothing and prints the offset of the first redrive with
"already":true. While other appends keep landing on the data log the
redrive can lose its conditional append: after two tries it fails with
Unavailable (retry), and once the shard's dead-letter log holds
--max-dead-letters replaced redrive intents with GroupLimit (trim it).
Needs Append on the stream.

Prints {"entry":E,"offset":O,"already":false}: O is the record's offset in
the data log.`,
		Example: `  felix deadletter redrive --broker 127.0.0.1:7100 --stream orders --shard 0 --entry 4`,
		Args:    noArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if err := checkCounterFlags(cmd, &f, "entry"); err != nil {
				return err
			}
			dc, closeFn, err := dialDeadLetters(cmd, &f)
			if err != nil {
				return err
			}
			defer closeFn()
			ctx, cancel := context.WithTimeout(cmd.Context(), f.timeout)
			defer cancel()
			res, err := dc.DeadLetterRedrive(ctx, f.shardID(), entry)
			if err != nil {
				return f.report(cmd, err)
			}
			p := newPrinter(cmd, f.output, "ENTRY", "OFFSET", "ALREADY")
			if err := p.print(struct {
				Entry   uint64 `json:"entry"`
				Offset  uint64 `json:"offset"`
				Already bool   `json:"already"`
			}{entry, res.DataOffset, res.Already}, entry, res.DataOffset, res.Already); err != nil {
				return err
			}
			return p.flush()
		},
	}
	f.register(cmd)
	cmd.Flags().Uint64Var(&entry, "entry", 0, "the dead-letter entry E to redrive (required)")
	return cmd
}

func newDeadLetterTrimCmd() *cobra.Command {
	var (
		f     shardFlags
		floor uint64
	)
	cmd := &cobra.Command{
		Use:   "trim --stream S --shard N --floor E",
		Short: "Drop the entries of a shard's dead-letter log below entry E",
		Long: `Drop the entries of a shard's dead-letter log below entry E (a conditional
trim of the log on its tail, made by the shard's leader). A shard's
dead-letter log holds at most --max-dead-letters records (felix broker,
10000 by default): once full, records due to be dead-lettered stay
outstanding in their group until a trim makes room. The same number caps
the redrive intents that replaced an earlier one after losing to other
appends: beyond it a redrive is refused (GroupLimit) until a trim makes
room. A floor at or below
the log's floor changes nothing. Needs Trim on the stream.

Prints {"floor":F}: the dead-letter log's floor after the trim.`,
		Example: `  felix deadletter trim --broker 127.0.0.1:7100 --stream orders --shard 0 --floor 120`,
		Args:    noArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if err := checkCounterFlags(cmd, &f, "floor"); err != nil {
				return err
			}
			dc, closeFn, err := dialDeadLetters(cmd, &f)
			if err != nil {
				return err
			}
			defer closeFn()
			ctx, cancel := context.WithTimeout(cmd.Context(), f.timeout)
			defer cancel()
			res, err := dc.DeadLetterTrim(ctx, f.shardID(), floor)
			if err != nil {
				return f.report(cmd, err)
			}
			p := newPrinter(cmd, f.output, "FLOOR")
			if err := p.print(struct {
				Floor uint64 `json:"floor"`
			}{res.Floor}, res.Floor); err != nil {
				return err
			}
			return p.flush()
		},
	}
	f.register(cmd)
	cmd.Flags().Uint64Var(&floor, "floor", 0, "the dead-letter entry E below which entries are dropped (required)")
	return cmd
}
