package member

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/go-logr/logr"
	"github.com/prometheus/client_golang/prometheus"

	"felix.dev/felix/broker/auth"
	"felix.dev/felix/broker/client"
	"felix.dev/felix/broker/datadir"
	"felix.dev/felix/broker/logstore"
	"felix.dev/felix/broker/metricsauth"
	"felix.dev/felix/broker/record"
	"felix.dev/felix/broker/replica"
	"felix.dev/felix/broker/replication"
	"felix.dev/felix/broker/server"
	"felix.dev/felix/broker/wire"
	"felix.dev/felix/internal/pki"
)

const (
	testNS      = "prod"
	testCluster = "logs"
)

var ordersShard = record.ShardID{Stream: "orders", Shard: 0}

func identity(kind pki.Kind, name string) pki.Identity {
	return pki.Identity{Namespace: testNS, Cluster: testCluster, Kind: kind, Name: name}
}

// writeCert issues a certificate for id from ca and writes the Secret
// layout (tls.crt, tls.key, ca.crt) into dir, each file replaced by a
// rename as the kubelet's symlink swap replaces it.
func writeCert(t *testing.T, ca *pki.CA, id pki.Identity, dir string) {
	t.Helper()
	certPEM, keyPEM, err := ca.Issue(pki.LeafRequest{Identity: id, Now: time.Now(), Validity: time.Hour}, nil)
	if err != nil {
		t.Fatal(err)
	}
	for name, b := range map[string][]byte{pki.CAFile: ca.CertPEM(), pki.KeyFile: keyPEM, pki.CertFile: certPEM} {
		tmp := filepath.Join(dir, "."+name+".tmp")
		if err := os.WriteFile(tmp, b, 0o600); err != nil {
			t.Fatal(err)
		}
		if err := os.Rename(tmp, filepath.Join(dir, name)); err != nil {
			t.Fatal(err)
		}
	}
}

// keyPair issues id's certificate as a tls.Certificate.
func keyPair(t *testing.T, ca *pki.CA, id pki.Identity) *tls.Certificate {
	t.Helper()
	return keyPairUID(t, ca, id, "")
}

// keyPairUID issues id's certificate bound to object uid ("" for none).
func keyPairUID(t *testing.T, ca *pki.CA, id pki.Identity, uid string) *tls.Certificate {
	t.Helper()
	certPEM, keyPEM, err := ca.Issue(pki.LeafRequest{Identity: id, UID: uid, Now: time.Now(), Validity: time.Hour}, nil)
	if err != nil {
		t.Fatal(err)
	}
	c, err := pki.ParseLeaf(certPEM, keyPEM)
	if err != nil {
		t.Fatal(err)
	}
	return &c
}

func roots(ca *pki.CA) *x509.CertPool {
	p := x509.NewCertPool()
	p.AddCert(ca.Cert)
	return p
}

// peers is the test's registry of peer addresses (status.peerAddress).
type peers struct {
	mu    sync.Mutex
	addrs map[replication.NodeID]string
}

func (p *peers) resolve(n replication.NodeID) (string, error) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if a, ok := p.addrs[n]; ok {
		return a, nil
	}
	return "", fmt.Errorf("%s: %w", n, errNoPeerAddress)
}

// testMember is the serving half of a secure member, in process: a store,
// a replica manager dialling peers over mTLS, the client and peer
// servers ServerOptions builds, on loopback listeners.
type testMember struct {
	name       replication.NodeID
	id         datadir.StorageID
	src        *pki.Source
	tlsDir     string
	mgr        *replica.Manager
	clientAddr string
	peerAddr   string
	// reg holds the member's TLS metrics (NewTLSMetrics).
	reg *prometheus.Registry
}

func startMember(t *testing.T, ca *pki.CA, name string, id byte, reg *peers, authz auth.Authorizer) *testMember {
	t.Helper()
	dir := t.TempDir()
	writeCert(t, ca, identity(pki.KindBroker, name), dir)
	src, err := pki.NewSource(pki.SourceOptions{Files: pki.DirFiles(dir), MinCheck: -1})
	if err != nil {
		t.Fatal(err)
	}
	store, err := logstore.Open(logstore.Options{Dir: t.TempDir(), Fsync: logstore.FsyncNone, ValueThreshold: logstore.BrokerValueThreshold, CommitLogValues: true})
	if err != nil {
		t.Fatal(err)
	}
	m := &testMember{name: replication.NodeID(name), src: src, tlsDir: dir}
	for i := range m.id {
		m.id[i] = id ^ byte(i)
	}
	m.mgr, err = replica.NewManager(replica.Options{Store: store, Self: m.name, SelfStorageID: m.id, Incarnation: 1,
		Resolve: reg.resolve, PeerTLS: PeerDialTLS(src), PassInterval: 20 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	cso, pso := ServerOptions(server.Options{StorageID: m.id[:]}, m.mgr.ReplicationHandler(), src, authz)
	m.reg = prometheus.NewRegistry()
	tm, err := NewTLSMetrics(m.reg, src)
	if err != nil {
		t.Fatal(err)
	}
	pso.OnTLSHandshakeError = tm.AcceptFailed
	if pso.Role != server.RolePeer || cso.Role != server.RoleClient || cso.TLS == nil || pso.TLS == nil || cso.InsecurePeersOnClientPort {
		t.Fatalf("secure ServerOptions: client %+v, peer %+v", cso.Role, pso.Role)
	}
	cs, ps := server.New(m.mgr.Shards(), cso), server.New(m.mgr.Shards(), pso)
	cl, pl := listen(t), listen(t)
	go func() { _ = cs.Serve(cl) }()
	go func() { _ = ps.Serve(pl) }()
	m.clientAddr, m.peerAddr = cl.Addr().String(), pl.Addr().String()
	reg.mu.Lock()
	reg.addrs[m.name] = m.peerAddr
	reg.mu.Unlock()
	t.Cleanup(func() {
		cs.Close()
		ps.Close()
		m.mgr.Close()
		_ = store.Close()
	})
	return m
}

func listen(t *testing.T) net.Listener {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	return l
}

func eventually(t *testing.T, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(15 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting for %s", what)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// leadOrders starts the orders shard on every member, led by the first.
func leadOrders(t *testing.T, ms ...*testMember) {
	t.Helper()
	var names []replication.NodeID
	a := replication.Assignment{Leader: ms[0].name, Epoch: 1, LeaderIncarnation: 1, Counted: map[replication.NodeID]replication.StorageID{}}
	for _, m := range ms {
		names = append(names, m.name)
		a.Counted[m.name] = replication.StorageID(m.id.String())
	}
	for _, m := range ms {
		if err := m.mgr.EnsureShard(ordersShard, names, replication.AckAll, 0); err != nil {
			t.Fatal(err)
		}
		if err := m.mgr.SetAssignment(ordersShard, a); err != nil {
			t.Fatal(err)
		}
	}
	eventually(t, "leader with fence committed", func() bool {
		st, err := ms[0].mgr.Status(ordersShard)
		return err == nil && st.Role == replication.RoleLeader && st.FenceCommitted
	})
}

func dialClient(t *testing.T, ca *pki.CA, addr string, cert *tls.Certificate) (*client.Client, error) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	c, err := client.Dial(ctx, addr, client.Options{TLS: pki.ClientConfig(cert, roots(ca), testNS+"/"+testCluster, "")})
	if err == nil {
		t.Cleanup(func() { _ = c.Close() })
	}
	return c, err
}

func appendOne(c *client.Client, payload string) error {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	_, err := c.Append(ctx, ordersShard, []record.Record{{Payload: []byte(payload)}}, nil)
	return err
}

// Two secure members replicate over the peer port with mutual TLS: an
// append under AckAll is acknowledged only once the follower, reached at
// its peer address with its broker certificate checked, holds it. The
// client is a FelixUser authenticated by certificate and authorized by
// the table; a user without a grant is refused.
func TestSecureMembersReplicateOverMutualTLS(t *testing.T) {
	ca, err := pki.NewCA("test-ca", time.Now(), 24*time.Hour, nil)
	if err != nil {
		t.Fatal(err)
	}
	table := auth.NewTable()
	table.Set("alice", "uid-alice", []auth.Grant{{Stream: "orders", Ops: []auth.Operation{auth.OpAppend, auth.OpRead}}})
	table.Set("bob", "uid-bob", nil)
	reg := &peers{addrs: map[replication.NodeID]string{}}
	a := startMember(t, ca, "logs-0", 1, reg, table)
	b := startMember(t, ca, "logs-1", 2, reg, table)
	leadOrders(t, a, b)

	alice, err := dialClient(t, ca, a.clientAddr, keyPairUID(t, ca, identity(pki.KindUser, "alice"), "uid-alice"))
	if err != nil {
		t.Fatal(err)
	}
	for i := range 3 {
		if err := appendOne(alice, fmt.Sprintf("r%d", i)); err != nil {
			t.Fatalf("append %d (AckAll, replicated over the peer port): %v", i, err)
		}
	}
	st, err := b.mgr.Status(ordersShard)
	if err != nil || st.Role != replication.RoleFollower {
		t.Fatalf("follower status %+v, %v", st, err)
	}

	bob, err := dialClient(t, ca, a.clientAddr, keyPairUID(t, ca, identity(pki.KindUser, "bob"), "uid-bob"))
	if err != nil {
		t.Fatal(err)
	}
	var we *wire.Error
	if err := appendOne(bob, "x"); !errors.As(err, &we) || we.Code != wire.CodeNotAuthorized {
		t.Fatalf("bob's append: %v, want NotAuthorized", err)
	}
	// Anonymous clients are refused at the Hello (the table allows none).
	if _, err := dialClient(t, ca, a.clientAddr, nil); err == nil {
		t.Fatal("anonymous client accepted")
	}
}

// A FelixUser deleted and recreated under the same name (a new uid,
// maybe someone else's, with other grants) is not matched by the earlier
// user's certificate, which is still valid: the member puts the
// certificate's uid into the principal and the table refuses it with
// NotAuthorized. The new user's certificate works; a user certificate
// that carries no uid is refused.
func TestRecreatedUserOldCertificateRefused(t *testing.T) {
	ca, err := pki.NewCA("test-ca", time.Now(), 24*time.Hour, nil)
	if err != nil {
		t.Fatal(err)
	}
	table := auth.NewTable()
	table.Set("alice", "uid-1", []auth.Grant{{Stream: "orders", Ops: []auth.Operation{auth.OpAppend}}})
	reg := &peers{addrs: map[replication.NodeID]string{}}
	m := startMember(t, ca, "logs-0", 1, reg, table)
	leadOrders(t, m)
	oldCert := keyPairUID(t, ca, identity(pki.KindUser, "alice"), "uid-1")
	old, err := dialClient(t, ca, m.clientAddr, oldCert)
	if err != nil {
		t.Fatal(err)
	}
	if err := appendOne(old, "first alice"); err != nil {
		t.Fatalf("the first alice's append: %v", err)
	}

	// What the access watcher does when the FelixUser is deleted and
	// another one of the same name is created.
	table.Delete("alice")
	table.Set("alice", "uid-2", []auth.Grant{{Stream: "orders", Ops: []auth.Operation{auth.OpAppend, auth.OpRead}}})

	notAuthorized := func(what string, err error) {
		t.Helper()
		var we *wire.Error
		if !errors.As(err, &we) || we.Code != wire.CodeNotAuthorized {
			t.Fatalf("%s: %v, want NotAuthorized", what, err)
		}
	}
	// The connection made before and a new one with the old certificate.
	err = appendOne(old, "stale")
	notAuthorized("old certificate, old connection", err)
	if !strings.Contains(err.Error(), "certificate was issued to an earlier FelixUser of this name") {
		t.Fatalf("refusal %q does not say why", err)
	}
	again, err := dialClient(t, ca, m.clientAddr, oldCert)
	if err != nil {
		t.Fatal(err)
	}
	notAuthorized("old certificate, new connection", appendOne(again, "stale"))

	unbound, err := dialClient(t, ca, m.clientAddr, keyPair(t, ca, identity(pki.KindUser, "alice")))
	if err != nil {
		t.Fatal(err)
	}
	notAuthorized("certificate without a uid", appendOne(unbound, "unbound"))

	fresh, err := dialClient(t, ca, m.clientAddr, keyPairUID(t, ca, identity(pki.KindUser, "alice"), "uid-2"))
	if err != nil {
		t.Fatal(err)
	}
	if err := appendOne(fresh, "second alice"); err != nil {
		t.Fatalf("the new alice's append: %v", err)
	}
}

// A client (or anything) presenting a user certificate to the peer port
// is refused by the TLS handshake: no Felix frame is ever read from it.
func TestPeerPortRefusesUserCertificateAtHandshake(t *testing.T) {
	ca, err := pki.NewCA("test-ca", time.Now(), 24*time.Hour, nil)
	if err != nil {
		t.Fatal(err)
	}
	reg := &peers{addrs: map[replication.NodeID]string{}}
	m := startMember(t, ca, "logs-0", 1, reg, auth.NewTable())
	for _, tc := range []struct {
		name string
		cert *tls.Certificate
	}{
		{"user", keyPair(t, ca, identity(pki.KindUser, "alice"))},
		{"operator", keyPair(t, ca, identity(pki.KindOperator, "felix-operator"))},
		{"none", nil},
	} {
		t.Run(tc.name, func(t *testing.T) {
			nc, err := net.Dial("tcp", m.peerAddr)
			if err != nil {
				t.Fatal(err)
			}
			defer func() { _ = nc.Close() }()
			_ = nc.SetDeadline(time.Now().Add(5 * time.Second))
			tc := tls.Client(nc, pki.ClientConfig(tc.cert, roots(ca), testNS+"/"+testCluster, ""))
			err = tc.Handshake()
			if err == nil {
				// TLS 1.3: the server checks the client's certificate
				// after the client's side completed; its alert is what
				// the first read sees.
				_, err = tc.Read(make([]byte, 1))
			}
			if err == nil {
				t.Fatal("peer port accepted the connection")
			}
			// The refusal is the server's TLS alert, not a Felix answer.
			var op *net.OpError
			if !errors.As(err, &op) || op.Op != "remote error" {
				t.Fatalf("peer port refusal %v (%T), want the server's TLS alert", err, err)
			}
		})
	}
	// A broker certificate of the cluster passes the handshake.
	tc, err := tls.Dial("tcp", m.peerAddr, pki.ClientConfig(keyPair(t, ca, identity(pki.KindBroker, "logs-1")), roots(ca), testNS+"/"+testCluster, ""))
	if err != nil {
		t.Fatalf("broker certificate: %v", err)
	}
	_ = tc.Close()
	// [L1] The refusals are counted, by reason, on the accepting side.
	eventually(t, "handshake refusals counted", func() bool {
		return gauge(t, m.reg, "felix_broker_peer_handshake_failures_total", "reason", ReasonNotBroker) == 2 &&
			gauge(t, m.reg, "felix_broker_peer_handshake_failures_total", "reason", ReasonHandshakeOther) == 1
	})
}

// gauge returns the value of the sample of name whose label key is value
// (summed over other labels), from reg.
func gauge(t *testing.T, reg *prometheus.Registry, name, key, value string) float64 {
	t.Helper()
	mfs, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	sum := 0.0
	for _, mf := range mfs {
		if mf.GetName() != name {
			continue
		}
		for _, m := range mf.GetMetric() {
			match := key == ""
			for _, l := range m.GetLabel() {
				if l.GetName() == key && l.GetValue() == value {
					match = true
				}
			}
			if !match {
				continue
			}
			switch {
			case m.GetCounter() != nil:
				sum += m.GetCounter().GetValue()
			case m.GetGauge() != nil:
				sum += m.GetGauge().GetValue()
			}
		}
	}
	return sum
}

// TestTLSMetricsExpiryAndReloadFailures [M3]: the certificate expiry
// gauge is the served chain's NotAfter, and a refused reload (another
// broker's certificate) is counted while the old one is kept.
func TestTLSMetricsExpiryAndReloadFailures(t *testing.T) {
	ca, err := pki.NewCA("test-ca", time.Now(), 24*time.Hour, nil)
	if err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	writeCert(t, ca, identity(pki.KindBroker, "logs-0"), dir)
	src, err := pki.NewSource(pki.SourceOptions{Files: pki.DirFiles(dir), MinCheck: -1})
	if err != nil {
		t.Fatal(err)
	}
	reg := prometheus.NewRegistry()
	if _, err := NewTLSMetrics(reg, src); err != nil {
		t.Fatal(err)
	}
	c, _, _ := src.Current()
	if got := gauge(t, reg, "felix_broker_tls_certificate_expiry_timestamp_seconds", "", ""); got != float64(c.Leaf.NotAfter.Unix()) {
		t.Fatalf("expiry %v, want %v", got, c.Leaf.NotAfter.Unix())
	}
	if got := gauge(t, reg, "felix_broker_tls_reload_failures_total", "", ""); got != 0 {
		t.Fatalf("reload failures %v", got)
	}
	writeCert(t, ca, identity(pki.KindBroker, "logs-1"), dir)
	if got := gauge(t, reg, "felix_broker_tls_reload_failures_total", "", ""); got != 1 {
		t.Fatalf("reload failures %v after another broker's certificate, want 1", got)
	}
	if src.Self() != identity(pki.KindBroker, "logs-0") {
		t.Fatalf("Self = %s", src.Self())
	}
}

// TestPeerPortBounds [L11]: the peer port takes the peer bounds, the client
// port keeps the ones it was given.
func TestPeerPortBounds(t *testing.T) {
	ca, err := pki.NewCA("test-ca", time.Now(), 24*time.Hour, nil)
	if err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	writeCert(t, ca, identity(pki.KindBroker, "logs-0"), dir)
	src, err := pki.NewSource(pki.SourceOptions{Files: pki.DirFiles(dir)})
	if err != nil {
		t.Fatal(err)
	}
	base := server.Options{MaxConnections: 1024, MaxConnectionsPerAddress: 256, HandshakeTimeout: 10 * time.Second}
	cso, pso := ServerOptions(base, nil, src, auth.NewTable())
	if cso.MaxConnections != 1024 || cso.MaxConnectionsPerAddress != 256 || cso.HandshakeTimeout != 10*time.Second {
		t.Fatalf("client port bounds %d %d %v", cso.MaxConnections, cso.MaxConnectionsPerAddress, cso.HandshakeTimeout)
	}
	if pso.MaxConnections != DefaultPeerMaxConnections || pso.MaxConnectionsPerAddress != DefaultPeerMaxConnectionsPerAddress ||
		pso.HandshakeTimeout != DefaultPeerHandshakeTimeout {
		t.Fatalf("peer port bounds %d %d %v", pso.MaxConnections, pso.MaxConnectionsPerAddress, pso.HandshakeTimeout)
	}
	if cso.Now == nil || pso.Now == nil {
		t.Fatal("the servers do not take the Source's clock")
	}
}

// Rotated certificate files are presented by the next handshake, without
// a restart, and a connection made before keeps working.
func TestRotatedCertificateServedWithoutRestart(t *testing.T) {
	ca, err := pki.NewCA("test-ca", time.Now(), 24*time.Hour, nil)
	if err != nil {
		t.Fatal(err)
	}
	table := auth.NewTable()
	table.Set("alice", "uid-alice", []auth.Grant{{Stream: "orders", Ops: []auth.Operation{auth.OpAppend}}})
	reg := &peers{addrs: map[replication.NodeID]string{}}
	m := startMember(t, ca, "logs-0", 1, reg, table)
	leadOrders(t, m)
	aliceCert := keyPairUID(t, ca, identity(pki.KindUser, "alice"), "uid-alice")
	before, err := dialClient(t, ca, m.clientAddr, aliceCert)
	if err != nil {
		t.Fatal(err)
	}
	if err := appendOne(before, "before"); err != nil {
		t.Fatal(err)
	}
	served := func() *x509.Certificate {
		c, err := tls.Dial("tcp", m.clientAddr, pki.ClientConfig(aliceCert, roots(ca), testNS+"/"+testCluster, ""))
		if err != nil {
			t.Fatal(err)
		}
		defer func() { _ = c.Close() }()
		return c.ConnectionState().PeerCertificates[0]
	}
	old := served()

	writeCert(t, ca, identity(pki.KindBroker, "logs-0"), m.tlsDir)
	eventually(t, "the new certificate served", func() bool { return served().SerialNumber.Cmp(old.SerialNumber) != 0 })
	if err := appendOne(before, "after"); err != nil {
		t.Fatalf("connection from before the rotation: %v", err)
	}
	if _, err := dialClient(t, ca, m.clientAddr, aliceCert); err != nil {
		t.Fatalf("new connection after the rotation: %v", err)
	}
}

// /live and /ready are plain HTTP and answer anyone; /metrics is HTTPS
// with the broker's certificate, refused without credentials, served to a
// broker certificate of the cluster, and not on the probe port.
func TestMetricsPortAuthenticates(t *testing.T) {
	ca, err := pki.NewCA("test-ca", time.Now(), 24*time.Hour, nil)
	if err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	writeCert(t, ca, identity(pki.KindBroker, "logs-0"), dir)
	src, err := pki.NewSource(pki.SourceOptions{Files: pki.DirFiles(dir), MinCheck: -1})
	if err != nil {
		t.Fatal(err)
	}
	hl, ml := listen(t), listen(t)
	cfg := Config{HTTP: hl, Metrics: ml, TLS: src, MetricsAuth: &metricsauth.Options{}}
	probes, metrics, metricsL, err := httpServers(cfg, func() error { return nil }, prometheus.NewRegistry(), logr.Discard())
	if err != nil {
		t.Fatal(err)
	}
	go func() { _ = probes.Serve(hl) }()
	go func() { _ = metrics.Serve(metricsL) }()
	t.Cleanup(func() { _ = probes.Close(); _ = metrics.Close() })

	plain := &http.Client{Timeout: 5 * time.Second}
	httpsWith := func(cert *tls.Certificate) *http.Client {
		return &http.Client{Timeout: 5 * time.Second, Transport: &http.Transport{
			TLSClientConfig: pki.ClientConfig(cert, roots(ca), testNS+"/"+testCluster, "")}}
	}
	for _, tc := range []struct {
		name string
		c    *http.Client
		url  string
		want int
	}{
		{"live", plain, "http://" + hl.Addr().String() + "/live", 200},
		{"ready", plain, "http://" + hl.Addr().String() + "/ready", 200},
		{"no metrics on the probe port", plain, "http://" + hl.Addr().String() + "/metrics", 404},
		{"metrics without credentials", httpsWith(nil), "https://" + ml.Addr().String() + "/metrics", 401},
		{"metrics with a user certificate", httpsWith(keyPair(t, ca, identity(pki.KindUser, "alice"))), "https://" + ml.Addr().String() + "/metrics", 401},
		{"metrics with a broker certificate", httpsWith(keyPair(t, ca, identity(pki.KindBroker, "logs-1"))), "https://" + ml.Addr().String() + "/metrics", 200},
	} {
		t.Run(tc.name, func(t *testing.T) {
			resp, err := tc.c.Get(tc.url)
			if err != nil {
				t.Fatal(err)
			}
			_ = resp.Body.Close()
			if resp.StatusCode != tc.want {
				t.Fatalf("GET %s: %d, want %d", tc.url, resp.StatusCode, tc.want)
			}
		})
	}
}
