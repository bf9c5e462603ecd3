package main

import (
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"os"

	"github.com/go-logr/logr"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"github.com/spf13/cobra"
	authenticationv1 "k8s.io/client-go/kubernetes/typed/authentication/v1"
	authorizationv1 "k8s.io/client-go/kubernetes/typed/authorization/v1"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/clientcmd"
	ctrllog "sigs.k8s.io/controller-runtime/pkg/log"

	"felix.dev/felix/broker/datadir"
	"felix.dev/felix/broker/logstore"
	"felix.dev/felix/broker/member"
	"felix.dev/felix/broker/metricsauth"
	"felix.dev/felix/internal/pki"
)

// runMember runs `felix broker` as a cluster member (broker/member).
func runMember(cmd *cobra.Command, f brokerFlags, log logr.Logger, mode logstore.FsyncMode) error {
	if f.cluster == "" || f.broker == "" || f.namespace == "" {
		return errors.New("cluster mode needs --cluster, --broker and --namespace (or run with --standalone)")
	}
	if f.tlsCert != "" || f.tlsKey != "" || f.tlsClientCA != "" {
		return errors.New("--tls-cert, --tls-key and --tls-client-ca are standalone flags; a cluster member reads its certificate from --tls-dir")
	}
	var src *pki.Source
	switch {
	case f.insecureNoTLS && f.tlsDir != "":
		return errors.New("--insecure-no-tls and --tls-dir exclude each other")
	case f.insecureNoTLS:
		if cmd.Flags().Changed("peer-listen") || f.advertisePeer != "" {
			return errors.New("--insecure-no-tls serves no peer port: peers replicate over --listen; drop --peer-listen and --advertise-peer")
		}
		log.Info("INSECURE: --insecure-no-tls: no TLS, no authentication, replication accepted from anyone on the client port; for tests and development only")
	case f.tlsDir == "":
		return errors.New("cluster mode needs --tls-dir (the broker's certificate Secret: tls.crt, tls.key, ca.crt); --insecure-no-tls runs without, for tests and development only")
	default:
		tlog := log.WithName("tls")
		var err error
		src, err = pki.NewSource(pki.SourceOptions{Files: pki.DirFiles(f.tlsDir), OnReload: func(err error) {
			if err != nil {
				tlog.Error(err, "new certificate files refused; still serving the previous ones", "dir", f.tlsDir)
				return
			}
			tlog.Info("certificate files reloaded", "dir", f.tlsDir)
		}})
		if err != nil {
			return fmt.Errorf("--tls-dir %s: %w", f.tlsDir, err)
		}
		tlog.Info("serving with certificate", "identity", src.Self().String())
	}
	// The control-plane client's caches log through controller-runtime's
	// logger; unset, it prints a stack trace into the broker's log 30 s in.
	ctrllog.SetLogger(log.WithName("controller-runtime"))
	restCfg, err := loadRESTConfig(f.kubeconfig)
	if err != nil {
		return err
	}
	pl, err := net.Listen("tcp", f.listen)
	if err != nil {
		return err
	}
	hl, err := net.Listen("tcp", f.http)
	if err != nil {
		_ = pl.Close()
		return err
	}
	var ppl, ml net.Listener
	closeAll := func() {
		for _, l := range []net.Listener{pl, hl, ppl, ml} {
			if l != nil {
				_ = l.Close()
			}
		}
	}
	if src != nil {
		if ppl, err = net.Listen("tcp", f.peerListen); err != nil {
			closeAll()
			return err
		}
	}
	var metricsAuth *metricsauth.Options
	if f.metricsListen != "" {
		if ml, err = net.Listen("tcp", f.metricsListen); err != nil {
			closeAll()
			return err
		}
		if src != nil {
			authn, err := authenticationv1.NewForConfig(restCfg)
			if err != nil {
				closeAll()
				return err
			}
			authz, err := authorizationv1.NewForConfig(restCfg)
			if err != nil {
				closeAll()
				return err
			}
			metricsAuth = &metricsauth.Options{Tokens: authn.TokenReviews(), Access: authz.SubjectAccessReviews()}
		}
	}
	addr := func(l net.Listener) string {
		if l == nil {
			return ""
		}
		return l.Addr().String()
	}
	reg := prometheus.NewRegistry()
	reg.MustRegister(collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}))
	out := cmd.OutOrStdout()
	return member.Run(cmd.Context(), member.Config{
		DataDir: f.dataDir, Fsync: mode, FsyncInterval: f.fsyncInterval, CommitLogValues: f.batchesInLog,
		Listen: pl, HTTP: hl, Advertise: f.advertise,
		PeerListen: ppl, AdvertisePeer: f.advertisePeer, Metrics: ml, MetricsAuth: metricsAuth,
		PeerMaxConnections: f.peerMaxConns, PeerMaxConnectionsPerAddress: f.peerMaxPerAddress,
		TLS: src, Insecure: f.insecureNoTLS,
		REST: restCfg, Namespace: f.namespace, Cluster: f.cluster, Broker: f.broker,
		HeartbeatInterval: f.heartbeatInterval, NodeExpiry: f.nodeExpiry, PassInterval: f.passInterval, ReportRefresh: f.reportRefresh,
		BootIDPath: f.bootIDFile, MaintainInterval: f.maintainInterval, SegmentRecords: f.segmentRecords,
		MinFreeBytes: uint64(f.minFree), SpaceCheckInterval: f.spaceInterval,
		Registry: reg, Profiles: f.pprof, ShutdownTimeout: f.shutdownTimeout, Log: log,
		ServerOptions: f.serverOptions(nil),
		Started: func(id datadir.StorageID, inc int64, d datadir.Decision) {
			hello, _ := json.Marshal(map[string]any{"msg": "serving", "listen": pl.Addr().String(), "http": hl.Addr().String(),
				"peer": addr(ppl), "metrics": addr(ml), "storageID": id.String(), "incarnation": inc, "fsync": mode.String(), "decision": d.Reason.String()})
			_, _ = fmt.Fprintln(out, string(hello))
		},
	})
}

// loadRESTConfig uses --kubeconfig, then $KUBECONFIG, then the in-cluster
// service account.
func loadRESTConfig(path string) (*rest.Config, error) {
	if path == "" {
		path = os.Getenv("KUBECONFIG")
	}
	if path != "" {
		return clientcmd.BuildConfigFromFlags("", path)
	}
	return rest.InClusterConfig()
}
