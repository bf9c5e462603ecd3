package member

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"net"
	"net/http"
	"path/filepath"
	"sync/atomic"
	"time"

	"github.com/go-logr/logr"
	"github.com/prometheus/client_golang/prometheus"
	"k8s.io/client-go/rest"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"felix.dev/felix/broker/auth"
	"felix.dev/felix/broker/controlplane"
	"felix.dev/felix/broker/datadir"
	"felix.dev/felix/broker/logstore"
	"felix.dev/felix/broker/metricsauth"
	"felix.dev/felix/broker/replica"
	"felix.dev/felix/broker/replication"
	"felix.dev/felix/broker/server"
	"felix.dev/felix/internal/pki"
	"felix.dev/felix/internal/version"
)

// LogStoreDir is the log store's directory inside the data directory.
const LogStoreDir = "logstore"

// Config configures a cluster member.
type Config struct {
	// DataDir is the broker's data directory (required).
	DataDir string
	// Fsync and FsyncInterval are the durability mode of the log store.
	Fsync         logstore.FsyncMode
	FsyncInterval time.Duration
	// CommitLogValues keeps each batch only in the commit log under
	// FsyncOnCommit (logstore.Options.CommitLogValues).
	CommitLogValues bool
	// Listen is the client protocol listener (TLS with TLS set); required.
	// Insecure, peers replicate over it too.
	Listen net.Listener
	// PeerListen is the peer (replication) listener, served with mutual
	// TLS to the cluster's brokers only; required unless Insecure.
	PeerListen net.Listener
	// HTTP is the plain listener for /live and /ready (and, Insecure
	// without Metrics, /metrics); required.
	HTTP net.Listener
	// Metrics, when set, serves /metrics: over HTTPS with TLS's
	// certificate to scrapers that authenticate (MetricsAuth), or, Insecure,
	// in plain HTTP. Nil and secure: /metrics is not served.
	Metrics net.Listener
	// MetricsAuth admits /metrics scrapers (required with Metrics unless
	// Insecure): see metricsauth. Its Certificate check is set by the
	// member when nil.
	MetricsAuth *metricsauth.Options
	// Advertise is the host:port clients reach this broker on (registered
	// as status.address); empty means the Listen address.
	Advertise string
	// AdvertisePeer is the host:port peers dial for replication
	// (registered as status.peerAddress); empty means the PeerListen
	// address. Unused when Insecure.
	AdvertisePeer string
	// TLS is the broker's certificate, key and trust bundle, reloaded on
	// change (pki.Source over --tls-dir); required unless Insecure.
	TLS *pki.Source
	// Insecure runs without TLS and without authentication: no peer port,
	// replication over the client port from anyone, every client allowed
	// everything, /metrics in plain HTTP. For tests and development only
	// (--insecure-no-tls); the operator never runs brokers so.
	Insecure bool

	// REST reaches the API server; Namespace, Cluster and Broker name this
	// broker's FelixBroker.
	REST                       *rest.Config
	Namespace, Cluster, Broker string
	// HeartbeatInterval and NodeExpiry are the cluster's timings.
	HeartbeatInterval, NodeExpiry time.Duration
	// BootIDPath is read for the current boot id ([ID-3]); empty means
	// /proc/sys/kernel/random/boot_id. Tests point it elsewhere to stand
	// for a machine restart.
	BootIDPath string
	// PassInterval is the replication pass interval (replica default when 0).
	PassInterval time.Duration
	// ReportRefresh is how often a shard report whose placement did not
	// change is rewritten, carrying its positions
	// (controlplane.DefaultReportRefresh when 0).
	ReportRefresh time.Duration
	// MaintainInterval is the time between maintenance passes: whole
	// segments below each log's floor are deleted and each stream's
	// retention applied (replica.DefaultMaintainInterval when 0; negative:
	// never).
	MaintainInterval time.Duration
	// SegmentRecords is the segment size of logs created from now on
	// (logstore.DefaultSegmentRecords when 0); tests make it small.
	SegmentRecords uint64
	// MinFreeBytes and SpaceCheckInterval are the log store's free-space
	// floor and how often it is measured (logstore.Options).
	MinFreeBytes       uint64
	SpaceCheckInterval time.Duration

	// Registry receives the broker's metrics; nil makes a new one.
	Registry *prometheus.Registry
	// Profiles also serves Go's runtime profiles under /debug/pprof/
	// (server.WithProfiles): on the metrics port, behind its check, or,
	// Insecure, on HTTP.
	Profiles bool
	// ServerOptions are passed to the protocol server (Shards, StorageID,
	// Replication and Metrics are set by the member).
	ServerOptions server.Options
	// PeerMaxConnections and PeerMaxConnectionsPerAddress bound the peer
	// port's connections; zero means DefaultPeerMaxConnections and
	// DefaultPeerMaxConnectionsPerAddress.
	PeerMaxConnections, PeerMaxConnectionsPerAddress int
	// ShutdownTimeout bounds the drain on stop.
	ShutdownTimeout time.Duration
	// Log receives progress.
	Log logr.Logger
	// Started, when set, is called once the broker serves, with its storage
	// id and incarnation.
	Started func(storageID datadir.StorageID, incarnation int64, decision datadir.Decision)
}

// ErrInsecure refuses a secure member without its TLS material or peer
// listener (Config.TLS, Config.PeerListen); only Config.Insecure, for
// tests and development, runs without them.
var ErrInsecure = errors.New("member: cluster mode needs TLS (Config.TLS) and a peer listener (Config.PeerListen) unless Insecure")

// ErrWrongIdentity refuses a member whose certificate (Config.TLS) is
// not this broker's: its peers would refuse it anyway.
var ErrWrongIdentity = errors.New("member: certificate identity is not this broker's")

// Run runs the member until ctx ends, then stops cleanly: drain, close the
// replicas and the store (which syncs), record a clean stop. It returns an
// error only if startup failed or the stop was not clean.
func Run(ctx context.Context, cfg Config) error {
	if cfg.DataDir == "" || cfg.Listen == nil || cfg.HTTP == nil || cfg.REST == nil ||
		cfg.Namespace == "" || cfg.Cluster == "" || cfg.Broker == "" {
		return errors.New("member: DataDir, Listen, HTTP, REST, Namespace, Cluster and Broker are required")
	}
	if !cfg.Insecure && (cfg.TLS == nil || cfg.PeerListen == nil) {
		return ErrInsecure
	}
	if !cfg.Insecure {
		want := pki.Identity{Namespace: cfg.Namespace, Cluster: cfg.Cluster, Kind: pki.KindBroker, Name: cfg.Broker}
		if got := cfg.TLS.Self(); got != want {
			return fmt.Errorf("%w: the certificate speaks for %s, this broker is %s", ErrWrongIdentity, got, want)
		}
	}
	log := cfg.Log
	if log.GetSink() == nil {
		log = logr.Discard()
	}
	reg := cfg.Registry
	if reg == nil {
		reg = prometheus.NewRegistry()
	}
	advertise := cfg.Advertise
	if advertise == "" {
		advertise = cfg.Listen.Addr().String()
	}
	var advertisePeer string
	if !cfg.Insecure {
		advertisePeer = cfg.AdvertisePeer
		if advertisePeer == "" {
			advertisePeer = cfg.PeerListen.Addr().String()
		}
	}

	// Health first: /live is up from the start so a probe never restarts a
	// broker that holds for the control plane; /ready follows the server.
	var srvReady atomic.Pointer[server.Server]
	var storeReady atomic.Pointer[logstore.Store]
	ready := func() error {
		s := srvReady.Load()
		if s == nil || !s.Ready() {
			return errors.New("not ready: not serving")
		}
		return storeReady.Load().SpaceErr() // storage full: appends refused, reads served
	}
	httpSrv, metricsSrv, metricsL, err := httpServers(cfg, ready, reg, log)
	if err != nil {
		return err
	}
	go func() { _ = httpSrv.Serve(server.LimitHTTPListener(cfg.HTTP, 0)) }()
	defer func() { _ = httpSrv.Close() }()
	if metricsSrv != nil {
		go func() { _ = metricsSrv.Serve(metricsL) }()
		defer func() { _ = metricsSrv.Close() }()
	}

	dirMode := cfg.Fsync
	if dirMode == 0 {
		dirMode = logstore.FsyncOnCommit
	}
	// Step 1 [ID-1] [ID-3]: local facts.
	dir, err := datadir.Open(cfg.DataDir, datadir.Options{Fsync: dirMode, BootIDPath: cfg.BootIDPath, Logger: log.WithName("datadir")})
	if err != nil {
		return err
	}
	defer func() { _ = dir.Close() }()
	identified, err := dir.Identify()
	if err != nil {
		return err
	}

	cp, err := controlplane.New(controlplane.Config{
		REST: cfg.REST, Namespace: cfg.Namespace, Cluster: cfg.Cluster, Broker: cfg.Broker,
		HeartbeatInterval: cfg.HeartbeatInterval, NodeExpiry: cfg.NodeExpiry, Log: log.WithName("controlplane"),
		PeerAddress: advertisePeer,
	})
	if err != nil {
		return err
	}
	// Step 2 [ID-4]: the current incarnation, before any store opens.
	log.Info("asking the control plane for this broker's incarnation", "broker", cfg.Broker)
	seen, err := cp.CurrentIncarnation(ctx)
	if err != nil {
		return fmt.Errorf("member: current incarnation: %w", err)
	}
	// Step 3 [ID-3]: a control plane ahead of the registration file rotates.
	cps := datadir.ControlPlane{State: datadir.ControlPlaneNoRecord}
	if seen > 0 {
		cps = datadir.ControlPlane{State: datadir.ControlPlaneKnown, Incarnation: datadir.Incarnation(seen)}
	}
	verified, err := identified.CheckIncarnation(cps)
	if err != nil {
		return err
	}
	id := verified.StorageID()
	// Step 4 [ID-2] [ID-4]: register, then record the grant.
	inc, err := cp.Register(ctx, id.String(), seen, advertise)
	if err != nil {
		return fmt.Errorf("member: register: %w", err)
	}
	prepared, err := verified.RecordRegistration(datadir.Incarnation(inc))
	if err != nil {
		return err
	}
	running, err := prepared.MarkRunning()
	if err != nil {
		return err
	}
	decision := running.Decision()
	log.Info("registered", "storageID", id.String(), "incarnation", inc, "decision", decision.Reason.String(), "rotated", decision.Action == datadir.New)

	// Step 5: stores, replication, serving.
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
	if err := reg.Register(version.NewBuildInfoCollector()); err != nil {
		return err
	}
	var tlsMetrics *TLSMetrics
	var peerFailed func(replication.NodeID, error)
	if !cfg.Insecure {
		if tlsMetrics, err = NewTLSMetrics(reg, cfg.TLS); err != nil {
			return err
		}
		peerFailed = tlsMetrics.DialFailed
	}
	store, err := logstore.Open(logstore.Options{Dir: filepath.Join(cfg.DataDir, LogStoreDir), Fsync: cfg.Fsync,
		FsyncInterval: cfg.FsyncInterval, SegmentRecords: cfg.SegmentRecords, ValueThreshold: logstore.BrokerValueThreshold, CommitLogValues: cfg.CommitLogValues,
		LastRun: LastRunOf(identified.Decision()), Logger: log.WithName("logstore"), Metrics: metrics,
		MinFreeBytes: cfg.MinFreeBytes, SpaceCheckInterval: cfg.SpaceCheckInterval})
	if err != nil {
		return err
	}
	if damaged := store.Damaged(); len(damaged) > 0 {
		corruptMetrics.Found(len(damaged))
		if id, inc, err = giveUpDamaged(ctx, log, store, running, damaged, inc, func(ctx context.Context, id datadir.StorageID) (int64, error) {
			return cp.Register(ctx, id.String(), inc, advertise)
		}); err != nil {
			_ = store.Close()
			return err
		}
		decision = running.Decision()
	}
	storeReady.Store(store)
	// Reports carry the consumer groups of the shards this broker leads,
	// read from the client server's group folds at each write (none
	// before it serves).
	reports := cp.NewReportWriter(controlplane.ReportOptions{Refresh: cfg.ReportRefresh,
		Groups: func(shard string) ([]controlplane.GroupPosition, error) {
			s := srvReady.Load()
			if s == nil {
				return nil, errNotServing
			}
			return reportGroups(s, shard)
		}})
	reader, err := client.New(cfg.REST, client.Options{Scheme: controlplane.NewScheme()})
	if err != nil {
		_ = store.Close()
		return err
	}
	resolver := resolver{reader: reader, namespace: cfg.Namespace, cluster: cfg.Cluster, insecure: cfg.Insecure, log: log.WithName("resolver")}
	var peerTLS func(replication.NodeID) *tls.Config
	if !cfg.Insecure {
		peerTLS = PeerDialTLS(cfg.TLS)
	}
	floors := &deletionFloors{}
	mgr, err := replica.NewManager(replica.Options{
		Store: store, Self: replication.NodeID(cfg.Broker), SelfStorageID: id, Incarnation: uint64(inc),
		Resolve: resolver.resolve, ClientAddr: resolver.clientAddr, PeerTLS: peerTLS, PeerConnectFailed: peerFailed, PassInterval: cfg.PassInterval, Logger: log.WithName("replica"),
		MaintainInterval: cfg.MaintainInterval, Metrics: maintMetrics,
		OnReport: func(r replication.Report, viewAt time.Time) {
			name := shardName(r.Shard)
			reports.Set(name, floors.withFloor(name, toShardReport(r, viewAt, time.Now())))
		},
	})
	if err != nil {
		_ = store.Close()
		return err
	}
	// Per-shard gauges, read from the replicas at scrape time.
	shardMetrics := replica.NewShardCollector(mgr)
	if err := reg.Register(shardMetrics); err != nil {
		mgr.Close()
		_ = store.Close()
		return err
	}
	defer reg.Unregister(shardMetrics)
	runCtx, stopRun := context.WithCancel(ctx)
	defer stopRun()
	// Who may do what: the FelixUsers of the cluster and its anonymous
	// access, watched; nothing is served until the first lists arrived.
	var authz auth.Authorizer
	var access *controlplane.AccessWatcher
	if !cfg.Insecure {
		if access, err = cp.NewAccessWatcher(auth.NewTable()); err != nil {
			mgr.Close()
			_ = store.Close()
			return err
		}
		go func() {
			if err := access.Run(runCtx); err != nil && runCtx.Err() == nil {
				log.Error(err, "access watch stopped: every client request is refused (authorization data is stale) until the broker restarts")
			}
		}()
		authz = access.Authorizer()
	}
	so := cfg.ServerOptions
	so.Metrics = metrics
	so.StorageID = id[:]
	cso, pso := ServerOptions(so, mgr.ReplicationHandler(), cfg.TLS, authz)
	cso.Logger = log.WithName("server")
	watcher, err := cp.NewShardWatcher()
	if err != nil {
		mgr.Close()
		_ = store.Close()
		return err
	}
	// Metadata and the ShardUnknown leader hint come from the same watch
	// as the assignments (the client port only).
	cso.Metadata = &metadata{shards: watcher, self: cfg.Broker, addrs: newAddrCache(resolver.clientAddr, time.Now)}
	pso.Metadata = nil
	srv := server.New(mgr.Shards(), cso)
	var peerSrv *server.Server
	if !cfg.Insecure {
		pso.Logger = log.WithName("peer-server")
		pso.OnTLSHandshakeError = tlsMetrics.AcceptFailed
		if cfg.PeerMaxConnections > 0 {
			pso.MaxConnections = cfg.PeerMaxConnections
		}
		if cfg.PeerMaxConnectionsPerAddress > 0 {
			pso.MaxConnectionsPerAddress = cfg.PeerMaxConnectionsPerAddress
		}
		peerSrv = server.New(mgr.Shards(), pso)
	}
	go func() { _ = watcher.Run(runCtx) }()
	// A restarting broker learns the current epochs before it accepts any
	// shipping: nothing is served until the watch has synced and every
	// held shard has been told its epoch.
	if !watcher.WaitForSync(runCtx) {
		mgr.Close()
		_ = store.Close()
		return fmt.Errorf("member: shard watch did not sync: %w", ctx.Err())
	}
	sync := &assignmentSync{mgr: mgr, reports: reports, cp: cp, reader: reader, self: cfg.Broker, namespace: cfg.Namespace, log: log.WithName("assignments"), floors: floors}
	if err := sync.apply(runCtx, watcher); err != nil {
		log.Error(err, "first assignment pass failed; retrying on the next change")
	}
	if access != nil && !access.WaitForSync(runCtx) {
		mgr.Close()
		_ = store.Close()
		return fmt.Errorf("member: access watch (FelixUsers, FelixCluster) did not sync: %w", ctx.Err())
	}
	go func() { _ = reports.Run(runCtx) }()
	go func() { _ = cp.RunHeartbeat(runCtx, reports.Current) }()
	go sync.run(runCtx, watcher)

	served := make(chan error, 2)
	go func() { served <- srv.Serve(cfg.Listen) }()
	if peerSrv != nil {
		go func() { served <- peerSrv.Serve(cfg.PeerListen) }()
	}
	srvReady.Store(srv)
	log.Info("serving", "listen", cfg.Listen.Addr().String(), "advertise", advertise, "advertisePeer", advertisePeer,
		"insecure", cfg.Insecure, "storageID", id.String(), "incarnation", inc)
	if cfg.Started != nil {
		cfg.Started(id, inc, decision)
	}

	var cause error
	select {
	case <-ctx.Done():
	case cause = <-served:
		log.Error(cause, "protocol listener failed")
	}
	log.Info("stopping: draining")
	timeout := cfg.ShutdownTimeout
	if timeout <= 0 {
		timeout = 30 * time.Second
	}
	sctx, cancel := context.WithTimeout(context.Background(), timeout)
	defer cancel()
	if err := srv.Shutdown(sctx); err != nil {
		log.Error(err, "drain did not finish; connections closed")
	}
	if peerSrv != nil {
		if err := peerSrv.Shutdown(sctx); err != nil {
			log.Error(err, "peer drain did not finish; connections closed")
		}
	}
	stopRun()
	mgr.Close()
	if err := store.Close(); err != nil {
		return errors.Join(cause, fmt.Errorf("close log store: %w (no clean stop recorded)", err))
	}
	if cause == nil {
		if err := running.MarkCleanStop(); err != nil {
			return fmt.Errorf("record clean stop: %w", err)
		}
		log.Info("clean stop recorded")
	}
	return cause
}

// httpServers builds the plain probe server (/live, /ready; /metrics
// too when Insecure without a metrics listener) and, with cfg.Metrics,
// the metrics server: HTTPS with the broker's certificate behind the
// scraper check, or plain when Insecure.
func httpServers(cfg Config, ready func() error, reg *prometheus.Registry, log logr.Logger) (probes, metrics *http.Server, metricsL net.Listener, err error) {
	var h http.Handler
	if cfg.Insecure && cfg.Metrics == nil {
		h = server.HTTPHandlerWithReason(ready, reg)
	} else {
		h = server.HealthHandler(ready)
	}
	if cfg.Profiles && cfg.Insecure {
		h = server.WithProfiles(h)
	}
	probes = server.NewHTTPServer(h)
	if cfg.Metrics == nil {
		if !cfg.Insecure {
			log.Info("no metrics listener: /metrics is not served")
		}
		return probes, nil, nil, nil
	}
	mh := server.MetricsHandler(reg)
	if cfg.Profiles && !cfg.Insecure {
		// Profiles reveal internals: a secure member serves them only
		// behind the scraper check.
		mh = server.WithProfiles(mh)
	}
	if cfg.Insecure {
		return probes, server.NewHTTPServer(mh), server.LimitHTTPListener(cfg.Metrics, 0), nil
	}
	if cfg.MetricsAuth == nil {
		return nil, nil, nil, errors.New("member: a metrics listener needs MetricsAuth")
	}
	mo := *cfg.MetricsAuth
	if mo.Certificate == nil {
		mo.Certificate = MetricsCertificate(cfg.TLS)
	}
	if mo.Log.GetSink() == nil {
		mo.Log = log.WithName("metricsauth")
	}
	tc := pki.ClientPortConfig(cfg.TLS)
	metrics = server.NewHTTPServer(metricsauth.New(mo).Wrap(mh))
	return probes, metrics, tls.NewListener(server.LimitHTTPListener(cfg.Metrics, 0), tc), nil
}
