package main

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"time"

	"github.com/go-logr/logr"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"github.com/spf13/cobra"

	"felix.dev/felix/broker/auth"
	"felix.dev/felix/broker/counter"
	"felix.dev/felix/broker/datadir"
	"felix.dev/felix/broker/group"
	"felix.dev/felix/broker/logstore"
	"felix.dev/felix/broker/member"
	"felix.dev/felix/broker/replica"
	"felix.dev/felix/broker/server"
	"felix.dev/felix/internal/version"
)

// logStoreDir is the log store's directory inside the data directory,
// beside storage-id, registration and run-state.
const logStoreDir = "logstore"

type brokerFlags struct {
	dataDir         string
	listen          string
	http            string
	fsync           string
	fsyncInterval   time.Duration
	batchesInLog    bool
	standalone      bool
	tlsCert, tlsKey string
	tlsClientCA     string
	// Cluster-mode security (docs/security.md).
	tlsDir                    string
	peerListen, advertisePeer string
	metricsListen             string
	insecureNoTLS             bool
	shutdownTimeout           time.Duration
	maxFrameSize              uint32
	maxInFlight               int64
	maxConnections            int
	verbosity                 int

	// Limits against hostile or buggy clients (server.Options).
	idleTimeout   time.Duration
	maxPerAddress int
	// peerMaxConns and peerMaxPerAddress bound the peer port (cluster mode).
	peerMaxConns, peerMaxPerAddress int
	maxFrameMemory                  int64
	frameMemoryWait                 time.Duration
	peerQueueBytes                  int64
	maxShards                       int
	counterSnapshotEvery            int
	maxCounters                     int
	groupLease                      time.Duration
	maxGroups                       int
	groupMaxInFlight                int
	maxDeadLetters                  int
	pprof                           bool
	minFree                         byteSize
	spaceInterval                   time.Duration

	// Cluster mode.
	cluster, broker, namespace string
	advertise, kubeconfig      string
	heartbeatInterval          time.Duration
	nodeExpiry, passInterval   time.Duration
	reportRefresh              time.Duration
	bootIDFile                 string
	maintainInterval           time.Duration
	segmentRecords             uint64
}

func newBrokerCmd() *cobra.Command {
	var f brokerFlags
	cmd := &cobra.Command{
		Use:   "broker --data-dir DIR --listen HOST:PORT --http HOST:PORT --fsync on-commit|periodic|none [--fsync-interval D] [--standalone]",
		Short: "Run a broker: serve shard logs over the Felix protocol",
		Long: `Run a broker. It opens the data directory (storage identity and run-state,
[ID-1]..[ID-4]), opens the log store in DIR/logstore, serves the Felix wire
protocol on --listen and /live, /ready and /metrics on --http (standalone;
/metrics on --metrics-listen when given).

--standalone runs without a control plane: every shard has one replica (this
broker) and is created by its first append (at most --max-shards; a shard
that was never appended to reads and describes as empty and is not created). Without it the broker is a cluster
member (--cluster, --broker, --namespace): before any store opens it asks the
control plane (the Kubernetes API) for its incarnation, holding with /live up
and /ready down while the API server cannot be reached, rotates its storage id
if the control plane is ahead of its registration file, registers, and then
serves the shards the operator assigns it [ID-4].

A cluster member is secure by default (docs/security.md): it reads its
certificate, key and trust bundle from --tls-dir (re-read when they change,
no restart), serves clients over TLS on --listen (a client is the FelixUser
its certificate names and may do what that FelixUser's grants say; without a
certificate only if the FelixCluster allows anonymous access), serves
replication on --peer-listen over mutual TLS to the cluster's brokers only,
registers --advertise and --advertise-peer, serves /live and /ready in plain
HTTP on --http and /metrics over HTTPS on --metrics-listen (a bearer token
allowed to get /metrics, or a broker or operator certificate). It starts
no client connection before the FelixUsers and its FelixCluster are loaded.
--insecure-no-tls, for tests and development only, drops all of that: one
plaintext port, replication over it, everyone allowed everything.

--fsync says when an append is acknowledged: on-commit (after a sync shared by
concurrent appends), periodic (a background sync every --fsync-interval) or
none. On SIGTERM or SIGINT the broker stops accepting, answers what it has
read, closes and syncs the store and records a clean stop in run-state.

Every --maintain-interval, in both modes, the broker deletes the whole
segments below each log's floor (set by committed trims) and applies
retention (in cluster mode each FelixStream's spec.retention; never on a
fenced stream).

Below --min-free-bytes of free space on the data directory's file system
(default 256Mi) the broker refuses appends with StorageFull, serves reads
and trims, and fails /ready with the reason; appends resume by themselves
once space returns (docs/durable-storage.md, "A full disk").

Once serving it prints one JSON line to stdout with the bound addresses and
the storage id; logs go to stderr as JSON lines.`,
		Example: `  felix broker --data-dir /var/lib/felix --listen 127.0.0.1:7100 --http 127.0.0.1:7101 --fsync periodic --standalone
  felix broker --data-dir ./data --listen :7100 --http :7101 --fsync on-commit --standalone --tls-cert tls.crt --tls-key tls.key`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error { return runBroker(cmd, f) },
	}
	fl := cmd.Flags()
	fl.StringVar(&f.dataDir, "data-dir", "", "data directory (required)")
	fl.StringVar(&f.listen, "listen", "127.0.0.1:7100", "protocol address HOST:PORT (port 0 picks one)")
	fl.StringVar(&f.http, "http", "127.0.0.1:7101", "plain HTTP address HOST:PORT for /live and /ready (and /metrics in standalone or --insecure-no-tls mode without --metrics-listen)")
	fl.StringVar(&f.fsync, "fsync", "on-commit", "durability: on-commit, periodic or none")
	fl.DurationVar(&f.fsyncInterval, "fsync-interval", logstore.DefaultFsyncInterval, "background sync interval under --fsync periodic")
	fl.BoolVar(&f.batchesInLog, "batches-in-commit-log", true, "under --fsync on-commit, write each batch once, to the commit log, with a ref in the index (false: also to badger's value log); once a data directory holds such batches, brokers from before this option refuse to open it")
	fl.BoolVar(&f.standalone, "standalone", false, "run without a control plane; every shard has one replica")
	fl.StringVar(&f.tlsCert, "tls-cert", "", "serve the protocol over TLS with this certificate (PEM)")
	fl.StringVar(&f.tlsKey, "tls-key", "", "private key (PEM) for --tls-cert")
	fl.StringVar(&f.tlsClientCA, "tls-client-ca", "", "standalone, with --tls-cert: require a client certificate signed by a CA of this PEM bundle (its subject CN names the client in logs; every such client may do everything)")
	fl.StringVar(&f.tlsDir, "tls-dir", "", "cluster mode: directory of the broker's certificate Secret (tls.crt, tls.key, ca.crt), re-read when it changes; required unless --insecure-no-tls")
	fl.StringVar(&f.peerListen, "peer-listen", "127.0.0.1:7072", "cluster mode: peer (replication) address HOST:PORT, mutual TLS, the cluster's brokers only")
	fl.IntVar(&f.peerMaxConns, "peer-max-connections", member.DefaultPeerMaxConnections, "cluster mode: open connections allowed on the peer port (a broker opens one to each peer)")
	fl.IntVar(&f.peerMaxPerAddress, "peer-max-connections-per-address", member.DefaultPeerMaxConnectionsPerAddress, "cluster mode: open peer-port connections allowed from one remote IP address")
	fl.StringVar(&f.advertisePeer, "advertise-peer", "", "cluster mode: HOST:PORT peers dial for replication (default: the --peer-listen address)")
	fl.StringVar(&f.metricsListen, "metrics-listen", "", "address HOST:PORT for /metrics; cluster mode: HTTPS with the broker's certificate, scrapers authenticate with a bearer token allowed to get /metrics or a broker/operator certificate (empty: /metrics not served); standalone: moves /metrics off --http")
	fl.BoolVar(&f.insecureNoTLS, "insecure-no-tls", false, "cluster mode, for tests and development only: no TLS, no peer port (peers replicate over --listen), no authentication (every client may do everything); never use it in production")
	fl.DurationVar(&f.shutdownTimeout, "shutdown-timeout", 30*time.Second, "how long a graceful stop may drain before closing connections")
	fl.Uint32Var(&f.maxFrameSize, "max-frame-size", 0, "largest protocol frame accepted in bytes (default 16 MiB)")
	fl.Int64Var(&f.maxInFlight, "max-inflight-bytes", 0, "request bytes one connection may have unanswered (default 64 MiB)")
	fl.IntVar(&f.maxConnections, "max-connections", 0, "open protocol connections allowed (default 1024)")
	fl.DurationVar(&f.idleTimeout, "idle-timeout", server.DefaultIdleTimeout, "disconnect a client that sends nothing for this long (0: never)")
	fl.IntVar(&f.maxPerAddress, "max-connections-per-address", server.DefaultMaxConnectionsPerAddress, "open protocol connections allowed from one remote IP address (0: no limit)")
	fl.Int64Var(&f.maxFrameMemory, "max-frame-memory", server.DefaultMaxFrameMemory, "bytes of client request frames all connections together may hold until answered, charged as their bytes arrive (at least --max-frame-size); small frames and replication frames also have pools of their own")
	fl.DurationVar(&f.frameMemoryWait, "frame-memory-wait", server.DefaultFrameMemoryWait, "how long a frame waits for --max-frame-memory before it is refused with Unavailable")
	fl.Int64Var(&f.peerQueueBytes, "peer-queue-bytes", server.DefaultPeerQueueBytes, "bytes of replication frames that may wait to be written on one peer connection; more are dropped (and sent again by replication)")
	fl.IntVar(&f.maxShards, "max-shards", server.DefaultMaxShards, "standalone: shards the broker creates on first append, at most (0: no limit)")
	fl.IntVar(&f.counterSnapshotEvery, "counter-snapshot-every", server.DefaultCounterSnapshotEvery, "after this many counter adds to a shard, snapshot its counters into its counter log and trim the log below the snapshot (0: never)")
	fl.IntVar(&f.maxCounters, "max-counters", counter.DefaultMaxKeys, "counters one shard may hold; an add creating one more is refused with CounterLimit (a shard's snapshot of them must fit one 1 MiB record: at most about 3000 with 256-byte keys)")
	fl.DurationVar(&f.groupLease, "group-lease", server.DefaultGroupLease, "how long a consumer-group member keeps a shard without a heartbeat, claim or commit; after it another member's claim takes the shard over (after a leadership change, at most twice this)")
	fl.IntVar(&f.maxGroups, "max-groups", group.DefaultMaxGroups, "consumer groups one shard may record; a claim creating one more is refused with GroupLimit")
	fl.IntVar(&f.maxDeadLetters, "max-dead-letters", server.DefaultMaxDeadLetters, "dead-lettered records one shard's dead-letter log may hold above its floor; beyond it records due to be dead-lettered stay outstanding until felix deadletter trim makes room; it also caps the redrive intents replaced after losing to other appends (a redrive beyond it is refused with GroupLimit)")
	fl.IntVar(&f.groupMaxInFlight, "group-max-in-flight", group.DefaultMaxInFlight, "the most outstanding (delivered, not acknowledged) records a group acknowledging per record may set on one shard; higher settings are refused with GroupLimit")
	fl.IntVarP(&f.verbosity, "v", "v", 0, "log verbosity")
	fl.BoolVar(&f.pprof, "pprof", false, "also serve Go profiles under /debug/pprof/ (cluster mode: on --metrics-listen, behind its check; otherwise on --http)")
	f.minFree = logstore.DefaultMinFreeBytes
	fl.Var(&f.minFree, "min-free-bytes", "free-space floor of the data directory's file system (bytes, or with Ki, Mi, Gi, Ti): below it appends are refused with StorageFull and /ready fails, until the free space is back above the floor plus max(floor/8, 4Mi); 0: no floor (ENOSPC only)")
	fl.DurationVar(&f.spaceInterval, "free-space-check-interval", logstore.DefaultSpaceCheckInterval, "how often the data directory's free space is measured (the writer also measures after writing a quarter of --min-free-bytes)")
	fl.StringVar(&f.cluster, "cluster", "", "cluster mode: the FelixCluster this broker belongs to")
	fl.StringVar(&f.broker, "broker", "", "cluster mode: this broker's FelixBroker name")
	fl.StringVar(&f.namespace, "namespace", "", "cluster mode: the namespace of the FelixCluster")
	fl.StringVar(&f.advertise, "advertise", "", "cluster mode: HOST:PORT peers and clients reach this broker on (default: the --listen address)")
	fl.StringVar(&f.kubeconfig, "kubeconfig", "", "cluster mode: kubeconfig file (default: in-cluster config, or $KUBECONFIG)")
	fl.DurationVar(&f.heartbeatInterval, "heartbeat-interval", 2*time.Second, "cluster mode: how often the heartbeat Lease is renewed")
	fl.DurationVar(&f.nodeExpiry, "node-expiry", 10*time.Second, "cluster mode: the cluster's node expiry timeout")
	fl.DurationVar(&f.passInterval, "pass-interval", 0, "cluster mode: replication pass interval (default 100ms)")
	fl.DurationVar(&f.reportRefresh, "report-refresh", 0, "cluster mode: how often a shard report whose placement did not change is rewritten with its positions (default 5m)")
	fl.DurationVar(&f.maintainInterval, "maintain-interval", time.Minute, "how often whole segments below each log's floor are deleted [TR-6] and each stream's retention is applied [TR-7], in both modes (0: never)")
	fl.Uint64Var(&f.segmentRecords, "segment-records", 0, "offsets per segment of logs created from now on, the unit of deletion (default 65536); for tests")
	_ = fl.MarkHidden("segment-records")
	fl.StringVar(&f.bootIDFile, "boot-id-file", "", "file holding the current boot id (default /proc/sys/kernel/random/boot_id); for tests that stand for a machine restart")
	_ = fl.MarkHidden("boot-id-file")
	_ = cmd.MarkFlagRequired("data-dir")
	return cmd
}

func runBroker(cmd *cobra.Command, f brokerFlags) (err error) {
	log := newJSONLogger(os.Stderr, f.verbosity).WithName("broker")
	mode, err := logstore.ParseFsyncMode(f.fsync)
	if err != nil {
		return err
	}
	dirMode := mode
	if !f.standalone {
		if f.maintainInterval <= 0 {
			// The flag's 0 (never) is the member's negative; its 0 means
			// the default.
			f.maintainInterval = -1
		}
		return runMember(cmd, f, log, mode)
	}
	if f.tlsDir != "" || f.insecureNoTLS || cmd.Flags().Changed("peer-listen") || f.advertisePeer != "" {
		return errors.New("--tls-dir, --insecure-no-tls, --peer-listen and --advertise-peer are cluster-mode flags; a standalone broker uses --tls-cert, --tls-key and --tls-client-ca")
	}
	tlsConf, authn, err := standaloneTLS(f)
	if err != nil {
		return err
	}
	// [ID-4], standalone: identity and run-state before any store opens.
	dir, err := datadir.Open(f.dataDir, datadir.Options{Fsync: dirMode, BootIDPath: f.bootIDFile, Logger: log.WithName("datadir")})
	if err != nil {
		return err
	}
	defer func() { _ = dir.Close() }()
	identified, err := dir.Identify()
	if err != nil {
		return err
	}
	prepared, err := identified.Standalone()
	if err != nil {
		return err
	}
	running, err := prepared.MarkRunning()
	if err != nil {
		return err
	}

	reg := prometheus.NewRegistry()
	reg.MustRegister(collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}), version.NewBuildInfoCollector())
	metrics, err := server.NewMetrics(reg)
	if err != nil {
		return err
	}
	maintMetrics, err := replica.NewMetrics(reg)
	if err != nil {
		return err
	}
	corruptMetrics, err := server.NewCorruptLogMetrics(reg)
	if err != nil {
		return err
	}
	store, err := logstore.Open(logstore.Options{Dir: filepath.Join(f.dataDir, logStoreDir), Fsync: mode, FsyncInterval: f.fsyncInterval,
		SegmentRecords: f.segmentRecords, ValueThreshold: logstore.BrokerValueThreshold, CommitLogValues: f.batchesInLog,
		AutoCommit: true, LastRun: member.LastRunOf(identified.Decision()), Logger: log.WithName("logstore"), Metrics: metrics,
		MinFreeBytes: uint64(f.minFree), SpaceCheckInterval: f.spaceInterval})
	if err != nil {
		return err
	}
	// A standalone broker has no peer to copy a damaged log from: it
	// refuses the log (Corrupt) until an operator runs felix log repair.
	if damaged := store.Damaged(); len(damaged) > 0 {
		corruptMetrics.Found(len(damaged))
		corruptMetrics.SetRefused(len(damaged))
		for _, d := range damaged {
			log.Error(d, "log refused: its stored data is damaged; see felix log inspect and felix log repair",
				"log", d.Log.String(), "offset", d.Offset)
		}
	}
	storeOpen := true
	defer func() {
		if storeOpen {
			_ = store.Close()
		}
	}()

	id := running.StorageID()
	maxShards := f.maxShards
	if maxShards <= 0 {
		maxShards = -1 // the flag's 0 (no limit) is the option's negative
	}
	opts := f.serverOptions(tlsConf)
	opts.Authenticate = authn
	opts.Logger, opts.Metrics, opts.StorageID = log.WithName("server"), metrics, id[:]
	srv := server.New(server.NewStoreShards(store, server.StoreShardsOptions{MaxShards: maxShards, Metrics: metrics}), opts)
	pl, err := net.Listen("tcp", f.listen)
	if err != nil {
		return err
	}
	hl, err := net.Listen("tcp", f.http)
	if err != nil {
		_ = pl.Close()
		return err
	}
	readiness := func() error {
		if !srv.Ready() {
			return errors.New("not ready: not serving")
		}
		return store.SpaceErr() // storage full: appends refused, reads served
	}
	var handler http.Handler
	var metricsSrv *http.Server
	if f.metricsListen != "" {
		ml, err := net.Listen("tcp", f.metricsListen)
		if err != nil {
			_ = pl.Close()
			_ = hl.Close()
			return err
		}
		ml = server.LimitHTTPListener(ml, 0)
		if tlsConf != nil {
			ml = tls.NewListener(ml, tlsConf)
		}
		metricsSrv = server.NewHTTPServer(server.MetricsHandler(reg))
		go func() { _ = metricsSrv.Serve(ml) }()
		defer func() { _ = metricsSrv.Close() }()
		handler = server.HealthHandler(readiness)
	} else {
		handler = server.HTTPHandlerWithReason(readiness, reg)
	}
	if f.pprof {
		handler = server.WithProfiles(handler)
	}
	httpSrv := server.NewHTTPServer(handler)
	served := make(chan error, 1)
	go func() { served <- srv.Serve(pl) }()
	if f.maintainInterval > 0 {
		go maintain(cmd.Context(), log.WithName("maintain"), store, maintMetrics, f.maintainInterval)
	}
	go func() { _ = httpSrv.Serve(server.LimitHTTPListener(hl, 0)) }()

	hello, _ := json.Marshal(map[string]string{"msg": "serving", "listen": pl.Addr().String(), "http": hl.Addr().String(),
		"storageID": id.String(), "fsync": mode.String(), "decision": running.Decision().Reason.String()})
	_, _ = fmt.Fprintln(cmd.OutOrStdout(), string(hello))
	log.Info("serving", "listen", pl.Addr().String(), "http", hl.Addr().String(), "storageID", id.String(), "fsync", mode.String())

	select {
	case <-cmd.Context().Done():
	case err := <-served:
		log.Error(err, "protocol listener failed")
		return stopBroker(log, f, srv, store, &storeOpen, running, httpSrv, err)
	}
	log.Info("stopping: draining connections")
	return stopBroker(log, f, srv, store, &storeOpen, running, httpSrv, nil)
}

// standaloneTLS is a standalone broker's TLS from --tls-cert, --tls-key
// and --tls-client-ca: nil without a certificate; with a client CA,
// client certificates are required and verified against it, and a
// connection's principal is a user named by the certificate's subject CN
// (every verified client may do everything: AllowAll).
func standaloneTLS(f brokerFlags) (*tls.Config, func(*tls.ConnectionState) (auth.Principal, error), error) {
	if f.tlsCert == "" && f.tlsKey == "" {
		if f.tlsClientCA != "" {
			return nil, nil, errors.New("--tls-client-ca needs --tls-cert and --tls-key")
		}
		return nil, nil, nil
	}
	cert, err := tls.LoadX509KeyPair(f.tlsCert, f.tlsKey)
	if err != nil {
		return nil, nil, fmt.Errorf("load TLS key pair: %w", err)
	}
	conf := &tls.Config{Certificates: []tls.Certificate{cert}, MinVersion: tls.VersionTLS12}
	if f.tlsClientCA == "" {
		return conf, nil, nil
	}
	b, err := os.ReadFile(f.tlsClientCA)
	if err != nil {
		return nil, nil, fmt.Errorf("read --tls-client-ca: %w", err)
	}
	pool := x509.NewCertPool()
	if !pool.AppendCertsFromPEM(b) {
		return nil, nil, fmt.Errorf("--tls-client-ca %s: no PEM certificate in it", f.tlsClientCA)
	}
	conf.ClientCAs, conf.ClientAuth = pool, tls.RequireAndVerifyClientCert
	return conf, func(cs *tls.ConnectionState) (auth.Principal, error) {
		if cs == nil || len(cs.PeerCertificates) == 0 {
			return auth.Principal{}, errors.New("a client certificate is required")
		}
		return auth.Principal{Kind: auth.User, Name: cs.PeerCertificates[0].Subject.CommonName}, nil
	}, nil
}

// serverOptions are the protocol server's limits from the flags, in both
// modes. A flag's 0 that means "off" is the option's negative.
func (f brokerFlags) serverOptions(tlsConf *tls.Config) server.Options {
	off := func(v int64) int64 {
		if v <= 0 {
			return -1
		}
		return v
	}
	return server.Options{TLS: tlsConf, MaxFrameSize: f.maxFrameSize, MaxInFlightBytes: f.maxInFlight,
		MaxConnections: f.maxConnections, IdleTimeout: time.Duration(off(int64(f.idleTimeout))),
		MaxConnectionsPerAddress: int(off(int64(f.maxPerAddress))), MaxFrameMemory: f.maxFrameMemory,
		FrameMemoryWait: f.frameMemoryWait, PeerQueueBytes: f.peerQueueBytes,
		CounterSnapshotEvery: int(off(int64(f.counterSnapshotEvery))), CounterLimits: counter.Limits{MaxKeys: f.maxCounters},
		GroupLease: f.groupLease, GroupLimits: group.Limits{MaxGroups: f.maxGroups, MaxInFlight: f.groupMaxInFlight},
		MaxDeadLetters: f.maxDeadLetters}
}

// stopBroker drains the server, closes (and so syncs) the store and records
// the clean stop; /live stays up until the end.
func stopBroker(log logr.Logger, f brokerFlags, srv *server.Server, store *logstore.Store, storeOpen *bool,
	running *datadir.Running, httpSrv *http.Server, cause error) error {
	ctx, cancel := context.WithTimeout(context.Background(), f.shutdownTimeout)
	defer cancel()
	if err := srv.Shutdown(ctx); err != nil {
		log.Error(err, "drain did not finish; connections closed")
	}
	*storeOpen = false
	if err := store.Close(); err != nil {
		_ = httpSrv.Close()
		return errors.Join(cause, fmt.Errorf("close log store: %w (no clean stop recorded)", err))
	}
	if cause == nil {
		if err := running.MarkCleanStop(); err != nil {
			_ = httpSrv.Close()
			return fmt.Errorf("record clean stop: %w", err)
		}
		log.Info("clean stop recorded")
	}
	_ = httpSrv.Shutdown(ctx)
	return cause
}

// maintain deletes whole segments below each log's floor (never the active
// one, so the floor-setting trim record survives [TR-6]) and applies each
// log's retention [TR-7] every interval until ctx ends (a standalone
// broker's logs have no other replica). Cluster members run the same pass
// in their replica manager (replica.Options.MaintainInterval), which also
// tells each shard's replication core where its logs now start.
func maintain(ctx context.Context, log logr.Logger, store *logstore.Store, metrics *replica.Metrics, every time.Duration) {
	t := time.NewTicker(every)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
		t0 := time.Now()
		res, err := replica.MaintainStore(ctx, store)
		if ctx.Err() != nil {
			return
		}
		if err != nil {
			log.Error(err, "maintenance")
		}
		replica.ReportPass(log, metrics, res, time.Since(t0))
	}
}
