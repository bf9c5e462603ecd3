package server

import (
	"context"
	"fmt"
	"net"
	"sync"
	"testing"
	"time"

	"felix.dev/felix/broker/logstore"
	"felix.dev/felix/broker/record"
	"felix.dev/felix/broker/wire"
)

// gatedLog is a Submitter over a real log: SubmitAppend applies the append
// at once, in call order, and holds its answer until the gate opens (a
// replicated log whose acknowledgements are slow).
type gatedLog struct {
	*logstore.Log
	gate chan struct{}

	mu        sync.Mutex
	submitted int // records submitted
}

func (g *gatedLog) SubmitAppend(ctx context.Context, recs []record.Record, expectTail *uint64) (AppendWait, error) {
	res, err := g.Log.Append(ctx, recs, expectTail)
	g.mu.Lock()
	g.submitted += len(recs)
	g.mu.Unlock()
	return func(ctx context.Context) (logstore.AppendResult, error) {
		select {
		case <-g.gate:
			return res, err
		case <-ctx.Done():
			return logstore.AppendResult{}, ctx.Err()
		}
	}, nil
}

func (g *gatedLog) count() int {
	g.mu.Lock()
	defer g.mu.Unlock()
	return g.submitted
}

type gatedShards struct{ l *gatedLog }

func (s gatedShards) DataLog(record.ShardID) (Log, error) { return s.l, nil }

// TestSubmitterPipelinesAppendsOnOneConnection: on a Submitter log the
// server submits every append of a connection without waiting for the
// earlier ones to be acknowledged, in the order they were sent, and
// answers each with its own range once acknowledged.
func TestSubmitterPipelinesAppendsOnOneConnection(t *testing.T) {
	store, err := logstore.Open(logstore.Options{Dir: t.TempDir(), Fsync: logstore.FsyncNone, AutoCommit: true})
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = store.Close() }()
	lg, err := store.Log(record.LogID{ShardID: shardA, Log: record.LogData})
	if err != nil {
		t.Fatal(err)
	}
	g := &gatedLog{Log: lg, gate: make(chan struct{})}
	srv := New(gatedShards{g}, Options{})
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	go func() { _ = srv.Serve(ln) }()
	defer func() {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		_ = srv.Shutdown(ctx)
	}()

	r := dialRaw(t, ln.Addr().String())
	r.hello(0)
	const n = 20
	waitSubmitted := func(want int) {
		t.Helper()
		deadline := time.Now().Add(10 * time.Second)
		for g.count() < want {
			if time.Now().After(deadline) {
				t.Fatalf("%d of %d records submitted with no acknowledgement given: appends wait for the ones before them", g.count(), want)
			}
			time.Sleep(time.Millisecond)
		}
	}
	for i := 0; i < n; i++ {
		b, err := wire.EncodeAppend(wire.AppendRequest{Shard: shardA, Records: recs(fmt.Sprintf("r%d", i))})
		if err != nil {
			t.Fatal(err)
		}
		r.send(wire.MsgAppend, uint32(i+1), b)
		if i == 0 {
			// The first is submitted alone, so the rest cannot join it.
			waitSubmitted(1)
		}
	}
	// Every append is submitted while none is acknowledged.
	waitSubmitted(n)
	close(g.gate)
	for i := 0; i < n; i++ {
		f := r.recv()
		if f.Type != wire.MsgAppendOK {
			t.Fatalf("request %d answered with %v", f.ReqID, f.Type)
		}
		ok, err := wire.DecodeAppendOK(f.Body)
		if err != nil {
			t.Fatal(err)
		}
		// Applied in the order sent: request i+1 holds offset i.
		if want := uint64(f.ReqID - 1); ok.First != want || ok.Tail != want+1 {
			t.Fatalf("request %d answered %+v, want first %d", f.ReqID, ok, want)
		}
	}
}

// The standalone log store's logs pipeline too.
var _ Submitter = (*logstore.Log)(nil)
