package server

import (
	"errors"
	"fmt"
	"net"
	"strings"
	"testing"

	"felix.dev/felix/broker/client"
	"felix.dev/felix/broker/logstore"
	"felix.dev/felix/broker/record"
	"felix.dev/felix/broker/wire"
	"felix.dev/felix/internal/diskfault"
)

// flipMarker flips a byte inside the one occurrence of marker under dir.
func flipMarker(t *testing.T, dir, marker string) {
	t.Helper()
	if f, err := diskfault.FlipMarker(dir, []byte(marker)); err != nil || len(f) != 1 {
		t.Fatalf("marker found %d times (%v)", len(f), err)
	}
}

// serveStore serves store on a new listener until the test ends.
func serveStore(t *testing.T, store *logstore.Store) string {
	t.Helper()
	srv := New(StoreShards(store), Options{})
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	go func() { _ = srv.Serve(l) }()
	t.Cleanup(func() { _ = srv.Shutdown(t.Context()); _ = store.Close() })
	return l.Addr().String()
}

// Issue 25: a read that reaches a damaged record gets the Corrupt code
// with the damaged offset, not Unavailable; and a log found damaged on
// open (its newest batch, after a clean stop) is refused as a whole:
// reads and appends get Corrupt.
func TestDamagedRecordsAreReportedAsCorrupt(t *testing.T) {
	for _, tc := range []struct {
		name    string
		lastRun logstore.LastRun
		damaged int // index of the damaged batch
	}{
		{"a record in the middle, found by the read", logstore.LastRunUnknown, 3},
		{"the newest batch after a clean stop, found on open", logstore.LastRunComplete, 9},
	} {
		t.Run(tc.name, func(t *testing.T) {
			o := logstore.Options{Dir: t.TempDir(), Fsync: logstore.FsyncOnCommit, AutoCommit: true, ValueThreshold: logstore.BrokerValueThreshold}
			store, err := logstore.Open(o)
			if err != nil {
				t.Fatal(err)
			}
			l, err := store.Log(record.LogID{ShardID: shardA, Log: record.LogData})
			if err != nil {
				t.Fatal(err)
			}
			for i := 0; i < 10; i++ {
				p := fmt.Sprintf("batch-%d-%s", i, strings.Repeat("p", 2000))
				if _, err := l.Append(t.Context(), recs(p), nil); err != nil {
					t.Fatal(err)
				}
			}
			if err := store.Close(); err != nil {
				t.Fatal(err)
			}
			flipMarker(t, o.Dir, fmt.Sprintf("batch-%d-ppp", tc.damaged))
			o.LastRun = tc.lastRun
			store, err = logstore.Open(o)
			if err != nil {
				t.Fatal(err)
			}
			addr := serveStore(t, store)
			c := dial(t, addr, client.Options{})
			ctx := ctxT(t)
			_, err = c.Read(ctx, wire.ReadRequest{Shard: shardA, From: wire.FromEarliest, MaxRecords: 100})
			var we *wire.Error
			if !errors.As(err, &we) || we.Code != wire.CodeCorrupt || !errors.Is(err, record.ErrCorrupt) {
				t.Fatalf("read: %v, want Corrupt", err)
			}
			if tc.lastRun == logstore.LastRunUnknown {
				// Records before the damage are served; the read that
				// reaches it fails, at the damaged offset.
				r, err := c.Read(ctx, wire.ReadRequest{Shard: shardA, From: wire.FromEarliest, MaxRecords: uint32(tc.damaged)})
				if err != nil || len(r.Records) != tc.damaged {
					t.Fatalf("read before the damage: %d records, %v", len(r.Records), err)
				}
			}
			if we.Offset != uint64(tc.damaged) {
				t.Fatalf("Corrupt at %d, want %d", we.Offset, tc.damaged)
			}
			if tc.lastRun == logstore.LastRunComplete {
				if _, err := c.Append(ctx, shardA, recs("more"), nil); !errors.As(err, &we) || we.Code != wire.CodeCorrupt {
					t.Fatalf("append to a damaged log: %v, want Corrupt", err)
				}
			}
			// A client that predates the code (no storage-errors feature)
			// is told Unavailable, which it knows to treat as retryable.
			old := dial(t, addr, client.Options{Features: wire.FeatureTrimTag})
			_, err = old.Read(ctx, wire.ReadRequest{Shard: shardA, From: wire.FromEarliest, MaxRecords: 100})
			if !errors.As(err, &we) || we.Code != wire.CodeUnavailable || !strings.HasPrefix(we.Message, "corrupt") {
				t.Fatalf("read without storage-errors: %v, want Unavailable", err)
			}
		})
	}
}
