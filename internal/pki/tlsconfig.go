package pki

import (
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"os"
	"time"
)

// verifyChain verifies a peer's chain (leaf first; the rest are offered
// as intermediates) against roots at time now for usage eku, with
// dnsName checked when non-empty, and returns the leaf's identity.
func verifyChain(certs []*x509.Certificate, roots *x509.CertPool, now time.Time, eku x509.ExtKeyUsage, dnsName string) (Identity, error) {
	if len(certs) == 0 {
		return Identity{}, ErrNoCertificate
	}
	if roots == nil {
		return Identity{}, ErrNoTrustBundle
	}
	inter := x509.NewCertPool()
	for _, c := range certs[1:] {
		inter.AddCert(c)
	}
	_, err := certs[0].Verify(x509.VerifyOptions{
		Roots:         roots,
		Intermediates: inter,
		CurrentTime:   now,
		DNSName:       dnsName,
		KeyUsages:     []x509.ExtKeyUsage{eku},
	})
	if err != nil {
		return Identity{}, fmt.Errorf("%w: %w", ErrUntrusted, err)
	}
	return IdentityOf(certs[0])
}

// verifyMember verifies a peer of s's cluster: chain against s's current
// bundle at s's clock, then same namespace and cluster as s.Self().
func verifyMember(s *Source, certs []*x509.Certificate, eku x509.ExtKeyUsage) (Identity, error) {
	m, err := s.current()
	if err != nil {
		return Identity{}, err
	}
	id, err := verifyChain(certs, m.pool, s.Now(), eku, "")
	if err != nil {
		return Identity{}, err
	}
	if !id.SameCluster(m.self) {
		return Identity{}, fmt.Errorf("%w: %s, want %s", ErrWrongCluster, id, m.self.ClusterRef())
	}
	return id, nil
}

// serverBase is what every server configuration shares: TLS 1.3, the
// Source's current certificate on every handshake, its clock, and no
// session resumption, so every connection is a full handshake checked
// against the current bundle.
func serverBase(s *Source) *tls.Config {
	return &tls.Config{
		MinVersion: tls.VersionTLS13,
		GetCertificate: func(*tls.ClientHelloInfo) (*tls.Certificate, error) {
			c, _, err := s.Current()
			return c, err
		},
		Time:                   s.Now,
		SessionTicketsDisabled: true,
	}
}

// ClientPortConfig returns the server configuration of a broker's client
// port. It presents s's current certificate and requests, but does not
// require or verify, a client certificate (tls.RequestClientCert): the
// handshake succeeds either way so that the application can answer with
// a wire error code. The application then calls VerifyClient on the
// connection state.
func ClientPortConfig(s *Source) *tls.Config {
	cfg := serverBase(s)
	cfg.ClientAuth = tls.RequestClientCert
	return cfg
}

// VerifyClient verifies the client certificate of a completed handshake
// on the client port: the chain against s's current trust bundle, at s's
// clock, for client authentication; then its identity, which must be of
// s.Self()'s cluster (any kind: the caller authorizes). Errors:
// ErrNoCertificate (none sent), ErrUntrusted (wrapping the x509 error:
// another CA, expired, wrong usage), ErrNoIdentity or
// ErrAmbiguousIdentity, ErrWrongCluster.
func VerifyClient(s *Source, cs tls.ConnectionState) (Identity, error) {
	return verifyMember(s, cs.PeerCertificates, x509.ExtKeyUsageClientAuth)
}

// VerifyClientUID is VerifyClient that also returns the uid the verified
// leaf carries (UIDOf: "" when it carries none). The caller decides what
// a uid, or its absence, means for the identity's kind.
func VerifyClientUID(s *Source, cs tls.ConnectionState) (Identity, string, error) {
	id, err := verifyMember(s, cs.PeerCertificates, x509.ExtKeyUsageClientAuth)
	if err != nil {
		return Identity{}, "", err
	}
	return id, UIDOf(cs.PeerCertificates[0]), nil
}

// PeerServerConfig returns the server configuration of a broker's peer
// (replication) port. It presents s's current certificate and requires a
// client certificate that verifies against s's current trust bundle for
// client authentication and whose identity is a broker of s.Self()'s
// cluster; the handshake fails otherwise (with the errors of
// VerifyClient, or ErrNotBroker).
func PeerServerConfig(s *Source) *tls.Config {
	cfg := serverBase(s)
	cfg.ClientAuth = tls.RequireAnyClientCert
	cfg.VerifyConnection = func(cs tls.ConnectionState) error {
		id, err := verifyMember(s, cs.PeerCertificates, x509.ExtKeyUsageClientAuth)
		if err != nil {
			return err
		}
		if id.Kind != KindBroker {
			return fmt.Errorf("%w: %s", ErrNotBroker, id)
		}
		return nil
	}
	return cfg
}

// PeerDialConfig returns the client configuration for a broker dialing
// peer broker name of its own cluster. It presents s's current
// certificate and requires the server's to verify against s's current
// trust bundle for server authentication and to be exactly broker name
// of s.Self()'s cluster. The address dialed is not checked (peers are
// reached by pod IP). Errors fail the handshake: those of VerifyClient,
// ErrNotBroker, ErrWrongPeer.
func PeerDialConfig(s *Source, name string) *tls.Config {
	return &tls.Config{
		MinVersion: tls.VersionTLS13,
		GetClientCertificate: func(*tls.CertificateRequestInfo) (*tls.Certificate, error) {
			c, _, err := s.Current()
			return c, err
		},
		Time: s.Now,
		// The chain and identity are verified in VerifyConnection against
		// the current bundle; the name-based check is what is skipped.
		InsecureSkipVerify: true,
		VerifyConnection: func(cs tls.ConnectionState) error {
			id, err := verifyMember(s, cs.PeerCertificates, x509.ExtKeyUsageServerAuth)
			if err != nil {
				return err
			}
			if id.Kind != KindBroker {
				return fmt.Errorf("%w: %s", ErrNotBroker, id)
			}
			if id.Name != name {
				return fmt.Errorf("%w: %s, dialed broker %q", ErrWrongPeer, id, name)
			}
			return nil
		},
	}
}

// ClientConfig returns the configuration for a client (CLI, Go client)
// of a broker's client port. It presents cert (nil: anonymous), and
// requires the server's chain to verify against roots for server
// authentication and the server to be a broker, of cluster when that is
// non-empty ("namespace/cluster"). The server's address is not checked
// unless serverName is non-empty: then it is sent as SNI and the
// certificate must also be valid for that name. The chain is verified at
// the returned config's Time (time.Now when nil), which the caller may
// set. Errors fail the handshake: ErrNoTrustBundle (nil roots),
// ErrInvalidIdentity (a malformed cluster), ErrUntrusted, ErrNoIdentity,
// ErrNotBroker, ErrWrongCluster.
func ClientConfig(cert *tls.Certificate, roots *x509.CertPool, cluster string, serverName string) *tls.Config {
	return ClientConfigForHost(cert, roots, cluster, serverName, "")
}

// ClientConfigForHost is ClientConfig for a client that dialed host (a
// DNS name or an IP address, no port). It also accepts a server whose
// certificate carries no felix identity (a standalone broker serving a
// certificate of its own), as any TLS client would: only when no cluster
// is required, and only if the chain verifies for serverName, or for host
// when serverName is empty. A certificate with a felix identity is held
// to ClientConfig's rules; host is never checked against it.
func ClientConfigForHost(cert *tls.Certificate, roots *x509.CertPool, cluster, serverName, host string) *tls.Config {
	cfg := &tls.Config{
		MinVersion: tls.VersionTLS13,
		ServerName: serverName,
		GetClientCertificate: func(*tls.CertificateRequestInfo) (*tls.Certificate, error) {
			if cert == nil {
				return &tls.Certificate{}, nil // send none
			}
			return cert, nil
		},
		// Verified in VerifyConnection, by identity (and serverName when
		// given), not by the address dialed.
		InsecureSkipVerify: true,
	}
	var ns, cl string
	var refErr error
	if cluster != "" {
		ns, cl, refErr = ParseClusterRef(cluster)
	}
	cfg.VerifyConnection = func(cs tls.ConnectionState) error {
		if refErr != nil {
			return refErr
		}
		now := time.Now()
		if cfg.Time != nil {
			now = cfg.Time()
		}
		id, err := verifyChain(cs.PeerCertificates, roots, now, x509.ExtKeyUsageServerAuth, serverName)
		if errors.Is(err, ErrNoIdentity) && cluster == "" {
			name := serverName
			if name == "" {
				name = host
			}
			if name == "" {
				return err
			}
			_, err = verifyChain(cs.PeerCertificates, roots, now, x509.ExtKeyUsageServerAuth, name)
			if errors.Is(err, ErrNoIdentity) {
				return nil // verified for name, like any TLS client
			}
			if err == nil {
				return fmt.Errorf("%w: the certificate carries a felix identity", ErrUntrusted) // cannot happen: same chain
			}
			return err
		}
		if err != nil {
			return err
		}
		if id.Kind != KindBroker {
			return fmt.Errorf("%w: %s", ErrNotBroker, id)
		}
		if cluster != "" && (id.Namespace != ns || id.Cluster != cl) {
			return fmt.Errorf("%w: %s, want %s", ErrWrongCluster, id, cluster)
		}
		return nil
	}
	return cfg
}

// LoadClientFiles reads f for a client and returns its ClientConfig: the
// trust bundle f.CA is required; f.Cert and f.Key are optional, together
// (neither: anonymous). Errors: ErrIncompleteFiles, ErrInvalidIdentity
// (a malformed cluster), read errors, and those of ParseCertsPEM and
// ParseLeaf. When cluster is empty and the client certificate carries a
// felix identity, the cluster is that identity's own namespace/cluster:
// a FelixUser's certificate talks only to its cluster's brokers unless
// another cluster is named. The files are read once: a long-running client that must
// follow rotation uses a Source.
func LoadClientFiles(f Files, cluster, serverName string) (*tls.Config, error) {
	return LoadClientFilesForHost(f, cluster, serverName, "")
}

// LoadClientFilesForHost is LoadClientFiles returning a
// ClientConfigForHost for host.
func LoadClientFilesForHost(f Files, cluster, serverName, host string) (*tls.Config, error) {
	if f.CA == "" {
		return nil, fmt.Errorf("%w: a client needs a trust bundle (%s)", ErrIncompleteFiles, CAFile)
	}
	if (f.Cert == "") != (f.Key == "") {
		return nil, fmt.Errorf("%w: a client certificate needs its key and the other way round", ErrIncompleteFiles)
	}
	if cluster != "" {
		if _, _, err := ParseClusterRef(cluster); err != nil {
			return nil, err
		}
	}
	caPEM, err := os.ReadFile(f.CA)
	if err != nil {
		return nil, fmt.Errorf("pki: read trust bundle: %w", err)
	}
	roots, err := ParseCertsPEM(caPEM)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", f.CA, err)
	}
	pool := x509.NewCertPool()
	for _, r := range roots {
		pool.AddCert(r)
	}
	var cert *tls.Certificate
	if f.Cert != "" {
		certPEM, err := os.ReadFile(f.Cert)
		if err != nil {
			return nil, fmt.Errorf("pki: read client certificate: %w", err)
		}
		keyPEM, err := os.ReadFile(f.Key)
		if err != nil {
			return nil, fmt.Errorf("pki: read client key: %w", err)
		}
		tc, err := ParseLeaf(certPEM, keyPEM)
		if err != nil {
			return nil, fmt.Errorf("%s: %w", f.Cert, err)
		}
		cert = &tc
		if id, err := IdentityOf(tc.Leaf); err == nil && cluster == "" {
			cluster = id.Namespace + "/" + id.Cluster
		}
	}
	return ClientConfigForHost(cert, pool, cluster, serverName, host), nil
}
