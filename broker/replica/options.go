package replica

import (
	"context"
	"crypto/tls"
	"net"
	"time"

	"github.com/go-logr/logr"

	"felix.dev/felix/broker/datadir"
	"felix.dev/felix/broker/logstore"
	"felix.dev/felix/broker/peer"
	"felix.dev/felix/broker/replication"
)

// DefaultPassInterval is the time between replication passes when
// Options.PassInterval is zero. It must stay comfortably longer than a
// round trip between brokers: a follower counts for a pass only with an
// answer to a request of that pass [RP-5].
const DefaultPassInterval = 100 * time.Millisecond

// DefaultMaxBatch is the records of one Append or Fetch message when
// Options.MaxBatch is zero: 1 MiB of 1 KiB records, which measured faster
// for catch-up than the core's own default of 256 (docs/performance.md).
const DefaultMaxBatch = 1024

// Options configures a Manager.
type Options struct {
	// Store holds this broker's shard logs. Required. The Manager never
	// closes it.
	Store *logstore.Store
	// Self names this broker (its FelixBroker name).
	Self replication.NodeID
	// SelfStorageID is this broker's storage id [ID-1], presented in every
	// outgoing handshake and carried into reports. The zero value presents
	// none. The server that accepts peers must present the same id
	// (server.Options.StorageID).
	SelfStorageID datadir.StorageID
	// Incarnation is this broker's registration incarnation [ID-2].
	Incarnation uint64
	// Resolve maps a broker to the address its server accepts replication
	// connections on (host:port). Required for shards with peers.
	Resolve func(replication.NodeID) (string, error)
	// ClientAddr maps a broker to the address clients should use, for the
	// NotLeader hint; nil uses Resolve.
	ClientAddr func(replication.NodeID) (string, error)
	// Dial opens peer connections; nil dials TCP.
	Dial func(ctx context.Context, addr string) (net.Conn, error)
	// PeerTLS, when set, is the TLS client configuration for dialing each
	// peer (peer.Options.TLS); nil: plain connections.
	PeerTLS func(replication.NodeID) *tls.Config
	// PeerConnectFailed, when set, is told every failed attempt to
	// connect to a peer (peer.Options.OnConnectFailed).
	PeerConnectFailed func(replication.NodeID, error)
	// Backoff spaces reconnection attempts to a peer.
	Backoff peer.Backoff
	// After is the clock that waits out a reconnection backoff and a
	// store's refusal for want of space; nil means time.After.
	After func(time.Duration) <-chan time.Time
	// PassInterval is the time between passes (one core Tick each); zero
	// means DefaultPassInterval.
	PassInterval time.Duration
	// MaxBatch caps the records of one Append or Fetch message
	// (DefaultMaxBatch when zero). Keep MaxBatch x the largest record
	// under the peers' frame size limit.
	MaxBatch int
	// MaxMessageBytes bounds the record bytes of one replication frame; a
	// larger Append or FetchResp is sent as several (DefaultMaxMessageBytes
	// when zero). Keep it under the peers' frame size limit.
	MaxMessageBytes int
	// RecentBytes bounds the recently persisted records kept in memory per
	// shard log to ship without reading the store (DefaultRecentBytes when
	// zero; negative keeps none).
	RecentBytes int
	// MaxInflight caps a follower's unanswered Appends per log within a
	// pass (core default when zero).
	MaxInflight int
	// Logger receives the runtime's log lines; zero discards.
	Logger logr.Logger
	// OnReport receives every report a leader makes [RP-6] (the control
	// plane writes it to FelixShard status.report), with viewAt: when the
	// pass the report describes started, by Now, taken before the core
	// call that started it. Every follower the report calls caught up
	// answered a request of that pass, so viewAt is a lower bound on when
	// the view was taken [CP-1]; zero when the runtime did not see the
	// pass start. Called from the shard's goroutine: it must not block and
	// must not call the Manager; copy and hand off.
	OnReport func(r replication.Report, viewAt time.Time)
	// Now stamps records whose client left Timestamp zero, and the start
	// of each replication pass (OnReport's viewAt); nil means time.Now.
	Now func() time.Time
	// MaintainInterval is the time between maintenance passes (Maintain:
	// deletion of whole segments below each log's floor, then retention);
	// zero means DefaultMaintainInterval, negative runs none (call
	// Maintain yourself).
	MaintainInterval time.Duration
	// Metrics receives the maintenance and log policy measurements; nil
	// records none.
	Metrics *Metrics
}

func (o Options) withDefaults() Options {
	if o.PassInterval <= 0 {
		o.PassInterval = DefaultPassInterval
	}
	if o.MaxMessageBytes <= 0 {
		o.MaxMessageBytes = DefaultMaxMessageBytes
	}
	if o.RecentBytes == 0 {
		o.RecentBytes = DefaultRecentBytes
	}
	if o.MaxBatch <= 0 {
		o.MaxBatch = DefaultMaxBatch
	}
	if o.Logger.GetSink() == nil {
		o.Logger = logr.Discard()
	}
	if o.Now == nil {
		o.Now = time.Now
	}
	if o.After == nil {
		o.After = time.After
	}
	if o.MaintainInterval == 0 {
		o.MaintainInterval = DefaultMaintainInterval
	}
	if o.ClientAddr == nil {
		o.ClientAddr = o.Resolve
	}
	return o
}

// selfIDs returns the storage id as handshake bytes and as core text.
func (o Options) selfIDs() ([]byte, replication.StorageID) {
	if o.SelfStorageID.IsZero() {
		return nil, ""
	}
	id := o.SelfStorageID
	return id[:], replication.StorageID(id.String())
}
