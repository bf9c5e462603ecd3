// Command kubectl-felix is the kubectl plugin of Felix: install it by
// copying the binary onto PATH, then `kubectl felix status`, `shards`,
// `switchover`, `backup` and `restore` act on FelixClusters through the
// Kubernetes API with the current kubeconfig (docs/kubectl-plugin.md).
// It never talks to a broker: every change is an object or an annotation
// the operator acts on.
package main

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/signal"
	"syscall"
	"time"

	"github.com/spf13/cobra"
	eventsv1 "k8s.io/api/events/v1"
	"k8s.io/apimachinery/pkg/runtime"
	clientgoscheme "k8s.io/client-go/kubernetes/scheme"
	"k8s.io/client-go/tools/clientcmd"
	"k8s.io/utils/clock"
	"sigs.k8s.io/controller-runtime/pkg/client"

	felixv1 "felix.dev/felix/api/v1alpha1"
)

// exitError carries the exit code of a failed command.
type exitError struct {
	code int
	err  error
}

func (e *exitError) Error() string { return e.err.Error() }
func (e *exitError) Unwrap() error { return e.err }

// Exit codes besides 0.
const (
	exitFailed  = 1 // the API refused, or what was asked did not happen
	exitUsage   = 2 // bad flags or arguments
	exitTimeout = 3 // --wait ran out before the operator did it
)

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	err := newRootCmd(clock.RealClock{}).ExecuteContext(ctx)
	stop()
	if err != nil {
		fmt.Fprintln(os.Stderr, "error:", err)
		var ee *exitError
		if errors.As(err, &ee) {
			os.Exit(ee.code)
		}
		os.Exit(exitFailed)
	}
}

// kubeFlags are kubectl's connection flags, the ones a plugin is expected
// to honour.
type kubeFlags struct {
	kubeconfig string
	context    string
	namespace  string
}

// env is what a command works with: a client, the namespace and a clock.
type env struct {
	c   client.Client
	ns  string
	clk clock.PassiveClock
}

func newRootCmd(clk clock.PassiveClock) *cobra.Command {
	var kf kubeFlags
	root := &cobra.Command{
		Use:   "kubectl-felix",
		Short: "Felix for kubectl: cluster status, shards, switchovers, backups and restores",
		Long: `kubectl felix acts on Felix clusters through the Kubernetes API, with the
current kubeconfig (or --kubeconfig, --context, --namespace). It never talks
to a broker: a switchover is an annotation and a backup an object, both
carried out by the operator.`,
		SilenceUsage:  true,
		SilenceErrors: true,
	}
	fl := root.PersistentFlags()
	fl.StringVar(&kf.kubeconfig, "kubeconfig", "", "path to the kubeconfig file (default: $KUBECONFIG or ~/.kube/config)")
	fl.StringVar(&kf.context, "context", "", "kubeconfig context to use")
	fl.StringVarP(&kf.namespace, "namespace", "n", "", "namespace (default: the context's)")
	connect := func() (*env, error) { return kf.connect(clk) }
	root.AddCommand(newStatusCmd(connect), newShardsCmd(connect), newSwitchoverCmd(connect), newBackupCmd(connect), newRestoreCmd(connect))
	root.SetFlagErrorFunc(func(_ *cobra.Command, err error) error { return &exitError{code: exitUsage, err: err} })
	return root
}

// connect builds a client from the kubeconfig flags.
func (kf *kubeFlags) connect(clk clock.PassiveClock) (*env, error) {
	rules := clientcmd.NewDefaultClientConfigLoadingRules()
	rules.ExplicitPath = kf.kubeconfig
	overrides := &clientcmd.ConfigOverrides{CurrentContext: kf.context}
	overrides.Context.Namespace = kf.namespace
	cc := clientcmd.NewNonInteractiveDeferredLoadingClientConfig(rules, overrides)
	cfg, err := cc.ClientConfig()
	if err != nil {
		return nil, fmt.Errorf("kubeconfig: %w", err)
	}
	ns, _, err := cc.Namespace()
	if err != nil {
		return nil, fmt.Errorf("kubeconfig namespace: %w", err)
	}
	c, err := client.New(cfg, client.Options{Scheme: newScheme()})
	if err != nil {
		return nil, err
	}
	return &env{c: c, ns: ns, clk: clk}, nil
}

// newScheme knows the Felix kinds and the core ones the plugin reads.
func newScheme() *runtime.Scheme {
	s := runtime.NewScheme()
	for _, add := range []func(*runtime.Scheme) error{clientgoscheme.AddToScheme, felixv1.AddToScheme, eventsv1.AddToScheme} {
		if err := add(s); err != nil {
			panic(err)
		}
	}
	return s
}

// usage wraps a usage error.
func usage(format string, args ...any) error {
	return &exitError{code: exitUsage, err: fmt.Errorf(format, args...)}
}

// pollEvery is how often --wait looks again.
const pollEvery = 500 * time.Millisecond

// waitUntil calls done every pollEvery until it says true or errs, ctx
// ends, or d passes; it returns whether done said true. done gets ctx,
// not a context bounded by d: a look started just before the end of the
// wait runs to its answer (a client-side rate limiter refuses to start a
// request that its context's deadline would cut short).
func waitUntil(ctx context.Context, d time.Duration, done func(context.Context) (bool, error)) (bool, error) {
	deadline := time.Now().Add(d)
	t := time.NewTicker(pollEvery)
	defer t.Stop()
	for {
		ok, err := done(ctx)
		if ok || err != nil || !time.Now().Before(deadline) {
			return ok, err
		}
		select {
		case <-ctx.Done():
			return false, nil
		case <-t.C:
		}
	}
}
