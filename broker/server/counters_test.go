package server

import (
	"errors"
	"net"
	"testing"
	"time"

	"felix.dev/felix/broker/client"
	"felix.dev/felix/broker/counter"
	"felix.dev/felix/broker/producer"
	"felix.dev/felix/broker/record"
	"felix.dev/felix/broker/wire"
)

// serveAgain starts another server over b's store: a broker restarted on
// the same data, whose counter folds can only come from the log.
func serveAgain(t *testing.T, b *broker, o Options) string {
	t.Helper()
	srv := New(StoreShards(b.store), o)
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	go func() { _ = srv.Serve(l) }()
	t.Cleanup(srv.Close)
	return l.Addr().String()
}

func TestCounterAddGetAndLimits(t *testing.T) {
	b := startBroker(t, Options{CounterLimits: counter.Limits{MaxKeys: 2, MaxKeyBytes: 8}})
	ctx := ctxT(t)
	c := dial(t, b.addr, client.Options{})
	if !c.Features().Has(wire.FeatureCounters) {
		t.Fatalf("features %v: counters not negotiated", c.Features())
	}
	steps := []struct {
		key   string
		delta int64
		want  int64
		code  wire.Code // 0: success
	}{
		{"hits", 5, 5, 0},
		{"hits", -2, 3, 0},
		{"misses", 1, 1, 0},
		{"third", 1, 0, wire.CodeCounterLimit},      // a third key
		{"toolongkey", 1, 0, wire.CodeCounterLimit}, // key over 8 bytes
		{"hits", 1 << 62, 1<<62 + 3, 0},             // fits
		{"hits", 1 << 62, 0, wire.CodeCounterLimit}, // overflows
		{"", 1, 0, wire.CodeBadRequest},             // empty key
	}
	for i, st := range steps {
		got, err := c.CounterAdd(ctx, shardA, st.key, st.delta, nil)
		if st.code != 0 {
			var we *wire.Error
			if !errors.As(err, &we) || we.Code != st.code {
				t.Fatalf("step %d: add %q %d: %v, want code %v", i, st.key, st.delta, err, st.code)
			}
			if st.code == wire.CodeCounterLimit && !errors.Is(err, wire.ErrCounterLimit) {
				t.Fatalf("step %d: %v does not match ErrCounterLimit", i, err)
			}
			continue
		}
		if err != nil || got.Value != st.want {
			t.Fatalf("step %d: add %q %d = %+v, %v; want %d", i, st.key, st.delta, got, err, st.want)
		}
	}
	g, err := c.CounterGet(ctx, shardA, "hits")
	if err != nil || g.Value != 1<<62+3 || g.Through != 4 {
		t.Fatalf("get hits = %+v, %v; want value %d through 4", g, err, int64(1<<62+3))
	}
	if g, err := c.CounterGet(ctx, shardA, "never"); err != nil || g.Value != 0 {
		t.Fatalf("get of an unknown key = %+v, %v", g, err)
	}
	// The data log is untouched: counters live in the counter log.
	if d, err := c.Describe(ctx, shardA); err != nil || d.Tail != 0 {
		t.Fatalf("data log describe = %+v, %v; want an empty data log", d, err)
	}
	// A connection without the feature cannot send counter requests.
	old := dial(t, b.addr, client.Options{Features: wire.FeatureAuth})
	if _, err := old.CounterGet(ctx, shardA, "hits"); !errors.Is(err, client.ErrNoCounters) {
		t.Fatalf("counter get without the feature: %v", err)
	}
	raw := dialRaw(t, b.addr)
	raw.hello(wire.FeatureAuth)
	body, err := wire.EncodeCounterGet(wire.CounterGetRequest{Shard: shardA, Key: "hits"})
	if err != nil {
		t.Fatal(err)
	}
	raw.send(wire.MsgCounterGet, 1, body)
	if e := decodeErr(t, raw.recv(), wire.FeatureAuth); e.Code != wire.CodeBadRequest {
		t.Fatalf("counter get on a connection without the feature: %v", e)
	}
}

// An add whose answer is lost (the connection closes before it is read)
// and that is sent again under the same producer and sequence is applied
// once, also after a snapshot trimmed the add's entry away and the broker
// restarted: the retry is answered with the first answer.
func TestCounterRetryAfterUnknownOutcomeAppliesOnce(t *testing.T) {
	b := startBroker(t, Options{})
	ctx := ctxT(t)
	c := dial(t, b.addr, client.Options{})
	if _, err := c.CounterAdd(ctx, shardA, "k", 10, nil); err != nil {
		t.Fatal(err)
	}
	p := wire.Producer{ID: [16]byte{0xc}, Seq: 0}

	// The first attempt: sent, and its answer never read.
	raw := dialRaw(t, b.addr)
	raw.hello(wire.KnownFeatures)
	body, err := wire.EncodeCounterAdd(wire.CounterAddRequest{Shard: shardA, Key: "k", Delta: 5, Producer: &p})
	if err != nil {
		t.Fatal(err)
	}
	raw.send(wire.MsgCounterAdd, 1, body)
	_ = raw.nc.Close()
	deadline := time.Now().Add(10 * time.Second)
	for {
		g, err := c.CounterGet(ctx, shardA, "k")
		if err != nil {
			t.Fatal(err)
		}
		if g.Value == 15 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("the first attempt never applied: value %d", g.Value)
		}
		time.Sleep(5 * time.Millisecond) // polling a state with a deadline
	}

	// The retry: the same answer, nothing applied again.
	got, err := c.CounterAdd(ctx, shardA, "k", 5, &p)
	if err != nil || got.Value != 15 || got.Offset != 1 {
		t.Fatalf("retry = %+v, %v; want value 15 at offset 1", got, err)
	}
	if g, err := c.CounterGet(ctx, shardA, "k"); err != nil || g.Value != 15 {
		t.Fatalf("after the retry: %+v, %v; want 15", g, err)
	}
	next := p
	next.Seq = 1
	if got, err := c.CounterAdd(ctx, shardA, "k", 1, &next); err != nil || got.Value != 16 {
		t.Fatalf("next add = %+v, %v; want 16", got, err)
	}

	// Snapshot and trim the counter log below it.
	snap, err := c.CounterSnapshot(ctx, shardA, true)
	if err != nil || snap.Keys != 1 || snap.Floor != snap.Offset || snap.Offset != 3 {
		t.Fatalf("snapshot = %+v, %v; want 1 key at offset 3, trimmed to it", snap, err)
	}
	cl, ok := b.store.Lookup(record.LogID{ShardID: shardA, Log: record.LogCounter})
	if !ok || cl.Describe().Floor != 3 {
		t.Fatalf("counter log floor: %+v", cl.Describe())
	}

	// A restarted broker folds from the snapshot and still knows the
	// producer's last add from it.
	c2 := dial(t, serveAgain(t, b, Options{}), client.Options{})
	if g, err := c2.CounterGet(ctx, shardA, "k"); err != nil || g.Value != 16 {
		t.Fatalf("get after restart: %+v, %v; want 16", g, err)
	}
	if got, err := c2.CounterAdd(ctx, shardA, "k", 1, &next); err != nil || got.Value != 16 || got.Offset != 2 {
		t.Fatalf("retry after trim and restart = %+v, %v; want value 16 at offset 2", got, err)
	}
	if _, err := c2.CounterAdd(ctx, shardA, "k", 1, &p); !errors.Is(err, wire.ErrOutOfSequence) {
		t.Fatalf("retry of an add older than the producer's last: %v, want OutOfSequence", err)
	}
	if g, err := c2.CounterGet(ctx, shardA, "k"); err != nil || g.Value != 16 {
		t.Fatalf("get after the retries: %+v, %v; want 16", g, err)
	}
}

// The server snapshots and trims by itself every CounterSnapshotEvery
// adds, and a restarted server folds the trimmed log to the same values.
func TestCounterAutomaticSnapshot(t *testing.T) {
	b := startBroker(t, Options{CounterSnapshotEvery: 3})
	ctx := ctxT(t)
	c := dial(t, b.addr, client.Options{})
	for i := range 8 {
		if _, err := c.CounterAdd(ctx, shardA, []string{"a", "b"}[i%2], int64(i), nil); err != nil {
			t.Fatal(err)
		}
	}
	cl, ok := b.store.Lookup(record.LogID{ShardID: shardA, Log: record.LogCounter})
	if !ok || cl.Describe().Floor == 0 {
		t.Fatalf("the counter log was never trimmed: %+v", cl.Describe())
	}
	c2 := dial(t, serveAgain(t, b, Options{CounterSnapshotEvery: -1}), client.Options{})
	for key, want := range map[string]int64{"a": 0 + 2 + 4 + 6, "b": 1 + 3 + 5 + 7} {
		if g, err := c2.CounterGet(ctx, shardA, key); err != nil || g.Value != want {
			t.Fatalf("%s after restart = %+v, %v; want %d", key, g, err, want)
		}
	}
}

// A counter log holding an entry that does not decode is refused loudly
// (Corrupt), never folded as if the entry were not there.
func TestCounterMalformedEntryIsLoud(t *testing.T) {
	b := startBroker(t, Options{})
	ctx := ctxT(t)
	c := dial(t, b.addr, client.Options{})
	if _, err := c.CounterAdd(ctx, shardA, "k", 1, nil); err != nil {
		t.Fatal(err)
	}
	cl, ok := b.store.Lookup(record.LogID{ShardID: shardA, Log: record.LogCounter})
	if !ok {
		t.Fatal("no counter log")
	}
	if _, err := cl.Append(ctx, []record.Record{{Payload: []byte{0x7f}}}, nil); err != nil {
		t.Fatal(err)
	}
	c2 := dial(t, serveAgain(t, b, Options{}), client.Options{})
	_, err := c2.CounterGet(ctx, shardA, "k")
	var we *wire.Error
	if !errors.As(err, &we) || we.Code != wire.CodeCorrupt || we.Offset != 1 {
		t.Fatalf("get over a malformed counter log: %v, want Corrupt at offset 1", err)
	}
	if _, err := c2.CounterAdd(ctx, shardA, "k", 1, &wire.Producer{ID: producer.ID{1}}); !errors.As(err, &we) || we.Code != wire.CodeCorrupt {
		t.Fatalf("add over a malformed counter log: %v, want Corrupt", err)
	}
}
