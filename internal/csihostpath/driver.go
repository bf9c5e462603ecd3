// Package csihostpath is a small CSI driver whose volumes are directories
// of one node and whose snapshots are copies of those directories. It is
// test infrastructure for the real-node cluster (docs/csi-hostpath.md):
// PersistentVolumeClaims and VolumeSnapshots on a single node, with none of
// the guarantees of real storage (no capacity enforcement, no isolation
// between volumes beyond directories, snapshots not atomic).
//
// A Driver implements the CSI Identity, Controller and Node services
// (github.com/container-storage-interface/spec) over one state directory;
// Registrar implements the kubelet's plugin registration service so the
// node plugin needs no node-driver-registrar sidecar.
package csihostpath

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"net"
	"os"
	"path/filepath"
	"sync"

	"github.com/container-storage-interface/spec/lib/go/csi"
	"github.com/go-logr/logr"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
)

// DefaultDriverName is the CSI driver name the manifests
// (hack/k8s/csi/) use.
const DefaultDriverName = "hostpath.csi.felix.dev"

// Config configures a Driver.
type Config struct {
	// Name is the CSI driver name (GetPluginInfo); DefaultDriverName if empty.
	Name string
	// Version is reported by GetPluginInfo; "dev" if empty.
	Version string
	// StateDir is the absolute directory holding volumes/ and snapshots/.
	// The controller and node plugins of one node must share it.
	StateDir string
	// NodeID is the node's name, reported by NodeGetInfo and used as the
	// value of the topology key. Required by the Node service; when set,
	// created volumes are accessible from this node only.
	NodeID string
	// KubeletDir, if set, is the kubelet's root directory: NodePublishVolume
	// refuses a target path outside it.
	KubeletDir string
	// Mounter does the node's bind mounts; the mount(2) based
	// SystemMounter if nil.
	Mounter Mounter
	// Log receives one line per failed call and, at V(1), per call.
	Log logr.Logger
}

// DefaultCapacityBytes is the capacity recorded for a volume whose request
// gives no size. Capacities are recorded, never enforced.
const DefaultCapacityBytes = 1 << 30

// Driver serves the CSI services over its state directory. Its methods are
// safe for concurrent use: controller operations are serialised by one
// mutex, node operations by another.
type Driver struct {
	csi.UnimplementedIdentityServer
	csi.UnimplementedControllerServer
	csi.UnimplementedNodeServer

	cfg    Config
	store  *store
	ctrlMu sync.Mutex
	nodeMu sync.Mutex
}

// New opens (creating if needed) the state directory of cfg and returns a
// driver over it.
func New(cfg Config) (*Driver, error) {
	if cfg.Name == "" {
		cfg.Name = DefaultDriverName
	}
	if cfg.Version == "" {
		cfg.Version = "dev"
	}
	if cfg.Mounter == nil {
		cfg.Mounter = SystemMounter{}
	}
	if cfg.KubeletDir != "" {
		if !filepath.IsAbs(cfg.KubeletDir) {
			return nil, fmt.Errorf("kubelet directory %q is not absolute", cfg.KubeletDir)
		}
		cfg.KubeletDir = filepath.Clean(cfg.KubeletDir)
	}
	s, err := newStore(cfg.StateDir)
	if err != nil {
		return nil, err
	}
	return &Driver{cfg: cfg, store: s}, nil
}

// TopologyKey is the topology segment key of this driver's nodes and
// volumes: "topology.<driver name>/node", valued with the node id.
func (d *Driver) TopologyKey() string { return "topology." + d.cfg.Name + "/node" }

// Services selects the CSI services Register puts on a server.
type Services struct {
	Controller bool
	Node       bool
}

// Register puts the Identity service and the selected others on s.
func (d *Driver) Register(s grpc.ServiceRegistrar, which Services) {
	csi.RegisterIdentityServer(s, d)
	if which.Controller {
		csi.RegisterControllerServer(s, d)
	}
	if which.Node {
		csi.RegisterNodeServer(s, d)
	}
}

// LoggingInterceptor logs every call at V(1) and every failed call at
// error level on log.
func LoggingInterceptor(log logr.Logger) grpc.UnaryServerInterceptor {
	return func(ctx context.Context, req any, info *grpc.UnaryServerInfo, handler grpc.UnaryHandler) (any, error) {
		resp, err := handler(ctx, req)
		if err != nil {
			log.Error(err, "call failed", "method", info.FullMethod, "code", status.Code(err).String())
		} else {
			log.V(1).Info("call", "method", info.FullMethod)
		}
		return resp, err
	}
}

// ListenUnix listens on the unix socket path, creating its directory and
// replacing a socket a previous run left behind (anything else at path is
// an error).
func ListenUnix(path string) (net.Listener, error) {
	if err := os.MkdirAll(filepath.Dir(path), 0o750); err != nil {
		return nil, err
	}
	if fi, err := os.Lstat(path); err == nil {
		if fi.Mode()&fs.ModeSocket == 0 {
			return nil, fmt.Errorf("%s exists and is not a socket", path)
		}
		if err := os.Remove(path); err != nil {
			return nil, err
		}
	}
	return net.Listen("unix", path)
}

// grpcError maps the store's and the OS's errors to gRPC status errors;
// a status error passes through.
func grpcError(err error) error {
	if err == nil {
		return nil
	}
	if _, ok := status.FromError(err); ok {
		return err
	}
	switch {
	case errors.Is(err, ErrNotFound): // ErrInvalidID too
		return status.Error(codes.NotFound, err.Error())
	default:
		return status.Error(codes.Internal, err.Error())
	}
}

// GetPluginInfo returns the driver's name and version.
func (d *Driver) GetPluginInfo(context.Context, *csi.GetPluginInfoRequest) (*csi.GetPluginInfoResponse, error) {
	return &csi.GetPluginInfoResponse{Name: d.cfg.Name, VendorVersion: d.cfg.Version}, nil
}

// GetPluginCapabilities reports the Controller service and topology
// (volumes are accessible from the node that holds them).
func (d *Driver) GetPluginCapabilities(context.Context, *csi.GetPluginCapabilitiesRequest) (*csi.GetPluginCapabilitiesResponse, error) {
	svc := func(t csi.PluginCapability_Service_Type) *csi.PluginCapability {
		return &csi.PluginCapability{Type: &csi.PluginCapability_Service_{Service: &csi.PluginCapability_Service{Type: t}}}
	}
	return &csi.GetPluginCapabilitiesResponse{Capabilities: []*csi.PluginCapability{
		svc(csi.PluginCapability_Service_CONTROLLER_SERVICE),
		svc(csi.PluginCapability_Service_VOLUME_ACCESSIBILITY_CONSTRAINTS),
	}}, nil
}

// Probe reports ready while the state directory is readable.
func (d *Driver) Probe(context.Context, *csi.ProbeRequest) (*csi.ProbeResponse, error) {
	if _, err := os.Stat(d.store.kindDir(volumePrefix)); err != nil {
		return nil, status.Errorf(codes.FailedPrecondition, "state directory: %v", err)
	}
	return &csi.ProbeResponse{}, nil
}
