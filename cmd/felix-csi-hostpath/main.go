// Command felix-csi-hostpath is the CSI driver of the real-node test
// cluster (docs/csi-hostpath.md): volumes are directories under a state
// directory of the node, snapshots copies of them
// (felix.dev/felix/internal/csihostpath).
//
// In controller mode it serves the Identity and Controller services on
// --endpoint for the csi-provisioner and csi-snapshotter sidecars. In node
// mode it serves Identity and Node on a socket under the kubelet's
// plugins directory and registers itself with the kubelet through the
// plugin registration socket in --registry-dir (no node-driver-registrar).
// Mode all does both on one socket. It stops on SIGINT or SIGTERM,
// removing its sockets.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"net"
	"os"
	"os/signal"
	"path/filepath"
	"sync"
	"syscall"

	"github.com/go-logr/logr"
	"github.com/go-logr/logr/funcr"
	"google.golang.org/grpc"

	"felix.dev/felix/internal/csihostpath"
	"felix.dev/felix/internal/version"
)

type options struct {
	mode, name, endpoint, stateDir, nodeID, kubeletDir, registryDir string
	verbosity, socketGroup                                          int
}

func main() {
	var o options
	flag.StringVar(&o.mode, "mode", "all", "controller, node or all")
	flag.StringVar(&o.name, "driver-name", csihostpath.DefaultDriverName, "CSI driver name")
	flag.StringVar(&o.endpoint, "endpoint", "", "unix socket of the CSI services (default in node and all modes: <kubelet-dir>/plugins/<driver-name>/csi.sock; required in controller mode)")
	flag.StringVar(&o.stateDir, "state-dir", "/var/lib/felix-csi-hostpath", "directory of the volumes and snapshots (shared by the controller and node plugins)")
	flag.StringVar(&o.nodeID, "node-id", os.Getenv("NODE_NAME"), "node name (default $NODE_NAME)")
	flag.StringVar(&o.kubeletDir, "kubelet-dir", "/var/lib/kubelet", "the kubelet's root directory; in node mode, mount targets must be below it")
	flag.StringVar(&o.registryDir, "registry-dir", "", "the kubelet's plugin registration directory (default <kubelet-dir>/plugins_registry)")
	flag.IntVar(&o.socketGroup, "socket-group", -1, "group id given the CSI socket (mode 0660), for sidecars that run as another user; -1 leaves the driver's group")
	flag.IntVar(&o.verbosity, "v", 0, "log verbosity (1 logs every call)")
	flag.Parse()

	var mu sync.Mutex
	log := funcr.NewJSON(func(obj string) {
		mu.Lock()
		defer mu.Unlock()
		fmt.Fprintln(os.Stderr, obj)
	}, funcr.Options{Verbosity: o.verbosity})

	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGINT, syscall.SIGTERM)
	defer stop()
	if err := run(ctx, log, o); err != nil {
		log.Error(err, "felix-csi-hostpath failed")
		os.Exit(1)
	}
}

func run(ctx context.Context, log logr.Logger, o options) error {
	var svc csihostpath.Services
	switch o.mode {
	case "controller":
		svc.Controller = true
	case "node":
		svc.Node = true
	case "all":
		svc = csihostpath.Services{Controller: true, Node: true}
	default:
		return fmt.Errorf("unknown mode %q (controller, node or all)", o.mode)
	}
	if o.endpoint == "" {
		if !svc.Node {
			return errors.New("--endpoint is required in controller mode")
		}
		o.endpoint = filepath.Join(o.kubeletDir, "plugins", o.name, "csi.sock")
	}
	if svc.Node && o.nodeID == "" {
		return errors.New("--node-id (or $NODE_NAME) is required in node mode")
	}
	if o.registryDir == "" {
		o.registryDir = filepath.Join(o.kubeletDir, "plugins_registry")
	}
	cfg := csihostpath.Config{
		Name:     o.name,
		Version:  version.Version,
		StateDir: o.stateDir,
		NodeID:   o.nodeID,
		Log:      log.WithName("driver"),
	}
	if svc.Node {
		cfg.KubeletDir = o.kubeletDir
	}
	d, err := csihostpath.New(cfg)
	if err != nil {
		return err
	}

	type server struct {
		srv  *grpc.Server
		lis  net.Listener
		path string
	}
	var servers []server
	defer func() {
		for _, s := range servers {
			s.srv.Stop()
			_ = os.Remove(s.path)
		}
	}()
	// Sockets are 0660: the kubelet and the sidecars (root, or of the
	// --socket-group) may connect, nobody else on the node.
	listen := func(path string, register func(grpc.ServiceRegistrar)) error {
		lis, err := csihostpath.ListenUnix(path)
		if err != nil {
			return err
		}
		if err := os.Chown(path, -1, o.socketGroup); err != nil {
			_ = lis.Close()
			return err
		}
		if err := os.Chmod(path, 0o660); err != nil {
			_ = lis.Close()
			return err
		}
		srv := grpc.NewServer(grpc.UnaryInterceptor(csihostpath.LoggingInterceptor(log.WithName("grpc"))))
		register(srv)
		servers = append(servers, server{srv, lis, path})
		return nil
	}
	if err := listen(o.endpoint, func(s grpc.ServiceRegistrar) { d.Register(s, svc) }); err != nil {
		return err
	}
	// The registration socket goes last: once it exists the kubelet calls
	// GetInfo and then the CSI socket.
	if svc.Node {
		reg := csihostpath.NewRegistrar(o.name, o.endpoint, log.WithName("registration"), nil)
		if err := listen(csihostpath.RegistrationSocket(o.registryDir, o.name), reg.Register); err != nil {
			return err
		}
	}

	errc := make(chan error, len(servers))
	for _, s := range servers {
		log.Info("serving", "socket", s.path, "mode", o.mode, "driver", o.name, "node", o.nodeID, "state", o.stateDir)
		go func() { errc <- s.srv.Serve(s.lis) }()
	}
	select {
	case <-ctx.Done():
		log.Info("stopping")
		for _, s := range servers {
			s.srv.GracefulStop()
		}
		return nil
	case err := <-errc:
		return err
	}
}
