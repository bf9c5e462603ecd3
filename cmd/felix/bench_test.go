package main

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"io"
	"net"
	"os"
	"strings"
	"sync"
	"testing"
	"time"

	"felix.dev/felix/broker/auth"
	"felix.dev/felix/broker/client"
	"felix.dev/felix/broker/record"
	"felix.dev/felix/broker/wire"
	"felix.dev/felix/internal/pki"
)

// holdingBroker accepts connections, does the handshake and holds every
// append unanswered for hold; it then reports on counts how many appends
// the connection had sent, answers them, and answers every later append
// at once.
func holdingBroker(t *testing.T, hold time.Duration, counts chan<- int) string {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = l.Close() })
	go func() {
		for {
			nc, err := l.Accept()
			if err != nil {
				return
			}
			go serveHolding(nc, hold, counts)
		}
	}()
	return l.Addr().String()
}

func serveHolding(nc net.Conn, hold time.Duration, counts chan<- int) {
	defer nc.Close()
	br := bufio.NewReader(nc)
	if _, err := wire.ReadFrame(br, 1<<20); err != nil {
		return
	}
	body, _ := wire.EncodeHelloOK(wire.HelloOK{Version: 1, MaxFrameSize: 1 << 20, MaxBatchRecords: 100})
	if wire.WriteFrame(nc, wire.Frame{Type: wire.MsgHelloOK, Body: body}) != nil {
		return
	}
	answer := func(f wire.Frame) error {
		return wire.WriteFrame(nc, wire.Frame{Type: wire.MsgAppendOK, ReqID: f.ReqID, Body: wire.EncodeAppendOK(wire.AppendOK{Tail: 1})})
	}
	var held []wire.Frame
	_ = nc.SetReadDeadline(time.Now().Add(hold))
	for {
		f, err := wire.ReadFrame(br, 1<<20)
		if errors.Is(err, os.ErrDeadlineExceeded) {
			break
		}
		if err != nil {
			return
		}
		held = append(held, f)
	}
	counts <- len(held)
	_ = nc.SetReadDeadline(time.Time{})
	for _, f := range held {
		if answer(f) != nil {
			return
		}
	}
	for {
		f, err := wire.ReadFrame(br, 1<<20)
		if err != nil || answer(f) != nil {
			return
		}
	}
}

// TestBenchKeepsPipelineInFlight: `felix bench` keeps exactly --pipeline
// appends unanswered on each connection (the peer harness's window), one
// for a synchronous producer, and counts the answered ones.
func TestBenchKeepsPipelineInFlight(t *testing.T) {
	for _, pipeline := range []int{1, 2, 8} {
		counts := make(chan int, 4)
		addr := holdingBroker(t, 200*time.Millisecond, counts)
		f := benchFlags{to: shardFlags{broker: addr}, stream: "bench", shards: 1, connections: 2, pipeline: pipeline,
			batch: 1, recordSize: 16, duration: 500 * time.Millisecond}
		res, err := runBench(context.Background(), f, client.Options{})
		if err != nil {
			t.Fatalf("pipeline %d: %v", pipeline, err)
		}
		for i := 0; i < f.connections; i++ {
			if n := <-counts; n != pipeline {
				t.Fatalf("pipeline %d: a connection had %d appends unanswered, want %d", pipeline, n, pipeline)
			}
		}
		if res.Errors != 0 || res.Records == 0 || res.Requests != res.Records {
			t.Fatalf("pipeline %d: %+v", pipeline, res)
		}
	}
}

// routedBroker is a fake cluster member: it answers Metadata with
// shards' leaders (name to address) and every append at once, and counts
// the appends it took per shard.
type routedBroker struct {
	addr string
	mu   sync.Mutex
	seen map[uint32]int
}

// serve answers on l until it closes; meta is the Metadata answer.
func (b *routedBroker) serve(t *testing.T, l net.Listener, meta wire.MetadataOK) {
	body, err := wire.EncodeMetadataOK(meta)
	if err != nil {
		t.Fatal(err)
	}
	go func() {
		for {
			nc, err := l.Accept()
			if err != nil {
				return
			}
			go b.conn(nc, body)
		}
	}()
}

func (b *routedBroker) conn(nc net.Conn, meta []byte) {
	defer nc.Close()
	br := bufio.NewReader(nc)
	if _, err := wire.ReadFrame(br, 1<<20); err != nil {
		return
	}
	hello, _ := wire.EncodeHelloOK(wire.HelloOK{Version: 1, Features: wire.FeatureMetadata, MaxFrameSize: 1 << 20, MaxBatchRecords: 100})
	if wire.WriteFrame(nc, wire.Frame{Type: wire.MsgHelloOK, Body: hello}) != nil {
		return
	}
	for {
		f, err := wire.ReadFrame(br, 1<<20)
		if err != nil {
			return
		}
		out := wire.Frame{Type: wire.MsgMetadataOK, ReqID: f.ReqID, Body: meta}
		if f.Type == wire.MsgAppend {
			req, err := wire.DecodeAppend(f.Body)
			if err != nil {
				return
			}
			b.mu.Lock()
			b.seen[req.Shard.Shard]++
			b.mu.Unlock()
			out = wire.Frame{Type: wire.MsgAppendOK, ReqID: f.ReqID, Body: wire.EncodeAppendOK(wire.AppendOK{Tail: 1})}
		}
		if wire.WriteFrame(nc, out) != nil {
			return
		}
	}
}

// TestBenchRoutesToEachShardsLeader: with --bootstrap, `felix bench`
// sends each shard's appends to the broker the metadata names its leader,
// synchronous and pipelined, from one bootstrap address.
func TestBenchRoutesToEachShardsLeader(t *testing.T) {
	for _, pipeline := range []int{1, 4} {
		la, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			t.Fatal(err)
		}
		lb, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = la.Close(); _ = lb.Close() })
		a := &routedBroker{addr: la.Addr().String(), seen: map[uint32]int{}}
		b := &routedBroker{addr: lb.Addr().String(), seen: map[uint32]int{}}
		meta := wire.MetadataOK{Brokers: []wire.BrokerInfo{{Name: "a", Address: a.addr}, {Name: "b", Address: b.addr}},
			Shards: []wire.ShardInfo{{Shard: record.ShardID{Stream: "bench", Shard: 0}, Leader: "a", Epoch: 1, Replicas: []string{"a", "b"}},
				{Shard: record.ShardID{Stream: "bench", Shard: 1}, Leader: "b", Epoch: 1, Replicas: []string{"b", "a"}}}}
		a.serve(t, la, meta)
		b.serve(t, lb, meta)
		f := benchFlags{routing: []string{a.addr}, stream: "bench", shardList: []uint{1, 0}, shards: 2, connections: 4,
			pipeline: pipeline, batch: 1, recordSize: 16, duration: 300 * time.Millisecond}
		res, err := runBench(context.Background(), f, client.Options{Features: wire.FeatureMetadata})
		if err != nil {
			t.Fatalf("pipeline %d: %v", pipeline, err)
		}
		if res.Errors != 0 || res.Records == 0 || !res.Routing || res.Shards != 2 {
			t.Fatalf("pipeline %d: %+v", pipeline, res)
		}
		a.mu.Lock()
		b.mu.Lock()
		if a.seen[0] == 0 || a.seen[1] != 0 || b.seen[1] == 0 || b.seen[0] != 0 {
			t.Fatalf("pipeline %d: appends by shard: a %v, b %v; want shard 0 on a only, shard 1 on b only", pipeline, a.seen, b.seen)
		}
		a.mu.Unlock()
		b.mu.Unlock()
	}
}

// TestBenchCommandAddressFlags: `felix bench` takes --bootstrap like the
// other client commands (routing through each shard's leader, reported
// as "routing"), refuses it together with --broker, and refuses --shards
// with --shard, as usage errors.
func TestBenchCommandAddressFlags(t *testing.T) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = l.Close() })
	b := &routedBroker{addr: l.Addr().String(), seen: map[uint32]int{}}
	b.serve(t, l, wire.MetadataOK{Brokers: []wire.BrokerInfo{{Name: "a", Address: b.addr}},
		Shards: []wire.ShardInfo{{Shard: record.ShardID{Stream: "bench", Shard: 3}, Leader: "a", Epoch: 1, Replicas: []string{"a"}}}})
	out := runCmd(t, newBenchCmd(), "--bootstrap", b.addr, "--shard", "3", "--connections", "2", "--pipeline", "2",
		"--warmup", "0s", "--duration", "200ms")
	var res benchResult
	if err := json.Unmarshal([]byte(out), &res); err != nil {
		t.Fatalf("output %q: %v", out, err)
	}
	b.mu.Lock()
	seen := b.seen[3]
	b.mu.Unlock()
	if !res.Routing || res.Shards != 1 || res.Records == 0 || res.Errors != 0 || seen == 0 {
		t.Fatalf("result %+v, appends to shard 3: %d", res, seen)
	}
	for _, args := range [][]string{
		{"--broker", b.addr, "--bootstrap", b.addr},
		{"--broker", b.addr, "--shards", "2", "--shard", "1"},
	} {
		cmd := newBenchCmd()
		var errOut bytes.Buffer
		cmd.SetOut(io.Discard)
		cmd.SetErr(&errOut)
		cmd.SetArgs(append(args, "--duration", "100ms"))
		err := cmd.ExecuteContext(context.Background())
		var ee *exitError
		if !errors.As(err, &ee) || ee.code != exitUsage {
			t.Fatalf("%q: %v, want a usage error; stderr %s", args, err, errOut.String())
		}
	}
}

// felix bench --counter-key adds to the counter of each connection's
// shard through a routing client (for --broker too) and reports the adds;
// the counters grew by exactly the adds acknowledged, which the command
// checks and this test checks again. It refuses pipelining and reads.
func TestBenchCounterAdds(t *testing.T) {
	clearTLSEnv(t)
	b := startTLSBroker(t)
	b.table.Set("alice", "uid-alice", []auth.Grant{{Stream: "bench", Ops: []auth.Operation{auth.OpAppend, auth.OpRead}}})
	alice := issueDir(t, b.ca, pki.Identity{Namespace: "ns", Cluster: "c", Kind: pki.KindUser, Name: "alice"})
	as := func(args ...string) (string, error) {
		return runFelix(t, append(args, "--broker", b.addr, "--stream", "bench", "--tls-dir", alice, "--cluster", "ns/c")...)
	}
	out, err := as("bench", "--shards", "2", "--connections", "3", "--counter-key", "hits", "--warmup", "50ms", "--duration", "200ms")
	if err != nil {
		t.Fatalf("bench --counter-key: %v\n%s", err, out)
	}
	var res benchResult
	if err := json.Unmarshal([]byte(out), &res); err != nil {
		t.Fatalf("output %q: %v", out, err)
	}
	if res.CounterKey != "hits" || res.Records == 0 || res.Errors != 0 || res.Shards != 2 || res.Pipeline != 1 || res.CounterAdds < res.Records {
		t.Fatalf("result %+v", res)
	}
	var sum int64
	for _, shard := range []string{"0", "1"} {
		out, err := as("counter", "get", "--shard", shard, "--key", "hits")
		if err != nil {
			t.Fatalf("counter get: %v\n%s", err, out)
		}
		var g struct{ Value int64 }
		if err := json.Unmarshal([]byte(out), &g); err != nil || g.Value == 0 {
			t.Fatalf("counter get on shard %s printed %q (%v)", shard, out, err)
		}
		sum += g.Value
	}
	if sum != res.CounterAdds {
		t.Fatalf("the counters sum to %d, bench acknowledged %d adds", sum, res.CounterAdds)
	}
	for _, extra := range [][]string{{"--pipeline", "4"}, {"--reads"}, {"--batch", "2"}} {
		out, err := as(append([]string{"bench", "--counter-key", "hits", "--duration", "100ms"}, extra...)...)
		if err == nil || !strings.Contains(out, "--counter-key takes") {
			t.Fatalf("bench --counter-key %v printed %q (%v), want a usage error", extra, out, err)
		}
	}
}
