package podrunner

import (
	"context"
	"errors"
	"fmt"
	"net/netip"
	"path/filepath"
	"strings"
	"time"

	"github.com/go-logr/logr"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/client-go/rest"
)

// DefaultNodeName is the Node the runner registers and binds pods to.
const DefaultNodeName = "felix-local"

// ErrSnapshotNotReady is returned by a SnapshotSource while the snapshot a
// claim is restored from has no ready content yet; the runner retries.
var ErrSnapshotNotReady = errors.New("podrunner: volume snapshot not ready")

// SnapshotSource finds the content of a ready VolumeSnapshot, so a claim
// whose dataSource is that snapshot can start as a copy of it. The
// internal/snapshots controller implements it.
type SnapshotSource interface {
	// SnapshotDir returns the directory holding the content of the
	// VolumeSnapshot namespace/name, or an error wrapping
	// ErrSnapshotNotReady while it is not ready to use.
	SnapshotDir(ctx context.Context, namespace, name string) (string, error)
}

// Config configures a Runner.
type Config struct {
	// RestConfig reaches the API server; the runner needs to bind, update
	// and delete pods, update pod and PVC status, create events-free Node
	// objects and, with ServiceAccountTokens, request tokens.
	RestConfig *rest.Config
	// Namespaces limits the runner to pods and claims in these namespaces;
	// empty means every namespace.
	Namespaces []string
	// Selector, when set, limits the runner to pods whose labels match it;
	// other pods are neither bound nor run. Claims are bound regardless.
	Selector labels.Selector
	// NodeName is the Node the runner registers and runs pods for
	// (DefaultNodeName when empty). The runner binds every unbound pod it
	// selects to it, as a scheduler would.
	NodeName string
	// NodeLabels are extra labels of the registered Node (e.g.
	// topology.kubernetes.io/zone).
	NodeLabels map[string]string
	// StateDir holds everything the runner writes: pvc/, snapshots/,
	// pods/, logs/ and the address book.
	StateDir string
	// Images maps a container image (e.g. "felix:dev") to the local
	// binary that stands for it. An image is one binary: the binary is the
	// image's entrypoint and replaces command[0]. A key without a tag
	// ("felix") matches every tag of that image and of any registry path
	// ending in it ("ghcr.io/org/felix:v1").
	Images map[string]string
	// Docker, when set, runs every container whose image maps in Images as
	// a Docker container of Docker.Image instead of a local process
	// (container mode): host networking (so the pod keeps its 127.0.0.x
	// address) unless Docker.Network names a bridge network, each volume
	// and the pod directory bind-mounted at the same path, kill = docker
	// kill, freeze = docker pause.
	Docker *DockerConfig
	// Addresses allocates pod IPs; default: an AddressBook over
	// 127.0.0.2-127.0.0.254 stored in StateDir/addresses.json, or in bridge
	// mode one over the network's subnet (gateway excluded) stored in
	// StateDir/addresses-<network>.json. In bridge mode it must hand out
	// addresses of the network's subnet.
	Addresses AddressAllocator
	// Snapshots supplies VolumeSnapshot content for claims restored from a
	// snapshot; nil means such claims stay Pending.
	Snapshots SnapshotSource
	// Kubeconfig, when set, is passed to every process as $KUBECONFIG so
	// it reaches the API server; processes run with its credentials.
	// ServiceAccountTokens overrides it.
	Kubeconfig string
	// ServiceAccountTokens gives every pod a kubeconfig holding a token of
	// its own ServiceAccount (a TokenRequest, refreshed), so its RBAC is
	// enforced as in a cluster. The ServiceAccount must exist.
	ServiceAccountTokens bool
	// RestartBackoff is the first restart delay of a crashed container
	// (default 1s); it doubles up to MaxRestartBackoff (default 30s) and
	// resets when a container ran for BackoffReset (default 60s).
	RestartBackoff, MaxRestartBackoff, BackoffReset time.Duration
	// MaxProbePeriod, when set, caps every probe's periodSeconds (so a
	// local cluster notices readiness quickly).
	MaxProbePeriod time.Duration
	// VolumeRefresh is how often a running pod's Secret and ConfigMap
	// volumes are updated in place from their objects (default
	// DefaultVolumeRefresh; negative: never, the files stay as the pod
	// started with them).
	VolumeRefresh time.Duration
	// ShutdownGrace caps how long the runner waits for processes after
	// SIGTERM when its context ends, before SIGKILL (default 5s).
	ShutdownGrace time.Duration
	// PowerLoss, when set, puts claims on power-loss file systems, so that
	// PowerCut can cut the power of a pod's machine (process mode only).
	PowerLoss *PowerLossConfig
	// Logger receives the runner's log; default: discard.
	Logger logr.Logger
	// Now is the clock for status timestamps and backoff resets; default
	// time.Now.
	Now func() time.Time
}

func (c *Config) withDefaults() (Config, error) {
	out := *c
	if out.RestConfig == nil {
		return out, errors.New("podrunner: Config.RestConfig is required")
	}
	if out.StateDir == "" {
		return out, errors.New("podrunner: Config.StateDir is required")
	}
	abs, err := filepath.Abs(out.StateDir)
	if err != nil {
		return out, fmt.Errorf("podrunner: state dir: %w", err)
	}
	out.StateDir = abs
	// Processes run in their pod's directory, so relative paths would
	// resolve against it: make them absolute now.
	images := make(map[string]string, len(out.Images))
	for image, bin := range out.Images {
		if strings.ContainsRune(bin, filepath.Separator) {
			if bin, err = filepath.Abs(bin); err != nil {
				return out, fmt.Errorf("podrunner: image %s: %w", image, err)
			}
		}
		images[image] = bin
	}
	out.Images = images
	if out.Kubeconfig != "" {
		if out.Kubeconfig, err = filepath.Abs(out.Kubeconfig); err != nil {
			return out, fmt.Errorf("podrunner: kubeconfig: %w", err)
		}
	}
	if out.NodeName == "" {
		out.NodeName = DefaultNodeName
	}
	if out.Addresses == nil && !out.bridge() {
		book, err := NewAddressBook(filepath.Join(out.StateDir, "addresses.json"), 2, 254)
		if err != nil {
			return out, err
		}
		out.Addresses = book
	}
	if out.RestartBackoff <= 0 {
		out.RestartBackoff = time.Second
	}
	if out.MaxRestartBackoff <= 0 {
		out.MaxRestartBackoff = 30 * time.Second
	}
	if out.BackoffReset <= 0 {
		out.BackoffReset = time.Minute
	}
	if out.ShutdownGrace <= 0 {
		out.ShutdownGrace = 5 * time.Second
	}
	if out.Now == nil {
		out.Now = time.Now
	}
	if out.PowerLoss != nil && out.Docker != nil {
		return out, errors.New("podrunner: Config.PowerLoss needs process mode (no Docker)")
	}
	if out.Logger.GetSink() == nil {
		out.Logger = logr.Discard()
	}
	return out, nil
}

// bridge reports whether containers run on a Docker bridge network.
func (c *Config) bridge() bool {
	return c.Docker != nil && c.Docker.Network != ""
}

// binaryFor returns the local binary standing for image.
func (c *Config) binaryFor(image string) (string, bool) {
	if b, ok := c.Images[image]; ok {
		return b, true
	}
	repo := image
	if i := strings.IndexByte(repo, '@'); i >= 0 {
		repo = repo[:i]
	}
	if i := strings.LastIndexByte(repo, ':'); i > strings.LastIndexByte(repo, '/') {
		repo = repo[:i]
	}
	if b, ok := c.Images[repo]; ok {
		return b, true
	}
	if i := strings.LastIndexByte(repo, '/'); i >= 0 {
		b, ok := c.Images[repo[i+1:]]
		return b, ok
	}
	return "", false
}

// ClaimDir is the directory standing for the PersistentVolumeClaim
// namespace/claim under stateDir: stateDir/pvc/<namespace>/<claim>.
func ClaimDir(stateDir, namespace, claim string) string {
	return filepath.Join(stateDir, "pvc", namespace, claim)
}

// LogPath is where the output of every container of pod namespace/name
// goes: stateDir/logs/<namespace>/<name>.log.
func LogPath(stateDir, namespace, name string) string {
	return filepath.Join(stateDir, "logs", namespace, name+".log")
}

// podDir holds a pod's own files (emptyDirs, tmp, token kubeconfig).
func podDir(stateDir, namespace, name string) string {
	return filepath.Join(stateDir, "pods", namespace, name)
}

// DockerConfig configures container mode.
type DockerConfig struct {
	// Image is the local image run for every mapped container image; its
	// entrypoint is the felix binary, so the container's args follow it.
	Image string
	// Docker is the docker CLI; default "docker".
	Docker string
	// Network, when set, runs every container on this user-defined Docker
	// bridge network (bridge mode) instead of host networking: each pod
	// gets its own address in the network's subnet (its status.podIP), the
	// host reaches it there, and the pod reaches the host at the network's
	// gateway (see Runner.Network). New creates the network if it does not
	// exist, and Run removes it when it returns if New created it. Only in
	// bridge mode can Partition cut a pod off the network.
	Network string
	// Subnet is the IPv4 subnet New creates Network with; when unset, the
	// first /24 of 172.29.0.0/16 that overlaps no Docker network and no
	// host interface. An existing network is used with its own subnet.
	Subnet netip.Prefix
}

func (d DockerConfig) dockerCLI() string {
	if d.Docker == "" {
		return "docker"
	}
	return d.Docker
}
