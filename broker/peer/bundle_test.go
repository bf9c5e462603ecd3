package peer

import (
	"bufio"
	"bytes"
	"encoding/binary"
	"encoding/hex"
	"errors"
	"flag"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"

	"github.com/google/go-cmp/cmp"
	"github.com/google/go-cmp/cmp/cmpopts"

	"felix.dev/felix/broker/record"
	"felix.dev/felix/broker/replication"
	"felix.dev/felix/broker/server"
	"felix.dev/felix/broker/wire"
)

var update = flag.Bool("update", false, "rewrite the golden vectors in testdata/golden and the bundle seeds of testdata/fuzz")

var otherShard = record.ShardID{Stream: "orders", Shard: 8}

// sampleBundles are a pass's requests and answers for two shards, as
// bundled by a broker: requests only, answers only.
func sampleBundles() map[string][]Shipped {
	ms := sampleMessages()
	idle := func(l record.LogKind, pass uint64) replication.Message {
		return replication.Message{Type: replication.MsgAppend, From: "broker-a", To: "broker-b", Epoch: 3, Pass: pass, Log: l, Index: 13, PrevEpoch: 3, Commit: 13}
	}
	resp := func(l record.LogKind, pass uint64) replication.Message {
		return replication.Message{Type: replication.MsgAppendResp, From: "broker-b", To: "broker-a", Epoch: 3, Pass: pass, Log: l, Match: true, MatchEnd: 13}
	}
	return map[string][]Shipped{
		"bundle_requests": {
			{Shard: codecShard, Msg: idle(record.LogData, 44)},
			{Shard: codecShard, Msg: idle(record.LogGroup, 44)},
			{Shard: otherShard, Msg: idle(record.LogData, 9)},
			{Shard: otherShard, Msg: ms[4]}, // Probe
			{Shard: codecShard, Msg: ms[6]}, // Fetch
		},
		"bundle_answers": {
			{Shard: codecShard, Msg: resp(record.LogData, 44)},
			{Shard: codecShard, Msg: ms[3]}, // AppendResp without match, with epochs
			{Shard: otherShard, Msg: ms[5]}, // ProbeResp
			{Shard: otherShard, Msg: ms[8]}, // Refuse
		},
	}
}

// A bundle carries its messages, of one or several shards, in order, each
// exactly as its version-1 frame would; DecodeFrame reads both layouts.
func TestBundleRoundTrip(t *testing.T) {
	for name, ms := range sampleBundles() {
		t.Run(name, func(t *testing.T) {
			b, err := AppendBundleFrame(nil, ms)
			if err != nil {
				t.Fatal(err)
			}
			f, err := wire.ReadFrame(bufio.NewReader(bytes.NewReader(b)), wire.DefaultMaxFrameSize)
			if err != nil {
				t.Fatal(err)
			}
			if want := FrameType(ms[0].Msg.Type); f.Type != want {
				t.Fatalf("frame type %s, want %s", f.Type, want)
			}
			got, err := DecodeFrame(f, nil)
			if err != nil {
				t.Fatal(err)
			}
			want := make([]Shipped, len(ms))
			for i, s := range ms {
				want[i] = s
				want[i].Size = len(mustBodyOf(t, s.Shard, s.Msg))
			}
			if d := cmp.Diff(want, got, cmpopts.EquateEmpty()); d != "" {
				t.Fatalf("round trip (-sent +decoded):\n%s", d)
			}
		})
	}
	// A version-1 frame decodes to its one message.
	m := sampleMessages()[0]
	f, err := Encode(codecShard, m)
	if err != nil {
		t.Fatal(err)
	}
	got, err := DecodeFrame(f, nil)
	if err != nil || len(got) != 1 || got[0].Shard != codecShard || got[0].Size != len(f.Body) {
		t.Fatalf("version-1 frame: %v, %v", got, err)
	}
	if d := cmp.Diff(m, got[0].Msg, cmpopts.EquateEmpty()); d != "" {
		t.Fatalf("version-1 frame (-sent +decoded):\n%s", d)
	}
}

func mustBodyOf(t *testing.T, shard record.ShardID, m replication.Message) []byte {
	t.Helper()
	f, err := Encode(shard, m)
	if err != nil {
		t.Fatal(err)
	}
	return f.Body
}

// bundleBody builds a bundle body by hand: count, then each entry with its
// length.
func bundleBody(count int, entries ...[]byte) []byte {
	b := []byte{bundleVersion}
	b = binary.BigEndian.AppendUint16(b, uint16(count))
	for _, e := range entries {
		b = binary.BigEndian.AppendUint32(b, uint32(len(e)))
		b = append(b, e...)
	}
	return b
}

// Every byte of a bundle is untrusted: a bad count, a bad entry, a nested
// bundle or trailing bytes refuse the whole frame, and nothing of it is
// handed on.
func TestBundleRefusesMalformedBodies(t *testing.T) {
	req := mustBodyOf(t, codecShard, sampleMessages()[1]) // an empty Append
	ans := mustBodyOf(t, codecShard, sampleMessages()[2])
	nested := bundleBody(1, req)
	cases := []struct {
		name string
		typ  wire.MsgType
		body []byte
	}{
		{"no messages", wire.MsgShip, bundleBody(0)},
		{"over MaxBundle", wire.MsgShip, bundleBody(MaxBundle+1, req)},
		{"count beyond the body", wire.MsgShip, bundleBody(3, req, req)},
		{"cut in the count", wire.MsgShip, []byte{bundleVersion, 0}},
		{"entry length beyond the body", wire.MsgShip, bundleBody(2, req, req)[:3+2*(4+len(req))-1]},
		{"entry shorter than any message", wire.MsgShip, bundleBody(2, req, make([]byte, minBodyLen-1))},
		{"malformed entry", wire.MsgShip, bundleBody(2, req, append(append([]byte(nil), req...), 0))},
		{"bundle inside a bundle", wire.MsgShip, bundleBody(2, req, append(nested, make([]byte, minBodyLen)...))},
		{"answer in a request bundle", wire.MsgShip, bundleBody(2, req, ans)},
		{"request in an answer bundle", wire.MsgShipAnswer, bundleBody(2, ans, req)},
		{"trailing bytes", wire.MsgShip, append(bundleBody(2, req, req), 0)},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			prior := []Shipped{{Shard: otherShard}}
			got, err := DecodeFrame(wire.Frame{Type: tc.typ, Body: tc.body}, prior)
			if !errors.Is(err, ErrMalformed) {
				t.Fatalf("err %v, want ErrMalformed", err)
			}
			if len(got) != 1 || got[0].Shard != otherShard {
				t.Fatalf("a refused bundle handed on messages: %v", got)
			}
		})
	}
	// The encoder refuses what the decoder would.
	ms := sampleBundles()["bundle_requests"]
	for name, bad := range map[string][]Shipped{
		"empty":                nil,
		"requests and answers": {ms[0], {Shard: codecShard, Msg: sampleMessages()[2]}},
		"over MaxBundle":       make([]Shipped, MaxBundle+1),
	} {
		if _, err := AppendBundleFrame(nil, bad); !errors.Is(err, ErrMalformed) {
			t.Errorf("%s: err %v, want ErrMalformed", name, err)
		}
	}
}

// TestBundleGoldenVectors pins the bytes of a bundle of requests and one of
// answers (docs/protocol.md, section 11). Run with -update to rewrite.
func TestBundleGoldenVectors(t *testing.T) {
	for name, ms := range sampleBundles() {
		t.Run(name, func(t *testing.T) {
			got, err := AppendBundleFrame(nil, ms)
			if err != nil {
				t.Fatal(err)
			}
			path := filepath.Join("testdata", "golden", name+".hex")
			if *update {
				hdr := fmt.Sprintf("# %s: %s frame of %d messages (body version 2), sent where ship-bundle was accepted\n",
					name, FrameType(ms[0].Msg.Type), len(ms))
				if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
					t.Fatal(err)
				}
				if err := os.WriteFile(path, []byte(hdr+hexLines(got)), 0o644); err != nil {
					t.Fatal(err)
				}
				// The same frame seeds FuzzDecodeFrame (type byte, body).
				seed := append([]byte{got[4]}, got[wire.FrameHeaderSize:]...)
				dir := filepath.Join("testdata", "fuzz", "FuzzDecodeFrame")
				if err := os.MkdirAll(dir, 0o755); err != nil {
					t.Fatal(err)
				}
				corpus := fmt.Sprintf("go test fuzz v1\n[]byte(%q)\n", seed)
				if err := os.WriteFile(filepath.Join(dir, "seed-"+name), []byte(corpus), 0o644); err != nil {
					t.Fatal(err)
				}
			}
			raw, err := os.ReadFile(path)
			if err != nil {
				t.Fatalf("read golden (run go test -update): %v", err)
			}
			want := parseHexLines(t, string(raw))
			if !bytes.Equal(got, want) {
				t.Fatalf("encoding changed:\n got %s\nwant %s", hexLines(got), hexLines(want))
			}
			f, err := wire.ReadFrame(bufio.NewReader(bytes.NewReader(want)), wire.DefaultMaxFrameSize)
			if err != nil {
				t.Fatal(err)
			}
			back, err := DecodeFrame(f, nil)
			if err != nil {
				t.Fatal(err)
			}
			if len(back) != len(ms) {
				t.Fatalf("%d messages, want %d", len(back), len(ms))
			}
			for i := range ms {
				if back[i].Shard != ms[i].Shard {
					t.Fatalf("message %d: shard %v, want %v", i, back[i].Shard, ms[i].Shard)
				}
				if d := cmp.Diff(ms[i].Msg, back[i].Msg, cmpopts.EquateEmpty()); d != "" {
					t.Fatalf("message %d (-want +got):\n%s", i, d)
				}
			}
		})
	}
}

func hexLines(b []byte) string {
	var sb strings.Builder
	for i := 0; i < len(b); i += 16 {
		line := b[i:min(i+16, len(b))]
		for j, c := range line {
			if j > 0 {
				sb.WriteByte(' ')
			}
			fmt.Fprintf(&sb, "%02x", c)
		}
		sb.WriteByte('\n')
	}
	return sb.String()
}

func parseHexLines(t *testing.T, s string) []byte {
	t.Helper()
	var clean strings.Builder
	for _, line := range strings.Split(s, "\n") {
		if strings.HasPrefix(line, "#") {
			continue
		}
		clean.WriteString(strings.ReplaceAll(line, " ", ""))
	}
	b, err := hex.DecodeString(clean.String())
	if err != nil {
		t.Fatalf("bad hex: %v", err)
	}
	return b
}

// bundleEcho answers every frame with one frame of Refuses, one per
// request in it, carrying the request's pass: a bundle when the
// connection accepted bundles and there are several, else one frame each.
type bundleEcho struct {
	mu    sync.Mutex
	feats []wire.Features
}

func (e *bundleEcho) ServeReplication(pc server.PeerConn, f wire.Frame) {
	ms, err := DecodeFrame(f, nil)
	if err != nil {
		return
	}
	e.mu.Lock()
	e.feats = append(e.feats, pc.Features())
	e.mu.Unlock()
	for i := range ms {
		m := ms[i].Msg
		ms[i].Msg = replication.Message{Type: replication.MsgRefuse, From: m.To, To: m.From, Epoch: m.Epoch, Pass: m.Pass}
	}
	if len(ms) > 1 && pc.Features().Has(wire.FeatureShipBundle) {
		b, err := AppendBundleFrame(nil, ms)
		if err == nil {
			pc.Send(wire.Frame{Type: wire.MsgShipAnswer, Body: b[wire.FrameHeaderSize:]})
		}
		return
	}
	for _, s := range ms {
		ans, _ := Encode(s.Shard, s.Msg)
		pc.Send(ans)
	}
}

// The pool offers ship-bundle: a broker that accepts it may be sent
// bundles, and its bundled answers reach Events one message at a time, in
// order, over the connection; an older broker (without the bit) is sent
// none, and neither side's connection reports the bit.
func TestPoolNegotiatesBundles(t *testing.T) {
	for _, tc := range []struct {
		name    string
		feats   wire.Features
		bundles bool
	}{
		{"current broker", 0, true}, // zero: every known bit
		{"older broker", wire.FeatureStorageID, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			h := &bundleEcho{}
			_, addr := serve(t, server.Options{Features: tc.feats, StorageID: followerID, Replication: h, InsecurePeersOnClientPort: true})
			rec := &recorder{}
			p := NewPool(Options{Self: "a", StorageID: make([]byte, 16), Events: rec, Backoff: Backoff{Min: 1, Max: 1},
				Resolve: func(replication.NodeID) (string, error) { return addr, nil }})
			defer p.Close()
			p.Want("b")
			waitFor(t, "connected", func() bool { return len(rec.snapshot().conns) == 1 })
			conn := rec.snapshot().conns[0]
			if got := p.Bundles("b", conn); got != tc.bundles {
				t.Fatalf("Bundles = %v, want %v", got, tc.bundles)
			}
			if p.Bundles("b", conn+1) {
				t.Fatal("Bundles for a connection that is not the current one")
			}
			var b []byte
			ms := []Shipped{}
			for pass := uint64(1); pass <= 3; pass++ {
				ms = append(ms, Shipped{Shard: codecShard, Msg: replication.Message{Type: replication.MsgProbe, From: "a", To: "b", Epoch: 1, Pass: pass}})
			}
			if tc.bundles {
				var err error
				if b, err = AppendBundleFrame(nil, ms); err != nil {
					t.Fatal(err)
				}
				p.Send("b", conn, b)
			} else {
				for _, s := range ms {
					fb, err := AppendFrame(nil, s.Shard, s.Msg)
					if err != nil {
						t.Fatal(err)
					}
					p.Send("b", conn, fb)
				}
			}
			waitFor(t, "answers", func() bool { return len(rec.snapshot().msgs) == 3 })
			for i, m := range rec.snapshot().msgs {
				if m.Pass != uint64(i+1) || m.Conn != conn || m.Type != replication.MsgRefuse {
					t.Fatalf("answer %d: %v over conn %d", i, m, m.Conn)
				}
			}
			h.mu.Lock()
			defer h.mu.Unlock()
			for _, f := range h.feats {
				if f.Has(wire.FeatureShipBundle) != tc.bundles {
					t.Fatalf("accepted connection's features %s", f)
				}
			}
		})
	}
}

// batchRecorder is a recorder that takes runs of answers (BatchEvents).
type batchRecorder struct {
	recorder
	runs []batchRun
}

type batchRun struct {
	shard record.ShardID
	msgs  []replication.Message
}

func (r *batchRecorder) Messages(s record.ShardID, ms []replication.Message) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.runs = append(r.runs, batchRun{shard: s, msgs: append([]replication.Message(nil), ms...)})
}

func (r *batchRecorder) snapshotRuns() []batchRun {
	r.mu.Lock()
	defer r.mu.Unlock()
	return append([]batchRun(nil), r.runs...)
}

// Where Events implements BatchEvents, a frame's answers reach it as runs
// of consecutive answers for one shard, in order, with the connection
// set, and none of them through Message.
func TestPoolHandsBatchEventsRunsPerShard(t *testing.T) {
	h := &bundleEcho{}
	_, addr := serve(t, server.Options{StorageID: followerID, Replication: h, InsecurePeersOnClientPort: true})
	rec := &batchRecorder{}
	p := NewPool(Options{Self: "a", StorageID: make([]byte, 16), Events: rec, Backoff: Backoff{Min: 1, Max: 1},
		Resolve: func(replication.NodeID) (string, error) { return addr, nil }})
	defer p.Close()
	p.Want("b")
	waitFor(t, "connected", func() bool { return len(rec.snapshot().conns) == 1 })
	conn := rec.snapshot().conns[0]
	other := record.ShardID{Stream: codecShard.Stream, Shard: codecShard.Shard + 1}
	shards := []record.ShardID{codecShard, codecShard, other, codecShard}
	var ms []Shipped
	for i, sh := range shards {
		ms = append(ms, Shipped{Shard: sh, Msg: replication.Message{Type: replication.MsgProbe, From: "a", To: "b", Epoch: 1, Pass: uint64(i + 1)}})
	}
	b, err := AppendBundleFrame(nil, ms)
	if err != nil {
		t.Fatal(err)
	}
	p.Send("b", conn, b)
	waitFor(t, "three runs", func() bool { return len(rec.snapshotRuns()) == 3 })
	want := []struct {
		shard  record.ShardID
		passes []uint64
	}{{codecShard, []uint64{1, 2}}, {other, []uint64{3}}, {codecShard, []uint64{4}}}
	for i, run := range rec.snapshotRuns() {
		if run.shard != want[i].shard || len(run.msgs) != len(want[i].passes) {
			t.Fatalf("run %d: %s with %d answers, want %s with %d", i, run.shard, len(run.msgs), want[i].shard, len(want[i].passes))
		}
		for j, m := range run.msgs {
			if m.Pass != want[i].passes[j] || m.Conn != conn || m.Type != replication.MsgRefuse {
				t.Fatalf("run %d answer %d: %v over conn %d", i, j, m, m.Conn)
			}
		}
	}
	if n := len(rec.snapshot().msgs); n != 0 {
		t.Fatalf("%d answers went through Message", n)
	}
}

// DecodeFrameNames decodes what DecodeFrame decodes, and once a
// connection's names are held it allocates none for them: a bundle of an
// idle pass (four empty Appends of one shard) decodes with no allocation
// left but the frame's own.
func TestDecodeFrameNamesInterns(t *testing.T) {
	var ms []Shipped
	for _, l := range record.LogKinds {
		ms = append(ms, Shipped{Shard: otherShard, Msg: replication.Message{Type: replication.MsgAppend,
			From: "broker-a", To: "broker-b", Epoch: 3, Pass: 9, Log: l, Index: 13, PrevEpoch: 3, Commit: 13}})
	}
	b, err := AppendBundleFrame(nil, ms)
	if err != nil {
		t.Fatal(err)
	}
	f := wire.Frame{Type: wire.MsgShip, Body: b[wire.FrameHeaderSize:]}
	plain, err := DecodeFrame(f, nil)
	if err != nil {
		t.Fatal(err)
	}
	var names Names
	buf := make([]Shipped, 0, len(ms))
	for i := range 2 {
		got, err := DecodeFrameNames(f, buf[:0], &names)
		if err != nil {
			t.Fatal(err)
		}
		if d := cmp.Diff(plain, got, cmpopts.EquateEmpty()); d != "" {
			t.Fatalf("decode %d with names (-plain +named):\n%s", i, d)
		}
	}
	if n := testing.AllocsPerRun(50, func() {
		if _, err := DecodeFrameNames(f, buf[:0], &names); err != nil {
			t.Fatal(err)
		}
	}); n != 0 {
		t.Fatalf("%v allocations per bundle with its names held, want 0", n)
	}
	if n := testing.AllocsPerRun(50, func() { _, _ = DecodeFrame(f, buf[:0]) }); n < float64(len(ms)) {
		t.Fatalf("%v allocations per bundle without names: the test no longer shows the difference", n)
	}
	// Past its bound a Names still decodes every name, holds no more
	// than the bound, and starts over (junk names cannot switch
	// interning off for good).
	var full Names
	for i := range maxNames + 10 {
		s := full.get([]byte(fmt.Sprintf("stream-%d", i)))
		if s != fmt.Sprintf("stream-%d", i) {
			t.Fatalf("name %d decoded as %q", i, s)
		}
		if len(full.m) > maxNames {
			t.Fatalf("Names holds %d names, bound %d", len(full.m), maxNames)
		}
	}
	if len(full.m) != 10 {
		t.Fatalf("Names holds %d names after 10 past its bound, want 10 (started over)", len(full.m))
	}
	if n := testing.AllocsPerRun(20, func() { _ = full.get([]byte("stream-260")) }); n != 0 {
		t.Fatalf("a name learned after starting over allocates %v times, want 0", n)
	}
}
