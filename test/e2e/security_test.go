package e2e

import (
	"bufio"
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"math"
	"net"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	felixv1 "felix.dev/felix/api/v1alpha1"
	"felix.dev/felix/broker/auth"
	"felix.dev/felix/broker/client"
	"felix.dev/felix/broker/logstore"
	"felix.dev/felix/broker/peer"
	"felix.dev/felix/broker/record"
	"felix.dev/felix/broker/replication"
	"felix.dev/felix/broker/wire"
	"felix.dev/felix/controllers"
	"felix.dev/felix/internal/pki"
)

// The security tests (issue #24) run on real broker processes serving
// TLS with certificates the operator issued, against the real API server:
// what the network can send a broker, who may connect, what a FelixUser
// may do, and certificate rotation under load.

func skipIfInsecure(t *testing.T) {
	t.Helper()
	if insecureFromEnv() {
		t.Skip("FELIX_E2E_INSECURE=1: brokers run without TLS or authentication")
	}
}

// readRecords reads the whole data log of shard 0 of stream from the
// leader at addr as the admin user (offset, epoch and payload of each).
func (c *cluster) readRecords(t *testing.T, addr, stream string) []record.Record {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	cl, err := c.dial(ctx, addr)
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()
	var out []record.Record
	req := wire.ReadRequest{Shard: record.ShardID{Stream: stream}, From: wire.FromEarliest, MaxRecords: 1000}
	for {
		r, err := cl.Read(ctx, req)
		if err != nil {
			t.Fatalf("read %s from %s: %v", stream, addr, err)
		}
		if len(r.Records) == 0 {
			return out
		}
		out = append(out, r.Records...)
		req.From, req.Offset = wire.FromOffset, r.Next
	}
}

// describe returns shard 0 of stream as the leader at addr describes it.
func (c *cluster) describe(t *testing.T, addr, stream string) wire.DescribeOK {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	cl, err := c.dial(ctx, addr)
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()
	d, err := cl.Describe(ctx, record.ShardID{Stream: stream})
	if err != nil {
		t.Fatalf("describe %s on %s: %v", stream, addr, err)
	}
	return d
}

// waitFollowerConfirmed waits until the stored report counts follower as
// caught up with everything below tail.
func (c *cluster) waitFollowerConfirmed(t *testing.T, stream, follower string, tail uint64) {
	t.Helper()
	c.eventually(fmt.Sprintf("%s confirming %s up to %d", follower, stream, tail), 60*time.Second, func() (bool, string) {
		sh := c.shard(stream, 0)
		if sh == nil || sh.Status.Report == nil {
			return false, shardState(sh)
		}
		for _, f := range sh.Status.Report.Followers {
			if f.Name == follower && f.CaughtUp && f.Confirmed >= int64(tail) {
				return true, ""
			}
		}
		return false, shardState(sh)
	})
}

// followerOf returns a broker of the 3-broker cluster other than leader,
// and its ordinal.
func (c *cluster) followerOf(leader string) (string, int) {
	for i := 0; i < 3; i++ {
		if n := fmt.Sprintf("%s-%d", c.name, i); n != leader {
			return n, i
		}
	}
	return "", -1
}

// rawHello opens a TLS connection to addr with conf and sends a Hello
// offering every feature; it returns the connection and a reader after
// the HelloOK.
func rawHello(t *testing.T, addr string, conf *tls.Config) (*tls.Conn, *bufio.Reader) {
	t.Helper()
	nc, err := tls.Dial("tcp", addr, conf)
	if err != nil {
		t.Fatalf("TLS to %s: %v", addr, err)
	}
	t.Cleanup(func() { _ = nc.Close() })
	_ = nc.SetDeadline(time.Now().Add(20 * time.Second))
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
		t.Fatalf("hello to %s: %v %v", addr, f.Type, err)
	}
	return nc, br
}

// storedRecords stops broker name cleanly (SIGTERM) and returns its data
// log of shard 0 of stream as stored on disk, with the log's description.
func (c *cluster) storedRecords(t *testing.T, name, stream string) ([]record.Record, logstore.Info) {
	t.Helper()
	c.mu.Lock()
	b := c.brokers[name]
	c.mu.Unlock()
	_ = b.cmd.Process.Signal(syscall.SIGTERM)
	select {
	case <-b.exited:
	case <-time.After(60 * time.Second):
		t.Fatalf("%s did not stop", name)
	}
	s, err := logstore.Open(logstore.Options{Dir: filepath.Join(b.dataDir, "logstore"), Fsync: logstore.FsyncOnCommit,
		ValueThreshold: logstore.BrokerValueThreshold, LastRun: logstore.LastRunComplete})
	if err != nil {
		t.Fatalf("open %s's log store: %v", name, err)
	}
	defer func() { _ = s.Close() }()
	l, ok := s.Lookup(record.LogID{ShardID: record.ShardID{Stream: stream}, Log: record.LogData})
	if !ok {
		t.Fatalf("%s holds no data log of %s", name, stream)
	}
	var out []record.Record
	from := l.Describe().Start
	for {
		r, err := l.ReadRaw(from, logstore.ReadOptions{MaxRecords: 1000})
		if err != nil {
			t.Fatalf("read %s's stored log from %d: %v", name, from, err)
		}
		if len(r.Records) == 0 {
			return out, l.Describe()
		}
		for _, rec := range r.Records {
			if rec.Kind == record.KindData {
				out = append(out, rec)
			}
		}
		from = r.Next
	}
}

// The issue's attack on real processes: a replication frame (a Ship
// Append naming the shard's leader as sender, at epoch 2^64-1) sent to a
// follower's client port by a client holding a valid certificate with
// every grant is answered NotAuthorized and counted; the follower's log
// (records, epochs, tail) is what the leader replicated and nothing else,
// the shard's epoch is unchanged, and replication goes on. A user
// certificate does not get past the peer port's handshake either.
func TestSecurity_ForgedShipAppendOnClientPortIsRefused(t *testing.T) {
	skipIfInsecure(t)
	c := newCluster(t, 3, felixv1.FsyncPeriodic)
	for i := 0; i < 3; i++ {
		c.startBroker(i)
	}
	const stream = "sec-forged"
	c.createStream(t, stream, 3)
	c.appendAcked(t, stream, 20, "before")
	a := c.shard(stream, 0).Status.Assignment
	leader := a.Leader
	follower, _ := c.followerOf(leader)
	before := c.describe(t, c.addressOf(leader), stream)
	c.waitFollowerConfirmed(t, stream, follower, before.Tail)
	held := c.readRecords(t, c.addressOf(leader), stream)
	last := held[len(held)-1]
	const refused = `felix_broker_replication_frames_refused_total{reason="client_port"}`
	if v, ok := c.metricValue(follower, refused); !ok || v != 0 {
		t.Fatalf("%s before the forged frame: %s = %v (scraped: %t), want 0", follower, refused, v, ok)
	}

	conf, err := c.clientTLSAs(adminUser)
	if err != nil {
		t.Fatal(err)
	}
	nc, br := rawHello(t, c.addressOf(follower), conf)
	forged, err := peer.Encode(record.ShardID{Stream: stream}, replication.Message{Type: replication.MsgAppend,
		From: replication.NodeID(leader), To: replication.NodeID(follower), Epoch: math.MaxUint64, Log: record.LogData,
		Index: before.Tail, PrevEpoch: last.Epoch, Commit: before.Tail + 1,
		Records: []record.Record{{Kind: record.KindData, Offset: before.Tail, Epoch: math.MaxUint64, Payload: []byte("forged")}}})
	if err != nil {
		t.Fatal(err)
	}
	if err := wire.WriteFrame(nc, forged); err != nil {
		t.Fatal(err)
	}
	f, err := wire.ReadFrame(br, wire.DefaultMaxFrameSize)
	if err != nil {
		t.Fatalf("no answer to the forged frame: %v", err)
	}
	if f.Type != wire.MsgError {
		t.Fatalf("forged frame answered with %v, want an error", f.Type)
	}
	if e, err := wire.DecodeError(f.Body, wire.KnownFeatures); err != nil || e.Code != wire.CodeNotAuthorized {
		t.Fatalf("forged frame answered %+v (%v), want NotAuthorized", e, err)
	}
	c.eventually(follower+" counting the refused frame", 10*time.Second, func() (bool, string) {
		v, ok := c.metricValue(follower, refused)
		return ok && v == 1, fmt.Sprintf("%s = %v (scraped: %t)", refused, v, ok)
	})

	// Peers dial the registered peer address: the port bound for
	// --peer-listen 127.0.0.1:0.
	if got := c.registered(t, follower).PeerAddress; got != c.brokerPeer(follower) || got == "" {
		t.Fatalf("%s registered peer address %q, it serves replication on %q", follower, got, c.brokerPeer(follower))
	}

	// The peer port does not take a user's certificate.
	pc, err := tls.Dial("tcp", c.brokerPeer(follower), conf)
	if err == nil {
		_ = pc.SetDeadline(time.Now().Add(10 * time.Second))
		// TLS 1.3: the server's verdict on the client certificate
		// arrives with the first read.
		_, err = pc.Read(make([]byte, 1))
		_ = pc.Close()
	}
	// Refused by the server's alert, not by a timeout of a connection it
	// kept.
	var oe *net.OpError
	if err == nil || !errors.As(err, &oe) || oe.Op != "remote error" {
		t.Fatalf("the peer port of %s with a user certificate: %v, want the handshake refused by the broker", follower, err)
	}
	t.Logf("peer port with a user certificate: %v", err)

	// Replication goes on: more appends reach the follower at the
	// shard's epoch.
	c.appendAcked(t, stream, 5, "after")
	after := c.describe(t, c.addressOf(leader), stream)
	if after.Tail != before.Tail+5 {
		t.Fatalf("leader tail %d after 5 more appends, want %d", after.Tail, before.Tail+5)
	}
	c.waitFollowerConfirmed(t, stream, follower, after.Tail)
	if now := c.shard(stream, 0).Status.Assignment; now.Epoch != a.Epoch || now.Leader != leader {
		t.Fatalf("assignment moved from %s@%d to %s@%d", leader, a.Epoch, now.Leader, now.Epoch)
	}
	want := c.readRecords(t, c.addressOf(leader), stream)

	// The follower's stored log is exactly the leader's.
	got, info := c.storedRecords(t, follower, stream)
	if info.Tail != after.Tail {
		t.Errorf("%s's stored tail %d, the leader's %d", follower, info.Tail, after.Tail)
	}
	if len(got) != len(want) {
		t.Fatalf("%s stores %d records, the leader %d", follower, len(got), len(want))
	}
	for i, r := range got {
		w := want[i]
		if r.Offset != w.Offset || r.Epoch != w.Epoch || string(r.Payload) != string(w.Payload) {
			t.Fatalf("%s's record %d is {%d e%d %q}, the leader's {%d e%d %q}", follower, i, r.Offset, r.Epoch, r.Payload, w.Offset, w.Epoch, w.Payload)
		}
		if r.Epoch > uint64(a.Epoch) || string(r.Payload) == "forged" {
			t.Fatalf("%s stores a forged record: %+v", follower, r)
		}
	}
}

// probeServed completes a TLS handshake with broker name's client port
// (as the admin user) or peer port (with broker other's kept
// certificate) and returns the serial of the certificate it served.
func (c *cluster) probeServed(name, other, port string) (string, error) {
	c.mu.Lock()
	b := c.brokers[name]
	c.mu.Unlock()
	var conf *tls.Config
	addr := b.addr
	if port == "peer" {
		src, err := pki.NewSource(pki.SourceOptions{Files: pki.DirFiles(c.brokerTLSDir(other))})
		if err != nil {
			return "", err
		}
		conf, addr = pki.PeerDialConfig(src, name), b.peer
	} else {
		var err error
		if conf, err = c.clientTLSAs(adminUser); err != nil {
			return "", err
		}
	}
	d := &net.Dialer{Timeout: 10 * time.Second}
	nc, err := tls.DialWithDialer(d, "tcp", addr, conf)
	if err != nil {
		return "", err
	}
	defer nc.Close()
	return nc.ConnectionState().PeerCertificates[0].SerialNumber.String(), nil
}

// fullLog is everything broker name logged so far.
func (c *cluster) fullLog(t *testing.T, name string) string {
	t.Helper()
	b, err := os.ReadFile(filepath.Join(c.dir, name+".log"))
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}

// brokerPeer returns a broker's peer port address.
func (c *cluster) brokerPeer(name string) string {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.brokers[name].peer
}

// Who may connect, and what a FelixUser may do, on a real broker: no
// certificate, a certificate of another CA and an expired certificate of
// the cluster's CA are refused at the connection, one of the cluster's CA
// not bound to the FelixUser's uid at its first request; a user without Trim
// cannot trim; a prefix grant allows appends inside it and nothing
// outside; a deleted FelixUser's open connection is refused from then on.
// Nothing is written by any refused request.
func TestSecurity_ClientAuthenticationAndGrants(t *testing.T) {
	skipIfInsecure(t)
	c := newCluster(t, 3, felixv1.FsyncPeriodic)
	for i := 0; i < 3; i++ {
		c.startBroker(i)
	}
	const inside, outside = "sec-grant-in", "sec-other"
	for _, s := range []string{inside, outside} {
		c.createStream(t, s, 3)
	}
	c.appendAcked(t, inside, 10, "admin")
	c.appendAcked(t, outside, 10, "admin")
	leader := c.leaderOf(inside)
	addr := c.addressOf(leader)
	if c.leaderOf(outside) != leader {
		// Both streams on one broker keeps the checks to one address; the
		// spread may put them apart, which is fine: describe each at its own.
		t.Logf("%s led by %s, %s by %s", inside, leader, outside, c.leaderOf(outside))
	}
	tails := func() map[string]wire.DescribeOK {
		return map[string]wire.DescribeOK{
			inside:  c.describe(t, c.addressOf(c.leaderOf(inside)), inside),
			outside: c.describe(t, c.addressOf(c.leaderOf(outside)), outside),
		}
	}
	start := tails()
	unchanged := func(what string) {
		t.Helper()
		for s, d := range tails() {
			if d != start[s] {
				t.Fatalf("after %s: %s is %+v, was %+v", what, s, d, start[s])
			}
		}
	}
	ca := c.clusterCA(t)
	// bundle trusts the cluster's brokers and presents no certificate.
	bundle, err := pki.LoadClientFiles(pki.Files{CA: pki.DirFiles(c.userDir(adminUser)).CA}, c.clusterRef(), "")
	if err != nil {
		t.Fatal(err)
	}

	dialWith := func(conf *tls.Config) error {
		ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
		defer cancel()
		cl, err := client.Dial(ctx, addr, client.Options{TLS: conf})
		if err != nil {
			return err
		}
		defer cl.Close()
		_, err = cl.Append(ctx, record.ShardID{Stream: inside}, []record.Record{{Payload: []byte("must-not-land")}}, nil)
		if err == nil {
			return errors.New("append accepted")
		}
		return err
	}

	t.Run("no certificate", func(t *testing.T) {
		err := dialWith(bundle)
		var ae *client.AuthError
		if !errors.Is(err, client.ErrUnauthenticated) || !errors.As(err, &ae) {
			t.Fatalf("dial without a certificate: %v, want Unauthenticated", err)
		}
		t.Logf("no certificate: %v", err)
		unchanged("a client without a certificate")
	})

	t.Run("certificate of another CA", func(t *testing.T) {
		other, err := pki.NewCA("another CA", time.Now(), time.Hour, nil)
		if err != nil {
			t.Fatal(err)
		}
		cert, _ := issue(t, other, pki.Identity{Namespace: c.namespace, Cluster: c.name, Kind: pki.KindUser, Name: adminUser}, time.Now(), time.Hour)
		err = dialWith(withCert(bundle, cert))
		if !errors.Is(err, client.ErrUnauthenticated) {
			t.Fatalf("dial with a certificate of another CA: %v, want Unauthenticated", err)
		}
		t.Logf("another CA: %v", err)
		unchanged("a client with a certificate of another CA")
	})

	t.Run("expired certificate", func(t *testing.T) {
		cert, _ := issue(t, ca, pki.Identity{Namespace: c.namespace, Cluster: c.name, Kind: pki.KindUser, Name: adminUser},
			time.Now().Add(-2*time.Hour), time.Hour)
		if !cert.Leaf.NotAfter.Before(time.Now()) {
			t.Fatalf("certificate valid until %s, not expired", cert.Leaf.NotAfter)
		}
		err := dialWith(withCert(bundle, cert))
		if !errors.Is(err, client.ErrUnauthenticated) {
			t.Fatalf("dial with an expired certificate: %v, want Unauthenticated", err)
		}
		t.Logf("expired: %v", err)
		unchanged("a client with an expired certificate")
	})

	t.Run("certificate without the FelixUser's uid", func(t *testing.T) {
		// Of the cluster's CA and valid, but not the one the operator
		// issued: it names e2e-admin without binding it to that
		// FelixUser's uid. The connection is authenticated; its requests
		// are refused.
		cert, _ := issue(t, ca, pki.Identity{Namespace: c.namespace, Cluster: c.name, Kind: pki.KindUser, Name: adminUser}, time.Now(), time.Hour)
		err := dialWith(withCert(bundle, cert))
		if !errors.Is(err, client.ErrNotAuthorized) {
			t.Fatalf("append with a certificate without the user's uid: %v, want NotAuthorized", err)
		}
		t.Logf("no uid: %v", err)
		unchanged("a client with a certificate without the user's uid")
	})

	t.Run("no Trim grant", func(t *testing.T) {
		c.createUser(t, "sec-notrim", prefixGrants([]felixv1.StreamOperation{felixv1.OperationRead, felixv1.OperationDescribe}, "sec-"))
		// Allowed to describe once the broker's watch has seen the user.
		c.eventuallyAs(t, "sec-notrim", addr, func(ctx context.Context, cl *client.Client) error {
			_, err := cl.Describe(ctx, record.ShardID{Stream: inside})
			return err
		})
		ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
		defer cancel()
		cl, err := c.dialAs(ctx, addr, "sec-notrim")
		if err != nil {
			t.Fatal(err)
		}
		defer cl.Close()
		ds, err := cl.Describe(ctx, record.ShardID{Stream: inside})
		if err != nil {
			t.Fatal(err)
		}
		_, err = cl.Trim(ctx, wire.TrimRequest{Shard: record.ShardID{Stream: inside}, Floor: ds.Tail - 5, ExpectTail: ds.Tail})
		var ae *client.AuthError
		if !errors.Is(err, client.ErrNotAuthorized) || !errors.As(err, &ae) || ae.Op != auth.OpTrim {
			t.Fatalf("trim without a Trim grant: %v, want NotAuthorized", err)
		}
		t.Logf("trim: %v", err)
		_, err = cl.Append(ctx, record.ShardID{Stream: inside}, []record.Record{{Payload: []byte("must-not-land")}}, nil)
		if !errors.Is(err, client.ErrNotAuthorized) {
			t.Fatalf("append without an Append grant: %v, want NotAuthorized", err)
		}
		unchanged("a trim and an append without their grants")
	})

	t.Run("prefix grant", func(t *testing.T) {
		c.createUser(t, "sec-prefix", prefixGrants([]felixv1.StreamOperation{felixv1.OperationAppend, felixv1.OperationDescribe}, "sec-grant"))
		// The broker learns of the new FelixUser through its watch:
		// retry until the first append inside the grant is allowed.
		var ok wire.AppendOK
		c.eventuallyAs(t, "sec-prefix", c.addressOf(c.leaderOf(inside)), func(ctx context.Context, cl *client.Client) error {
			var err error
			ok, err = cl.Append(ctx, record.ShardID{Stream: inside}, []record.Record{{Payload: []byte("granted")}}, nil)
			return err
		})
		if ok.First != start[inside].Tail {
			t.Fatalf("granted append at %d, want %d", ok.First, start[inside].Tail)
		}
		ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
		defer cancel()
		cl, err := c.dialAs(ctx, c.addressOf(c.leaderOf(outside)), "sec-prefix")
		if err != nil {
			t.Fatal(err)
		}
		defer cl.Close()
		_, err = cl.Append(ctx, record.ShardID{Stream: outside}, []record.Record{{Payload: []byte("must-not-land")}}, nil)
		if !errors.Is(err, client.ErrNotAuthorized) {
			t.Fatalf("append outside the prefix grant: %v, want NotAuthorized", err)
		}
		t.Logf("outside the grant: %v", err)
		now := tails()
		if now[outside] != start[outside] {
			t.Fatalf("%s changed by a refused append: %+v, was %+v", outside, now[outside], start[outside])
		}
		if now[inside].Tail != start[inside].Tail+1 {
			t.Fatalf("%s tail %d, want %d (one granted append)", inside, now[inside].Tail, start[inside].Tail+1)
		}
	})

	t.Run("deleted user", func(t *testing.T) {
		// A connection open before the FelixUser is deleted: its requests
		// are refused once the broker's watch sees the deletion.
		ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
		defer cancel()
		in := c.addressOf(c.leaderOf(inside))
		cl, err := c.dialAs(ctx, in, "sec-prefix")
		if err != nil {
			t.Fatal(err)
		}
		defer cl.Close()
		before, err := cl.Describe(ctx, record.ShardID{Stream: inside})
		if err != nil {
			t.Fatal(err)
		}
		u := &felixv1.FelixUser{ObjectMeta: metav1.ObjectMeta{Name: "sec-prefix", Namespace: c.namespace}}
		if err := c.c.Delete(ctx, u); err != nil {
			t.Fatal(err)
		}
		c.eventually("the deleted user refused", 30*time.Second, func() (bool, string) {
			_, err := cl.Describe(ctx, record.ShardID{Stream: inside})
			return errors.Is(err, client.ErrNotAuthorized), fmt.Sprint(err)
		})
		_, err = cl.Append(ctx, record.ShardID{Stream: inside}, []record.Record{{Payload: []byte("must-not-land")}}, nil)
		if !errors.Is(err, client.ErrNotAuthorized) {
			t.Fatalf("append by a deleted user: %v, want NotAuthorized", err)
		}
		if d := c.describe(t, in, inside); d != before {
			t.Fatalf("%s changed by a deleted user's append: %+v, was %+v", inside, d, before)
		}
	})
}

// withCert is conf presenting cert.
func withCert(conf *tls.Config, cert *tls.Certificate) *tls.Config {
	out := conf.Clone()
	out.GetClientCertificate = func(*tls.CertificateRequestInfo) (*tls.Certificate, error) { return cert, nil }
	return out
}

// eventuallyAs retries op on a new connection to addr as FelixUser user
// until it succeeds (a broker allows a new FelixUser once its watch has
// seen it), for up to 30 s.
func (c *cluster) eventuallyAs(t *testing.T, user, addr string, op func(context.Context, *client.Client) error) {
	t.Helper()
	c.eventually(user+" allowed", 30*time.Second, func() (bool, string) {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		cl, err := c.dialAs(ctx, addr, user)
		if err == nil {
			err = op(ctx, cl)
			_ = cl.Close()
		}
		return err == nil, fmt.Sprint(err)
	})
}

// Certificate rotation under load: with a short certificate lifetime the
// operator renews every broker's and the admin user's certificate several
// times while publishers append (acknowledged, one record per append,
// new connections throughout). No request fails, every acknowledged
// record is at its offset exactly once, and the brokers served the new
// certificates without a restart.
func TestSecurity_RotationUnderLoad(t *testing.T) {
	skipIfInsecure(t)
	// A leaf is valid for 180 s (from 18 s before issue, pki.Backdate)
	// and renewed renewBefore = 160 s ahead of its expiry: 20 s after
	// issue.
	const lifetime, renewBefore = 180 * time.Second, 160 * time.Second
	c := newClusterWith(t, 3, felixv1.FsyncPeriodic, shortTiming, func(s *felixv1.FelixClusterSpec) {
		s.Security.TLS.CertificateDuration = &metav1.Duration{Duration: lifetime}
		s.Security.TLS.RenewBefore = &metav1.Duration{Duration: renewBefore}
	})
	pids := map[string]int{}
	for i := 0; i < 3; i++ {
		b := c.startBroker(i)
		pids[b.name] = b.cmd.Process.Pid
	}
	const stream = "sec-rotate"
	c.createStream(t, stream, 3)
	c.waitServing(t, stream)
	leader := c.leaderOf(stream)
	addr := c.addressOf(leader)

	run := 70 * time.Second
	const publishers = 4
	const perConn = 200 // appends per connection before a publisher reconnects
	type ack struct {
		off     uint64
		payload string
	}
	var (
		mu       sync.Mutex
		acks     []ack
		failures []error
		conns    atomic.Int64
	)
	stop := time.Now().Add(run)
	var wg sync.WaitGroup
	// A prober opens new TLS connections to every broker's client and
	// peer ports throughout (a broker re-reads its files when a handshake
	// needs them, so long-lived peer connections alone would not show a
	// follower's rotation) and notes the certificate each served.
	served := map[string]map[string]bool{} // "broker port" -> serials
	var probeErrs []error
	wg.Add(1)
	go func() {
		defer wg.Done()
		for time.Now().Before(stop) {
			for i := 0; i < 3; i++ {
				name := fmt.Sprintf("%s-%d", c.name, i)
				other := fmt.Sprintf("%s-%d", c.name, (i+1)%3)
				for _, port := range []string{"client", "peer"} {
					serial, err := c.probeServed(name, other, port)
					mu.Lock()
					if err != nil {
						probeErrs = append(probeErrs, fmt.Errorf("%s %s port: %w", name, port, err))
					} else {
						k := name + " " + port
						if served[k] == nil {
							served[k] = map[string]bool{}
						}
						served[k][serial] = true
					}
					mu.Unlock()
				}
			}
			time.Sleep(time.Second)
		}
	}()
	for p := 0; p < publishers; p++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			n := 0
			for time.Now().Before(stop) {
				ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
				cl, err := c.dial(ctx, addr)
				if err != nil {
					cancel()
					mu.Lock()
					failures = append(failures, fmt.Errorf("publisher %d: dial: %w", p, err))
					mu.Unlock()
					return
				}
				conns.Add(1)
				for i := 0; i < perConn && time.Now().Before(stop); i++ {
					payload := fmt.Sprintf("p%d-%d", p, n)
					n++
					ok, err := cl.Append(ctx, record.ShardID{Stream: stream}, []record.Record{{Payload: []byte(payload)}}, nil)
					mu.Lock()
					if err != nil {
						failures = append(failures, fmt.Errorf("publisher %d: append %s: %w", p, payload, err))
					} else {
						acks = append(acks, ack{ok.First, payload})
					}
					mu.Unlock()
					if err != nil {
						break
					}
				}
				_ = cl.Close()
				cancel()
			}
		}()
	}
	wg.Wait()
	if len(failures) > 0 {
		t.Fatalf("%d failed requests during rotation, first: %v", len(failures), failures[0])
	}
	t.Logf("%d acknowledged appends over %d connections in %s", len(acks), conns.Load(), run)

	for i := 0; i < 3; i++ {
		name := fmt.Sprintf("%s-%d", c.name, i)
		serials := c.secrets.serialsOf(name + "-tls")
		if len(serials) < 3 {
			t.Errorf("%s's certificate changed %d times during the run, want at least 2", name, len(serials)-1)
		}
		c.mu.Lock()
		b := c.brokers[name]
		c.mu.Unlock()
		select {
		case <-b.exited:
			t.Errorf("%s exited during the run; log: %s", name, c.brokerLog(name))
		default:
		}
		if b.cmd.Process.Pid != pids[name] {
			t.Errorf("%s restarted: pid %d, was %d", name, b.cmd.Process.Pid, pids[name])
		}
		for _, port := range []string{"client", "peer"} {
			got := served[name+" "+port]
			if len(got) < 3 {
				t.Errorf("%s served %d certificates on its %s port during the run, want at least 3", name, len(got), port)
			}
			for s := range got {
				if !slices.Contains(serials, s) {
					t.Errorf("%s served certificate %s on its %s port, not one of its Secret's %v", name, s, port, serials)
				}
			}
		}
		// After the run: a new connection gets the Secret's current one.
		if s, err := c.probeServed(name, fmt.Sprintf("%s-%d", c.name, (i+1)%3), "client"); err != nil || s != serials[len(serials)-1] {
			t.Errorf("%s serves %s (%v) after the run, its Secret holds %s", name, s, err, serials[len(serials)-1])
		}
		t.Logf("%s: Secret had %d certificates; served %d on the client port, %d on the peer port; %d reloads logged; pid %d",
			name, len(serials), len(served[name+" client"]), len(served[name+" peer"]),
			strings.Count(c.fullLog(t, name), "certificate files reloaded"), pids[name])
	}
	if len(probeErrs) > 0 {
		t.Errorf("%d failed handshakes during rotation, first: %v", len(probeErrs), probeErrs[0])
	}
	if s := c.secrets.serialsOf(controllers.UserSecretName(adminUser)); len(s) < 3 {
		t.Errorf("%s's certificate changed %d times during the run, want at least 2", adminUser, len(s)-1)
	}

	got := c.readRecords(t, addr, stream)
	at := map[uint64]string{}
	count := map[string]int{}
	for _, r := range got {
		at[r.Offset] = string(r.Payload)
		count[string(r.Payload)]++
	}
	for _, a := range acks {
		if at[a.off] != a.payload {
			t.Fatalf("acknowledged %q at %d, the log has %q", a.payload, a.off, at[a.off])
		}
		if count[a.payload] != 1 {
			t.Fatalf("acknowledged %q is in the log %d times", a.payload, count[a.payload])
		}
	}
	// Replication kept up across the rotations: the followers hold it all.
	tail := got[len(got)-1].Offset + 1
	for i := 0; i < 3; i++ {
		if name := fmt.Sprintf("%s-%d", c.name, i); name != leader {
			c.waitFollowerConfirmed(t, stream, name, tail)
		}
	}
}
