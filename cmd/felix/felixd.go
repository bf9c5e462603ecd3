package main

import (
	"context"
	"errors"
	"fmt"
	"os"
	"sync"
	"time"

	"github.com/spf13/cobra"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/clientcmd"
	ctrlclient "sigs.k8s.io/controller-runtime/pkg/client"

	felixv1 "felix.dev/felix/api/v1alpha1"
	"felix.dev/felix/broker/client"
	"felix.dev/felix/broker/record"
	"felix.dev/felix/felixd"
)

// Exit codes of `felix felixd --once`.
const (
	exitRetired   = 4 // a newer epoch took the workload over
	exitLeaseLost = 5 // the lease renewal failed
)

type felixdFlags struct {
	broker        string
	stream        string
	shard         uint32
	workload      string
	namespace     string
	kubeconfig    string
	identity      string
	streamObject  string
	checkEvery    time.Duration
	snapshotEvery int
	leaseDuration time.Duration
	renewDeadline time.Duration
	retryPeriod   time.Duration
	stepInterval  time.Duration
	timeout       time.Duration
	once          bool
	verbosity     int
	tls           tlsFlags
}

// newFelixdCmd is `felix felixd`: the example lease-holding workload.
func newFelixdCmd() *cobra.Command {
	var f felixdFlags
	cmd := &cobra.Command{
		Use:   "felixd --broker HOST:PORT --stream S --shard N --workload NAME [--namespace NS] [--kubeconfig PATH]",
		Short: "Run an example workload (a counter) under a lease, writing to a fenced stream",
		Long: `Run a counter under the workload's coordination.k8s.io Lease (NS/NAME), writing
its outputs to one shard with tail-conditional writes that carry the lease
epoch (felixd, rules [FD-1..4]; docs/felixd.md, docs/rules.md).

On acquiring the lease, and again at least every --check-stream-every while
it holds it, it checks the FelixStream (--stream-object, default --stream,
in --namespace) is fenced, with retention off and ack Quorum or All [FD-4];
a refusal stops it. It rebuilds the counter from the latest snapshot plus
the outputs after it, makes its fenced write and then appends one output
every --step-interval, saving a snapshot and trimming below it every
--snapshot-every outputs.

When a newer epoch takes over it retires; when its renewal fails it stops.
Then it campaigns again, or with --once exits with code 4 (retired) or 5
(lease lost). Logs are JSON lines on stderr.`,
		Example: `  felix felixd --broker 127.0.0.1:7100 --stream orders --shard 0 --workload counter --snapshot-every 100`,
		Args:    cobra.NoArgs,
		RunE:    func(cmd *cobra.Command, _ []string) error { return runFelixd(cmd, f) },
	}
	fl := cmd.Flags()
	fl.StringVar(&f.broker, "broker", "127.0.0.1:7100", "broker address HOST:PORT")
	fl.StringVar(&f.stream, "stream", "", "stream name (required)")
	fl.Uint32Var(&f.shard, "shard", 0, "shard number")
	fl.StringVar(&f.workload, "workload", "", "workload name: the name of its Lease (required)")
	fl.StringVar(&f.namespace, "namespace", "default", "namespace of the Lease and the FelixStream")
	fl.StringVar(&f.kubeconfig, "kubeconfig", "", "kubeconfig file (default: $KUBECONFIG, ~/.kube/config or in-cluster)")
	fl.StringVar(&f.identity, "identity", "", "this holder's identity in the Lease (default: HOSTNAME-PID)")
	fl.StringVar(&f.streamObject, "stream-object", "", "FelixStream checked for [FD-4] (default: --stream)")
	fl.DurationVar(&f.checkEvery, "check-stream-every", felixd.DefaultCheckStreamEvery, "re-read the FelixStream at least this often while holding the lease; writes pause while it cannot be read [FD-4]")
	fl.IntVar(&f.snapshotEvery, "snapshot-every", 100, "outputs between snapshots (0: never)")
	fl.DurationVar(&f.leaseDuration, "lease-duration", 15*time.Second, "how long others wait on an unchanged lease before taking it over")
	fl.DurationVar(&f.renewDeadline, "renew-deadline", 10*time.Second, "how long renewal may fail before the lease is given up")
	fl.DurationVar(&f.retryPeriod, "retry-period", 2*time.Second, "interval between acquisition attempts and renewals")
	fl.DurationVar(&f.stepInterval, "step-interval", felixd.DefaultStepInterval, "pause between outputs")
	fl.DurationVar(&f.timeout, "timeout", 10*time.Second, "deadline of each broker dial (the first, and each redial after the broker closed the connection)")
	fl.BoolVar(&f.once, "once", false, "exit after retiring (code 4) or losing the lease (code 5) instead of campaigning again")
	fl.IntVarP(&f.verbosity, "v", "v", 0, "log verbosity")
	f.tls.register(cmd)
	return cmd
}

func runFelixd(cmd *cobra.Command, f felixdFlags) error {
	if f.stream == "" || f.workload == "" {
		return errors.New("--stream and --workload are required")
	}
	log := newJSONLogger(cmd.ErrOrStderr(), f.verbosity).
		WithName("felixd").WithValues("workload", f.workload)
	if f.identity == "" {
		host, _ := os.Hostname()
		f.identity = fmt.Sprintf("%s-%d", host, os.Getpid())
	}
	restCfg, err := loadKubeconfig(f.kubeconfig)
	if err != nil {
		return err
	}
	cs, err := kubernetes.NewForConfig(restCfg)
	if err != nil {
		return err
	}
	// The FelixStream is always checked [FD-4]: the Lease needs an API
	// server anyway, so a standalone broker's stream is described there
	// too (a FelixStream with fenced: true), and there is no way to skip it.
	scheme := runtime.NewScheme()
	if err := felixv1.AddToScheme(scheme); err != nil {
		return err
	}
	reader, err := ctrlclient.New(restCfg, ctrlclient.Options{Scheme: scheme})
	if err != nil {
		return err
	}
	name := f.streamObject
	if name == "" {
		name = f.stream
	}
	key := types.NamespacedName{Namespace: f.namespace, Name: name}
	check := func(ctx context.Context) error { return felixd.CheckStream(ctx, reader, key) }

	tlsSet, err := f.tls.resolve(os.Getenv)
	if err != nil {
		return usageErr(cmd, err)
	}
	ct, err := tlsSet.load(hostOf(f.broker))
	if err != nil {
		return usageErr(cmd, err)
	}
	// The broker closes a connection idle for its --idle-timeout (a
	// standby campaigning for the lease sends nothing), so the log dials
	// again when it finds its connection closed, resending only what is
	// safe to resend (docs/felixd.md). Every dial reads the certificate
	// files again, so a renewed client certificate (a mounted FelixUser
	// Secret updated in place) is used from the next connection on; if
	// they do not load, the last good ones are kept.
	var ctMu sync.Mutex
	dial := func(ctx context.Context) (*client.Client, error) {
		ctMu.Lock()
		if fresh, err := tlsSet.load(hostOf(f.broker)); err != nil {
			log.Error(err, "reload client certificate files; keeping the last good ones")
		} else {
			ct = fresh
		}
		opts := ct.options()
		ctMu.Unlock()
		dctx, cancel := context.WithTimeout(ctx, f.timeout)
		defer cancel()
		return client.Dial(dctx, f.broker, opts)
	}
	shardLog, err := felixd.NewRedialingClientLog(cmd.Context(), dial, record.ShardID{Stream: f.stream, Shard: f.shard},
		log.WithName("broker"))
	if err != nil {
		return err
	}
	defer func() { _ = shardLog.Close() }()
	for {
		lease, err := felixd.NewLease(felixd.LeaseConfig{Client: cs.CoordinationV1(), Namespace: f.namespace, Name: f.workload,
			Identity: f.identity, LeaseDuration: f.leaseDuration, RenewDeadline: f.renewDeadline, RetryPeriod: f.retryPeriod,
			Logger: log.WithName("lease")})
		if err != nil {
			return err
		}
		err = felixd.Run(cmd.Context(), felixd.RunConfig{Lease: lease, Log: shardLog, Workload: &felixd.Counter{}, CheckStream: check,
			CheckStreamEvery: f.checkEvery, SnapshotEvery: f.snapshotEvery, StepInterval: f.stepInterval, Logger: log})
		switch {
		case err == nil:
			return nil
		case errors.Is(err, felixd.ErrRetired):
			log.Info("retired: a newer epoch holds the workload", "once", f.once)
			if f.once {
				return &exitError{code: exitRetired, err: err}
			}
		case errors.Is(err, felixd.ErrLeaseLost):
			log.Info("lease lost", "err", err.Error(), "once", f.once)
			if f.once {
				return &exitError{code: exitLeaseLost, err: err}
			}
		default:
			return err
		}
	}
}

// loadKubeconfig loads path, or with an empty path the default rules
// ($KUBECONFIG, ~/.kube/config, then in-cluster).
func loadKubeconfig(path string) (*rest.Config, error) {
	rules := clientcmd.NewDefaultClientConfigLoadingRules()
	rules.ExplicitPath = path
	cfg, err := clientcmd.NewNonInteractiveDeferredLoadingClientConfig(rules, &clientcmd.ConfigOverrides{}).ClientConfig()
	if err != nil {
		return nil, fmt.Errorf("kubeconfig: %w", err)
	}
	return cfg, nil
}
