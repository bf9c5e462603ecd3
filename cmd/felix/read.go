package main

import (
	"context"
	"encoding/base64"
	"errors"
	"fmt"
	"strconv"
	"time"
	"unicode/utf8"

	"github.com/spf13/cobra"

	"felix.dev/felix/broker/client"
	"felix.dev/felix/broker/record"
	"felix.dev/felix/broker/wire"
)

// readLine is one record as felix read prints it. Payload is set when the
// payload is valid UTF-8, PayloadBase64 otherwise.
type readLine struct {
	Offset        uint64            `json:"offset"`
	Epoch         uint64            `json:"epoch"`
	Timestamp     string            `json:"timestamp"`
	Headers       map[string]string `json:"headers"`
	Payload       *string           `json:"payload,omitempty"`
	PayloadBase64 string            `json:"payloadBase64,omitempty"`
}

// followWait is how long one follow-mode read waits at the broker.
const followWait = 10 * time.Second

func newReadCmd() *cobra.Command {
	var f shardFlags
	var from string
	var limit int
	var follow bool
	cmd := &cobra.Command{
		Use:   "read --broker HOST:PORT --stream S --shard N --from OFFSET|earliest|latest [--limit N] [--follow]",
		Short: "Read records from a shard",
		Long: `Read a shard's records from a start position: an offset, earliest (the
floor) or latest (the tail: only records appended from now on). Without
--follow the command stops when it has read everything committed; with
--follow it waits for new records until interrupted. With --bootstrap or
--cluster it reads on from the same position across reconnections and
leader changes (a failover neither skips nor repeats a record; each retry
is noted on stderr); with --broker it dials that broker again when it
closes the connection (its idle timeout, a restart). --limit stops after
N records.

Prints one JSON object per record: offset, epoch, timestamp, headers and
payload (payload when valid UTF-8, otherwise payloadBase64). A start below the
floor is refused with CursorTooOld carrying floor and, when the trim that set
it had headers, trimHeaders.`,
		Example: `  felix read --broker 127.0.0.1:7100 --stream orders --shard 0 --from earliest
  felix read --broker 127.0.0.1:7100 --stream orders --shard 0 --from 42 --limit 10 -o table
  felix read --broker 127.0.0.1:7100 --stream orders --shard 0 --from latest --follow`,
		Args: noArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if err := f.check(cmd); err != nil {
				return err
			}
			req := wire.ReadRequest{Shard: f.shardID()}
			switch from {
			case "earliest":
				req.From = wire.FromEarliest
			case "latest":
				req.From = wire.FromLatest
			default:
				off, err := strconv.ParseUint(from, 10, 64)
				if err != nil {
					return usageErr(cmd, fmt.Errorf("--from %q is not an offset, earliest or latest", from))
				}
				req.From, req.Offset = wire.FromOffset, off
			}
			if limit < 0 {
				return usageErr(cmd, errors.New("--limit must not be negative"))
			}
			c, err := f.dial(cmd)
			if err != nil {
				return err
			}
			defer func() { _ = c.Close() }()
			p := newPrinter(cmd, f.output, "OFFSET", "EPOCH", "TIMESTAMP", "HEADERS", "PAYLOAD")
			printed := 0
			if cl, ok := c.(*client.Cluster); ok && follow {
				// Routed: Follow reads on from the same position across
				// reconnections and leader changes.
				err := cl.Follow(cmd.Context(), req, client.FollowOptions{Wait: followWait, MaxRecords: req.MaxRecords,
					OnRetry: func(err error, wait time.Duration) {
						fmt.Fprintf(cmd.ErrOrStderr(), "felix read: %v; reading again from the same position in %v\n", err, wait)
					}},
					func(res wire.ReadOK) error {
						for _, r := range res.Records {
							if err := printRecord(p, r); err != nil {
								return err
							}
							if printed++; limit > 0 && printed >= limit {
								return client.ErrStopFollowing
							}
						}
						return p.flush()
					})
				if err != nil {
					_ = p.flush()
					return f.report(cmd, err)
				}
				return p.flush()
			}
			redialed := false // since the last read answered
			for limit == 0 || printed < limit {
				if limit > 0 {
					req.MaxRecords = uint32(limit - printed)
				}
				timeout := f.timeout
				if follow {
					req.WaitMillis = uint32(followWait / time.Millisecond)
					timeout += followWait
				}
				ctx, cancel := context.WithTimeout(cmd.Context(), timeout)
				res, err := c.Read(ctx, req)
				cancel()
				if err != nil && follow && !redialed && errors.Is(err, client.ErrClosed) && cmd.Context().Err() == nil {
					// The broker closed the connection (its idle timeout
					// while the output was blocked, a restart): a read is
					// safe to send again, from the same position.
					_ = c.Close()
					if c, err = f.dial(cmd); err != nil {
						_ = p.flush()
						return err
					}
					redialed = true
					continue
				}
				if err != nil {
					if follow && cmd.Context().Err() != nil {
						break // interrupted
					}
					_ = p.flush()
					return f.report(cmd, err)
				}
				redialed = false
				for _, r := range res.Records {
					if err := printRecord(p, r); err != nil {
						return err
					}
					printed++
				}
				if follow {
					if err := p.flush(); err != nil {
						return err
					}
				}
				// An empty answer means the read reached the committed end
				// (skipped trim records only move Next).
				caughtUp := len(res.Records) == 0
				req.From, req.Offset = wire.FromOffset, res.Next
				if caughtUp && !follow {
					break
				}
			}
			return p.flush()
		},
	}
	f.register(cmd)
	cmd.Flags().StringVar(&from, "from", "earliest", "start: an offset, earliest or latest")
	cmd.Flags().IntVar(&limit, "limit", 0, "stop after N records (0: no limit)")
	cmd.Flags().BoolVar(&follow, "follow", false, "wait for new records until interrupted")
	return cmd
}

// printRecord prints one record read as a readLine.
func printRecord(p *printer, r record.Record) error {
	line := readLine{Offset: r.Offset, Epoch: r.Epoch, Timestamp: time.Unix(0, r.Timestamp).UTC().Format(time.RFC3339Nano),
		Headers: headersJSON(r.Headers)}
	text := string(r.Payload)
	if utf8.Valid(r.Payload) {
		line.Payload = &text
	} else {
		line.PayloadBase64 = base64.StdEncoding.EncodeToString(r.Payload)
		text = "base64:" + line.PayloadBase64
	}
	return p.print(line, r.Offset, r.Epoch, line.Timestamp, headersText(r.Headers), text)
}
