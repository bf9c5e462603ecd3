package server

import (
	"encoding/binary"
	"errors"
	"math"
	"runtime"
	"sync"
	"testing"
	"time"

	"felix.dev/felix/broker/client"
	"felix.dev/felix/broker/logstore"
	"felix.dev/felix/broker/record"
	"felix.dev/felix/broker/wire"
)

// metric returns the value of the counter or gauge name whose labels
// include the given pairs (0 when absent).
func (b *broker) metric(name string, labels ...string) float64 {
	b.t.Helper()
	families, err := b.reg.Gather()
	if err != nil {
		b.t.Fatal(err)
	}
	for _, mf := range families {
		if mf.GetName() != name {
			continue
		}
	next:
		for _, m := range mf.GetMetric() {
			for i := 0; i+1 < len(labels); i += 2 {
				found := false
				for _, lp := range m.GetLabel() {
					if lp.GetName() == labels[i] && lp.GetValue() == labels[i+1] {
						found = true
					}
				}
				if !found {
					continue next
				}
			}
			if c := m.GetCounter(); c != nil {
				return c.GetValue()
			}
			return m.GetGauge().GetValue()
		}
	}
	return 0
}

// eventually polls cond until it holds or d passes.
func eventually(t *testing.T, d time.Duration, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(d)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("not within %v: %s", d, what)
		}
		time.Sleep(5 * time.Millisecond)
	}
}

// frameHeader is the 9-byte prefix of a frame announcing body bytes.
func frameHeader(typ wire.MsgType, id uint32, body int) []byte {
	h := binary.BigEndian.AppendUint32(nil, uint32(5+body))
	h = append(h, byte(typ))
	return binary.BigEndian.AppendUint32(h, id)
}

func describeBody(t *testing.T, stream string) []byte {
	t.Helper()
	b, err := wire.EncodeDescribe(wire.DescribeRequest{Shard: record.ShardID{Stream: stream}})
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// TestHandshakeDeadlineClearedOnceHelloAnswered: the handshake deadline
// bounds the Hello only. A client that waits longer than it after the Hello,
// or pipelines its first request with the Hello and then waits, is served.
func TestHandshakeDeadlineClearedOnceHelloAnswered(t *testing.T) {
	const hs = 200 * time.Millisecond
	b := startBroker(t, Options{HandshakeTimeout: hs})
	hello, _ := wire.EncodeHello(wire.Hello{Version: 1})
	desc := describeBody(t, "orders")
	tests := []struct {
		name      string
		pipelined bool
	}{{"wait after hello", false}, {"request pipelined with hello", true}}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			r := dialRaw(t, b.addr)
			first := wire.AppendFrame(nil, wire.Frame{Type: wire.MsgHello, Body: hello})
			if tc.pipelined {
				first = wire.AppendFrame(first, wire.Frame{Type: wire.MsgDescribe, ReqID: 1, Body: desc})
			}
			if _, err := r.nc.Write(first); err != nil {
				t.Fatal(err)
			}
			if f := r.recv(); f.Type != wire.MsgHelloOK {
				t.Fatalf("hello answered with %v", f.Type)
			}
			if tc.pipelined {
				if f := r.recv(); f.Type != wire.MsgDescribeOK {
					t.Fatalf("pipelined describe answered with %v", f.Type)
				}
			}
			time.Sleep(3 * hs) // the point of the test: outlive the handshake deadline
			r.send(wire.MsgDescribe, 2, desc)
			if f := r.recv(); f.Type != wire.MsgDescribeOK || f.ReqID != 2 {
				e, _ := wire.DecodeError(f.Body, 0)
				t.Fatalf("describe after %v: %v %v, want DescribeOK", 3*hs, f.Type, e)
			}
		})
	}
}

// TestIdleTimeoutOnByDefault: a server configured with nothing still drops
// a silent client, and an idle client is told why.
func TestIdleTimeoutOnByDefault(t *testing.T) {
	if got := New(nil, Options{}).opts.IdleTimeout; got <= 0 {
		t.Fatalf("default idle timeout %v: idle connections would be held forever", got)
	}
	if got := New(nil, Options{IdleTimeout: -1}).opts.IdleTimeout; got > 0 {
		t.Fatalf("a negative idle timeout turns it off, got %v", got)
	}
	b := startBroker(t, Options{IdleTimeout: 150 * time.Millisecond})
	r := dialRaw(t, b.addr)
	r.hello(0)
	frames := r.expectClosed(3 * time.Second)
	if len(frames) != 1 {
		t.Fatalf("idle connection closed with %d frames, want one error", len(frames))
	}
	if e := decodeErr(t, frames[0], 0); e.Code != wire.CodeBadRequest || frames[0].ReqID != 0 {
		t.Fatalf("idle close: %v (request %d)", e, frames[0].ReqID)
	}
	if n := b.metric("felix_broker_connections_dropped_total", "reason", "idle"); n != 1 {
		t.Fatalf("idle drops counted %v, want 1", n)
	}
}

// TestIdleTimeoutSparesAWaitingFollowRead: a connection whose follow read
// is parked at the broker for longer than the idle timeout is waiting for
// the broker, not idle; the read is answered when its wait ends.
func TestIdleTimeoutSparesAWaitingFollowRead(t *testing.T) {
	b := startBroker(t, Options{IdleTimeout: 150 * time.Millisecond})
	c := dial(t, b.addr, client.Options{})
	ctx := ctxT(t)
	if _, err := c.Append(ctx, shardA, recs("one"), nil); err != nil {
		t.Fatal(err)
	}
	start := time.Now()
	r, err := c.Read(ctx, wire.ReadRequest{Shard: shardA, From: wire.FromOffset, Offset: 1, WaitMillis: 800})
	if err != nil {
		t.Fatalf("follow read waiting %v past a %v idle timeout: %v", time.Since(start), 150*time.Millisecond, err)
	}
	if len(r.Records) != 0 || r.Next != 1 {
		t.Fatalf("follow read = %+v, want empty at 1", r)
	}
	if _, err := c.Append(ctx, shardA, recs("two"), nil); err != nil {
		t.Fatalf("append after the wait: %v", err)
	}
}

// TestHelloFrameIsSmall: the first frame of a connection is refused at
// once when it announces more than a Hello can be, before any of it is
// read or held.
func TestHelloFrameIsSmall(t *testing.T) {
	b := startBroker(t, Options{HandshakeTimeout: 10 * time.Second})
	r := dialRaw(t, b.addr)
	if _, err := r.nc.Write(frameHeader(wire.MsgHello, 0, 1<<20)); err != nil {
		t.Fatal(err)
	}
	start := time.Now()
	frames := r.expectClosed(3 * time.Second)
	if len(frames) != 1 || time.Since(start) > 2*time.Second {
		t.Fatalf("a 1 MiB hello: %d frames after %v", len(frames), time.Since(start))
	}
	if e := decodeErr(t, frames[0], 0); e.Code != wire.CodeBadRequest {
		t.Fatalf("a 1 MiB hello: %v", e)
	}
}

// TestConnectionsPerAddressLimit: one remote address cannot hold more than
// its share of connections; the next one is refused with Unavailable and
// counted, and a freed slot admits a new one.
func TestConnectionsPerAddressLimit(t *testing.T) {
	b := startBroker(t, Options{MaxConnections: 100, MaxConnectionsPerAddress: 2})
	first := dial(t, b.addr, client.Options{})
	_ = dial(t, b.addr, client.Options{})
	ctx := ctxT(t)
	_, err := client.Dial(ctx, b.addr, client.Options{})
	var we *wire.Error
	if !errors.As(err, &we) || we.Code != wire.CodeUnavailable {
		t.Fatalf("third connection from one address: %v, want Unavailable", err)
	}
	if n := b.metric("felix_broker_connections_dropped_total", "reason", "too-many-from-address"); n != 1 {
		t.Fatalf("refusals counted %v, want 1", n)
	}
	if _, err := first.Describe(ctx, shardA); err != nil {
		t.Fatalf("an admitted connection stopped working: %v", err)
	}
	_ = first.Close()
	eventually(t, 5*time.Second, "a connection admitted after one closed", func() bool {
		c, err := client.Dial(ctx, b.addr, client.Options{})
		if err == nil {
			_ = c.Close()
		}
		return err == nil
	})
}

// TestFrameMemoryBoundsStalledFrames: clients that announce maximum-size
// frames, send part of them and stall make the broker hold neither their
// announced bytes nor more than its frame memory budget: a body is charged
// as it arrives (at most twice what arrived), the frames whose next chunk
// does not fit are refused, and the budget is whole again once the clients
// are gone.
func TestFrameMemoryBoundsStalledFrames(t *testing.T) {
	const (
		frame   = 16 << 20
		clients = 12
		sent    = 3 << 20 // of each body: charged as 4 MiB
		budget  = 2*(frame+4) + 100
	)
	b := startBroker(t, Options{MaxFrameSize: frame, MaxFrameMemory: budget,
		FrameMemoryWait: 100 * time.Millisecond, FrameTimeout: 3 * time.Second})
	runtime.GC()
	var before runtime.MemStats
	runtime.ReadMemStats(&before)
	conns := make([]*rawConn, clients)
	part := make([]byte, sent)
	for i := range conns {
		conns[i] = dialRaw(t, b.addr)
		conns[i].hello(0)
		if _, err := conns[i].nc.Write(append(frameHeader(wire.MsgAppend, uint32(i+1), frame-5), part...)); err != nil {
			t.Fatal(err)
		}
	}
	grown := func() uint64 {
		runtime.GC()
		var now runtime.MemStats
		runtime.ReadMemStats(&now)
		if now.HeapAlloc < before.HeapAlloc {
			return 0
		}
		return now.HeapAlloc - before.HeapAlloc
	}
	const bound = budget + 8<<20 // the budget, plus the test's own buffer and slack
	eventually(t, 5*time.Second, "frames over the budget refused", func() bool {
		return b.metric("felix_broker_frame_memory_refusals_total") >= clients-budget/(4<<20) || grown() > bound
	})
	if g := grown(); g > bound {
		t.Fatalf("%d stalled %d-byte frames grew the heap by %d bytes (bound %d)", clients, frame, g, bound)
	}
	if held := b.metric("felix_broker_frame_memory_bytes"); held > budget {
		t.Fatalf("frame memory held %v, over the budget", held)
	}
	for _, r := range conns {
		_ = r.nc.Close()
	}
	eventually(t, 10*time.Second, "frame budget released", func() bool { return b.metric("felix_broker_frame_memory_bytes") == 0 })
}

// TestFrameMemoryRefusalAnswersTheRequest: a large frame that does not fit
// the budget within the wait is read past and answered with Unavailable for
// its own request id; a small frame takes from the small-frame pool and is
// answered; the connection stays usable.
func TestFrameMemoryRefusalAnswersTheRequest(t *testing.T) {
	const frame = 256 << 10
	b := startBroker(t, Options{MaxFrameSize: frame, MaxFrameMemory: 1, FrameMemoryWait: 100 * time.Millisecond})
	hog := dialRaw(t, b.addr)
	hog.hello(0)
	// All but the body's last byte: the hog holds the whole budget.
	if _, err := hog.nc.Write(append(frameHeader(wire.MsgAppend, 1, frame-5), make([]byte, frame-6)...)); err != nil {
		t.Fatal(err)
	}
	eventually(t, 5*time.Second, "the hog's frame admitted", func() bool {
		return b.metric("felix_broker_frame_memory_bytes") == frame+4
	})
	r := dialRaw(t, b.addr)
	r.hello(0)
	r.send(wire.MsgAppend, 7, make([]byte, 128<<10))
	f := r.recv()
	if e := decodeErr(t, f, 0); e.Code != wire.CodeUnavailable || f.ReqID != 7 {
		t.Fatalf("frame over the budget: %v for request %d, want Unavailable for 7", e, f.ReqID)
	}
	if n := b.metric("felix_broker_frame_memory_refusals_total"); n != 1 {
		t.Fatalf("refusals counted %v, want 1", n)
	}
	desc := describeBody(t, "orders")
	r.send(wire.MsgDescribe, 8, desc)
	if f := r.recv(); f.Type != wire.MsgDescribeOK || f.ReqID != 8 {
		t.Fatalf("small frame while the budget is full: %v for %d", f.Type, f.ReqID)
	}
	_ = hog.nc.Close()
	eventually(t, 5*time.Second, "the hog's frame released", func() bool { return b.metric("felix_broker_frame_memory_bytes") == 0 })
	r.send(wire.MsgDescribe, 9, desc)
	if f := r.recv(); f.Type != wire.MsgDescribeOK || f.ReqID != 9 {
		t.Fatalf("after the budget freed: %v for %d", f.Type, f.ReqID)
	}
	eventually(t, 5*time.Second, "frame budget released", func() bool { return b.metric("felix_broker_frame_memory_bytes") == 0 })
}

// TestLookingNeverCreatesAShard: describes, reads (also in follow mode) and
// no-op trims of shards the standalone store does not hold answer as the
// empty shard and create nothing; the first append creates the shard and
// wakes a follow read that was waiting for it.
func TestLookingNeverCreatesAShard(t *testing.T) {
	b := startBroker(t, Options{})
	c := dial(t, b.addr, client.Options{})
	ctx := ctxT(t)
	for i := 0; i < 50; i++ {
		s := record.ShardID{Stream: "looked-at", Shard: uint32(i)}
		if d, err := c.Describe(ctx, s); err != nil || d != (wire.DescribeOK{}) {
			t.Fatalf("describe of an unknown shard: %+v %v", d, err)
		}
		for _, from := range []wire.FromKind{wire.FromOffset, wire.FromEarliest, wire.FromLatest} {
			if r, err := c.Read(ctx, wire.ReadRequest{Shard: s, From: from}); err != nil || r.Next != 0 || len(r.Records) != 0 {
				t.Fatalf("read of an unknown shard: %+v %v", r, err)
			}
		}
		if tr, err := c.Trim(ctx, wire.TrimRequest{Shard: s}); err != nil || tr != (wire.TrimOK{}) {
			t.Fatalf("no-op trim of an unknown shard: %+v %v", tr, err)
		}
	}
	s := record.ShardID{Stream: "looked-at", Shard: 0}
	_, err := c.Read(ctx, wire.ReadRequest{Shard: s, From: wire.FromOffset, Offset: 1})
	var we *wire.Error
	if !errors.As(err, &we) || we.Code != wire.CodeBadRequest {
		t.Fatalf("read above the empty shard's tail: %v, want BadRequest", err)
	}
	_, err = c.Trim(ctx, wire.TrimRequest{Shard: s, ExpectTail: 3})
	if !errors.As(err, &we) || we.Code != wire.CodeOffsetMismatch || we.Tail != 0 {
		t.Fatalf("trim expecting tail 3 of an unknown shard: %v, want OffsetMismatch tail 0", err)
	}
	if logs := b.store.Logs(); len(logs) != 0 {
		t.Fatalf("looking created %d logs, e.g. %v", len(logs), logs[0])
	}
	// A follow read waiting on a shard that does not exist yet gets the
	// first append's records.
	got := make(chan wire.ReadOK, 1)
	go func() {
		r, err := c.Read(ctx, wire.ReadRequest{Shard: s, From: wire.FromOffset, WaitMillis: 5000})
		if err != nil {
			t.Error(err)
		}
		got <- r
	}()
	// Create the shard only once the read waits for its creation, so the
	// wake-on-creation path is the one exercised.
	ss := b.srv.shards.(*storeShards)
	eventually(t, 5*time.Second, "follow read parked on the absent shard", func() bool { return ss.parkedReads() == 1 })
	if _, err := c.Append(ctx, s, recs("first"), nil); err != nil {
		t.Fatal(err)
	}
	select {
	case r := <-got:
		if len(r.Records) != 1 || string(r.Records[0].Payload) != "first" {
			t.Fatalf("follow read got %+v", r)
		}
	case <-time.After(3 * time.Second):
		t.Fatalf("follow read not woken by the shard's creation")
	}
	if logs := b.store.Logs(); len(logs) != 1 {
		t.Fatalf("after one append: %d logs, want 1", len(logs))
	}
}

// TestStandaloneShardLimit: appends create shards up to the limit; one more
// is refused with Unavailable and counted, while existing shards go on.
func TestStandaloneShardLimit(t *testing.T) {
	b := startBrokerWith(t, logstore.FsyncNone, Options{}, func(s *logstore.Store, m *Metrics) Shards {
		return NewStoreShards(s, StoreShardsOptions{MaxShards: 2, Metrics: m})
	})
	c := dial(t, b.addr, client.Options{})
	ctx := ctxT(t)
	for i := 0; i < 2; i++ {
		if _, err := c.Append(ctx, record.ShardID{Stream: "s", Shard: uint32(i)}, recs("x"), nil); err != nil {
			t.Fatal(err)
		}
	}
	_, err := c.Append(ctx, record.ShardID{Stream: "s", Shard: 2}, recs("x"), nil)
	var we *wire.Error
	if !errors.As(err, &we) || we.Code != wire.CodeUnavailable {
		t.Fatalf("append creating a third shard: %v, want Unavailable", err)
	}
	if n := b.metric("felix_broker_shard_creations_refused_total"); n != 1 {
		t.Fatalf("refusals counted %v, want 1", n)
	}
	if _, err := c.Append(ctx, record.ShardID{Stream: "s", Shard: 1}, recs("y"), nil); err != nil {
		t.Fatalf("append to an existing shard at the limit: %v", err)
	}
	if logs := b.store.Logs(); len(logs) != 2 {
		t.Fatalf("%d logs, want 2", len(logs))
	}
}

// TestReservedOffsetsUnreachable: the store's earliest and latest markers
// sent as explicit offsets are refused; from=earliest and from=latest are
// the way to ask for them.
func TestReservedOffsetsUnreachable(t *testing.T) {
	b := startBroker(t, Options{})
	c := dial(t, b.addr, client.Options{})
	ctx := ctxT(t)
	if _, err := c.Append(ctx, shardA, recs("a", "b"), nil); err != nil {
		t.Fatal(err)
	}
	for _, off := range []uint64{math.MaxUint64, math.MaxUint64 - 1} {
		r, err := c.Read(ctx, wire.ReadRequest{Shard: shardA, From: wire.FromOffset, Offset: off})
		var we *wire.Error
		if !errors.As(err, &we) || we.Code != wire.CodeBadRequest {
			t.Fatalf("read from explicit offset %d: %d records, next %d, %v; want BadRequest", off, len(r.Records), r.Next, err)
		}
	}
	if r, err := c.Read(ctx, wire.ReadRequest{Shard: shardA, From: wire.FromEarliest}); err != nil || len(r.Records) != 2 {
		t.Fatalf("from earliest: %+v %v", r, err)
	}
}

// TestBadStreamNamesRefused: a request naming a stream outside the
// documented character set is refused with BadRequest and creates nothing.
func TestBadStreamNamesRefused(t *testing.T) {
	b := startBroker(t, Options{})
	r := dialRaw(t, b.addr)
	r.hello(0)
	good := describeBody(t, "x")
	for i, name := range []string{"not utf-8 \xff", "with space", "a/b", string(make([]byte, 256))} {
		body := binary.BigEndian.AppendUint16(nil, uint16(len(name)))
		body = append(append(body, name...), good[3:]...)
		id := uint32(10 + i)
		r.send(wire.MsgDescribe, id, body)
		app := binary.BigEndian.AppendUint16(nil, uint16(len(name)))
		app = append(append(app, name...), 0, 0, 0, 0, 0, 0, 0, 0, 1, 0, 0, 0, 0, 0, 1, 'x')
		r.send(wire.MsgAppend, id+100, app)
		for j := 0; j < 2; j++ {
			f := r.recv()
			if e := decodeErr(t, f, 0); e.Code != wire.CodeBadRequest {
				t.Fatalf("stream %q: %v for request %d, want BadRequest", name, e, f.ReqID)
			}
		}
	}
	if logs := b.store.Logs(); len(logs) != 0 {
		t.Fatalf("bad names created %d logs: %v", len(logs), logs)
	}
}

// captureRepl is a ReplicationHandler that hands over the PeerConn of the
// first replication frame.
type captureRepl struct{ pcs chan PeerConn }

func (h captureRepl) ServeReplication(pc PeerConn, _ wire.Frame) {
	select {
	case h.pcs <- pc:
	default:
	}
}

// TestPeerSendNeverBlocks: sending to a peer that stopped reading returns at
// once whatever the socket and queue hold; what does not fit is dropped and
// counted (the replication core sends again), so a shard's loop never
// waits for a peer.
func TestPeerSendNeverBlocks(t *testing.T) {
	h := captureRepl{pcs: make(chan PeerConn, 1)}
	b := startBroker(t, Options{Replication: h, InsecurePeersOnClientPort: true, WriteTimeout: 20 * time.Second, PeerQueueFrames: 8})
	r := dialRaw(t, b.addr)
	r.hello(wire.FeatureStorageID)
	r.send(wire.MsgShip, 0, []byte{1})
	var pc PeerConn
	select {
	case pc = <-h.pcs:
	case <-time.After(5 * time.Second):
		t.Fatal("no replication frame served")
	}
	// The peer reads nothing from here on.
	body := make([]byte, 64<<10)
	var wg sync.WaitGroup
	wg.Add(1)
	sent, dropped := 0, 0
	go func() {
		defer wg.Done()
		for i := 0; i < 2000; i++ {
			if pc.Send(wire.Frame{Type: wire.MsgShipAnswer, Body: body}) {
				sent++
			} else {
				dropped++
			}
		}
	}()
	done := make(chan struct{})
	go func() { wg.Wait(); close(done) }()
	select {
	case <-done:
	case <-time.After(3 * time.Second):
		t.Fatalf("2000 sends of 64 KiB to a peer that reads nothing did not return within 3s (WriteTimeout 20s)")
	}
	if dropped == 0 {
		t.Fatalf("all %d sends queued for a peer that reads nothing", sent)
	}
	if n := b.metric("felix_broker_peer_sends_dropped_total"); int(n) != dropped {
		t.Fatalf("drops counted %v, want %d", n, dropped)
	}
}
