package felixd

import (
	"context"
	"errors"
	"net"
	"testing"
	"time"

	"github.com/go-logr/logr"

	"felix.dev/felix/broker/client"
	"felix.dev/felix/broker/logstore"
	"felix.dev/felix/broker/record"
	"felix.dev/felix/broker/server"
	"felix.dev/felix/broker/wire"
)

// serveStore serves the logs of a fresh store over the wire protocol (a
// standalone broker in process) and returns the store and its address.
func serveStore(t *testing.T) (*logstore.Store, string) {
	t.Helper()
	return serveStoreWith(t, server.Options{})
}

// serveStoreWith is serveStore with the server's options.
func serveStoreWith(t *testing.T, opts server.Options) (*logstore.Store, string) {
	t.Helper()
	store, err := logstore.Open(logstore.Options{Dir: t.TempDir(), AutoCommit: true, Fsync: logstore.FsyncNone})
	if err != nil {
		t.Fatal(err)
	}
	srv := server.New(server.StoreShards(store), opts)
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	served := make(chan error, 1)
	go func() { served <- srv.Serve(l) }()
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		_ = srv.Shutdown(ctx)
		<-served
		_ = store.Close()
	})
	return store, l.Addr().String()
}

func dialLog(t *testing.T, addr string, o client.Options) *ClientLog {
	t.Helper()
	c, err := client.Dial(context.Background(), addr, o)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = c.Close() })
	l, err := NewClientLog(c, testShard.ShardID)
	if err != nil {
		t.Fatal(err)
	}
	return l
}

// TestFD4_ClientLogReportsRetention: over the wire, ClientLog.Describe
// reports the broker's own retention setting of the shard's data log, so
// Holder.Start refuses a log with retention on even when no FelixStream
// says so; with a connection that did not negotiate the log-policy feature
// (an older broker) it reports RetentionUnknown.
func TestFD4_ClientLogReportsRetention(t *testing.T) {
	ctx := context.Background()
	store, addr := serveStore(t)
	cl := dialLog(t, addr, client.Options{})
	// Describe does not create a standalone shard (only an append does):
	// create its log so its retention can be set.
	if _, err := store.CreateLog(testShard, logstore.LogOptions{}); err != nil {
		t.Fatal(err)
	}
	info, err := cl.Describe(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if info.Retention != RetentionOff {
		t.Fatalf("retention %v, want RetentionOff", info.Retention)
	}
	lg, ok := store.Lookup(record.LogID{ShardID: testShard.ShardID, Log: record.LogData})
	if !ok {
		t.Fatal("no data log")
	}
	if err := lg.SetRetention(logstore.RetentionPolicy{MaxBytes: 1 << 20}); err != nil {
		t.Fatal(err)
	}
	if info, err := cl.Describe(ctx); err != nil || info.Retention != RetentionOn {
		t.Fatalf("describe: %+v, %v; want RetentionOn", info, err)
	}
	h, err := NewHolder(HolderConfig{Log: cl, Epoch: 1, Workload: &Counter{}, Logger: logr.Discard()})
	if err != nil {
		t.Fatal(err)
	}
	if err := h.Start(ctx); !errors.Is(err, ErrRetention) {
		t.Fatalf("start on a broker log with retention on: %v, want ErrRetention", err)
	}
	if tail := lg.Describe().Tail; tail != 0 {
		t.Fatalf("a refused holder wrote: tail %d", tail)
	}
	old := dialLog(t, addr, client.Options{Features: wire.FeatureTrimTag})
	if info, err := old.Describe(ctx); err != nil || info.Retention != RetentionUnknown {
		t.Fatalf("describe without log-policy: %+v, %v; want RetentionUnknown", info, err)
	}
}
