package main

import (
	"crypto/tls"
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"os"

	"github.com/go-logr/logr"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"github.com/spf13/cobra"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/clientcmd"
	ctrllog "sigs.k8s.io/controller-runtime/pkg/log"

	"felix.dev/felix/broker/datadir"
	"felix.dev/felix/broker/logstore"
	"felix.dev/felix/broker/member"
)

// runMember runs `felix broker` as a cluster member (broker/member).
func runMember(cmd *cobra.Command, f brokerFlags, log logr.Logger, mode logstore.FsyncMode, tlsConf *tls.Config) error {
	if f.cluster == "" || f.broker == "" || f.namespace == "" {
		return errors.New("cluster mode needs --cluster, --broker and --namespace (or run with --standalone)")
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
	reg := prometheus.NewRegistry()
	reg.MustRegister(collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}))
	out := cmd.OutOrStdout()
	return member.Run(cmd.Context(), member.Config{
		DataDir: f.dataDir, Fsync: mode, FsyncInterval: f.fsyncInterval, CommitLogValues: f.batchesInLog,
		Listen: pl, HTTP: hl, Advertise: f.advertise,
		REST: restCfg, Namespace: f.namespace, Cluster: f.cluster, Broker: f.broker,
		HeartbeatInterval: f.heartbeatInterval, NodeExpiry: f.nodeExpiry, PassInterval: f.passInterval, ReportRefresh: f.reportRefresh,
		BootIDPath: f.bootIDFile, MaintainInterval: f.maintainInterval, SegmentRecords: f.segmentRecords,
		MinFreeBytes: uint64(f.minFree), SpaceCheckInterval: f.spaceInterval,
		Registry: reg, Profiles: f.pprof, ShutdownTimeout: f.shutdownTimeout, Log: log,
		ServerOptions: f.serverOptions(tlsConf),
		Started: func(id datadir.StorageID, inc int64, d datadir.Decision) {
			hello, _ := json.Marshal(map[string]any{"msg": "serving", "listen": pl.Addr().String(), "http": hl.Addr().String(),
				"storageID": id.String(), "incarnation": inc, "fsync": mode.String(), "decision": d.Reason.String()})
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
