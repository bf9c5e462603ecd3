package replica

import (
	"bufio"
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"errors"
	"math"
	"math/big"
	"net"
	"net/url"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"felix.dev/felix/broker/auth"
	"felix.dev/felix/broker/logstore"
	"felix.dev/felix/broker/peer"
	"felix.dev/felix/broker/record"
	"felix.dev/felix/broker/replication"
	"felix.dev/felix/broker/wire"
)

// testPKI is a throw-away certificate authority for the peer port: every
// broker certificate names felix://test/felix/broker/<name> in a URI SAN,
// as brokers' certificates do. (The runtime uses the pki package; this is
// the smallest stand-in that exercises the server's hooks.)
type testPKI struct {
	ca     *x509.Certificate
	key    *ecdsa.PrivateKey
	pool   *x509.CertPool
	server tls.Certificate
	serial int64
}

const testBrokerURI = "felix://test/felix/broker/"

func newTestPKI(t testing.TB) *testPKI {
	t.Helper()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	tmpl := &x509.Certificate{SerialNumber: big.NewInt(1), Subject: pkix.Name{CommonName: "test CA"},
		NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(time.Hour),
		IsCA: true, BasicConstraintsValid: true, KeyUsage: x509.KeyUsageCertSign}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		t.Fatal(err)
	}
	ca, err := x509.ParseCertificate(der)
	if err != nil {
		t.Fatal(err)
	}
	p := &testPKI{ca: ca, key: key, pool: x509.NewCertPool(), serial: 1}
	p.pool.AddCert(ca)
	p.server = p.issue(t, "", []net.IP{net.IPv4(127, 0, 0, 1)})
	return p
}

// issue signs a certificate for broker name (a server certificate for
// ips when name is empty).
func (p *testPKI) issue(t testing.TB, name string, ips []net.IP) tls.Certificate {
	t.Helper()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	p.serial++
	tmpl := &x509.Certificate{SerialNumber: big.NewInt(p.serial), Subject: pkix.Name{CommonName: "broker " + name},
		NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(time.Hour), IPAddresses: ips,
		KeyUsage: x509.KeyUsageDigitalSignature, ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageClientAuth, x509.ExtKeyUsageServerAuth}}
	if name != "" {
		u, err := url.Parse(testBrokerURI + name)
		if err != nil {
			t.Fatal(err)
		}
		tmpl.URIs = []*url.URL{u}
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, p.ca, &key.PublicKey, p.key)
	if err != nil {
		t.Fatal(err)
	}
	return tls.Certificate{Certificate: [][]byte{der}, PrivateKey: key}
}

// serverConfig is the peer port's TLS: client certificates are asked for
// and checked against the CA if given; Authenticate decides.
func (p *testPKI) serverConfig(testing.TB) *tls.Config {
	return &tls.Config{Certificates: []tls.Certificate{p.server}, ClientCAs: p.pool,
		ClientAuth: tls.VerifyClientCertIfGiven, MinVersion: tls.VersionTLS13}
}

func (p *testPKI) clientConfig(t testing.TB, name replication.NodeID) *tls.Config {
	return &tls.Config{Certificates: []tls.Certificate{p.issue(t, string(name), nil)}, RootCAs: p.pool, MinVersion: tls.VersionTLS13}
}

// dialer is a node's peer dialer: TLS with its own broker certificate.
func (p *testPKI) dialer(t testing.TB, name replication.NodeID) func(context.Context, string) (net.Conn, error) {
	d := &tls.Dialer{Config: p.clientConfig(t, name)}
	return func(ctx context.Context, addr string) (net.Conn, error) { return d.DialContext(ctx, "tcp", addr) }
}

var errNoBrokerCert = errors.New("no verified broker certificate")

// authenticate is the peer port's Authenticate: the verified chain's leaf
// names the broker.
func (p *testPKI) authenticate(cs *tls.ConnectionState) (auth.Principal, error) {
	if cs == nil || len(cs.VerifiedChains) == 0 {
		return auth.Principal{}, errNoBrokerCert
	}
	for _, u := range cs.VerifiedChains[0][0].URIs {
		if name, ok := strings.CutPrefix(u.String(), testBrokerURI); ok {
			return auth.Principal{Kind: auth.Broker, Name: name}, nil
		}
	}
	return auth.Principal{}, errNoBrokerCert
}

func gatheredCounter(t testing.TB, reg *prometheus.Registry, name, label, value string) float64 {
	t.Helper()
	families, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	for _, mf := range families {
		if mf.GetName() != name {
			continue
		}
		for _, m := range mf.GetMetric() {
			for _, lp := range m.GetLabel() {
				if lp.GetName() == label && lp.GetValue() == value {
					return m.GetCounter().GetValue()
				}
			}
		}
	}
	return 0
}

// securedCluster is a 3-broker cluster replicating over mutual-TLS peer
// ports, leader a, with n records acknowledged and committed on b.
func securedCluster(t *testing.T, n int) *cluster {
	c := newClusterCfg(t, logstore.FsyncPeriodic, t.TempDir, 20*time.Millisecond, func(c *cluster) { c.pki = newTestPKI(t) }, "a", "b", "c")
	c.ensure(replication.AckQuorum, "a", "b", "c")
	c.assign(c.firstAssignment("a"))
	c.waitLeading(c.nodes["a"])
	appendN(t, dial(t, c.nodes["a"]), "r", n)
	waitFollowerCommitted(t, c, "b")
	return c
}

// waitFollowerCommitted waits until follower holds and has committed the
// leader a's whole data log.
func waitFollowerCommitted(t *testing.T, c *cluster, follower replication.NodeID) {
	t.Helper()
	lead, ok := c.nodes["a"].store.Lookup(record.LogID{ShardID: testShard, Log: record.LogData})
	if !ok {
		t.Fatal("leader has no data log")
	}
	want := lead.Describe().Tail
	eventually(t, string(follower)+" committed the leader's log", 10*time.Second, func() bool {
		l, ok := c.nodes[follower].store.Lookup(record.LogID{ShardID: testShard, Log: record.LogData})
		return ok && l.Describe().Committed >= want
	})
}

// forgedAppend is the Ship Append of the security issue: it names the
// leader a as sender, at epoch 2^64-1, and ships a record at offset 1 of
// another epoch, so a follower that took it would truncate its committed
// records from offset 1 on.
func forgedAppend(t *testing.T, held []record.Record) wire.Frame {
	t.Helper()
	f, err := peer.Encode(testShard, replication.Message{Type: replication.MsgAppend, From: "a", To: "b",
		Epoch: math.MaxUint64, Log: record.LogData, Index: 1, PrevEpoch: held[0].Epoch, Commit: 0,
		Records: []record.Record{{Kind: record.KindData, Offset: 1, Epoch: math.MaxUint64, Payload: []byte("forged")}}})
	if err != nil {
		t.Fatal(err)
	}
	return f
}

// handshake sends a Hello offering every feature on nc and returns a
// reader positioned after the HelloOK.
func handshakeRaw(t *testing.T, nc net.Conn) *bufio.Reader {
	t.Helper()
	_ = nc.SetDeadline(time.Now().Add(10 * time.Second))
	body, err := wire.EncodeHello(wire.Hello{Version: wire.ProtocolVersion, Features: wire.KnownFeatures})
	if err != nil {
		t.Fatal(err)
	}
	if err := wire.WriteFrame(nc, wire.Frame{Type: wire.MsgHello, Body: body}); err != nil {
		t.Fatal(err)
	}
	br := bufio.NewReader(nc)
	f, err := wire.ReadFrame(br, wire.DefaultMaxFrameSize)
	if err != nil || f.Type != wire.MsgHelloOK {
		t.Fatalf("hello: %v %v", f.Type, err)
	}
	return br
}

// expectUnchanged appends one more record through the leader, waits until
// b has committed it, and checks b's data log is before plus that record,
// at the cluster's epoch: nothing of a forged frame got in.
func expectUnchanged(t *testing.T, c *cluster, before []record.Record) {
	t.Helper()
	appendN(t, dial(t, c.nodes["a"]), "after", 1)
	waitFollowerCommitted(t, c, "b")
	after := readAllRaw(t, c.nodes["b"], record.LogData)
	if len(after) != len(before)+1 {
		t.Fatalf("b holds %d records, want %d (+1 appended after the forged frame)", len(after), len(before)+1)
	}
	for i, r := range before {
		a := after[i]
		if a.Offset != r.Offset || a.Epoch != r.Epoch || string(a.Payload) != string(r.Payload) {
			t.Fatalf("b's record %d changed: %+v -> %+v", i, r, a)
		}
	}
	if e := after[len(before)].Epoch; e != before[len(before)-1].Epoch {
		t.Fatalf("the next record has epoch %d, want %d", e, before[len(before)-1].Epoch)
	}
	st, err := c.nodes["b"].mgr.Status(testShard)
	if err != nil || st.Epoch != 1 {
		t.Fatalf("b's status %+v (%v), want epoch 1", st, err)
	}
}

// The issue's attack: a forged Ship Append sent to a follower's client
// port is refused with NotAuthorized, counted, and the follower's log
// (tail, epochs, records) is unchanged.
func TestForgedShipOnClientPortIsRefused(t *testing.T) {
	c := securedCluster(t, 5)
	b := c.nodes["b"]
	before := readAllRaw(t, b, record.LogData)

	nc, err := net.DialTimeout("tcp", b.addr, 5*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = nc.Close() }()
	br := handshakeRaw(t, nc)
	if err := wire.WriteFrame(nc, forgedAppend(t, before)); err != nil {
		t.Fatal(err)
	}
	f, err := wire.ReadFrame(br, wire.DefaultMaxFrameSize)
	if err != nil {
		t.Fatalf("no answer to the forged frame: %v", err)
	}
	if f.Type != wire.MsgError {
		t.Fatalf("forged frame answered with %v", f.Type)
	}
	e, err := wire.DecodeError(f.Body, wire.KnownFeatures)
	if err != nil || e.Code != wire.CodeNotAuthorized {
		t.Fatalf("forged frame answered %v (%v), want NotAuthorized", e, err)
	}
	if n := gatheredCounter(t, b.srvReg, "felix_broker_replication_frames_refused_total", "reason", "client_port"); n != 1 {
		t.Fatalf("frames refused on the client port = %v, want 1", n)
	}
	expectUnchanged(t, c, before)
}

// A broker of the cluster can speak only for itself: a frame on a peer
// connection authenticated as broker c that names a as its sender is
// dropped, counted, and the follower's log is unchanged.
func TestPeerFrameWithForgedSenderIsDropped(t *testing.T) {
	c := securedCluster(t, 5)
	b := c.nodes["b"]
	before := readAllRaw(t, b, record.LogData)

	nc, err := tls.Dial("tcp", b.peerAddr, c.pki.clientConfig(t, "c"))
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = nc.Close() }()
	handshakeRaw(t, nc)
	if err := wire.WriteFrame(nc, forgedAppend(t, before)); err != nil {
		t.Fatal(err)
	}
	eventually(t, "the forged frame counted as sender_mismatch", 10*time.Second, func() bool {
		return gatheredCounter(t, b.srvReg, "felix_broker_replication_frames_refused_total", "reason", "sender_mismatch") == 1
	})
	expectUnchanged(t, c, before)
}

// The peer port refuses a connection without a broker certificate at its
// Hello.
func TestPeerPortRefusesWithoutCertificate(t *testing.T) {
	c := securedCluster(t, 1)
	b := c.nodes["b"]
	nc, err := tls.Dial("tcp", b.peerAddr, &tls.Config{RootCAs: c.pki.pool, MinVersion: tls.VersionTLS13})
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = nc.Close() }()
	_ = nc.SetDeadline(time.Now().Add(10 * time.Second))
	body, _ := wire.EncodeHello(wire.Hello{Version: wire.ProtocolVersion, Features: wire.KnownFeatures})
	if err := wire.WriteFrame(nc, wire.Frame{Type: wire.MsgHello, Body: body}); err != nil {
		t.Fatal(err)
	}
	f, err := wire.ReadFrame(bufio.NewReader(nc), wire.DefaultMaxFrameSize)
	if err != nil || f.Type != wire.MsgError {
		t.Fatalf("hello without a certificate answered %v %v", f.Type, err)
	}
	if e, err := wire.DecodeError(f.Body, wire.KnownFeatures); err != nil || e.Code != wire.CodeUnauthenticated {
		t.Fatalf("hello without a certificate answered %v (%v), want Unauthenticated", e, err)
	}
}
