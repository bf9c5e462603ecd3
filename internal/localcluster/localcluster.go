// Package localcluster runs the whole Felix product on one machine: a real
// kube-apiserver and etcd (envtest, built from pinned modules), the Felix
// CRDs and the VolumeSnapshot CRDs, the operator as a `felix operator`
// process, the podrunner playing the kubelet for broker pods (each a
// `felix broker` process on its own 127.0.0.x address, its volume a
// directory; or a Docker container, with host networking or on a bridge
// network with its own address), and the snapshot controller stand-in.
//
// `make dev` (cmd/felix-dev) and the end-to-end scenarios use it.
package localcluster

import (
	"context"
	"errors"
	"fmt"
	"net/netip"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"syscall"
	"time"

	"github.com/go-logr/logr"
	"k8s.io/client-go/rest"

	"felix.dev/felix/internal/podrunner"
	"felix.dev/felix/internal/snapshots"
	"felix.dev/felix/internal/testenv"
)

// Options configures a local cluster.
type Options struct {
	// StateDir holds the kubeconfig, the volumes, snapshots and logs.
	StateDir string
	// Felix is the felix binary run for the operator and for every pod
	// whose image is felix (required).
	Felix string
	// Namespaces the podrunner and snapshot controller serve; empty: all.
	Namespaces []string
	// DockerImage, when set, runs broker pods as Docker containers of this
	// local image (container mode) instead of local processes.
	DockerImage string
	// DockerNetwork, with DockerImage, runs the containers on this Docker
	// bridge network (created if missing, on DockerSubnet or a free /24 of
	// 172.29.0.0/16, and removed at Stop if created) instead of host
	// networking: each pod has its own address in the subnet, reaches the
	// API server relay at the network's gateway, and can be cut off with
	// Runner.Partition.
	DockerNetwork string
	// DockerSubnet is the subnet DockerNetwork is created with (optional).
	DockerSubnet netip.Prefix
	// PowerLoss, when set, puts the claims of these namespaces (every
	// namespace when the list is empty) on power-loss file systems
	// (internal/powerfs over FUSE; process mode only), so that
	// Runner.PowerCut can cut the power of a broker pod: SIGKILL, the
	// unsynced writes of its claim dropped, the claim mounted again over
	// what was durable and a new boot id, before the runner restarts it.
	PowerLoss *PowerLossOptions
	// Log receives progress.
	Log logr.Logger
}

// PowerLossOptions select the power-loss claims of a local cluster.
type PowerLossOptions struct {
	// Namespaces whose claims are on powerfs; empty: every namespace.
	Namespaces []string
	// Tear tears the last unsynced write of each file at a power cut.
	Tear bool
	// Seed seeds the tearing and the boot ids.
	Seed uint64
	// StrictPOSIX: only a directory's fsync makes its entries durable
	// (default: any fsync does, as on ext4 and xfs; see
	// podrunner.PowerLossConfig).
	StrictPOSIX bool
}

// Cluster is a running local cluster. Stop ends everything it started.
//
// Env.Client and Env.Config reach the API server directly; everything the
// cluster runs (operator, podrunner, snapshot controller, pods) reaches it
// through a relay that APIServerDown and APIServerUp close and reopen, so
// a test can take the API server away from the product while it keeps
// observing through its own client.
type Cluster struct {
	Env    *testenv.Env
	Runner *podrunner.Runner
	// Kubeconfig is the kubeconfig of the operator and the pods (through
	// the relay).
	Kubeconfig string
	StateDir   string

	relay    *apiRelay
	log      logr.Logger
	cancel   context.CancelFunc
	done     chan struct{}
	operator *exec.Cmd
	opExited chan struct{}
}

// Start starts the API server, installs the CRDs, and starts the operator,
// the podrunner and the snapshot controller.
func Start(ctx context.Context, o Options) (*Cluster, error) {
	if o.Felix == "" || o.StateDir == "" {
		return nil, errors.New("localcluster: Felix and StateDir are required")
	}
	log := o.Log
	if log.GetSink() == nil {
		log = logr.Discard()
	}
	if err := os.MkdirAll(filepath.Join(o.StateDir, "logs"), 0o755); err != nil {
		return nil, err
	}
	env, err := testenv.StartEnv()
	if err != nil {
		return nil, err
	}
	c := &Cluster{Env: env, StateDir: o.StateDir, log: log, done: make(chan struct{})}
	c.Kubeconfig = filepath.Join(o.StateDir, "kubeconfig")
	fail := func(err error) (*Cluster, error) {
		c.Stop()
		return nil, err
	}
	u, err := url.Parse(env.Config.Host)
	if err != nil {
		return fail(fmt.Errorf("localcluster: API server address %q: %w", env.Config.Host, err))
	}
	relay, err := newAPIRelay(u.Host)
	if err != nil {
		return fail(err)
	}
	c.relay = relay
	// The API server's certificate names 127.0.0.1, whatever the port.
	cfg := rest.CopyConfig(env.Config)
	cfg.Host = "https://" + relay.addr()
	if err := testenv.WriteKubeconfig(cfg, c.Kubeconfig); err != nil {
		return fail(err)
	}
	if err := snapshots.InstallCRDs(ctx, env.Config); err != nil {
		return fail(fmt.Errorf("snapshot CRDs: %w", err))
	}
	var docker *podrunner.DockerConfig
	if o.DockerImage != "" {
		docker = &podrunner.DockerConfig{Image: o.DockerImage, Network: o.DockerNetwork, Subnet: o.DockerSubnet}
	} else if o.DockerNetwork != "" {
		return fail(errors.New("localcluster: DockerNetwork needs DockerImage"))
	}
	var power *podrunner.PowerLossConfig
	if p := o.PowerLoss; p != nil {
		if docker != nil {
			return fail(errors.New("localcluster: PowerLoss needs process mode (a FUSE claim cannot be handed to a container)"))
		}
		// The broker reads its boot id from the file the runner replaces
		// at every power cut.
		power = &podrunner.PowerLossConfig{Namespaces: p.Namespaces, BootIDFlag: "--boot-id-file", Tear: p.Tear, Seed: p.Seed, StrictPOSIX: p.StrictPOSIX}
	}
	runner, err := podrunner.New(podrunner.Config{
		Docker:     docker,
		PowerLoss:  power,
		RestConfig: cfg, Namespaces: o.Namespaces, StateDir: o.StateDir,
		Images:     map[string]string{"felix": o.Felix},
		Kubeconfig: c.Kubeconfig, MaxProbePeriod: time.Second,
		RestartBackoff: 500 * time.Millisecond, MaxRestartBackoff: 5 * time.Second,
		Logger: log.WithName("podrunner"),
	})
	if err != nil {
		return fail(err)
	}
	c.Runner = runner
	if n, ok := runner.Network(); ok {
		// Containers reach the host at the gateway: the relay listens
		// there too, on the same port, and the runner points the pods'
		// kubeconfigs at it (tls-server-name 127.0.0.1).
		if err := relay.listenAlso(n.Gateway.String()); err != nil {
			return fail(err)
		}
		log.Info("bridge network", "network", n.Name, "subnet", n.Subnet, "gateway", n.Gateway, "created", n.Created)
	}
	snaps, err := snapshots.New(snapshots.Config{RestConfig: cfg, Namespaces: o.Namespaces,
		StateDir: o.StateDir, Freezer: runner, Logger: log.WithName("snapshots")})
	if err != nil {
		return fail(err)
	}
	// Claims restored from a VolumeSnapshot start as a copy of it.
	runner.SetSnapshots(snaps)
	runCtx, cancel := context.WithCancel(context.Background())
	c.cancel = cancel
	errs := make(chan error, 2)
	go func() { errs <- runner.Run(runCtx) }()
	go func() { errs <- snaps.Run(runCtx) }()
	go func() {
		<-errs
		<-errs
		close(c.done)
	}()

	// The operator runs as its own process, as it would in a pod.
	opLog, err := os.Create(filepath.Join(o.StateDir, "logs", "operator.log"))
	if err != nil {
		return fail(err)
	}
	op := exec.Command(o.Felix, "operator", "--metrics-bind-address", "0", "--health-probe-bind-address", "0")
	op.Env = append(os.Environ(), "KUBECONFIG="+c.Kubeconfig)
	op.Stdout, op.Stderr = opLog, opLog
	op.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	if err := op.Start(); err != nil {
		_ = opLog.Close()
		return fail(fmt.Errorf("start operator: %w", err))
	}
	c.operator, c.opExited = op, make(chan struct{})
	go func() { _ = op.Wait(); _ = opLog.Close(); close(c.opExited) }()
	log.Info("local cluster up", "apiserver", env.Config.Host, "kubeconfig", c.Kubeconfig, "stateDir", o.StateDir)
	return c, nil
}

// APIServerDown makes the API server unreachable for everything the
// cluster runs: established connections are cut and new ones refused (as a
// stopped API server's port refuses them) until APIServerUp. The API
// server itself keeps running, so the test's own client (Env.Client) still
// works and no state is lost.
func (c *Cluster) APIServerDown() {
	c.relay.down()
}

// APIServerUp makes the API server reachable again on the same address.
func (c *Cluster) APIServerUp() error {
	if c.relay == nil {
		return errClosedRelay
	}
	return c.relay.up()
}

// Stop stops the operator, every pod process, the controllers and the API
// server.
func (c *Cluster) Stop() {
	if c.operator != nil && c.operator.Process != nil {
		_ = c.operator.Process.Signal(syscall.SIGTERM)
		select {
		case <-c.opExited:
		case <-time.After(10 * time.Second):
			_ = c.operator.Process.Kill()
			<-c.opExited
		}
	}
	if c.cancel != nil {
		c.cancel()
		<-c.done // the runner removed the network it created
	} else if c.Runner != nil {
		if err := c.Runner.Close(); err != nil {
			c.log.Error(err, "remove bridge network")
		}
	}
	if c.relay != nil {
		c.relay.down()
	}
	if c.Env != nil {
		_ = c.Env.Stop()
	}
}
