// Command felix-dev runs the whole Felix product on one machine, with no
// Kubernetes cluster: a real kube-apiserver and etcd (built by
// hack/build-envtest.sh) with the Felix CRDs, the operator, and a
// process-runner that plays the kubelet for broker pods (each a `felix
// broker` process on its own 127.0.0.x address, its volume a directory). It
// applies the samples (a 5-broker FelixCluster and two FelixStreams), waits
// until every shard has a leader, prints the commands to try, and runs until
// interrupted.
//
// It is the README's run command (`make dev`).
package main

import (
	"bytes"
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"os/signal"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/go-logr/logr/funcr"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/util/yaml"
	"sigs.k8s.io/controller-runtime/pkg/client"
	ctrllog "sigs.k8s.io/controller-runtime/pkg/log"

	felixv1 "felix.dev/felix/api/v1alpha1"
	"felix.dev/felix/internal/localcluster"
	"felix.dev/felix/internal/testenv"
)

func main() {
	root := testenv.RepoRoot()
	stateDir := flag.String("state-dir", filepath.Join(root, ".felix-dev"), "directory for the kubeconfig, volumes and logs (wiped at start)")
	felix := flag.String("felix", filepath.Join(root, "bin", "felix"), "the felix binary to run for the operator and the brokers")
	samples := flag.String("samples", filepath.Join(root, "config", "samples"), "manifests to apply once the cluster is up (empty: none)")
	verbose := flag.Bool("v", false, "log the runner's progress to stderr too (it always goes to <state-dir>/logs/felix-dev.log)")
	dockerImage := flag.String("docker-image", "", "run broker pods as Docker containers of this local image (container mode)")
	dockerNetwork := flag.String("docker-network", "", "with -docker-image: put every broker container on this Docker bridge network, each with its own address (created if missing, removed at exit if created); empty: host networking")
	flag.Parse()
	if err := run(*stateDir, *felix, *samples, *dockerImage, *dockerNetwork, *verbose); err != nil {
		fmt.Fprintln(os.Stderr, "felix-dev:", err)
		os.Exit(1)
	}
}

func run(stateDir, felix, samples, dockerImage, dockerNetwork string, verbose bool) error {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	if _, err := os.Stat(felix); err != nil {
		return fmt.Errorf("felix binary: %w (run `make build`)", err)
	}
	// A fresh API server each run: old volumes would only confuse it.
	if err := os.RemoveAll(stateDir); err != nil {
		return err
	}
	// The runner's own log goes to <state-dir>/logs/felix-dev.log, and with
	// -v to stderr too.
	if err := os.MkdirAll(filepath.Join(stateDir, "logs"), 0o755); err != nil {
		return err
	}
	devLog, err := os.Create(filepath.Join(stateDir, "logs", "felix-dev.log"))
	if err != nil {
		return err
	}
	defer func() { _ = devLog.Close() }()
	var out io.Writer = devLog
	if verbose {
		out = io.MultiWriter(devLog, os.Stderr)
	}
	var mu sync.Mutex
	log := funcr.NewJSON(func(obj string) {
		mu.Lock()
		defer mu.Unlock()
		_, _ = fmt.Fprintln(out, obj)
	}, funcr.Options{})
	// controller-runtime's own loggers (envtest, and the caches' informers,
	// which log through it) write there too. Unset, controller-runtime
	// prints "log.SetLogger(...) was never called" with a stack trace on
	// the terminal once the cluster has been up for 30 seconds.
	ctrllog.SetLogger(log.WithName("controller-runtime"))
	fmt.Println("starting kube-apiserver, etcd, the operator and the pod runner ...")
	c, err := localcluster.Start(ctx, localcluster.Options{StateDir: stateDir, Felix: felix, DockerImage: dockerImage,
		DockerNetwork: dockerNetwork, Log: log})
	if err != nil {
		return err
	}
	defer func() {
		fmt.Println("\nstopping everything ...")
		c.Stop()
	}()
	if samples != "" {
		if err := applyDir(ctx, c.Env.Client, samples); err != nil {
			return err
		}
		fmt.Printf("applied %s; waiting for brokers and shard leaders ...\n", samples)
		if err := waitShardsLed(ctx, c.Env.Client); err != nil {
			return err
		}
	}
	fmt.Printf(`
Felix is running locally: kube-apiserver %s, the operator, and broker
processes on 127.0.0.x (logs in %s).

Point kubectl at it:

  export KUBECONFIG=%s

Then try:

  kubectl get felixclusters,felixbrokers,felixstreams
  kubectl get felixshards                 # leader, epoch and caught-up count per shard
  kubectl get pods -o wide                # broker pods with their 127.0.0.x addresses
  kubectl describe felixshard events-0    # promotions, id rotations and waits as events

  LEADER=$(kubectl get felixshard events-0 -o jsonpath='{.status.assignment.leader}')
  ADDR=$(kubectl get felixbroker $LEADER -o jsonpath='{.status.address}')
  bin/felix append --broker $ADDR --stream events --shard 0 --payload hello
  bin/felix read   --broker $ADDR --stream events --shard 0 --from earliest
  bin/felix describe --broker $ADDR --stream events --shard 0

  kubectl delete pod $LEADER             # watch a follower take over: kubectl get felixshards -w

Press Ctrl-C to stop.
`, c.Env.Config.Host, filepath.Join(stateDir, "logs"), c.Kubeconfig)
	<-ctx.Done()
	return nil
}

// applyDir creates every object of every YAML file in dir, in the default
// namespace unless the object names one.
func applyDir(ctx context.Context, c client.Client, dir string) error {
	files, err := filepath.Glob(filepath.Join(dir, "*.yaml"))
	if err != nil {
		return err
	}
	for _, f := range files {
		data, err := os.ReadFile(f)
		if err != nil {
			return err
		}
		dec := yaml.NewYAMLOrJSONDecoder(bytes.NewReader(data), 4096)
		for {
			u := &unstructured.Unstructured{}
			if err := dec.Decode(&u.Object); err != nil {
				if errors.Is(err, io.EOF) {
					break
				}
				return fmt.Errorf("%s: %w", f, err)
			}
			if len(u.Object) == 0 {
				continue
			}
			if u.GetNamespace() == "" {
				u.SetNamespace("default")
			}
			if err := c.Create(ctx, u); err != nil {
				return fmt.Errorf("%s: %s/%s: %w", filepath.Base(f), u.GetKind(), u.GetName(), err)
			}
		}
	}
	return nil
}

// waitShardsLed waits until there is at least one FelixShard and every one
// has an assigned leader whose report shows it serving, printing progress.
func waitShardsLed(ctx context.Context, c client.Client) error {
	deadline := time.Now().Add(3 * time.Minute)
	last := ""
	for time.Now().Before(deadline) {
		var shards felixv1.FelixShardList
		if err := c.List(ctx, &shards); err != nil {
			return err
		}
		ready, total := 0, len(shards.Items)
		for _, s := range shards.Items {
			if s.Status.Assignment != nil && s.Status.Report != nil && s.Status.Report.Leader == s.Status.Assignment.Leader {
				ready++
			}
		}
		var brokers felixv1.FelixBrokerList
		if err := c.List(ctx, &brokers); err != nil {
			return err
		}
		up := 0
		for _, b := range brokers.Items {
			if b.Status.State == felixv1.BrokerUp {
				up++
			}
		}
		msg := fmt.Sprintf("  brokers up %d/%d, shards led %d/%d", up, len(brokers.Items), ready, total)
		if msg != last {
			fmt.Println(msg)
			last = msg
		}
		if total > 0 && ready == total {
			return nil
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(500 * time.Millisecond):
		}
	}
	return fmt.Errorf("shards not all led after 3 minutes (%s); see the logs", strings.TrimSpace(last))
}
