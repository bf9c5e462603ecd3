package pki

import (
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"errors"
	"math/big"
	"net"
	"os"
	"path/filepath"
	"testing"
	"time"
)

// clientOf returns a ClientConfig trusting ca (or bundle) with clk as
// its clock.
func clientOf(cert *tls.Certificate, roots *x509.CertPool, cluster, serverName string, clk *fakeClock) *tls.Config {
	cfg := ClientConfig(cert, roots, cluster, serverName)
	cfg.Time = clk.Now
	return cfg
}

// noIdentityLeaf is a client certificate from ca without a felix URI SAN.
func noIdentityLeaf(t *testing.T, ca *CA) *tls.Certificate {
	t.Helper()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	tmpl := &x509.Certificate{
		SerialNumber: big.NewInt(99), Subject: pkix.Name{CommonName: "anon"},
		NotBefore: t0.Add(-time.Hour), NotAfter: t0.Add(time.Hour),
		KeyUsage: x509.KeyUsageDigitalSignature, ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageClientAuth},
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, ca.Cert, key.Public(), ca.Key)
	if err != nil {
		t.Fatal(err)
	}
	der2, _ := x509.MarshalPKCS8PrivateKey(key)
	return mustLeaf(t, pair{
		pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der}),
		pem.EncodeToMemory(&pem.Block{Type: "PRIVATE KEY", Bytes: der2}),
	})
}

func TestClientPortVerifyClient(t *testing.T) {
	ca := mustCA(t, "ca")
	other := mustCA(t, "other")
	short := mustIssue(t, ca, userID("brief"), t0, time.Hour)
	for _, tc := range []struct {
		name    string
		cert    *tls.Certificate
		advance time.Duration
		want    error
		id      Identity
	}{
		{"user", mustLeaf(t, mustIssue(t, ca, userID("alice"), t0, time.Hour)), 0, nil, userID("alice")},
		{"broker", mustLeaf(t, mustIssue(t, ca, brokerID("b-1"), t0, time.Hour)), 0, nil, brokerID("b-1")},
		{"operator", mustLeaf(t, mustIssue(t, ca, Identity{Namespace: "prod", Cluster: "logs", Kind: KindOperator, Name: "op"}, t0, time.Hour)), 0, nil,
			Identity{Namespace: "prod", Cluster: "logs", Kind: KindOperator, Name: "op"}},
		{"anonymous", nil, 0, ErrNoCertificate, Identity{}},
		{"other CA", mustLeaf(t, mustIssue(t, other, userID("alice"), t0, time.Hour)), 0, ErrUntrusted, Identity{}},
		{"expired", mustLeaf(t, short), 2 * time.Hour, ErrUntrusted, Identity{}},
		{"not yet valid", mustLeaf(t, mustIssue(t, ca, userID("later"), t0.Add(time.Hour), time.Hour)), 0, ErrUntrusted, Identity{}},
		{"other cluster", mustLeaf(t, mustIssue(t, ca, Identity{Namespace: "prod", Cluster: "metrics", Kind: KindUser, Name: "alice"}, t0, time.Hour)), 0, ErrWrongCluster, Identity{}},
		{"other namespace", mustLeaf(t, mustIssue(t, ca, Identity{Namespace: "dev", Cluster: "logs", Kind: KindUser, Name: "alice"}, t0, time.Hour)), 0, ErrWrongCluster, Identity{}},
		{"no identity", noIdentityLeaf(t, ca), 0, ErrNoIdentity, Identity{}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			clk := newClock(t0)
			s, _ := brokerSource(t, ca, brokerID("b-0"), clk, nil)
			clk.Advance(tc.advance)
			res := handshake(t, ClientPortConfig(s), clientOf(tc.cert, pool(ca.Cert), "prod/logs", "", clk))
			if res.serverErr != nil || res.clientErr != nil {
				t.Fatalf("handshake must succeed whatever the client sends: server %v, client %v", res.serverErr, res.clientErr)
			}
			if res.client.Version != tls.VersionTLS13 {
				t.Fatalf("version %x", res.client.Version)
			}
			id, err := VerifyClient(s, res.server)
			if !errors.Is(err, tc.want) {
				t.Fatalf("VerifyClient: %v, want %v", err, tc.want)
			}
			if id != tc.id {
				t.Fatalf("VerifyClient identity %s, want %s", id, tc.id)
			}
			if errors.Is(err, ErrUntrusted) {
				var inv x509.CertificateInvalidError
				var ua x509.UnknownAuthorityError
				if !errors.As(err, &inv) && !errors.As(err, &ua) {
					t.Fatalf("ErrUntrusted does not wrap the x509 error: %v", err)
				}
			}
		})
	}
}

// forgedServer returns a Source serving a certificate from ca for id with
// server authentication whatever its kind (Issue would not sign it).
func forgedServer(t *testing.T, ca *CA, id Identity, clk *fakeClock) *Source {
	t.Helper()
	c, k, err := ca.issue(LeafRequest{Identity: id, Now: t0, Validity: time.Hour}, []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth}, nil)
	if err != nil {
		t.Fatal(err)
	}
	d := newSecretDir(t)
	d.write(c, k, ca.CertPEM())
	return mustSource(t, d, clk, nil)
}

func TestClientConfigChecksServer(t *testing.T) {
	ca := mustCA(t, "ca")
	other := mustCA(t, "other")
	user := mustLeaf(t, mustIssue(t, ca, userID("alice"), t0, time.Hour))
	sanned := func(clk *fakeClock) *Source {
		c, k, err := ca.Issue(LeafRequest{Identity: brokerID("b-0"), DNSNames: []string{"logs.prod.svc"}, IPs: []net.IP{net.IPv4(127, 0, 0, 1)}, Now: t0, Validity: time.Hour}, nil)
		if err != nil {
			t.Fatal(err)
		}
		d := newSecretDir(t)
		d.write(c, k, ca.CertPEM())
		return mustSource(t, d, clk, nil)
	}
	for _, tc := range []struct {
		name       string
		server     func(*fakeClock) *Source
		roots      *x509.CertPool
		cluster    string
		serverName string
		want       error
	}{
		{"broker", func(c *fakeClock) *Source { s, _ := brokerSource(t, ca, brokerID("b-0"), c, nil); return s }, pool(ca.Cert), "prod/logs", "", nil},
		{"any cluster", func(c *fakeClock) *Source { s, _ := brokerSource(t, ca, brokerID("b-0"), c, nil); return s }, pool(ca.Cert), "", "", nil},
		// A user certificate has no server authentication: it cannot
		// serve as a broker.
		{"user cert", func(c *fakeClock) *Source { s, _ := brokerSource(t, ca, userID("mallory"), c, nil); return s }, pool(ca.Cert), "prod/logs", "", ErrUntrusted},
		{"operator cert", func(c *fakeClock) *Source {
			s, _ := brokerSource(t, ca, Identity{Namespace: "prod", Cluster: "logs", Kind: KindOperator, Name: "op"}, c, nil)
			return s
		}, pool(ca.Cert), "prod/logs", "", ErrUntrusted},
		// Even with server authentication, a user identity is no broker.
		{"forged user server", func(c *fakeClock) *Source { return forgedServer(t, ca, userID("mallory"), c) }, pool(ca.Cert), "prod/logs", "", ErrNotBroker},
		{"other CA", func(c *fakeClock) *Source { s, _ := brokerSource(t, other, brokerID("b-0"), c, nil); return s }, pool(ca.Cert), "prod/logs", "", ErrUntrusted},
		{"other cluster", func(c *fakeClock) *Source {
			s, _ := brokerSource(t, ca, Identity{Namespace: "prod", Cluster: "metrics", Kind: KindBroker, Name: "b-0"}, c, nil)
			return s
		}, pool(ca.Cert), "prod/logs", "", ErrWrongCluster},
		{"server name matches", sanned, pool(ca.Cert), "prod/logs", "logs.prod.svc", nil},
		{"server IP matches", sanned, pool(ca.Cert), "prod/logs", "127.0.0.1", nil},
		{"server name differs", sanned, pool(ca.Cert), "prod/logs", "evil.example", ErrUntrusted},
		{"no roots", func(c *fakeClock) *Source { s, _ := brokerSource(t, ca, brokerID("b-0"), c, nil); return s }, nil, "prod/logs", "", ErrNoTrustBundle},
		{"bad cluster ref", func(c *fakeClock) *Source { s, _ := brokerSource(t, ca, brokerID("b-0"), c, nil); return s }, pool(ca.Cert), "logs", "", ErrInvalidIdentity},
	} {
		t.Run(tc.name, func(t *testing.T) {
			clk := newClock(t0)
			s := tc.server(clk)
			res := handshake(t, ClientPortConfig(s), clientOf(user, tc.roots, tc.cluster, tc.serverName, clk))
			if !errors.Is(res.clientErr, tc.want) {
				t.Fatalf("client: %v, want %v", res.clientErr, tc.want)
			}
			if tc.want == nil && res.serverErr != nil {
				t.Fatalf("server: %v", res.serverErr)
			}
		})
	}
}

func TestPeerConfigs(t *testing.T) {
	ca := mustCA(t, "ca")
	other := mustCA(t, "other")
	for _, tc := range []struct {
		name       string
		dialer     Identity
		dialerCA   *CA
		dial       string
		server     Identity
		wantClient error // seen by the dialer
		wantServer error // seen by the peer port
	}{
		{"peer", brokerID("b-1"), ca, "b-0", brokerID("b-0"), nil, nil},
		{"wrong peer name", brokerID("b-1"), ca, "b-2", brokerID("b-0"), ErrWrongPeer, nil},
		{"user dials peer port", userID("alice"), ca, "b-0", brokerID("b-0"), nil, ErrNotBroker},
		{"operator dials peer port", Identity{Namespace: "prod", Cluster: "logs", Kind: KindOperator, Name: "op"}, ca, "b-0", brokerID("b-0"), nil, ErrNotBroker},
		{"broker of another cluster", Identity{Namespace: "prod", Cluster: "metrics", Kind: KindBroker, Name: "b-1"}, ca, "b-0", brokerID("b-0"), ErrWrongCluster, nil},
		{"broker of another CA", brokerID("b-1"), other, "b-0", brokerID("b-0"), ErrUntrusted, nil},
	} {
		t.Run(tc.name, func(t *testing.T) {
			clk := newClock(t0)
			srv, _ := brokerSource(t, ca, tc.server, clk, nil)
			dialer, _ := brokerSource(t, tc.dialerCA, tc.dialer, clk, tc.dialerCA.CertPEM())
			res := handshake(t, PeerServerConfig(srv), PeerDialConfig(dialer, tc.dial))
			if tc.wantClient != nil && !errors.Is(res.clientErr, tc.wantClient) {
				t.Fatalf("dialer: %v, want %v", res.clientErr, tc.wantClient)
			}
			if tc.wantServer != nil && !errors.Is(res.serverErr, tc.wantServer) {
				t.Fatalf("peer port: %v, want %v", res.serverErr, tc.wantServer)
			}
			if tc.wantClient == nil && tc.wantServer == nil {
				if res.clientErr != nil || res.serverErr != nil {
					t.Fatalf("handshake: dialer %v, peer port %v", res.clientErr, res.serverErr)
				}
				if id, err := IdentityOf(res.server.PeerCertificates[0]); err != nil || id != tc.dialer {
					t.Fatalf("peer port sees %s, %v", id, err)
				}
			} else if res.clientErr == nil && res.serverErr == nil {
				t.Fatal("handshake succeeded")
			}
		})
	}
	// The peer port's own checks, with dialers that accept the server
	// (a ClientConfig for any cluster, trusting both CAs).
	for _, tc := range []struct {
		name   string
		dialer *tls.Certificate
		want   error
	}{
		{"peer port refuses another cluster", mustLeaf(t, mustIssue(t, ca, Identity{Namespace: "prod", Cluster: "metrics", Kind: KindBroker, Name: "b-1"}, t0, time.Hour)), ErrWrongCluster},
		{"peer port refuses another CA", mustLeaf(t, mustIssue(t, other, brokerID("b-1"), t0, time.Hour)), ErrUntrusted},
		{"peer port refuses no identity", noIdentityLeaf(t, ca), ErrNoIdentity},
	} {
		t.Run(tc.name, func(t *testing.T) {
			clk := newClock(t0)
			srv, _ := brokerSource(t, ca, brokerID("b-0"), clk, nil)
			res := handshake(t, PeerServerConfig(srv), clientOf(tc.dialer, pool(ca.Cert, other.Cert), "", "", clk))
			if !errors.Is(res.serverErr, tc.want) || res.clientErr == nil {
				t.Fatalf("peer port: %v, want %v (dialer: %v)", res.serverErr, tc.want, res.clientErr)
			}
		})
	}
	// An anonymous client cannot even complete the handshake.
	clk := newClock(t0)
	srv, _ := brokerSource(t, ca, brokerID("b-0"), clk, nil)
	res := handshake(t, PeerServerConfig(srv), clientOf(nil, pool(ca.Cert), "prod/logs", "", clk))
	if res.serverErr == nil || res.clientErr == nil {
		t.Fatalf("anonymous peer: server %v client %v", res.serverErr, res.clientErr)
	}
}

// Rotation: a new leaf written to the files is presented at the next
// handshake, by servers and dialers; a second CA added to the bundle
// makes the leaves of both verify.
func TestRotation(t *testing.T) {
	ca1 := mustCA(t, "ca-1")
	ca2 := mustCA(t, "ca-2")
	clk := newClock(t0)
	srv, srvDir := brokerSource(t, ca1, brokerID("b-0"), clk, nil)
	dialer, dialerDir := brokerSource(t, ca1, brokerID("b-1"), clk, nil)
	peer := func() handshakeResult {
		t.Helper()
		return handshake(t, PeerServerConfig(srv), PeerDialConfig(dialer, "b-0"))
	}
	serials := func(res handshakeResult) (server, client string) {
		t.Helper()
		if res.clientErr != nil || res.serverErr != nil {
			t.Fatalf("handshake: dialer %v, peer port %v", res.clientErr, res.serverErr)
		}
		return res.client.PeerCertificates[0].SerialNumber.String(), res.server.PeerCertificates[0].SerialNumber.String()
	}
	s1, c1 := serials(peer())

	// New leaves from the same CA.
	clk.Advance(time.Minute)
	p := mustIssue(t, ca1, brokerID("b-0"), clk.Now(), time.Hour)
	srvDir.write(p.cert, p.key, ca1.CertPEM())
	q := mustIssue(t, ca1, brokerID("b-1"), clk.Now(), time.Hour)
	dialerDir.write(q.cert, q.key, ca1.CertPEM())
	clk.Advance(time.Second)
	s2, c2 := serials(peer())
	if s2 == s1 || s2 != mustCerts(t, p.cert)[0].SerialNumber.String() {
		t.Fatal("server still presents the old leaf")
	}
	if c2 == c1 || c2 != mustCerts(t, q.cert)[0].SerialNumber.String() {
		t.Fatal("dialer still presents the old leaf")
	}

	// The server moves to a leaf of ca2 before the dialer trusts ca2: refused.
	r := mustIssue(t, ca2, brokerID("b-0"), clk.Now(), time.Hour)
	both := append(ca1.CertPEM(), ca2.CertPEM()...)
	srvDir.write(r.cert, r.key, both)
	clk.Advance(time.Second)
	if res := peer(); !errors.Is(res.clientErr, ErrUntrusted) {
		t.Fatalf("ca2 leaf before the dialer trusts ca2: %v", res.clientErr)
	}
	// Both trust both CAs: a ca2 leaf and a ca1 leaf verify each other.
	dialerDir.write(q.cert, q.key, both)
	clk.Advance(time.Second)
	s3, _ := serials(peer())
	if s3 != mustCerts(t, r.cert)[0].SerialNumber.String() {
		t.Fatal("server does not present its ca2 leaf")
	}
	// And a client trusting the bundle verifies both.
	roots := pool(mustCerts(t, both)...)
	user := mustLeaf(t, mustIssue(t, ca1, userID("alice"), clk.Now(), time.Hour))
	res := handshake(t, ClientPortConfig(srv), clientOf(user, roots, "prod/logs", "", clk))
	if res.clientErr != nil {
		t.Fatalf("client with both CAs: %v", res.clientErr)
	}
	if id, err := VerifyClient(srv, res.server); err != nil || id != userID("alice") {
		t.Fatalf("ca1 user against a server of ca2 trusting both: %s, %v", id, err)
	}
}

func TestLoadClientFiles(t *testing.T) {
	ca := mustCA(t, "ca")
	dir := t.TempDir()
	f := DirFiles(dir)
	u := mustIssue(t, ca, userID("alice"), time.Now(), time.Hour)
	for name, b := range map[string][]byte{f.Cert: u.cert, f.Key: u.key, f.CA: ca.CertPEM()} {
		if err := os.WriteFile(name, b, 0o600); err != nil {
			t.Fatal(err)
		}
	}
	for _, tc := range []struct {
		name    string
		f       Files
		cluster string
		want    error
	}{
		{"with cert", f, "prod/logs", nil},
		{"anonymous", Files{CA: f.CA}, "", nil},
		{"no CA", Files{Cert: f.Cert, Key: f.Key}, "", ErrIncompleteFiles},
		{"cert without key", Files{Cert: f.Cert, CA: f.CA}, "", ErrIncompleteFiles},
		{"key without cert", Files{Key: f.Key, CA: f.CA}, "", ErrIncompleteFiles},
		{"bad cluster", f, "prod", ErrInvalidIdentity},
		{"missing CA file", Files{CA: filepath.Join(dir, "nope")}, "", os.ErrNotExist},
		{"key as CA", Files{CA: f.Key}, "", ErrBadPEM},
		{"mismatched key", Files{Cert: f.Cert, Key: f.CA, CA: f.CA}, "", ErrBadKey},
	} {
		t.Run(tc.name, func(t *testing.T) {
			cfg, err := LoadClientFiles(tc.f, tc.cluster, "")
			if !errors.Is(err, tc.want) {
				t.Fatalf("LoadClientFiles: %v, want %v", err, tc.want)
			}
			if err == nil && (cfg == nil || cfg.MinVersion != tls.VersionTLS13) {
				t.Fatalf("config %+v", cfg)
			}
		})
	}
	// The loaded config talks to a broker at the real clock.
	cfg, err := LoadClientFiles(f, "prod/logs", "")
	if err != nil {
		t.Fatal(err)
	}
	clk := newClock(time.Now())
	srv, _ := brokerSource(t, ca, brokerID("b-0"), clk, nil)
	res := handshake(t, ClientPortConfig(srv), cfg)
	if res.clientErr != nil {
		t.Fatalf("handshake: %v", res.clientErr)
	}
	if id, err := VerifyClient(srv, res.server); err != nil || id != userID("alice") {
		t.Fatalf("VerifyClient: %s, %v", id, err)
	}
	// No cluster named [L3]: the certificate's own cluster is required, so
	// a broker of another cluster trusted by the same bundle is refused.
	pinned, err := LoadClientFiles(f, "", "")
	if err != nil {
		t.Fatal(err)
	}
	if res := handshake(t, ClientPortConfig(srv), pinned); res.clientErr != nil {
		t.Fatalf("own cluster: %v", res.clientErr)
	}
	foreign, _ := brokerSource(t, ca, Identity{Namespace: "prod", Cluster: "metrics", Kind: KindBroker, Name: "b-0"}, clk, nil)
	pinned, err = LoadClientFilesForHost(f, "", "", "127.0.0.1")
	if err != nil {
		t.Fatal(err)
	}
	if res := handshake(t, ClientPortConfig(foreign), pinned); !errors.Is(res.clientErr, ErrWrongCluster) {
		t.Fatalf("another cluster's broker without --cluster: %v, want ErrWrongCluster", res.clientErr)
	}
	// An anonymous client names no cluster and accepts any trusted one.
	anon, err := LoadClientFiles(Files{CA: f.CA}, "", "")
	if err != nil {
		t.Fatal(err)
	}
	if res := handshake(t, ClientPortConfig(foreign), anon); res.clientErr != nil {
		t.Fatalf("anonymous client: %v", res.clientErr)
	}
}
