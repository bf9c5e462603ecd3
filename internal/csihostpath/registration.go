package csihostpath

import (
	"context"
	"path/filepath"

	"github.com/go-logr/logr"
	"google.golang.org/grpc"
	registerapi "k8s.io/kubelet/pkg/apis/pluginregistration/v1"
)

// Registrar is the kubelet plugin registration service
// (k8s.io/kubelet/pkg/apis/pluginregistration/v1) of a CSI node plugin:
// the kubelet finds its socket in its plugins_registry directory, calls
// GetInfo to learn the driver's name and CSI endpoint, and reports the
// outcome with NotifyRegistrationStatus. It replaces upstream's
// node-driver-registrar sidecar.
type Registrar struct {
	registerapi.UnimplementedRegistrationServer

	name     string
	endpoint string
	log      logr.Logger
	statusCh chan<- *registerapi.RegistrationStatus
}

// NewRegistrar returns the registration service of driver name whose CSI
// socket the kubelet reaches at endpoint (a path on the node). Every status
// the kubelet reports is logged and, if statusCh is not nil, sent on it
// without blocking (dropped when the channel is full).
func NewRegistrar(name, endpoint string, log logr.Logger, statusCh chan<- *registerapi.RegistrationStatus) *Registrar {
	return &Registrar{name: name, endpoint: endpoint, log: log, statusCh: statusCh}
}

// Register puts the service on s.
func (r *Registrar) Register(s grpc.ServiceRegistrar) { registerapi.RegisterRegistrationServer(s, r) }

// RegistrationSocket is the socket path of driver name in the kubelet's
// plugin registry directory, named like node-driver-registrar's.
func RegistrationSocket(registryDir, name string) string {
	return filepath.Join(registryDir, name+"-reg.sock")
}

// GetInfo tells the kubelet this is a CSI plugin, its name, its CSI
// endpoint and the CSI versions it speaks.
func (r *Registrar) GetInfo(context.Context, *registerapi.InfoRequest) (*registerapi.PluginInfo, error) {
	return &registerapi.PluginInfo{
		Type:              registerapi.CSIPlugin,
		Name:              r.name,
		Endpoint:          r.endpoint,
		SupportedVersions: []string{"1.0.0"}, // the kubelet accepts CSI 1.x
	}, nil
}

// NotifyRegistrationStatus records the kubelet's verdict. A refusal is
// logged as an error and the plugin keeps serving: the kubelet retries
// when the socket is recreated, so the fix is to restart the pod.
func (r *Registrar) NotifyRegistrationStatus(_ context.Context, st *registerapi.RegistrationStatus) (*registerapi.RegistrationStatusResponse, error) {
	if st.GetPluginRegistered() {
		r.log.Info("registered with the kubelet", "driver", r.name, "endpoint", r.endpoint)
	} else {
		r.log.Error(nil, "the kubelet refused the registration", "driver", r.name, "error", st.GetError())
	}
	if r.statusCh != nil {
		select {
		case r.statusCh <- st:
		default:
		}
	}
	return &registerapi.RegistrationStatusResponse{}, nil
}
