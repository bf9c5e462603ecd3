package main

import (
	"fmt"
	"strings"
	"time"

	"github.com/go-logr/logr"
	"github.com/spf13/cobra"
	"github.com/spf13/pflag"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/cache"
	"sigs.k8s.io/controller-runtime/pkg/healthz"
	ctrlmetrics "sigs.k8s.io/controller-runtime/pkg/metrics"
	"sigs.k8s.io/controller-runtime/pkg/metrics/filters"
	metricsserver "sigs.k8s.io/controller-runtime/pkg/metrics/server"

	"felix.dev/felix/controllers"
	"felix.dev/felix/internal/version"
)

// operatorOptions are the flags of `felix operator`.
type operatorOptions struct {
	brokerImage     string
	rollWaitTimeout time.Duration
	metricsAddr     string
	metricsSecure   bool
	metricsCertDir  string
	probeAddr       string
	leaderElect     bool
	leaderElectNS   string
	leaderElectID   string
	watchNamespaces []string
	brokerAuthRole  string
	verbosity       int
	maxClockSkew    time.Duration
}

// newOperatorCmd is `felix operator`: the control plane. It runs every
// Felix reconciler in one controller-runtime manager, optionally with
// leader election so several replicas can stand by.
func newOperatorCmd() *cobra.Command {
	var o operatorOptions
	cmd := &cobra.Command{
		Use:   "operator",
		Short: "Run the Felix operator (the control plane)",
		Long: "Run the Felix operator: it runs broker pods, keeps the registry of brokers (storage id and\n" +
			"incarnation), watches their heartbeats, reads shard leaders' reports and decides placement.",
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if len(o.watchNamespaces) > 0 && !cmd.Flags().Changed("broker-auth-delegator-role") {
				o.brokerAuthRole = ""
			}
			return runOperator(cmd, o)
		},
	}
	f := cmd.Flags()
	f.StringVar(&o.metricsAddr, "metrics-bind-address", ":8443", "address the metrics endpoint binds to (\"0\" disables it)")
	f.BoolVar(&o.metricsSecure, "metrics-secure", true, "serve /metrics over HTTPS to scrapers that present a bearer token allowed to get the /metrics non-resource URL (TokenReview and SubjectAccessReview); false serves plain HTTP to anyone, for development only")
	f.StringVar(&o.metricsCertDir, "metrics-cert-dir", "", "directory holding tls.crt and tls.key for the metrics endpoint (default: a self-signed certificate made at start)")
	f.StringVar(&o.probeAddr, "health-probe-bind-address", ":8081", "address the /healthz and /readyz probes bind to")
	f.BoolVar(&o.leaderElect, "leader-elect", false, "use leader election so that only one operator replica is active")
	f.StringVar(&o.leaderElectNS, "leader-election-namespace", "", "namespace of the leader-election Lease (default: the pod's namespace)")
	f.StringVar(&o.leaderElectID, "leader-election-id", "felix-operator.felix.dev", "name of the leader-election Lease")
	f.StringSliceVar(&o.watchNamespaces, "watch-namespaces", nil, "watch only these namespaces (comma-separated or repeated; default: all namespaces). With a Role per namespace instead of the ClusterRole; see docs/security.md")
	f.StringVar(&o.brokerAuthRole, "broker-auth-delegator-role", controllers.DefaultBrokerAuthDelegatorRole, "ClusterRole whose shipped ClusterRoleBinding of the same name the operator adds each cluster's broker ServiceAccount to, so brokers can authenticate and authorize scrapers of their /metrics by bearer token (\"\": none; the default with --watch-namespaces, whose Roles cannot update ClusterRoleBindings)")
	f.StringSliceVar(&o.watchNamespaces, "namespace", nil, "watch only this namespace")
	_ = f.MarkDeprecated("namespace", "use --watch-namespaces")
	f.SetNormalizeFunc(func(_ *pflag.FlagSet, name string) pflag.NormalizedName {
		if name == "watch-namespace" {
			name = "watch-namespaces"
		}
		return pflag.NormalizedName(name)
	})
	f.DurationVar(&o.maxClockSkew, "max-clock-skew", controllers.DefaultMaxClockSkew, "how far a broker's clock may run ahead of the operator's; a broker without a storage id is counted only from a view its leader took at least this long after it registered")
	f.StringVar(&o.brokerImage, "broker-image", DefaultBrokerImage(), "broker image of FelixClusters without spec.image (the chart sets the operator's own image)")
	f.DurationVar(&o.rollWaitTimeout, "roll-wait-timeout", controllers.DefaultRollWaitTimeout, "how long a rolling update waits for a broker's leaderships to move and its shards to catch up before it restarts the broker anyway (a failover where it must)")
	f.IntVar(&o.verbosity, "v", 0, "log verbosity (0: changes and errors; 1: every reconcile decision)")
	return cmd
}

func runOperator(cmd *cobra.Command, o operatorOptions) error {
	if o.maxClockSkew <= 0 {
		return fmt.Errorf("--max-clock-skew must be positive, got %s", o.maxClockSkew)
	}
	out := cmd.ErrOrStderr()
	logger := newJSONLogger(out, o.verbosity).WithName("operator")
	ctrl.SetLogger(logger)
	cfg, err := ctrl.GetConfig()
	if err != nil {
		return fmt.Errorf("kubeconfig: %w", err)
	}
	mgr, err := ctrl.NewManager(cfg, managerOptions(o, logger))
	if err != nil {
		return fmt.Errorf("manager: %w", err)
	}
	copts := controllerOptions(o)
	// The operator's metrics and felix_build_info, on controller-runtime's
	// registry (served on --metrics-bind-address).
	if copts.Metrics, err = controllers.NewMetrics(ctrlmetrics.Registry, mgr.GetCache()); err != nil {
		return fmt.Errorf("metrics: %w", err)
	}
	if err := controllers.Setup(mgr, copts); err != nil {
		return err
	}
	if err := mgr.AddHealthzCheck("healthz", healthz.Ping); err != nil {
		return err
	}
	if err := mgr.AddReadyzCheck("readyz", healthz.Ping); err != nil {
		return err
	}
	logger.Info("starting felix operator", "leaderElection", o.leaderElect, "metrics", o.metricsAddr, "metricsSecure", o.metricsSecure,
		"probes", o.probeAddr, "watchNamespaces", o.watchNamespaces)
	return mgr.Start(cmd.Context())
}

// managerOptions is the operator's manager: its cache restricted to
// --watch-namespaces, metrics, probes and leader election.
func managerOptions(o operatorOptions, logger logr.Logger) ctrl.Options {
	cacheOpts := controllers.CacheOptions()
	cacheOpts.DefaultNamespaces = watchedNamespaces(o.watchNamespaces)
	return ctrl.Options{
		Scheme:                        controllers.NewScheme(),
		Cache:                         cacheOpts,
		Metrics:                       metricsOptions(o),
		HealthProbeBindAddress:        o.probeAddr,
		LeaderElection:                o.leaderElect,
		LeaderElectionID:              o.leaderElectID,
		LeaderElectionNamespace:       o.leaderElectNS,
		LeaderElectionReleaseOnCancel: true,
		Logger:                        logger,
	}
}

// controllerOptions are the reconcilers' options from the flags.
func controllerOptions(o operatorOptions) controllers.Options {
	return controllers.Options{MaxClockSkew: o.maxClockSkew, BrokerAuthDelegatorRole: o.brokerAuthRole, DefaultBrokerImage: o.brokerImage,
		RollWaitTimeout: o.rollWaitTimeout}
}

// watchedNamespaces is the manager cache's DefaultNamespaces for
// --watch-namespaces: nil (every namespace) when none is named.
func watchedNamespaces(names []string) map[string]cache.Config {
	out := map[string]cache.Config{}
	for _, n := range names {
		if n = strings.TrimSpace(n); n != "" {
			out[n] = cache.Config{}
		}
	}
	if len(out) == 0 {
		return nil
	}
	return out
}

// metricsOptions is the operator's metrics endpoint: HTTPS with
// controller-runtime's authentication and authorization filter unless
// --metrics-secure=false. A scraper needs a token the API server accepts
// (TokenReview) and RBAC get on the /metrics non-resource URL
// (SubjectAccessReview; the felix-metrics-reader ClusterRole grants it).
func metricsOptions(o operatorOptions) metricsserver.Options {
	opts := metricsserver.Options{BindAddress: o.metricsAddr}
	if o.metricsSecure {
		opts.SecureServing = true
		opts.FilterProvider = filters.WithAuthenticationAndAuthorization
		opts.CertDir = o.metricsCertDir
	}
	return opts
}

// DefaultBrokerImage is the operator's default --broker-image: the felix
// image of its own release, felix:<version> (felix:dev for a development
// build, the tag make dev and docker-build give the image).
func DefaultBrokerImage() string { return "felix:" + version.Version }
