package main

import (
	"bufio"
	"context"
	"errors"

	"github.com/spf13/cobra"

	"felix.dev/felix/broker/record"
)

func newAppendCmd() *cobra.Command {
	var f shardFlags
	var expectTail uint64
	var headers []string
	var payload string
	var eachLine bool
	cmd := &cobra.Command{
		Use:   "append --broker HOST:PORT --stream S --shard N [--expect-tail T] [--header k=v ...] [--payload TEXT]",
		Short: "Append records to a shard",
		Long: `Append records to a shard as one batch: all land at consecutive offsets or none do.

With --payload one record is appended; without it, every line of stdin is one
record (without its newline), all in one batch. --header applies to every
record. With --expect-tail the batch lands only if the shard's next offset is
T; otherwise nothing is written and the error OffsetMismatch names the
current tail. Without --idempotent an append whose outcome is unknown is
never sent again. With --idempotent the batch carries a producer id and a
sequence number and is sent again after a lost answer, Unavailable or
Fenced, within --timeout: the leader answers a resend of a batch it wrote
with the original offsets and writes nothing, across a leader change too.

Prints {"first":F,"last":L,"tail":T}. Errors go to stderr as one JSON object
with "error" (e.g. OffsetMismatch, RecordTooLarge, UnknownOutcome) and its
fields; the exit code is 1 for a refusal, 2 for bad usage and 3 when the
append was sent but not answered (it may have landed).

With --each-line every line of stdin is appended as its own batch as soon as
it is read, one after the other, and one answer is printed per line: a
console producer for a pipe that stays open. The first refusal or unknown
outcome ends it with that error (lines after it are not sent); with
--idempotent every line is one numbered batch of the same producer.`,
		Example: `  felix append --broker 127.0.0.1:7100 --stream orders --shard 0 --payload hello
  printf 'a\nb\nc\n' | felix append --broker 127.0.0.1:7100 --stream orders --shard 0
  felix append --broker 127.0.0.1:7100 --stream orders --shard 0 --expect-tail 3 --header epoch=2 --payload fenced
  felix append --bootstrap 127.0.0.5 --stream orders --shard 0 --idempotent --payload once
  felix append --bootstrap 127.0.0.5 --bootstrap 127.0.0.6 --stream orders --shard 0 --payload hello --tls-dir ./alice --cluster default/felix
  felix append --cluster felix -n default --stream orders --shard 0 --payload hello --tls-dir ./alice   # addresses through the kubeconfig
  tail -f app.log | felix append --bootstrap 127.0.0.5 --stream orders --shard 0 --each-line --idempotent`,
		Args: noArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if err := f.check(cmd); err != nil {
				return err
			}
			hs, err := parseHeaders(cmd, headers)
			if err != nil {
				return err
			}
			if eachLine && cmd.Flags().Changed("payload") {
				return usageErr(cmd, errors.New("--each-line appends the lines of stdin: give it without --payload"))
			}
			if eachLine && cmd.Flags().Changed("expect-tail") {
				return usageErr(cmd, errors.New("--each-line takes no --expect-tail"))
			}
			if eachLine {
				return appendEachLine(cmd, &f, hs)
			}
			var recs []record.Record
			if cmd.Flags().Changed("payload") {
				recs = []record.Record{{Headers: hs, Payload: []byte(payload)}}
			} else {
				sc := bufio.NewScanner(cmd.InOrStdin())
				sc.Buffer(make([]byte, 64<<10), 16<<20)
				for sc.Scan() {
					recs = append(recs, record.Record{Headers: hs, Payload: append([]byte(nil), sc.Bytes()...)})
				}
				if err := sc.Err(); err != nil {
					return usageErr(cmd, err)
				}
				if len(recs) == 0 {
					return usageErr(cmd, errors.New("no records: give --payload or lines on stdin"))
				}
			}
			var expect *uint64
			if cmd.Flags().Changed("expect-tail") {
				expect = &expectTail
			}
			c, err := f.dial(cmd)
			if err != nil {
				return err
			}
			defer func() { _ = c.Close() }()
			ctx, cancel := context.WithTimeout(cmd.Context(), f.timeout)
			defer cancel()
			res, err := c.Append(ctx, f.shardID(), recs, expect)
			if err != nil {
				return f.report(cmd, err)
			}
			p := newPrinter(cmd, f.output, "FIRST", "LAST", "TAIL")
			if err := printAck(p, res.First, res.Tail); err != nil {
				return err
			}
			return p.flush()
		},
	}
	f.register(cmd)
	cmd.Flags().Uint64Var(&expectTail, "expect-tail", 0, "append only if the shard's next offset is T")
	cmd.Flags().StringArrayVar(&headers, "header", nil, "header k=v on every record (repeatable)")
	cmd.Flags().StringVar(&payload, "payload", "", "the one record's payload (default: one record per line of stdin)")
	cmd.Flags().BoolVar(&eachLine, "each-line", false, "append every line of stdin as its own batch as soon as it is read, printing one answer per line")
	cmd.Flags().BoolVar(&f.idempotent, "idempotent", false, "send the batch again when its outcome is unknown; the leader writes it once (needs brokers with idempotent appends)")
	return cmd
}

// printAck prints one append's answer: the first and last offsets written
// and the shard's tail after it.
func printAck(p *printer, first, tail uint64) error {
	return p.print(struct {
		First uint64 `json:"first"`
		Last  uint64 `json:"last"`
		Tail  uint64 `json:"tail"`
	}{first, tail - 1, tail}, first, tail-1, tail)
}

// appendEachLine is `felix append --each-line`: one batch per line of
// stdin, sent as the line is read, its answer printed (and flushed) before
// the next line is read. The first error ends it.
func appendEachLine(cmd *cobra.Command, f *shardFlags, hs []record.Header) error {
	c, err := f.dial(cmd)
	if err != nil {
		return err
	}
	defer func() { _ = c.Close() }()
	p := newPrinter(cmd, f.output, "FIRST", "LAST", "TAIL")
	sc := bufio.NewScanner(cmd.InOrStdin())
	sc.Buffer(make([]byte, 64<<10), 16<<20)
	for sc.Scan() {
		recs := []record.Record{{Headers: hs, Payload: append([]byte(nil), sc.Bytes()...)}}
		ctx, cancel := context.WithTimeout(cmd.Context(), f.timeout)
		res, err := c.Append(ctx, f.shardID(), recs, nil)
		cancel()
		if err != nil {
			return f.report(cmd, err)
		}
		if err := printAck(p, res.First, res.Tail); err != nil {
			return err
		}
		if err := p.flush(); err != nil {
			return err
		}
	}
	if err := sc.Err(); err != nil {
		return usageErr(cmd, err)
	}
	return nil
}
