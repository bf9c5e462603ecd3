package server

import (
	"errors"
	"fmt"
	"testing"

	"felix.dev/felix/broker/client"
)

// TestGroupLagsForTheReport: GroupLags answers each group's committed
// offset and its lag behind the data log's tail now. A server that has
// not served the shard's groups yet (a new leader) builds the fold from
// the group log; the lag follows the tail without any group request, and
// so does the metric; while a request holds the fold it answers its last
// reading against the tail now, and ErrGroupsBusy without one.
func TestGroupLagsForTheReport(t *testing.T) {
	b := startBroker(t, Options{})
	ctx := ctxT(t)
	c := dial(t, b.addr, client.Options{})
	if _, err := c.Append(ctx, shardA, recs("a", "b", "c", "d", "e", "f", "g", "h", "i", "j"), nil); err != nil {
		t.Fatal(err)
	}
	for _, g := range []struct {
		name   string
		offset uint64
	}{{"billing", 3}, {"audit", 10}} {
		cl, err := c.GroupClaim(ctx, shardA, g.name, "m1")
		if err != nil {
			t.Fatal(err)
		}
		if _, err := c.GroupCommit(ctx, shardA, g.name, "m1", cl.Generation, g.offset); err != nil {
			t.Fatal(err)
		}
	}
	want := func(srv *Server, what, expect string) {
		t.Helper()
		got, err := srv.GroupLags(shardA)
		if err != nil || fmt.Sprint(got) != expect {
			t.Fatalf("%s: %v %v, want %s", what, got, err, expect)
		}
	}
	want(b.srv, "the serving leader", "[{audit 10 0} {billing 3 7}]")

	// A new leader on the same log, before any group request.
	fresh := New(StoreShards(b.store), Options{Metrics: b.srv.opts.Metrics})
	t.Cleanup(fresh.Close)
	want(fresh, "a server with no fold yet", "[{audit 10 0} {billing 3 7}]")

	// The tail moves; no group request comes: the lag and the metric follow.
	if _, err := c.Append(ctx, shardA, recs("k", "l"), nil); err != nil {
		t.Fatal(err)
	}
	want(b.srv, "after two more records", "[{audit 10 2} {billing 3 9}]")
	if lag := b.metric("felix_broker_group_lag_records", "stream", "orders", "shard", "0", "group", "billing"); lag != 9 {
		t.Fatalf("lag metric %v, want 9", lag)
	}

	// A request holds the fold: the last reading, against the tail now.
	gs := b.srv.groupShard(shardA)
	gs.mu.Lock()
	if _, err := c.Append(ctx, shardA, recs("m"), nil); err != nil {
		gs.mu.Unlock()
		t.Fatal(err)
	}
	got, err := b.srv.GroupLags(shardA)
	gs.mu.Unlock()
	if err != nil || fmt.Sprint(got) != "[{audit 10 3} {billing 3 10}]" {
		t.Fatalf("busy fold: %v %v, want the last reading against tail 13", got, err)
	}

	// Busy before any reading.
	other := New(StoreShards(b.store), Options{})
	t.Cleanup(other.Close)
	ogs := other.groupShard(shardA)
	ogs.mu.Lock()
	_, err = other.GroupLags(shardA)
	ogs.mu.Unlock()
	if !errors.Is(err, ErrGroupsBusy) {
		t.Fatalf("busy fold never read: %v, want ErrGroupsBusy", err)
	}
}
