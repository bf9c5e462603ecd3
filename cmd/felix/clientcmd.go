package main

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/spf13/cobra"

	"felix.dev/felix/broker/client"
	"felix.dev/felix/broker/record"
	"felix.dev/felix/broker/wire"
)

// Exit codes of the client commands.
const (
	exitBrokerError = 1 // the broker refused the request (OffsetMismatch, CursorTooOld, ...)
	exitUsage       = 2 // bad flags or input
	exitUnknown     = 3 // the request was sent but not answered: it may have landed
)

// CLI-only error names, beside the wire codes' names.
const (
	errNameUsage          = "Usage"
	errNameUnknownOutcome = "UnknownOutcome"
)

// shardFlags are the flags every client command shares.
type shardFlags struct {
	broker  string
	stream  string
	shard   uint32
	output  string
	timeout time.Duration
	tls     tlsFlags
}

// tlsFlags turn on TLS to the broker.
type tlsFlags struct {
	ca         string
	serverName string
}

func (t *tlsFlags) register(cmd *cobra.Command) {
	cmd.Flags().StringVar(&t.ca, "tls-ca", "", "connect with TLS, trusting the CA certificates in this PEM file")
	cmd.Flags().StringVar(&t.serverName, "tls-server-name", "", "name to verify in the broker's certificate (default: the host of --broker)")
}

// config returns the client TLS config, or nil without --tls-ca.
func (t *tlsFlags) config() (*tls.Config, error) {
	if t.ca == "" {
		return nil, nil
	}
	pem, err := os.ReadFile(t.ca)
	if err != nil {
		return nil, err
	}
	pool := x509.NewCertPool()
	if !pool.AppendCertsFromPEM(pem) {
		return nil, fmt.Errorf("no certificate in %s", t.ca)
	}
	return &tls.Config{RootCAs: pool, ServerName: t.serverName, MinVersion: tls.VersionTLS12}, nil
}

// dialOptions returns the client options for these flags.
func (t *tlsFlags) dialOptions(cmd *cobra.Command, broker string) (client.Options, error) {
	conf, err := t.config()
	if err != nil {
		return client.Options{}, usageErr(cmd, err)
	}
	if conf != nil && conf.ServerName == "" {
		host, _, err := net.SplitHostPort(broker)
		if err != nil {
			return client.Options{}, usageErr(cmd, err)
		}
		conf.ServerName = host
	}
	return client.Options{Features: wire.FeatureTrimTag | wire.FeatureStorageErrors, TLS: conf}, nil
}

func (f *shardFlags) register(cmd *cobra.Command) {
	fl := cmd.Flags()
	fl.StringVar(&f.broker, "broker", "127.0.0.1:7070", "broker address HOST:PORT")
	fl.StringVar(&f.stream, "stream", "", "stream name (required)")
	fl.Uint32Var(&f.shard, "shard", 0, "shard number")
	fl.StringVarP(&f.output, "output", "o", "json", "output format: json (one JSON object per line) or table")
	fl.DurationVar(&f.timeout, "timeout", 30*time.Second, "deadline of each request")
	f.tls.register(cmd)
	cmd.SetFlagErrorFunc(func(c *cobra.Command, err error) error { return usageErr(c, err) })
}

func (f *shardFlags) shardID() record.ShardID {
	return record.ShardID{Stream: f.stream, Shard: f.shard}
}

func (f *shardFlags) check(cmd *cobra.Command) error {
	if f.output != "json" && f.output != "table" {
		return usageErr(cmd, fmt.Errorf("unknown output format %q (want json or table)", f.output))
	}
	if f.stream == "" {
		return usageErr(cmd, errors.New("--stream is required"))
	}
	return nil
}

// dial connects to the broker, offering the trim tag so CursorTooOld
// carries the trim's headers [TR-4].
func (f *shardFlags) dial(cmd *cobra.Command) (*client.Client, error) {
	opts, err := f.tls.dialOptions(cmd, f.broker)
	if err != nil {
		return nil, err
	}
	ctx, cancel := context.WithTimeout(cmd.Context(), f.timeout)
	defer cancel()
	c, err := client.Dial(ctx, f.broker, opts)
	if err != nil {
		return nil, reportErr(cmd, err)
	}
	return c, nil
}

// parseHeaders parses repeated k=v flags, keeping their order.
func parseHeaders(cmd *cobra.Command, kvs []string) ([]record.Header, error) {
	var hs []record.Header
	for _, kv := range kvs {
		k, v, ok := strings.Cut(kv, "=")
		if !ok || k == "" {
			return nil, usageErr(cmd, fmt.Errorf("header %q is not k=v", kv))
		}
		hs = append(hs, record.Header{Key: k, Value: []byte(v)})
	}
	return hs, nil
}

// headersJSON renders headers as an object (a repeated key keeps its last
// value); values are text.
func headersJSON(hs []record.Header) map[string]string {
	m := make(map[string]string, len(hs))
	for _, h := range hs {
		m[h.Key] = string(h.Value)
	}
	return m
}

func headersText(hs []record.Header) string {
	parts := make([]string, 0, len(hs))
	for _, h := range hs {
		parts = append(parts, h.Key+"="+string(h.Value))
	}
	return strings.Join(parts, ",")
}

// errorJSON is the stderr object for err: "error" is the wire code's name
// (or a CLI-only name) and the code's fields follow.
func errorJSON(err error) (map[string]any, int) {
	out := map[string]any{"message": err.Error()}
	var we *wire.Error
	var ue *client.UnknownOutcomeError
	switch {
	case errors.As(err, &ue):
		out["error"] = errNameUnknownOutcome
		return out, exitUnknown
	case errors.As(err, &we):
		out["error"] = we.Code.String()
		out["message"] = we.Message
		switch we.Code {
		case wire.CodeOffsetMismatch:
			out["expected"] = we.Expected
			out["tail"] = we.Tail
		case wire.CodeCursorTooOld:
			out["from"] = we.From
			out["floor"] = we.Floor
			if we.HasTag {
				out["trimHeaders"] = headersJSON(we.TrimHeaders)
			}
		case wire.CodeNotLeader:
			out["leader"] = we.Leader
			out["epoch"] = we.Epoch
		case wire.CodeFenced:
			out["epoch"] = we.Epoch
		case wire.CodeRecordTooLarge:
			out["limit"] = we.Limit
		case wire.CodeCorrupt:
			out["offset"] = we.Offset
		}
		return out, exitBrokerError
	default:
		out["error"] = wire.CodeUnavailable.String()
		return out, exitBrokerError
	}
}

type usageError struct{ err error }

func (e *usageError) Error() string { return e.err.Error() }
func (e *usageError) Unwrap() error { return e.err }

func usageErr(cmd *cobra.Command, err error) error {
	return reportErr(cmd, &usageError{err})
}

// reportErr prints err to stderr as one JSON object and returns the
// exitError that makes main exit non-zero without printing again.
func reportErr(cmd *cobra.Command, err error) error {
	var out map[string]any
	code := exitUsage
	var ue *usageError
	if errors.As(err, &ue) {
		out = map[string]any{"error": errNameUsage, "message": ue.Error()}
	} else {
		out, code = errorJSON(err)
	}
	_ = writeJSON(cmd.ErrOrStderr(), out)
	return &exitError{code: code, err: err}
}

// printer writes results as JSON lines or as a table.
type printer struct {
	w     io.Writer
	table *tabwriter.Writer
}

func newPrinter(cmd *cobra.Command, output string, columns ...string) *printer {
	p := &printer{w: cmd.OutOrStdout()}
	if output == "table" {
		p.table = tabwriter.NewWriter(p.w, 0, 4, 2, ' ', 0)
		_, _ = fmt.Fprintln(p.table, strings.Join(columns, "\t"))
	}
	return p
}

// print writes obj as one JSON line, or cells as a table row.
func (p *printer) print(obj any, cells ...any) error {
	if p.table != nil {
		parts := make([]string, len(cells))
		for i, c := range cells {
			parts[i] = fmt.Sprint(c)
		}
		_, err := fmt.Fprintln(p.table, strings.Join(parts, "\t"))
		return err
	}
	return writeJSON(p.w, obj)
}

// writeJSON writes obj as one line of JSON, without HTML escaping.
func writeJSON(w io.Writer, obj any) error {
	enc := json.NewEncoder(w)
	enc.SetEscapeHTML(false)
	return enc.Encode(obj)
}

func (p *printer) flush() error {
	if p.table != nil {
		return p.table.Flush()
	}
	return nil
}

// noArgs refuses positional arguments with a JSON usage error.
func noArgs(cmd *cobra.Command, args []string) error {
	if len(args) > 0 {
		return usageErr(cmd, fmt.Errorf("unexpected argument %q (everything is a flag)", args[0]))
	}
	return nil
}
