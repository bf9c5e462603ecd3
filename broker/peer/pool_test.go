package peer

import (
	"bytes"
	"encoding/hex"
	"net"
	"sync"
	"testing"
	"time"

	"felix.dev/felix/broker/record"
	"felix.dev/felix/broker/replication"
	"felix.dev/felix/broker/server"
	"felix.dev/felix/broker/wire"
)

func TestBackoffDoublesToItsCap(t *testing.T) {
	b := Backoff{Min: 10 * time.Millisecond, Max: 70 * time.Millisecond}
	for _, tc := range []struct {
		failures int
		want     time.Duration
	}{{1, 10 * time.Millisecond}, {2, 20 * time.Millisecond}, {3, 40 * time.Millisecond}, {4, 70 * time.Millisecond}, {40, 70 * time.Millisecond}} {
		if got := b.Delay(tc.failures); got != tc.want {
			t.Errorf("Delay(%d) = %v, want %v", tc.failures, got, tc.want)
		}
	}
	if got := (Backoff{}).Delay(1); got != DefaultBackoffMin {
		t.Errorf("zero Backoff: %v", got)
	}
}

// recorder is an Events that keeps everything it is told.
type recorder struct {
	mu     sync.Mutex
	events []string
	conns  []replication.ConnID
	ids    []replication.StorageID
	msgs   []replication.Message
	lookup int
}

func (r *recorder) Connected(n replication.NodeID, c replication.ConnID, id replication.StorageID) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.events = append(r.events, "connected")
	r.conns = append(r.conns, c)
	r.ids = append(r.ids, id)
}

func (r *recorder) Disconnected(n replication.NodeID, c replication.ConnID) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.events = append(r.events, "disconnected")
}

func (r *recorder) LookupFailed(n replication.NodeID) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.lookup++
}

func (r *recorder) Message(s record.ShardID, m replication.Message) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.msgs = append(r.msgs, m)
}

func (r *recorder) snapshot() recorder {
	r.mu.Lock()
	defer r.mu.Unlock()
	return recorder{events: append([]string(nil), r.events...), conns: append([]replication.ConnID(nil), r.conns...),
		ids: append([]replication.StorageID(nil), r.ids...), msgs: append([]replication.Message(nil), r.msgs...), lookup: r.lookup}
}

// echo answers every request with a Refuse carrying the request's pass,
// over the connection it came on; it keeps the connections it saw.
type echo struct {
	mu    sync.Mutex
	conns []server.PeerConn
}

func (e *echo) ServeReplication(pc server.PeerConn, f wire.Frame) {
	shard, m, err := Decode(f)
	if err != nil {
		return
	}
	e.mu.Lock()
	e.conns = append(e.conns, pc)
	e.mu.Unlock()
	ans, _ := Encode(shard, replication.Message{Type: replication.MsgRefuse, From: m.To, To: m.From, Epoch: m.Epoch, Pass: m.Pass})
	pc.Send(ans)
}

func serve(t *testing.T, o server.Options) (*server.Server, string) {
	t.Helper()
	srv := server.New(nil, o)
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	go func() { _ = srv.Serve(l) }()
	t.Cleanup(srv.Close)
	return srv, l.Addr().String()
}

func waitFor(t *testing.T, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(5 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting for %s", what)
		}
		time.Sleep(2 * time.Millisecond)
	}
}

var followerID = []byte{0xc9, 0x1e, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15}

// [RP-2] The follower's HelloOK presents its storage id; every connection
// gets a new ConnID; answers come back over the connection of the request,
// in order; a lost connection is reported and re-dialled after the
// backoff the injected clock is asked for.
func TestRP2_PoolLearnsTheFollowersIDPerConnection(t *testing.T) {
	h := &echo{}
	srv, addr := serve(t, server.Options{StorageID: followerID, Replication: h, InsecurePeersOnClientPort: true})
	_ = srv
	var amu sync.Mutex
	resolve := func(replication.NodeID) (string, error) {
		amu.Lock()
		defer amu.Unlock()
		return addr, nil
	}
	rec := &recorder{}
	var waits []time.Duration
	var wmu sync.Mutex
	p := NewPool(Options{Self: "a", StorageID: make([]byte, 16), Events: rec, Resolve: resolve,
		Backoff: Backoff{Min: time.Millisecond, Max: 8 * time.Millisecond},
		After: func(d time.Duration) <-chan time.Time {
			wmu.Lock()
			waits = append(waits, d)
			wmu.Unlock()
			ch := make(chan time.Time, 1)
			ch <- time.Time{}
			return ch
		}})
	defer p.Close()
	p.Want("b")
	waitFor(t, "connected", func() bool { return len(rec.snapshot().conns) == 1 })
	s := rec.snapshot()
	if want := replication.StorageID(hex.EncodeToString(followerID)); s.ids[0] != want {
		t.Fatalf("presented id %q, want %q", s.ids[0], want)
	}
	conn1 := s.conns[0]
	if cur, id, ok := p.Current("b"); !ok || cur != conn1 || id != s.ids[0] {
		t.Fatalf("Current = %d %q %v", cur, id, ok)
	}

	const n = 50
	for i := 1; i <= n; i++ {
		b, err := AppendFrame(nil, codecShard, replication.Message{Type: replication.MsgProbe, From: "a", To: "b", Epoch: 1, Pass: uint64(i)})
		if err != nil {
			t.Fatal(err)
		}
		if !p.Send("b", conn1, b) {
			t.Fatalf("send %d refused", i)
		}
	}
	waitFor(t, "answers", func() bool { return len(rec.snapshot().msgs) == n })
	for i, m := range rec.snapshot().msgs {
		if m.Pass != uint64(i+1) || m.Conn != conn1 || m.Type != replication.MsgRefuse {
			t.Fatalf("answer %d: %v over conn %d, want pass %d over %d", i, m, m.Conn, i+1, conn1)
		}
	}
	if p.Send("b", conn1+100, []byte{}) {
		t.Fatal("a send over a connection that is not the current one was accepted")
	}

	// Drop the connection from the follower's side (a restart).
	h.mu.Lock()
	pcs := append([]server.PeerConn(nil), h.conns...)
	h.mu.Unlock()
	srv.Close()
	for _, pc := range pcs {
		<-pc.Done()
	}
	_, addr2 := serve(t, server.Options{StorageID: followerID, Replication: h, InsecurePeersOnClientPort: true})
	amu.Lock()
	addr = addr2
	amu.Unlock()
	waitFor(t, "reconnected", func() bool { return len(rec.snapshot().conns) == 2 })
	s = rec.snapshot()
	if s.events[1] != "disconnected" || s.conns[1] <= conn1 {
		t.Fatalf("events %v conns %v: want a disconnect and a newer ConnID", s.events, s.conns)
	}
	if p.Send("b", conn1, []byte{}) {
		t.Fatal("the old connection still accepts frames")
	}
	wmu.Lock()
	defer wmu.Unlock()
	if len(waits) == 0 || waits[0] != time.Millisecond {
		t.Fatalf("backoff waits %v, want the first to be the minimum", waits)
	}
}

// A peer that does not negotiate the storage-id bit (an older broker)
// presents "", and a peer that negotiates it without presenting an id is a
// failed lookup: reported, and the connection is not used [RP-2].
func TestRP2_OlderBrokerPresentsNoIDAndAMissingIDIsAFailedLookup(t *testing.T) {
	for _, tc := range []struct {
		name       string
		opts       server.Options
		wantID     replication.StorageID
		wantLookup bool
	}{
		{"older broker", server.Options{Features: wire.FeatureTrimTag, StorageID: followerID, Replication: &echo{}, InsecurePeersOnClientPort: true}, "", false},
		{"negotiated without an id", server.Options{Replication: &echo{}, InsecurePeersOnClientPort: true}, "", true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, addr := serve(t, tc.opts)
			rec := &recorder{}
			p := NewPool(Options{Self: "a", Events: rec, Backoff: Backoff{Min: time.Millisecond, Max: time.Millisecond},
				Resolve: func(replication.NodeID) (string, error) { return addr, nil }})
			defer p.Close()
			p.Want("b")
			if tc.wantLookup {
				waitFor(t, "lookup failures", func() bool { return rec.snapshot().lookup >= 2 })
				if s := rec.snapshot(); len(s.conns) != 0 {
					t.Fatalf("a connection without a learned id was reported connected: %v", s.events)
				}
				return
			}
			waitFor(t, "connected", func() bool { return len(rec.snapshot().conns) == 1 })
			if s := rec.snapshot(); s.ids[0] != tc.wantID || s.lookup != 0 {
				t.Fatalf("id %q lookups %d", s.ids[0], s.lookup)
			}
		})
	}
}

// A frame that does not fit the connection's queue drops the connection
// rather than skip the frame: the peer sees a new connection, never a gap.
func TestFullQueueDropsTheConnection(t *testing.T) {
	_, addr := serve(t, server.Options{StorageID: followerID, Replication: &echo{}, InsecurePeersOnClientPort: true})
	rec := &recorder{}
	p := NewPool(Options{Self: "a", Events: rec, QueueBytes: 64, Backoff: Backoff{Min: time.Millisecond, Max: time.Millisecond},
		Resolve: func(replication.NodeID) (string, error) { return addr, nil }})
	defer p.Close()
	p.Want("b")
	waitFor(t, "connected", func() bool { return len(rec.snapshot().conns) == 1 })
	conn := rec.snapshot().conns[0]
	if p.Send("b", conn, make([]byte, 65)) {
		t.Fatal("a frame over the queue limit was accepted")
	}
	waitFor(t, "a new connection", func() bool { return len(rec.snapshot().conns) == 2 })
	if s := rec.snapshot(); s.events[1] != "disconnected" || s.conns[1] == conn {
		t.Fatalf("events %v conns %v", s.events, s.conns)
	}
}

// fetchEcho answers every Probe with a FetchResp of one record whose
// payload is the pass, repeated: 16 bytes, the same size every time.
type fetchEcho struct{}

func (fetchEcho) ServeReplication(pc server.PeerConn, f wire.Frame) {
	ms, err := DecodeFrame(f, nil)
	if err != nil {
		return
	}
	for _, s := range ms {
		m := s.Msg
		payload := bytes.Repeat([]byte{byte('A' + m.Pass)}, 16)
		ans := replication.Message{Type: replication.MsgFetchResp, From: m.To, To: m.From, Epoch: m.Epoch, Pass: m.Pass,
			Index: 1, Base: 0, Tail: 2, Records: []record.Record{{Offset: 1, Epoch: 1, Kind: record.KindData, Payload: payload}}}
		if m.Pass%2 == 0 {
			// Even passes: an answer without records, whose body the
			// reader may read the next frame into.
			ans = replication.Message{Type: replication.MsgRefuse, From: m.To, To: m.From, Epoch: m.Epoch, Pass: m.Pass}
		}
		b, err := AppendFrame(nil, s.Shard, ans)
		if err == nil {
			pc.SendFrame(b)
		}
	}
}

// The pool's reader reads a frame into the last one's body only when
// nothing decoded from that body was handed on: records handed to Events
// keep their payloads whatever frames follow. The frames sent are handed
// out again by Buffer once written.
func TestPoolReaderKeepsBodiesHandedOn(t *testing.T) {
	_, addr := serve(t, server.Options{StorageID: followerID, Replication: fetchEcho{}, InsecurePeersOnClientPort: true})
	rec := &recorder{}
	p := NewPool(Options{Self: "a", StorageID: make([]byte, 16), Events: rec, Backoff: Backoff{Min: 1, Max: 1},
		Resolve: func(replication.NodeID) (string, error) { return addr, nil }})
	defer p.Close()
	p.Want("b")
	waitFor(t, "connected", func() bool { return len(rec.snapshot().conns) == 1 })
	conn := rec.snapshot().conns[0]
	const passes = 12
	for pass := uint64(1); pass <= passes; pass++ {
		b, err := AppendFrame(nil, codecShard, replication.Message{Type: replication.MsgProbe, From: "a", To: "b", Epoch: 1, Pass: pass})
		if err != nil {
			t.Fatal(err)
		}
		p.Send("b", conn, b)
	}
	waitFor(t, "answers", func() bool { return len(rec.snapshot().msgs) == passes })
	// The requests are written: Buffer hands their buffers out, empty,
	// for the current connection only.
	if b := p.Buffer("b", conn+1); b != nil {
		t.Fatalf("Buffer for a connection that is not the current one: %d bytes of capacity", cap(b))
	}
	for range passes {
		if b := p.Buffer("b", conn); b == nil || len(b) != 0 {
			t.Fatalf("Buffer after the frames were written: %v", b)
		}
	}
	for i, m := range rec.snapshot().msgs {
		if m.Pass != uint64(i+1) {
			t.Fatalf("answer %d: pass %d", i, m.Pass)
		}
		if m.Pass%2 == 0 {
			continue
		}
		if want := bytes.Repeat([]byte{byte('A' + m.Pass)}, 16); len(m.Records) != 1 || !bytes.Equal(m.Records[0].Payload, want) {
			t.Fatalf("answer %d: records %v, want one with payload %q", i, m.Records, want)
		}
	}
}
