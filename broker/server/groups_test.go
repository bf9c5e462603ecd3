package server

import (
	"errors"
	"testing"
	"time"

	"felix.dev/felix/broker/client"
	"felix.dev/felix/broker/group"
	"felix.dev/felix/broker/record"
	"felix.dev/felix/broker/wire"
)

func newFakeClock() *fakeClock { return &fakeClock{now: time.Unix(1_800_000_000, 0)} }

// Advance moves the clock by d.
func (f *fakeClock) Advance(d time.Duration) { f.Set(f.Now().Add(d)) }

// wantFenced checks that err is GroupFenced naming owner at generation.
func wantFenced(t *testing.T, what string, err error, owner string, gen uint64) {
	t.Helper()
	var we *wire.Error
	if !errors.Is(err, wire.ErrGroupFenced) || !errors.As(err, &we) || we.Owner != owner || we.Generation != gen {
		t.Fatalf("%s: %v, want GroupFenced naming %q at generation %d", what, err, owner, gen)
	}
}

func TestGroupClaimCommitDescribe(t *testing.T) {
	b := startBroker(t, Options{GroupLimits: group.Limits{MaxGroups: 2, MaxNameBytes: 8}, GroupLease: 5 * time.Second})
	ctx := ctxT(t)
	c := dial(t, b.addr, client.Options{})
	if !c.Features().Has(wire.FeatureGroups) {
		t.Fatalf("features %v: groups not negotiated", c.Features())
	}
	if _, err := c.Append(ctx, shardA, recs("a", "b", "c", "d"), nil); err != nil {
		t.Fatal(err)
	}
	cl, err := c.GroupClaim(ctx, shardA, "billing", "m1")
	if err != nil || cl.Generation != 1 || cl.Committed != 0 || cl.LeaseMillis != 5000 {
		t.Fatalf("first claim: %+v %v", cl, err)
	}
	if again, err := c.GroupClaim(ctx, shardA, "billing", "m1"); err != nil || again.Generation != 1 {
		t.Fatalf("claim by the owner: %+v %v, want generation 1 unchanged", again, err)
	}
	_, err = c.GroupClaim(ctx, shardA, "billing", "m2")
	wantFenced(t, "claim of an owned shard", err, "m1", 1)
	if _, err := c.GroupCommit(ctx, shardA, "billing", "m1", 1, 3); err != nil {
		t.Fatal(err)
	}
	if _, err := c.GroupHeartbeat(ctx, shardA, "billing", "m1", 1); err != nil {
		t.Fatal(err)
	}
	d, err := c.GroupDescribe(ctx, shardA, "")
	if err != nil || d.Tail != 4 || len(d.Groups) != 1 {
		t.Fatalf("describe: %+v %v", d, err)
	}
	if g := d.Groups[0]; g.Group != "billing" || g.Owner != "m1" || g.Generation != 1 || g.Committed != 3 || g.Lag != 1 || g.LeaseMillis == 0 || g.LeaseMillis > 5000 {
		t.Fatalf("billing: %+v", g)
	}
	if lag := b.metric("felix_broker_group_lag_records", "stream", "orders", "shard", "0", "group", "billing"); lag != 1 {
		t.Fatalf("lag metric %v, want 1", lag)
	}
	// The data log is untouched: groups live in the group log.
	if dd, err := c.Describe(ctx, shardA); err != nil || dd.Tail != 4 {
		t.Fatalf("data log: %+v %v", dd, err)
	}
	refusals := []struct {
		group, member string
		code          wire.Code
	}{
		{"audit", "m1", 0},
		{"third", "m1", wire.CodeGroupLimit},
		{"billing", "toolongname", wire.CodeGroupLimit},
		{"", "m1", wire.CodeBadRequest},
	}
	for _, r := range refusals {
		_, err := c.GroupClaim(ctx, shardA, r.group, r.member)
		var we *wire.Error
		if (r.code == 0) != (err == nil) || (r.code != 0 && (!errors.As(err, &we) || we.Code != r.code)) {
			t.Fatalf("claim %q by %q: %v, want code %v", r.group, r.member, err, r.code)
		}
	}
	if _, err := c.GroupLeave(ctx, shardA, "billing", "m1", 1); err != nil {
		t.Fatal(err)
	}
	cl, err = c.GroupClaim(ctx, shardA, "billing", "m2")
	if err != nil || cl.Generation != 2 || cl.Committed != 3 {
		t.Fatalf("claim after the leave: %+v %v, want generation 2 from 3", cl, err)
	}
	// A connection without the feature cannot send group requests.
	old := dial(t, b.addr, client.Options{Features: wire.FeatureAuth})
	if _, err := old.GroupDescribe(ctx, shardA, ""); !errors.Is(err, client.ErrNoGroups) {
		t.Fatalf("describe without the feature: %v", err)
	}
}

// A member that stops heartbeating loses the shard once its lease ran out
// on the leader's clock, and not before; the new owner resumes after the
// last committed offset; the old owner's commit and heartbeat are refused.
func TestGroupLeaseExpiryMovesOwnership(t *testing.T) {
	clk := newFakeClock()
	b := startBroker(t, Options{GroupLease: 10 * time.Second, Now: clk.Now})
	ctx := ctxT(t)
	c := dial(t, b.addr, client.Options{})
	if _, err := c.GroupClaim(ctx, shardA, "g", "m1"); err != nil {
		t.Fatal(err)
	}
	if _, err := c.GroupCommit(ctx, shardA, "g", "m1", 1, 7); err != nil {
		t.Fatal(err)
	}
	clk.Advance(9 * time.Second)
	_, err := c.GroupClaim(ctx, shardA, "g", "m2")
	wantFenced(t, "claim within the lease", err, "m1", 1)
	clk.Advance(2 * time.Second)
	cl, err := c.GroupClaim(ctx, shardA, "g", "m2")
	if err != nil || cl.Generation != 2 || cl.Committed != 7 {
		t.Fatalf("claim after the lease: %+v %v, want generation 2 from 7", cl, err)
	}
	_, err = c.GroupCommit(ctx, shardA, "g", "m1", 1, 9)
	wantFenced(t, "commit by the former owner", err, "m2", 2)
	_, err = c.GroupHeartbeat(ctx, shardA, "g", "m1", 1)
	wantFenced(t, "heartbeat by the former owner", err, "m2", 2)
	// A heartbeat keeps the shard: m2 heartbeats within every lease.
	for range 3 {
		clk.Advance(8 * time.Second)
		if _, err := c.GroupHeartbeat(ctx, shardA, "g", "m2", 2); err != nil {
			t.Fatal(err)
		}
	}
	_, err = c.GroupClaim(ctx, shardA, "g", "m1")
	wantFenced(t, "claim of a heartbeating owner's shard", err, "m2", 2)
}

// A commit by a member whose claim was superseded in the log, sent to a
// server whose fold predates the new claim (as a deposed leader's would),
// is refused by the group log's tail check, not by any timer: the server
// holding the stale fold still believes the member owns the shard and
// its lease runs, yet the conditional append fails, the fold is rebuilt
// and the commit refused with GroupFenced. The group log stays foldable.
func TestTR9_StaleGroupCommitRefusedByTheLog(t *testing.T) {
	clk := newFakeClock()
	opts := Options{GroupLease: 10 * time.Second, Now: clk.Now}
	b := startBroker(t, opts)
	ctx := ctxT(t)
	c1 := dial(t, b.addr, client.Options{})
	if _, err := c1.GroupClaim(ctx, shardA, "g", "m1"); err != nil {
		t.Fatal(err)
	}
	if _, err := c1.GroupCommit(ctx, shardA, "g", "m1", 1, 5); err != nil {
		t.Fatal(err)
	}
	// A second server over the same store: its own fold, its leases fresh.
	other := Options{GroupLease: time.Nanosecond, Now: clk.Now}
	c2 := dial(t, serveAgain(t, b, other), client.Options{})
	if _, err := c2.GroupDescribe(ctx, shardA, "g"); err != nil {
		t.Fatal(err)
	}
	clk.Advance(time.Second) // past the second server's lease; not the first's
	if cl, err := c2.GroupClaim(ctx, shardA, "g", "m2"); err != nil || cl.Generation != 2 || cl.Committed != 5 {
		t.Fatalf("claim through the second server: %+v %v", cl, err)
	}
	_, err := c1.GroupCommit(ctx, shardA, "g", "m1", 1, 6)
	wantFenced(t, "commit through the stale fold", err, "m2", 2)
	d, err := c1.GroupDescribe(ctx, shardA, "g")
	if err != nil || len(d.Groups) != 1 || d.Groups[0].Owner != "m2" || d.Groups[0].Committed != 5 {
		t.Fatalf("describe after the refusal: %+v %v", d, err)
	}
	// A third server folds the whole log: it agrees.
	c3 := dial(t, serveAgain(t, b, opts), client.Options{})
	if d, err := c3.GroupDescribe(ctx, shardA, "g"); err != nil || d.Groups[0].Generation != 2 || d.Groups[0].Committed != 5 {
		t.Fatalf("describe by a fresh fold: %+v %v", d, err)
	}
}

// A restarted broker folds the group log (from its snapshot after an
// automatic snapshot and trim): the owner, generation and committed
// offset survive, and a new member resumes after the committed offset.
func TestGroupStateSurvivesRestartAndTrim(t *testing.T) {
	clk := newFakeClock()
	opts := Options{GroupLease: 10 * time.Second, GroupSnapshotEvery: 3, Now: clk.Now}
	b := startBroker(t, opts)
	ctx := ctxT(t)
	c := dial(t, b.addr, client.Options{})
	if _, err := c.GroupClaim(ctx, shardA, "g", "m1"); err != nil {
		t.Fatal(err)
	}
	for i := uint64(1); i <= 4; i++ {
		if _, err := c.GroupCommit(ctx, shardA, "g", "m1", 1, i*10); err != nil {
			t.Fatal(err)
		}
	}
	gl, _ := b.store.Lookup(record.LogID{ShardID: shardA, Log: record.LogGroup})
	if info := gl.Describe(); info.ReadableStart() == 0 {
		t.Fatalf("group log not trimmed after a snapshot: %+v", info)
	}
	c2 := dial(t, serveAgain(t, b, opts), client.Options{})
	_, err := c2.GroupClaim(ctx, shardA, "g", "m2")
	wantFenced(t, "claim on a restarted broker within the fresh lease", err, "m1", 1)
	clk.Advance(11 * time.Second)
	cl, err := c2.GroupClaim(ctx, shardA, "g", "m2")
	if err != nil || cl.Generation != 2 || cl.Committed != 40 {
		t.Fatalf("claim after the restart: %+v %v, want generation 2 from 40", cl, err)
	}
}

// Two GroupConsumers on one shard, the broker's clock injected: the second
// takes the shard over once the first stopped polling for a lease; the
// first learns it at its next poll (its heartbeat is fenced) and its
// commit is refused; the second reads from the first's committed offset.
func TestGroupConsumerTakeoverAfterSilence(t *testing.T) {
	clk := newFakeClock()
	b := startBroker(t, Options{GroupLease: 10 * time.Second, Now: clk.Now})
	ctx := ctxT(t)
	if _, err := dial(t, b.addr, client.Options{}).Append(ctx, shardA, recs("a", "b", "c", "d"), nil); err != nil {
		t.Fatal(err)
	}
	cl, err := client.NewCluster(ctx, client.ClusterOptions{Attempts: 3}, b.addr)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = cl.Close() })
	member := func(name string) *client.GroupConsumer {
		g, err := client.NewGroupConsumer(cl, client.GroupConsumerOptions{Stream: shardA.Stream, Shards: []uint32{shardA.Shard}, Group: "g", Member: name, MaxRecords: 2})
		if err != nil {
			t.Fatal(err)
		}
		return g
	}
	first, second := member("first"), member("second")
	bs, err := first.Poll(ctx)
	if err != nil || len(bs) != 1 || len(bs[0].Records) != 2 {
		t.Fatalf("first poll: %+v %v", bs, err)
	}
	if err := first.Commit(ctx, shardA, bs[0].Next); err != nil {
		t.Fatal(err)
	}
	if bs, err := second.Poll(ctx); err != nil || len(bs) != 0 {
		t.Fatalf("second poll within the first's lease: %+v %v", bs, err)
	}
	clk.Advance(11 * time.Second)
	bs, err = second.Poll(ctx)
	if err != nil || len(bs) != 1 || bs[0].Generation != 2 || bs[0].Records[0].Offset != 2 {
		t.Fatalf("second poll after the first's lease: %+v %v, want generation 2 from offset 2", bs, err)
	}
	if err := first.Commit(ctx, shardA, 4); !errors.Is(err, wire.ErrGroupFenced) {
		t.Fatalf("commit of the silent member: %v, want GroupFenced", err)
	}
	if bs, err := first.Poll(ctx); err != nil || len(bs) != 0 || len(first.Owned()) != 0 {
		t.Fatalf("first poll after the takeover: %+v %v, owned %v", bs, err, first.Owned())
	}
}
