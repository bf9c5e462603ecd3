package member

import (
	"context"
	"errors"
	"os"

	"github.com/prometheus/client_golang/prometheus"

	"felix.dev/felix/broker/peer"
	"felix.dev/felix/broker/replication"
	"felix.dev/felix/internal/pki"
)

// Sides of felix_broker_peer_handshake_failures_total.
const (
	// SideAccept: a connection to this broker's peer port was refused in
	// its TLS handshake.
	SideAccept = "accept"
	// SideDial: this broker's connection to a peer failed in its TLS
	// handshake.
	SideDial = "dial"
)

// Reasons of felix_broker_peer_handshake_failures_total.
const (
	ReasonNotBroker      = "not_broker"      // a certificate of the cluster, not a broker's (pki.ErrNotBroker)
	ReasonWrongCluster   = "wrong_cluster"   // a broker certificate of another cluster (pki.ErrWrongCluster)
	ReasonWrongPeer      = "wrong_peer"      // dialing: another broker answered (pki.ErrWrongPeer)
	ReasonUntrusted      = "untrusted"       // the chain does not verify: another CA, expired, wrong usage (pki.ErrUntrusted)
	ReasonNoIdentity     = "no_identity"     // no or two felix identities (pki.ErrNoIdentity, pki.ErrAmbiguousIdentity)
	ReasonNoCertificate  = "no_certificate"  // pki.ErrNoCertificate
	ReasonTimeout        = "timeout"         // the handshake did not finish in time
	ReasonHandshakeOther = "handshake_other" // anything else: no certificate sent, not TLS, a reset
)

// HandshakeFailureReason classifies a failed peer TLS handshake (or peer
// connection attempt) for felix_broker_peer_handshake_failures_total.
func HandshakeFailureReason(err error) string {
	switch {
	case errors.Is(err, pki.ErrNotBroker):
		return ReasonNotBroker
	case errors.Is(err, pki.ErrWrongCluster):
		return ReasonWrongCluster
	case errors.Is(err, pki.ErrWrongPeer):
		return ReasonWrongPeer
	case errors.Is(err, pki.ErrUntrusted):
		return ReasonUntrusted
	case errors.Is(err, pki.ErrNoIdentity), errors.Is(err, pki.ErrAmbiguousIdentity):
		return ReasonNoIdentity
	case errors.Is(err, pki.ErrNoCertificate):
		return ReasonNoCertificate
	case errors.Is(err, os.ErrDeadlineExceeded), errors.Is(err, context.DeadlineExceeded):
		return ReasonTimeout
	}
	return ReasonHandshakeOther
}

// TLSMetrics are a secure member's certificate metrics:
// felix_broker_tls_certificate_expiry_timestamp_seconds and
// felix_broker_tls_reload_failures_total (read from the Source at each
// scrape) and felix_broker_peer_handshake_failures_total{side,reason}.
type TLSMetrics struct {
	peerHandshake *prometheus.CounterVec
}

// NewTLSMetrics registers the TLS metrics of src on reg.
func NewTLSMetrics(reg prometheus.Registerer, src *pki.Source) (*TLSMetrics, error) {
	m := &TLSMetrics{peerHandshake: prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "felix_broker_peer_handshake_failures_total",
		Help: "Peer connections refused or failed: side accept (the peer port's TLS handshake refused the connection) or dial (this broker's TLS handshake with a peer failed), by reason."},
		[]string{"side", "reason"})}
	expiry := prometheus.NewGaugeFunc(prometheus.GaugeOpts{
		Name: "felix_broker_tls_certificate_expiry_timestamp_seconds",
		Help: "When the broker's served certificate chain (its earliest NotAfter) expires, in Unix seconds."},
		func() float64 { return float64(src.NotAfter().Unix()) })
	failures := prometheus.NewCounterFunc(prometheus.CounterOpts{
		Name: "felix_broker_tls_reload_failures_total",
		Help: "Changed certificate files the broker refused to load (kept serving the previous material)."},
		func() float64 {
			// Look at the files first: a scrape collects the expiry gauge
			// (which looks) concurrently, so without this a change shows
			// in one metric and not in the other of the same scrape.
			_, _, _ = src.Current()
			return float64(src.Failures())
		})
	for _, c := range []prometheus.Collector{m.peerHandshake, expiry, failures} {
		if err := reg.Register(c); err != nil {
			return nil, err
		}
	}
	return m, nil
}

// AcceptFailed counts a refused handshake on the peer port
// (server.Options.OnTLSHandshakeError).
func (m *TLSMetrics) AcceptFailed(err error) {
	m.peerHandshake.WithLabelValues(SideAccept, HandshakeFailureReason(err)).Inc()
}

// DialFailed counts a connection to a peer that failed in its TLS
// handshake (replica.Options.PeerConnectFailed; other failures, a peer
// not listening, are not counted).
func (m *TLSMetrics) DialFailed(_ replication.NodeID, err error) {
	if !errors.Is(err, peer.ErrTLSHandshake) {
		return
	}
	m.peerHandshake.WithLabelValues(SideDial, HandshakeFailureReason(err)).Inc()
}
