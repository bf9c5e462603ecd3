package controlplane

import (
	"context"
	"errors"
	"fmt"
	"sync/atomic"
	"time"

	"github.com/go-logr/logr"
	coordinationv1 "k8s.io/api/coordination/v1"
	"k8s.io/apimachinery/pkg/runtime"
	clientgoscheme "k8s.io/client-go/kubernetes/scheme"
	"k8s.io/client-go/rest"
	"k8s.io/utils/clock"
	"sigs.k8s.io/controller-runtime/pkg/client"

	felixv1 "felix.dev/felix/api/v1alpha1"
)

// Config says which broker a Client speaks for and how.
type Config struct {
	// REST reaches the API server (in a pod: rest.InClusterConfig).
	REST *rest.Config
	// Namespace, Cluster and Broker name the broker: its FelixBroker and
	// heartbeat Lease are Namespace/Broker.
	Namespace, Cluster, Broker string
	// PeerAddress is the host:port of the broker's peer (replication) port,
	// sent with every registration request (RegistrationRequest.
	// PeerAddress) and copied by the operator into status.peerAddress,
	// where peers find it. Empty: the broker has no peer port (insecure
	// dev mode, which replicates over the client port).
	PeerAddress string
	// HeartbeatInterval is how often RunHeartbeat renews the Lease.
	HeartbeatInterval time.Duration
	// NodeExpiry is written to the Lease as its duration.
	NodeExpiry time.Duration
	// MinBackoff and MaxBackoff bound the wait between attempts while the
	// API server cannot be reached (defaults 200ms and 5s).
	MinBackoff, MaxBackoff time.Duration
	// RequestTimeout bounds one API request (default 10s).
	RequestTimeout time.Duration
	// Clock is the real clock when nil.
	Clock clock.WithTicker
	// Log receives progress and errors.
	Log logr.Logger
}

// Client is a broker's connection to the control plane. Safe for
// concurrent use.
type Client struct {
	cfg         Config
	c           client.Client
	holding     atomic.Bool
	incarnation atomic.Int64
}

// ErrConfig is returned by New for an incomplete Config.
var ErrConfig = errors.New("controlplane: incomplete config")

// NewScheme returns a scheme with the kinds a broker reads and writes.
func NewScheme() *runtime.Scheme {
	s := runtime.NewScheme()
	_ = clientgoscheme.AddToScheme(s)
	_ = felixv1.AddToScheme(s)
	_ = coordinationv1.AddToScheme(s)
	return s
}

// New returns a Client. It does not contact the API server, so a broker
// can build it while the control plane is unreachable.
func New(cfg Config) (*Client, error) {
	if cfg.REST == nil || cfg.Namespace == "" || cfg.Broker == "" || cfg.Cluster == "" {
		return nil, fmt.Errorf("%w: REST, Namespace, Cluster and Broker are required", ErrConfig)
	}
	if cfg.HeartbeatInterval <= 0 {
		cfg.HeartbeatInterval = 2 * time.Second
	}
	if cfg.NodeExpiry <= 0 {
		cfg.NodeExpiry = 10 * time.Second
	}
	if cfg.MinBackoff <= 0 {
		cfg.MinBackoff = 200 * time.Millisecond
	}
	if cfg.MaxBackoff < cfg.MinBackoff {
		cfg.MaxBackoff = max(5*time.Second, cfg.MinBackoff)
	}
	if cfg.RequestTimeout <= 0 {
		cfg.RequestTimeout = 10 * time.Second
	}
	if cfg.Clock == nil {
		cfg.Clock = clock.RealClock{}
	}
	rc := rest.CopyConfig(cfg.REST)
	rc.Timeout = cfg.RequestTimeout
	if rc.QPS == 0 {
		rc.QPS, rc.Burst = 50, 100
	}
	rc.UserAgent = "felix-broker/" + cfg.Broker
	c, err := client.New(rc, client.Options{Scheme: NewScheme()})
	if err != nil {
		return nil, fmt.Errorf("controlplane: client: %w", err)
	}
	return &Client{cfg: cfg, c: c}, nil
}

// Holding reports whether the broker is holding for the control plane:
// the last attempt of CurrentIncarnation or Register could not reach it (or
// found no record yet). A broker serves /ready=false and /live=true while
// it holds [ID-4].
func (c *Client) Holding() bool { return c.holding.Load() }

// Incarnation returns the incarnation Register was granted (0 before).
func (c *Client) Incarnation() int64 { return c.incarnation.Load() }

// Broker returns the broker's name.
func (c *Client) Broker() string { return c.cfg.Broker }

// backoff waits before attempt n (from 0), doubling from MinBackoff up
// to MaxBackoff; it returns ctx's error if ctx ends first.
func (c *Client) backoff(ctx context.Context, n int) error {
	d := c.cfg.MinBackoff
	for i := 0; i < n && d < c.cfg.MaxBackoff; i++ {
		d *= 2
	}
	d = min(d, c.cfg.MaxBackoff)
	t := c.cfg.Clock.NewTimer(d)
	defer t.Stop()
	select {
	case <-ctx.Done():
		return ctx.Err()
	case <-t.C():
		return nil
	}
}
