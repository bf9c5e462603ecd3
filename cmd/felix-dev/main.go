// Command felix-dev runs the whole Felix product on one machine, with no
// Kubernetes cluster: a real kube-apiserver and etcd (built by
// hack/build-envtest.sh) with the Felix CRDs, the operator, and a
// process-runner that plays the kubelet for broker pods (each a `felix
// broker` process on its own 127.0.0.x address, its volume a directory). It
// applies the samples (a 5-broker FelixCluster, two FelixStreams and a
// nightly FelixScheduledBackup), makes
// two FelixUsers for the CLI (demoUsers) and writes their certificate
// Secrets under <state-dir>/users/<name>/ (tls.crt, tls.key, ca.crt: the
// layout of the CLI's --tls-dir), waits until every shard has a leader,
// prints the commands to try, and runs until interrupted.
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
	apierrors "k8s.io/apimachinery/pkg/api/errors"
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
	}
	var demoCluster felixv1.FelixCluster
	if err := c.Env.Client.Get(ctx, client.ObjectKey{Namespace: "default", Name: "demo"}, &demoCluster); err != nil {
		if !apierrors.IsNotFound(err) {
			return err
		}
		// Other samples, or none: no demo users, no tour.
		if samples != "" {
			if err := waitShardsLed(ctx, c.Env.Client); err != nil {
				return err
			}
		}
		fmt.Printf("\nFelix is running locally: kube-apiserver %s (logs in %s).\n\n  export KUBECONFIG=%s\n\nPress Ctrl-C to stop.\n",
			c.Env.Config.Host, filepath.Join(stateDir, "logs"), c.Kubeconfig)
		<-ctx.Done()
		return nil
	}
	// The users go in with the cluster, so every broker finds them in
	// its first list of FelixUsers.
	users := demoUsers(stateDir)
	for _, u := range users {
		if err := c.Env.Client.Create(ctx, localcluster.UserObject(u)); err != nil {
			return fmt.Errorf("FelixUser %s: %w", u.Name, err)
		}
	}
	fmt.Printf("applied %s and FelixUsers %s; waiting for brokers and shard leaders ...\n", samples, userNames(users))
	if err := waitShardsLed(ctx, c.Env.Client); err != nil {
		return err
	}
	for _, u := range users {
		if _, err := localcluster.WaitUser(ctx, c.Env.Client, u); err != nil {
			return err
		}
	}
	demo, admin := users[0].Dir, users[1].Dir
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

  kubectl get felixusers                  # demo and demo-admin, their Secrets and expiry

Clients connect over TLS and authenticate with a certificate. The FelixUser
demo may Append, Read and Describe the sample streams (events and
counter-output); demo-admin may also Trim them. Their Secrets are written to:

  %s   (tls.crt, tls.key, ca.crt)
  %s

  export FELIX_TLS_DIR=%s
  export FELIX_BOOTSTRAP=127.0.0.2,127.0.0.3,127.0.0.4   # any brokers (port 7100); the client finds each shard's leader
  bin/felix shards   --stream events -o table          # leader, epoch and replicas of every shard
  bin/felix append   --stream events --shard 0 --payload hello
  bin/felix read     --stream events --shard 0 --from earliest
  bin/felix describe --stream events --shard 0 -o table

  # A trim is conditional on the tail; demo has no Trim grant, so the
  # broker refuses it (NotAuthorized); demo-admin may.
  TAIL=$(bin/felix describe --stream events --shard 0 | sed 's/.*"tail":\([0-9]*\).*/\1/')
  bin/felix trim --stream events --shard 0 --floor 1 --expect-tail $TAIL
  bin/felix trim --tls-dir %s --stream events --shard 0 --floor 1 --expect-tail $TAIL

  LEADER=$(bin/felix shards --stream events | head -1 | sed 's/.*"leader":"\([^"]*\)".*/\1/')
  kubectl delete pod $LEADER             # a follower takes over: kubectl get felixshards -w
  bin/felix append --stream events --shard 0 --payload after   # the client follows to the new leader

Press Ctrl-C to stop.
`, c.Env.Config.Host, filepath.Join(stateDir, "logs"), c.Kubeconfig, demo, admin, demo, admin)
	<-ctx.Done()
	return nil
}

// demoUsers are the FelixUsers make dev creates in the samples' cluster,
// with their Secrets' files under stateDir/users/<name>: demo may append,
// read and describe the sample streams but not trim (the tour shows the
// refusal); demo-admin may also trim them.
func demoUsers(stateDir string) []localcluster.UserOptions {
	rw := []felixv1.StreamOperation{felixv1.OperationAppend, felixv1.OperationRead, felixv1.OperationDescribe}
	all := append(rw[:len(rw):len(rw)], felixv1.OperationTrim)
	user := func(name string, grants []felixv1.StreamGrant) localcluster.UserOptions {
		return localcluster.UserOptions{Namespace: "default", Cluster: "demo", Name: name, Grants: grants,
			Dir: filepath.Join(stateDir, "users", name), Timeout: 3 * time.Minute}
	}
	return []localcluster.UserOptions{
		user("demo", []felixv1.StreamGrant{{Stream: "events", Operations: rw}, {Stream: "counter-output", Operations: rw}}),
		user("demo-admin", []felixv1.StreamGrant{{Stream: "events", Operations: all}, {Stream: "counter-output", Operations: all}}),
	}
}

func userNames(us []localcluster.UserOptions) string {
	names := make([]string, len(us))
	for i, u := range us {
		names[i] = u.Name
	}
	return strings.Join(names, " and ")
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
