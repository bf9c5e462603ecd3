package main

import (
	"context"
	"crypto/tls"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"path/filepath"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/spf13/cobra"

	"felix.dev/felix/broker/client"
	"felix.dev/felix/broker/record"
	"felix.dev/felix/broker/wire"
	"felix.dev/felix/internal/pki"
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
	errNameTLS            = "TLSHandshake"
)

// shardFlags are the flags every client command shares.
type shardFlags struct {
	broker string
	// bootstrap lists brokers of a cluster (or its client Service) to
	// learn the cluster from; requests then go to each shard's leader.
	bootstrap []string
	stream    string
	shard     uint32
	output    string
	timeout   time.Duration
	tls       tlsFlags
	// who is the identity of the client certificate the last dial
	// presented ("" anonymous), for messages.
	who string
	// idempotent makes appends idempotent (a routing client even for
	// --broker): an append whose outcome is unknown is sent again and
	// the leader de-duplicates it.
	idempotent bool
	// kube are the kubeconfig flags --cluster is resolved through.
	kube kubeFlags
}

// Environment variables of the TLS flags; a flag given on the command
// line wins over its variable.
const (
	envTLSCert       = "FELIX_TLS_CERT"
	envTLSKey        = "FELIX_TLS_KEY"
	envTLSCA         = "FELIX_TLS_CA"
	envTLSDir        = "FELIX_TLS_DIR"
	envTLSServerName = "FELIX_TLS_SERVER_NAME"
	// envBootstrap is --bootstrap's variable: comma-separated HOST:PORTs.
	envBootstrap = "FELIX_BOOTSTRAP"
)

// DefaultClientPort is the port of a broker's client protocol: what
// cluster pods listen on and a standalone broker's default, so the CLI's
// default --broker and a bootstrap address without a port reach it.
const DefaultClientPort = "7100"

// defaultBroker is the CLI's default --broker: a standalone broker on this
// machine.
const defaultBroker = "127.0.0.1:" + DefaultClientPort

// tlsFlags turn on TLS to the broker: the flags as given, before the
// environment is consulted (resolve).
type tlsFlags struct {
	cert, key, ca, dir string
	serverName         string
	cluster            string
}

func (t *tlsFlags) register(cmd *cobra.Command) {
	fl := cmd.Flags()
	fl.StringVar(&t.cert, "tls-cert", "", "client certificate (PEM, leaf first) to authenticate with; env "+envTLSCert)
	fl.StringVar(&t.key, "tls-key", "", "private key of --tls-cert (PEM); env "+envTLSKey)
	fl.StringVar(&t.ca, "tls-ca", "", "trust bundle (PEM) the broker's certificate must verify against; alone: anonymous over TLS; env "+envTLSCA)
	fl.StringVar(&t.dir, "tls-dir", "", "directory laid out like a FelixUser Secret: tls.crt, tls.key, ca.crt (--tls-cert/--tls-key/--tls-ca override its files); env "+envTLSDir)
	fl.StringVar(&t.serverName, "tls-server-name", "", "also require this DNS name in the broker's certificate (sent as SNI); env "+envTLSServerName)
	fl.StringVar(&t.cluster, "cluster", "", "NAMESPACE/NAME: require the broker to be a broker of this FelixCluster (implies TLS; default: the client certificate's own cluster)")
}

// tlsSettings is the resolved TLS configuration of a client command.
type tlsSettings struct {
	// Enabled: some TLS flag or variable is set.
	Enabled    bool
	Files      client.TLSFiles
	ServerName string
	Cluster    string
}

// resolve merges the flags with the environment (getenv). The file flags
// (--tls-cert, --tls-key, --tls-ca, --tls-dir) are taken as a group: if
// any is given on the command line the file variables are ignored, so a
// command line never mixes its files with the environment's. Within the
// group, --tls-dir supplies tls.crt, tls.key and ca.crt and the single-file
// flags replace its files one by one. --tls-server-name wins over its
// variable on its own. TLS is on when anything is set; it then needs a
// trust bundle, and a certificate needs its key.
func (t *tlsFlags) resolve(getenv func(string) string) (tlsSettings, error) {
	cert, key, ca, dir := t.cert, t.key, t.ca, t.dir
	if cert == "" && key == "" && ca == "" && dir == "" {
		cert, key, ca, dir = getenv(envTLSCert), getenv(envTLSKey), getenv(envTLSCA), getenv(envTLSDir)
	}
	s := tlsSettings{ServerName: t.serverName, Cluster: t.cluster}
	if s.ServerName == "" {
		s.ServerName = getenv(envTLSServerName)
	}
	if dir != "" {
		s.Files = client.TLSFiles{Cert: filepath.Join(dir, pki.CertFile), Key: filepath.Join(dir, pki.KeyFile), CA: filepath.Join(dir, pki.CAFile)}
	}
	for _, o := range []struct {
		v   string
		dst *string
	}{{cert, &s.Files.Cert}, {key, &s.Files.Key}, {ca, &s.Files.CA}} {
		if o.v != "" {
			*o.dst = o.v
		}
	}
	s.Enabled = s.Files != (client.TLSFiles{}) || s.ServerName != "" || s.Cluster != ""
	if !s.Enabled {
		return s, nil
	}
	if s.Files.CA == "" {
		return s, errors.New("TLS needs the broker's trust bundle: give --tls-ca or --tls-dir (or " + envTLSCA + " / " + envTLSDir + ")")
	}
	if (s.Files.Cert == "") != (s.Files.Key == "") {
		return s, errors.New("--tls-cert and --tls-key go together")
	}
	if s.Cluster != "" {
		if _, _, err := pki.ParseClusterRef(s.Cluster); err != nil {
			return s, fmt.Errorf("--cluster %q: want NAMESPACE/NAME: %w", s.Cluster, err)
		}
	}
	return s, nil
}

// clientTLS is what a command dials with: the TLS config (nil: plain
// TCP) and who it authenticates as, for messages.
type clientTLS struct {
	conf *tls.Config
	// identity is the felix:// identity of the client certificate, or ""
	// (anonymous, or a certificate without one).
	identity string
}

// load reads the files of s (again on every call, so a long-running
// command follows rotated files).
func (s tlsSettings) load(host string) (clientTLS, error) {
	if !s.Enabled {
		return clientTLS{}, nil
	}
	conf, err := client.TLSFromFilesForHost(s.Files, s.Cluster, s.ServerName, host)
	if err != nil {
		return clientTLS{}, err
	}
	out := clientTLS{conf: conf}
	if s.Files.Cert != "" {
		if c, err := conf.GetClientCertificate(&tls.CertificateRequestInfo{}); err == nil && c.Leaf != nil {
			if id, err := pki.IdentityOf(c.Leaf); err == nil {
				out.identity = id.String()
			}
		}
	}
	return out, nil
}

// options returns the client options of a resolved TLS setting. The
// features include idempotent appends (offered to every broker, used only
// by append --idempotent), counters, consumer groups and per-record
// acknowledgement with the dead-letter log.
func (c clientTLS) options() client.Options {
	return client.Options{Features: wire.FeatureTrimTag | wire.FeatureStorageErrors | wire.FeatureAuth | wire.FeatureMetadata | wire.FeatureIdempotent | wire.FeatureCounters | wire.FeatureGroups | wire.FeatureAcks, TLS: c.conf}
}

// dialOptions resolves the TLS flags against the environment, reads the
// files and returns the client options; errors are usage errors.
func (t *tlsFlags) dialOptions(cmd *cobra.Command, addr string) (client.Options, clientTLS, error) {
	s, err := t.resolve(os.Getenv)
	if err != nil {
		return client.Options{}, clientTLS{}, usageErr(cmd, err)
	}
	ct, err := s.load(hostOf(addr))
	if err != nil {
		return client.Options{}, clientTLS{}, usageErr(cmd, err)
	}
	return ct.options(), ct, nil
}

func (f *shardFlags) register(cmd *cobra.Command) {
	fl := cmd.Flags()
	fl.StringVar(&f.stream, "stream", "", "stream name (required)")
	fl.Uint32Var(&f.shard, "shard", 0, "shard number")
	fl.StringVarP(&f.output, "output", "o", "json", "output format: json (one JSON object per line) or table")
	fl.DurationVar(&f.timeout, "timeout", 30*time.Second, "deadline of each request")
	f.registerTarget(cmd)
}

// registerTarget registers the flags that say where requests go and how
// they are secured (--broker, --bootstrap, the TLS flags, --cluster and
// the kubeconfig flags), which dial and endpoints resolve.
func (f *shardFlags) registerTarget(cmd *cobra.Command) {
	fl := cmd.Flags()
	fl.StringVar(&f.broker, "broker", defaultBroker, "one broker's address HOST:PORT, spoken to alone (a standalone broker); excludes --bootstrap")
	fl.StringArrayVar(&f.bootstrap, "bootstrap", nil, "HOST[:PORT] of any broker of a cluster, or of its client Service (repeatable; port "+DefaultClientPort+" when left out): requests go to each shard's leader, found and followed by the client; env "+envBootstrap+" (comma-separated)")
	f.tls.register(cmd)
	fl.Lookup("cluster").Usage = clusterFlagHelp
	f.kube.register(fl)
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

// shardClient is what the client commands send requests through: one
// broker's connection (*client.Client, --broker) or a cluster that routes
// each request to its shard's leader (*client.Cluster, --bootstrap).
type shardClient interface {
	Append(ctx context.Context, shard record.ShardID, recs []record.Record, expectTail *uint64) (wire.AppendOK, error)
	Read(ctx context.Context, req wire.ReadRequest) (wire.ReadOK, error)
	Trim(ctx context.Context, req wire.TrimRequest) (wire.TrimOK, error)
	Describe(ctx context.Context, shard record.ShardID) (wire.DescribeOK, error)
	Metadata(ctx context.Context, streams ...string) (wire.MetadataOK, error)
	Close() error
}

// bootstrapAddrs returns the bootstrap addresses: --bootstrap, else
// FELIX_BOOTSTRAP (unless --broker was given); a port left out is
// DefaultClientPort. None means --broker alone.
func (f *shardFlags) bootstrapAddrs(cmd *cobra.Command, getenv func(string) string) ([]string, error) {
	given := cmd.Flags().Changed("broker")
	addrs := f.bootstrap
	if len(addrs) > 0 && given {
		return nil, errors.New("--broker and --bootstrap exclude each other: --broker speaks to one broker, --bootstrap routes through a cluster")
	}
	if len(addrs) == 0 && !given {
		if v := getenv(envBootstrap); v != "" {
			addrs = strings.Split(v, ",")
		}
	}
	var out []string
	for _, a := range addrs {
		a = strings.TrimSpace(a)
		if a == "" {
			continue
		}
		if _, _, err := net.SplitHostPort(a); err != nil {
			a = net.JoinHostPort(a, DefaultClientPort)
		}
		out = append(out, a)
	}
	if len(addrs) > 0 && len(out) == 0 {
		return nil, errors.New("--bootstrap (or " + envBootstrap + ") holds no address")
	}
	return out, nil
}

// target is where a client command's requests go, from its flags.
type target struct {
	// bootstrap are the addresses of --bootstrap or FELIX_BOOTSTRAP; none:
	// --broker alone, or the kubeconfig's (viaKube).
	bootstrap []string
	// cluster is --cluster resolved against -n and the kubeconfig's
	// namespace; zero without --cluster.
	cluster clusterRef
	// viaKube: the bootstrap addresses are to be read through the
	// kubeconfig (--cluster without --broker, --bootstrap or
	// FELIX_BOOTSTRAP).
	viaKube bool
}

// target resolves the address flags. Precedence: --broker, --bootstrap
// and FELIX_BOOTSTRAP (bootstrapAddrs) win over the kubeconfig, which is
// used to find the cluster's brokers only when none of them is given and
// --cluster is. Errors are usage errors, or a *clusterLookupError when the
// kubeconfig (needed for the namespace of --cluster NAME without -n) does
// not load.
func (f *shardFlags) target(cmd *cobra.Command, getenv func(string) string) (target, error) {
	boot, err := f.bootstrapAddrs(cmd, getenv)
	if err != nil {
		return target{}, err
	}
	ref, ok, err := clusterRefOf(f.tls.cluster, &f.kube)
	if err != nil {
		return target{}, err
	}
	t := target{bootstrap: boot, cluster: ref}
	t.viaKube = ok && len(boot) == 0 && !cmd.Flags().Changed("broker")
	return t, nil
}

// dial connects to the broker (--broker), or learns the cluster from
// --bootstrap or, for --cluster alone, from the addresses the kubeconfig's
// API server lists for it; it offers the trim tag so CursorTooOld carries
// the trim's headers [TR-4].
func (f *shardFlags) dial(cmd *cobra.Command) (shardClient, error) {
	ctx, cancel := context.WithTimeout(cmd.Context(), f.timeout)
	defer cancel()
	boot, opts, err := f.endpoints(ctx, cmd)
	if err != nil {
		return nil, err
	}
	if len(boot) > 0 {
		c, err := client.NewCluster(ctx, client.ClusterOptions{Options: opts, Idempotent: f.idempotent}, boot...)
		if err != nil {
			return nil, f.report(cmd, err)
		}
		return c, nil
	}
	c, err := client.Dial(ctx, f.broker, opts)
	if err != nil {
		return nil, f.report(cmd, err)
	}
	return c, nil
}

// endpoints resolves where the command's requests go: the bootstrap
// addresses of a routing client (--bootstrap, FELIX_BOOTSTRAP, or for
// --cluster alone the kubeconfig's; none means --broker alone) and the
// options to dial with. ctx bounds the kubeconfig lookup. Errors are
// reported (usage errors, or the lookup's).
func (f *shardFlags) endpoints(ctx context.Context, cmd *cobra.Command) ([]string, client.Options, error) {
	tg, err := f.target(cmd, os.Getenv)
	if err != nil {
		if le := (*clusterLookupError)(nil); errors.As(err, &le) {
			return nil, client.Options{}, reportErr(cmd, err)
		}
		return nil, client.Options{}, usageErr(cmd, err)
	}
	if tg.cluster != (clusterRef{}) {
		// The broker's certificate must be of this cluster, however
		// --cluster was spelled.
		f.tls.cluster = tg.cluster.String()
	}
	if _, err := f.tls.resolve(os.Getenv); err != nil {
		return nil, client.Options{}, usageErr(cmd, err)
	}
	boot := tg.bootstrap
	if tg.viaKube {
		r, err := f.kube.source().Reader()
		if err == nil {
			boot, err = clusterBootstrap(ctx, r, tg.cluster)
		}
		if err != nil {
			return nil, client.Options{}, reportErr(cmd, err)
		}
	}
	if f.idempotent && len(boot) == 0 {
		// Only a routing client numbers appends; a standalone broker
		// lists no shards, so it serves them itself.
		boot = []string{f.broker}
	}
	addr := f.broker
	if len(boot) > 0 {
		addr = boot[0]
	}
	opts, ct, err := f.tls.dialOptions(cmd, addr)
	if err != nil {
		return nil, client.Options{}, err
	}
	f.who = ct.identity
	return boot, opts, nil
}

// report is reportErr naming the identity the command authenticated as.
func (f *shardFlags) report(cmd *cobra.Command, err error) error {
	return reportErr(cmd, &asIdentity{who: f.who, err: err})
}

// asIdentity carries who a refused request was sent as to errorJSON.
type asIdentity struct {
	who string // felix:// identity, "" anonymous
	err error
}

func (e *asIdentity) Error() string { return e.err.Error() }
func (e *asIdentity) Unwrap() error { return e.err }

// principalText renders a felix:// identity as "user alice", or
// "anonymous" for "".
func principalText(who string) string {
	if who == "" {
		return "anonymous"
	}
	id, err := pki.ParseIdentityString(who)
	if err != nil {
		return who
	}
	return string(id.Kind) + " " + id.Name
}

// authJSON fills out for a refusal on grounds of identity.
func authJSON(out map[string]any, ae *client.AuthError, who string) {
	out["error"] = ae.Err.Code.String()
	out["reason"] = ae.Err.Message
	if who != "" {
		out["identity"] = who
	}
	if ae.Err.Code == wire.CodeUnauthenticated {
		if who == "" {
			out["message"] = "unauthenticated: the broker requires a client certificate (give --tls-dir, or --tls-cert and --tls-key): " + ae.Err.Message
		} else {
			out["message"] = "unauthenticated: the broker does not accept " + principalText(who) + ": " + ae.Err.Message
		}
		return
	}
	out["operation"] = ae.Op.String()
	out["stream"] = ae.Shard.Stream
	out["shard"] = ae.Shard.Shard
	out["message"] = fmt.Sprintf("not authorized: %s may not %s stream %s", principalText(who), ae.Op, ae.Shard.Stream)
}

// tlsJSON fills out for a failed TLS handshake: "reason" names what was
// wrong with the broker's certificate when pki says.
func tlsJSON(out map[string]any, he *client.HandshakeError) {
	out["error"] = errNameTLS
	for _, r := range []struct {
		err  error
		name string
	}{
		{pki.ErrUntrusted, "Untrusted"}, {pki.ErrNoIdentity, "NoIdentity"}, {pki.ErrAmbiguousIdentity, "AmbiguousIdentity"},
		{pki.ErrNotBroker, "NotBroker"}, {pki.ErrWrongCluster, "WrongCluster"}, {pki.ErrNoTrustBundle, "NoTrustBundle"},
	} {
		if errors.Is(he, r.err) {
			out["reason"] = r.name
			break
		}
	}
	switch out["reason"] {
	case "Untrusted":
		out["hint"] = "the broker's certificate does not verify against the trust bundle (--tls-ca, or ca.crt of --tls-dir): another cluster's CA, or expired"
	case "WrongCluster":
		out["hint"] = "the broker belongs to another FelixCluster than --cluster names"
	case "NotBroker", "NoIdentity", "AmbiguousIdentity":
		out["hint"] = "the server's certificate is not a Felix broker's"
	}
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
	var ae *client.AuthError
	var he *client.HandshakeError
	var le *clusterLookupError
	switch {
	case errors.As(err, &ae):
		var who string
		if ai := (*asIdentity)(nil); errors.As(err, &ai) {
			who = ai.who
		}
		authJSON(out, ae, who)
		return out, exitBrokerError
	case errors.As(err, &he):
		tlsJSON(out, he)
		return out, exitBrokerError
	case errors.As(err, &le):
		out["error"] = errNameClusterLookup
		out["reason"] = le.reason
		return out, exitBrokerError
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
		case wire.CodeShardUnknown:
			if we.Leader != "" {
				out["leader"] = we.Leader
				out["epoch"] = we.Epoch
			}
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

// hostOf is the host of a HOST:PORT address (addr itself when it has no
// port), the name a certificate without a felix identity must be valid
// for.
func hostOf(addr string) string {
	host, _, err := net.SplitHostPort(addr)
	if err != nil {
		return addr
	}
	return host
}
