package member

import (
	"crypto/tls"
	"errors"
	"fmt"
	"time"

	"felix.dev/felix/broker/auth"
	"felix.dev/felix/broker/replication"
	"felix.dev/felix/broker/server"
	"felix.dev/felix/internal/pki"
)

// ErrNoClientTLS is the Unauthenticated reason of a client-port
// connection that is not TLS on a member that requires it (never seen in
// practice: the client port's listener is TLS-only).
var ErrNoClientTLS = errors.New("member: the client port requires TLS")

// principalOf maps a verified certificate identity, and the object uid
// the certificate carries, to the principal the authorizer decides
// about: user/<name> is FelixUser <name> with UID uid (the authorizer
// refuses it unless uid is the current FelixUser's), a broker is a
// Broker principal (Describe only on the client port), the operator an
// Operator principal.
func principalOf(id pki.Identity, uid string) (auth.Principal, error) {
	switch id.Kind {
	case pki.KindUser:
		return auth.Principal{Kind: auth.User, Name: id.Name, UID: uid}, nil
	case pki.KindBroker:
		return auth.Principal{Kind: auth.Broker, Name: id.Name}, nil
	case pki.KindOperator:
		return auth.Principal{Kind: auth.Operator, Name: id.Name}, nil
	}
	return auth.Principal{}, fmt.Errorf("%w: kind %q", pki.ErrInvalidIdentity, id.Kind)
}

// AuthenticateClient is server.Options.Authenticate for the client port
// of a member serving src: the client certificate is verified against
// src's current trust bundle (pki.VerifyClientUID) and its identity and
// uid mapped to a principal. No certificate is auth.Anonymous (the authorizer then
// refuses the connection unless the FelixCluster allows anonymous
// access); a certificate that does not verify (another CA, expired, no
// or two identities, another cluster) is an error, answered
// Unauthenticated.
func AuthenticateClient(src *pki.Source) func(cs *tls.ConnectionState) (auth.Principal, error) {
	return func(cs *tls.ConnectionState) (auth.Principal, error) {
		if cs == nil {
			return auth.Principal{}, ErrNoClientTLS
		}
		id, uid, err := pki.VerifyClientUID(src, *cs)
		if errors.Is(err, pki.ErrNoCertificate) {
			return auth.Principal{Kind: auth.Anonymous}, nil
		}
		if err != nil {
			return auth.Principal{}, fmt.Errorf("client certificate refused: %w", err)
		}
		return principalOf(id, uid)
	}
}

// AuthenticatePeer is server.Options.Authenticate for the peer port. The
// handshake (pki.PeerServerConfig) already required a broker certificate
// of the cluster; this names the broker, re-verifying against the same
// bundle, and refuses anything else.
func AuthenticatePeer(src *pki.Source) func(cs *tls.ConnectionState) (auth.Principal, error) {
	return func(cs *tls.ConnectionState) (auth.Principal, error) {
		if cs == nil {
			return auth.Principal{}, ErrNoClientTLS
		}
		id, err := pki.VerifyClient(src, *cs)
		if err != nil {
			return auth.Principal{}, fmt.Errorf("peer certificate refused: %w", err)
		}
		if id.Kind != pki.KindBroker {
			return auth.Principal{}, fmt.Errorf("%w: %s", pki.ErrNotBroker, id)
		}
		return auth.Principal{Kind: auth.Broker, Name: id.Name}, nil
	}
}

// PeerDialTLS is replica.Options.PeerTLS for a member serving src: the
// dialed peer must present exactly the broker certificate of the broker
// dialed (pki.PeerDialConfig), and this broker presents its own.
func PeerDialTLS(src *pki.Source) func(replication.NodeID) *tls.Config {
	return func(n replication.NodeID) *tls.Config { return pki.PeerDialConfig(src, string(n)) }
}

// MetricsCertificate admits a /metrics request whose client certificate
// verifies against src's trust bundle with a broker or operator identity
// of the cluster (metricsauth.Options.Certificate).
func MetricsCertificate(src *pki.Source) func(cs *tls.ConnectionState) error {
	return func(cs *tls.ConnectionState) error {
		id, err := pki.VerifyClient(src, *cs)
		if err != nil {
			return err
		}
		if id.Kind != pki.KindBroker && id.Kind != pki.KindOperator {
			return fmt.Errorf("%w: %s may not scrape by certificate", pki.ErrNotBroker, id)
		}
		return nil
	}
}

// Bounds of the peer port (the client port's are server.Options', set
// by --max-connections and --max-connections-per-address). A broker opens
// one replication connection to each peer (broker/peer.Pool), re-dialled
// when lost, so a cluster of n brokers holds n-1 on each peer port.
const (
	// DefaultPeerMaxConnections bounds the peer port's open connections
	// (Config.PeerMaxConnections, --peer-max-connections).
	DefaultPeerMaxConnections = 64
	// DefaultPeerMaxConnectionsPerAddress bounds those from one IP (one
	// broker pod; a few while an old connection is being torn down).
	DefaultPeerMaxConnectionsPerAddress = 8
	// DefaultPeerHandshakeTimeout bounds accept to Hello on the peer
	// port (the dialing broker's own bound is 5s).
	DefaultPeerHandshakeTimeout = 5 * time.Second
)

// ServerOptions are the options of a member's two protocol servers,
// derived from base (limits, logger, metrics, storage id) and the
// replication handler they share.
//
// Secure (src set): the client port serves TLS (pki.ClientPortConfig)
// with RoleClient, AuthenticateClient and authz, and refuses replication
// frames; the peer port serves mTLS (pki.PeerServerConfig) with RolePeer
// and AuthenticatePeer, only to brokers, with the peer port's bounds
// (DefaultPeerMaxConnections and the others above). Both compare
// connection certificates' expiry with src's clock.
//
// Insecure (src nil, --insecure-no-tls, for tests and development only):
// one plaintext client port, every connection anonymous and allowed
// everything, and replication frames accepted on it from anyone
// (server.Options.InsecurePeersOnClientPort); peer is the zero value and
// no peer port is served.
func ServerOptions(base server.Options, repl server.ReplicationHandler, src *pki.Source, authz auth.Authorizer) (client, peer server.Options) {
	client = base
	client.Replication = repl
	client.Role = server.RoleClient
	if src == nil {
		client.TLS = nil
		client.Authenticate = nil
		client.Authorizer = auth.AllowAll{}
		client.InsecurePeersOnClientPort = true
		return client, server.Options{}
	}
	client.Now = src.Now
	client.TLS = pki.ClientPortConfig(src)
	client.Authenticate = AuthenticateClient(src)
	client.Authorizer = authz
	client.InsecurePeersOnClientPort = false

	peer = base
	peer.Now = src.Now
	// A broker opens one connection to each peer it replicates with:
	// the peer port needs far fewer than the client port.
	peer.MaxConnections = DefaultPeerMaxConnections
	peer.MaxConnectionsPerAddress = DefaultPeerMaxConnectionsPerAddress
	peer.HandshakeTimeout = DefaultPeerHandshakeTimeout
	peer.Replication = repl
	peer.Role = server.RolePeer
	peer.TLS = pki.PeerServerConfig(src)
	peer.Authenticate = AuthenticatePeer(src)
	peer.Authorizer = nil // client requests are refused on the peer port before any authorization
	peer.InsecurePeersOnClientPort = false
	return client, peer
}
