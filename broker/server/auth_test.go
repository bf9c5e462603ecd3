package server

import (
	"crypto/tls"
	"errors"
	"strings"
	"sync"
	"testing"
	"time"

	"felix.dev/felix/broker/auth"
	"felix.dev/felix/broker/client"
	"felix.dev/felix/broker/record"
	"felix.dev/felix/broker/wire"
)

// as authenticates every connection as p.
func as(p auth.Principal) func(*tls.ConnectionState) (auth.Principal, error) {
	return func(*tls.ConnectionState) (auth.Principal, error) { return p, nil }
}

var errNoCert = errors.New("no client certificate presented")

func refusedRequests(b *broker, reason string) float64 {
	return b.metric("felix_broker_requests_refused_total", "reason", reason)
}

func refusedReplication(b *broker, reason string) float64 {
	return b.metric("felix_broker_replication_frames_refused_total", "reason", reason)
}

func wantCode(t *testing.T, err error, code wire.Code) *wire.Error {
	t.Helper()
	var we *wire.Error
	if !errors.As(err, &we) || we.Code != code {
		t.Fatalf("err = %v, want %v", err, code)
	}
	return we
}

// expectRefusedHello sends a Hello offering feats and an Append pipelined
// behind it, and checks the broker answers the Hello with one
// connection-level error of code (message containing msg), closes, and
// writes nothing.
func expectRefusedHello(t *testing.T, b *broker, feats wire.Features, code wire.Code, msg string) {
	t.Helper()
	r := dialRaw(t, b.addr)
	hello, err := wire.EncodeHello(wire.Hello{Version: 1, Features: feats})
	if err != nil {
		t.Fatal(err)
	}
	app, err := wire.EncodeAppend(wire.AppendRequest{Shard: shardA, Records: recs("forged")})
	if err != nil {
		t.Fatal(err)
	}
	frames := wire.AppendFrame(nil, wire.Frame{Type: wire.MsgHello, Body: hello})
	frames = wire.AppendFrame(frames, wire.Frame{Type: wire.MsgAppend, ReqID: 1, Body: app})
	if _, err := r.nc.Write(frames); err != nil {
		t.Fatal(err)
	}
	got := r.expectClosed(5 * time.Second)
	if len(got) != 1 || got[0].ReqID != 0 {
		t.Fatalf("got %d frames (%v), want one connection-level error", len(got), got)
	}
	e := decodeErr(t, got[0], feats)
	if e.Code != code || !strings.Contains(e.Message, msg) {
		t.Fatalf("hello answered %v %q, want %v containing %q", e.Code, e.Message, code, msg)
	}
	if logs := b.store.Logs(); len(logs) != 0 {
		t.Fatalf("store holds %v after a refused connection", logs)
	}
}

// TestUnauthenticatedHelloWritesNothing: when Authenticate fails, the Hello
// is answered Unauthenticated (BadRequest for a client without the auth
// feature), the connection closes and the request behind the Hello is
// never applied.
func TestUnauthenticatedHelloWritesNothing(t *testing.T) {
	calls := 0
	var mu sync.Mutex
	b := startBroker(t, Options{Authenticate: func(cs *tls.ConnectionState) (auth.Principal, error) {
		mu.Lock()
		defer mu.Unlock()
		calls++
		if cs != nil {
			t.Errorf("plaintext connection passed a TLS state")
		}
		return auth.Principal{}, errNoCert
	}})
	expectRefusedHello(t, b, wire.KnownFeatures, wire.CodeUnauthenticated, errNoCert.Error())
	expectRefusedHello(t, b, 0, wire.CodeBadRequest, "unauthenticated: "+errNoCert.Error())
	mu.Lock()
	defer mu.Unlock()
	if calls != 2 {
		t.Fatalf("Authenticate called %d times for 2 connections", calls)
	}
	if n := b.metric("felix_broker_connections_dropped_total", "reason", "unauthenticated"); n != 2 {
		t.Fatalf("connections dropped unauthenticated = %v, want 2", n)
	}
}

// TestAnonymousRefusedUnlessAllowed: with a Table that does not allow
// anonymous connections, a connection without identity is refused at its
// Hello; once allowed, it gets exactly the anonymous grants.
func TestAnonymousRefusedUnlessAllowed(t *testing.T) {
	tb := auth.NewTable()
	b := startBroker(t, Options{Authorizer: tb})
	expectRefusedHello(t, b, wire.KnownFeatures, wire.CodeUnauthenticated, "anonymous")

	tb.SetAnonymous([]auth.Grant{{Stream: "public", Ops: []auth.Operation{auth.OpAppend}}}, true)
	c := dial(t, b.addr, client.Options{})
	ctx := ctxT(t)
	if _, err := c.Append(ctx, record.ShardID{Stream: "public"}, recs("x"), nil); err != nil {
		t.Fatalf("anonymous append to a granted stream: %v", err)
	}
	_, err := c.Append(ctx, shardA, recs("x"), nil)
	wantCode(t, err, wire.CodeNotAuthorized)
	if _, ok := b.store.Lookup(record.LogID{ShardID: shardA, Log: record.LogData}); ok {
		t.Fatal("refused append created its shard")
	}
}

// TestTrimNeedsItsOwnGrant: a user allowed to append, read and describe is
// refused Trim with NotAuthorized, and the log is unchanged.
func TestTrimNeedsItsOwnGrant(t *testing.T) {
	tb := auth.NewTable()
	tb.Set("alice", "uid-alice", []auth.Grant{{Stream: shardA.Stream, Ops: []auth.Operation{auth.OpAppend, auth.OpRead, auth.OpDescribe}}})
	b := startBroker(t, Options{Authorizer: tb, Authenticate: as(auth.Principal{Kind: auth.User, Name: "alice", UID: "uid-alice"})})
	c := dial(t, b.addr, client.Options{})
	ctx := ctxT(t)
	if _, err := c.Append(ctx, shardA, recs("a", "b", "c"), nil); err != nil {
		t.Fatal(err)
	}
	before, err := c.Describe(ctx, shardA)
	if err != nil {
		t.Fatal(err)
	}
	_, err = c.Trim(ctx, wire.TrimRequest{Shard: shardA, Floor: 2, ExpectTail: before.Tail})
	we := wantCode(t, err, wire.CodeNotAuthorized)
	if !strings.Contains(we.Message, "Trim") || !strings.Contains(we.Message, "user/alice") {
		t.Fatalf("refusal message %q does not say who and what", we.Message)
	}
	after, err := c.Describe(ctx, shardA)
	if err != nil {
		t.Fatal(err)
	}
	if after != before {
		t.Fatalf("log changed by a refused trim: %+v -> %+v", before, after)
	}
	res, err := c.Read(ctx, wire.ReadRequest{Shard: shardA, From: wire.FromEarliest, MaxRecords: 10})
	if err != nil || len(res.Records) != 3 {
		t.Fatalf("read after refused trim: %d records, %v", len(res.Records), err)
	}
	if n := refusedRequests(b, RefusedNotAuthorized); n != 1 {
		t.Fatalf("requests refused not_authorized = %v, want 1", n)
	}
	if n := b.metric("felix_broker_requests_total", "op", "trim", "result", "NotAuthorized"); n != 1 {
		t.Fatalf("requests{trim,NotAuthorized} = %v, want 1", n)
	}
	// Trim granted: now it goes through.
	tb.Set("alice", "uid-alice", []auth.Grant{{Stream: shardA.Stream, Ops: []auth.Operation{auth.OpTrim, auth.OpDescribe}}})
	if _, err := c.Trim(ctx, wire.TrimRequest{Shard: shardA, Floor: 2, ExpectTail: before.Tail}); err != nil {
		t.Fatalf("trim with the grant: %v", err)
	}
}

// TestAppendByPrefixGrant: a prefix grant allows appends (conditional or
// not) to the streams under it and nothing else; a refused append writes
// nothing. A client that did not negotiate the auth feature gets
// BadRequest with the reason.
func TestAppendByPrefixGrant(t *testing.T) {
	tb := auth.NewTable()
	tb.Set("bob", "uid-bob", []auth.Grant{{Stream: "team-a.", Prefix: true, Ops: []auth.Operation{auth.OpAppend}}})
	b := startBroker(t, Options{Authorizer: tb, Authenticate: as(auth.Principal{Kind: auth.User, Name: "bob", UID: "uid-bob"})})
	c := dial(t, b.addr, client.Options{})
	ctx := ctxT(t)
	in := record.ShardID{Stream: "team-a.events"}
	out := record.ShardID{Stream: "team-b.events"}
	if _, err := c.Append(ctx, in, recs("1"), nil); err != nil {
		t.Fatalf("append under the prefix: %v", err)
	}
	if _, err := c.Append(ctx, in, recs("2"), u64(1)); err != nil {
		t.Fatalf("conditional append under the prefix: %v", err)
	}
	_, err := c.Append(ctx, out, recs("x"), nil)
	wantCode(t, err, wire.CodeNotAuthorized)
	_, err = c.Append(ctx, out, recs("x"), u64(0))
	wantCode(t, err, wire.CodeNotAuthorized)
	_, err = c.Describe(ctx, in) // Describe is not implied by Append
	wantCode(t, err, wire.CodeNotAuthorized)
	_, err = c.Read(ctx, wire.ReadRequest{Shard: in, From: wire.FromEarliest})
	wantCode(t, err, wire.CodeNotAuthorized)
	if _, ok := b.store.Lookup(record.LogID{ShardID: out, Log: record.LogData}); ok {
		t.Fatal("refused append created its shard")
	}
	if n := refusedRequests(b, RefusedNotAuthorized); n != 4 {
		t.Fatalf("requests refused not_authorized = %v, want 4", n)
	}

	old := dial(t, b.addr, client.Options{NoFeatures: true})
	_, err = old.Append(ctx, out, recs("x"), nil)
	we := wantCode(t, err, wire.CodeBadRequest)
	if !strings.HasPrefix(we.Message, "not authorized: ") {
		t.Fatalf("downgraded message %q", we.Message)
	}
}

// countRepl is a ReplicationHandler that records what reaches it.
type countRepl struct {
	mu     sync.Mutex
	frames int
	ids    []string
	got    chan struct{}
}

func (h *countRepl) ServeReplication(pc PeerConn, _ wire.Frame) {
	h.mu.Lock()
	h.frames++
	h.ids = append(h.ids, pc.Identity())
	h.mu.Unlock()
	select {
	case h.got <- struct{}{}:
	default:
	}
}

func (h *countRepl) seen() (int, []string) {
	h.mu.Lock()
	defer h.mu.Unlock()
	return h.frames, append([]string(nil), h.ids...)
}

// TestClientPortRefusesReplication: a broker with replication refuses
// every replication frame on its client port with NotAuthorized, never
// hands it to the handler, counts it, and keeps serving the connection.
func TestClientPortRefusesReplication(t *testing.T) {
	h := &countRepl{got: make(chan struct{}, 1)}
	b := startBroker(t, Options{Replication: h, Authenticate: as(auth.Principal{Kind: auth.Broker, Name: "b-1"})})
	r := dialRaw(t, b.addr)
	r.hello(wire.KnownFeatures)
	for i, typ := range []wire.MsgType{wire.MsgShip, wire.MsgShipAnswer, 0x4F} {
		r.send(typ, uint32(10+i), []byte{1, 2, 3})
		f := r.recv()
		if f.ReqID != uint32(10+i) {
			t.Fatalf("answer to %v has request id %d", typ, f.ReqID)
		}
		if e := decodeErr(t, f, wire.KnownFeatures); e.Code != wire.CodeNotAuthorized {
			t.Fatalf("%v on the client port answered %v, want NotAuthorized", typ, e)
		}
	}
	body, _ := wire.EncodeDescribe(wire.DescribeRequest{Shard: shardA})
	r.send(wire.MsgDescribe, 20, body)
	if f := r.recv(); f.Type != wire.MsgDescribeOK {
		t.Fatalf("describe after refused frames answered %v", f.Type)
	}
	if n, _ := h.seen(); n != 0 {
		t.Fatalf("handler saw %d frames from the client port", n)
	}
	if n := refusedReplication(b, RefusedClientPort); n != 3 {
		t.Fatalf("replication frames refused client_port = %v, want 3", n)
	}
}

// TestPeerPort: the peer port accepts only brokers (refused at the Hello
// otherwise), serves only replication frames, and tells the handler which
// broker the connection is.
func TestPeerPort(t *testing.T) {
	t.Run("anonymous", func(t *testing.T) {
		b := startBroker(t, Options{Role: RolePeer, Replication: &countRepl{}})
		expectRefusedHello(t, b, wire.KnownFeatures, wire.CodeUnauthenticated, "broker")
		if n := refusedReplication(b, RefusedNotBroker); n != 1 {
			t.Fatalf("refused not_broker = %v, want 1", n)
		}
	})
	t.Run("user", func(t *testing.T) {
		b := startBroker(t, Options{Role: RolePeer, Replication: &countRepl{}, Authenticate: as(auth.Principal{Kind: auth.User, Name: "mallory"})})
		expectRefusedHello(t, b, wire.KnownFeatures, wire.CodeNotAuthorized, "not a broker")
		if n := refusedReplication(b, RefusedNotBroker); n != 1 {
			t.Fatalf("refused not_broker = %v, want 1", n)
		}
	})
	t.Run("nameless broker", func(t *testing.T) {
		b := startBroker(t, Options{Role: RolePeer, Replication: &countRepl{}, Authenticate: as(auth.Principal{Kind: auth.Broker})})
		expectRefusedHello(t, b, wire.KnownFeatures, wire.CodeUnauthenticated, "names no broker")
	})
	t.Run("failed", func(t *testing.T) {
		b := startBroker(t, Options{Role: RolePeer, Replication: &countRepl{},
			Authenticate: func(*tls.ConnectionState) (auth.Principal, error) { return auth.Principal{}, errNoCert }})
		expectRefusedHello(t, b, wire.KnownFeatures, wire.CodeUnauthenticated, errNoCert.Error())
	})
	t.Run("broker", func(t *testing.T) {
		h := &countRepl{got: make(chan struct{}, 1)}
		b := startBroker(t, Options{Role: RolePeer, Replication: h, Authenticate: as(auth.Principal{Kind: auth.Broker, Name: "b-1"})})
		r := dialRaw(t, b.addr)
		r.hello(wire.KnownFeatures)
		for i, typ := range []wire.MsgType{wire.MsgAppend, wire.MsgRead, wire.MsgTrim, wire.MsgDescribe, 0x30} {
			r.send(typ, uint32(1+i), []byte{0})
			if e := decodeErr(t, r.recv(), wire.KnownFeatures); e.Code != wire.CodeNotAuthorized {
				t.Fatalf("%v on the peer port answered %v, want NotAuthorized", typ, e)
			}
		}
		r.send(wire.MsgShip, 0, []byte{1})
		select {
		case <-h.got:
		case <-time.After(10 * time.Second):
			t.Fatal("the Ship frame never reached the handler")
		}
		if n, ids := h.seen(); n != 1 || ids[0] != "b-1" {
			t.Fatalf("handler saw %d frames, identities %v; want 1 from b-1", n, ids)
		}
		if n := refusedRequests(b, RefusedPeerPort); n != 5 {
			t.Fatalf("requests refused peer_port = %v, want 5", n)
		}
		if logs := b.store.Logs(); len(logs) != 0 {
			t.Fatalf("store holds %v", logs)
		}
	})
}

// TestInsecurePeersOnClientPortHasNoIdentity: the test-only escape hands
// client-port frames on, with no identity.
func TestInsecurePeersOnClientPortHasNoIdentity(t *testing.T) {
	h := &countRepl{got: make(chan struct{}, 1)}
	b := startBroker(t, Options{Replication: h, InsecurePeersOnClientPort: true})
	r := dialRaw(t, b.addr)
	r.hello(wire.KnownFeatures)
	r.send(wire.MsgShip, 0, []byte{1})
	select {
	case <-h.got:
	case <-time.After(10 * time.Second):
		t.Fatal("the Ship frame never reached the handler")
	}
	if n, ids := h.seen(); n != 1 || ids[0] != "" {
		t.Fatalf("handler saw %d frames, identities %q; want 1 without identity", n, ids)
	}
}
