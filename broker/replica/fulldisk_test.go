package replica

import (
	"context"
	"errors"
	"sync"
	"testing"
	"time"

	"felix.dev/felix/broker/client"
	"felix.dev/felix/broker/logstore"
	"felix.dev/felix/broker/record"
	"felix.dev/felix/broker/replication"
	"felix.dev/felix/broker/server"
	"felix.dev/felix/broker/wire"
)

// freeByDir is a FreeSpace the test sets per store directory.
type freeByDir struct {
	mu   sync.Mutex
	free map[string]uint64
}

func (f *freeByDir) get(dir string) (uint64, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if v, ok := f.free[dir]; ok {
		return v, nil
	}
	return 1 << 40, nil
}

func (f *freeByDir) set(dir string, v uint64) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.free[dir] = v
}

// TestFullDiskLeaderRefusesFollowerClaimsNothing: a leader whose disk is
// below the floor refuses appends with StorageFull and keeps leading, and
// takes appends again once space returns; a follower below the floor does
// not count as holding records it did not persist, and the other two
// still commit.
func TestFullDiskLeaderRefusesFollowerClaimsNothing(t *testing.T) {
	const floor = 64 << 20
	ff := &freeByDir{free: map[string]uint64{}}
	c := newClusterCfg(t, logstore.FsyncOnCommit, t.TempDir, 20*time.Millisecond, func(c *cluster) {
		c.minFree, c.freeSpace = floor, ff.get
	}, "a", "b", "c")
	c.ensure(replication.AckQuorum, "a", "b", "c")
	c.assign(c.firstAssignment("a"))
	a, b := c.nodes["a"], c.nodes["b"]
	c.waitLeading(a)
	cl := dial(t, a)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	recs := []record.Record{{Payload: []byte("x")}}
	if _, err := cl.Append(ctx, testShard, recs, nil); err != nil {
		t.Fatal(err)
	}

	// The leader's disk fills.
	ff.set(a.dir, 0)
	eventually(t, "a full", 5*time.Second, func() bool { return a.store.Space().Full })
	_, err := cl.Append(ctx, testShard, recs, nil)
	var we *wire.Error
	if !errors.As(err, &we) || we.Code != wire.CodeStorageFull {
		t.Fatalf("append to a full leader: %v, want StorageFull", err)
	}
	if st, err := a.mgr.Status(testShard); err != nil || st.Role != replication.RoleLeader {
		t.Fatalf("full leader: status %+v, %v; want still leading", st, err)
	}
	ff.set(a.dir, 1<<40)
	eventually(t, "a has space", 5*time.Second, func() bool { return !a.store.Space().Full })
	if _, err := cl.Append(ctx, testShard, recs, nil); err != nil {
		t.Fatalf("append after space returned: %v", err)
	}

	// A follower's disk fills: a and c commit, b claims nothing more.
	ff.set(b.dir, 0)
	eventually(t, "b full", 5*time.Second, func() bool { return b.store.Space().Full })
	var tail uint64
	for i := 0; i < 5; i++ {
		res, err := cl.Append(ctx, testShard, recs, nil)
		if err != nil {
			t.Fatalf("append with one follower full: %v", err)
		}
		tail = res.Tail
	}
	bl, _ := b.store.Lookup(record.LogID{ShardID: testShard, Log: record.LogData})
	info := bl.Describe()
	st, err := b.mgr.Status(testShard)
	if err != nil {
		t.Fatalf("full follower: %v; want it still running, holding its writes", err)
	}
	if st.Persisted[record.LogData] > info.Durable {
		t.Fatalf("full follower claims %d persisted, its store holds %d durably", st.Persisted[record.LogData], info.Durable)
	}
	if info.Tail >= tail {
		t.Fatalf("full follower stored up to %d, the leader's tail %d: nothing should have landed", info.Tail, tail)
	}

	// Space returns: the follower writes what it held and catches up.
	ff.set(b.dir, 1<<40)
	waitCaughtUp(t, b, tail)
}

// appendAllCatchUp appends recs once space has returned and waits until
// every replica is durable up to the new tail.
func appendAllCatchUp(ctx context.Context, t *testing.T, c *cluster, cl *client.Client, recs []record.Record) {
	t.Helper()
	res, err := cl.Append(ctx, testShard, recs, nil)
	if err != nil {
		t.Fatalf("append after space returned: %v", err)
	}
	for _, n := range []string{"a", "b", "c"} {
		waitCaughtUp(t, c.nodes[replication.NodeID(n)], res.Tail)
	}
}

// waitCaughtUp waits until n's data log is durable up to tail and its
// replica still runs.
func waitCaughtUp(t *testing.T, n *node, tail uint64) {
	t.Helper()
	l, _ := n.store.Lookup(record.LogID{ShardID: testShard, Log: record.LogData})
	deadline := time.Now().Add(10 * time.Second)
	for {
		_, err := n.mgr.Status(testShard)
		if err != nil {
			t.Fatalf("%s after space returned: %v", n.name, err)
		}
		d := l.Describe().Durable
		if d >= tail {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("%s: durable %d, the leader's tail %d, 10s after space returned", n.name, d, tail)
		}
		time.Sleep(5 * time.Millisecond)
	}
}

// TestFullDiskLeaderFenceWaitsForSpace: a leader whose fence write is
// refused for want of space keeps the shard (refusing appends with
// StorageFull) and writes its fence once space returns.
func TestFullDiskLeaderFenceWaitsForSpace(t *testing.T) {
	const floor = 64 << 20
	ff := &freeByDir{free: map[string]uint64{}}
	c := newClusterCfg(t, logstore.FsyncOnCommit, t.TempDir, 20*time.Millisecond, func(c *cluster) {
		c.minFree, c.freeSpace = floor, ff.get
	}, "a", "b", "c")
	a := c.nodes["a"]
	ff.set(a.dir, 0)
	eventually(t, "a full", 5*time.Second, func() bool { return a.store.Space().Full })
	c.ensure(replication.AckQuorum, "a", "b", "c")
	c.assign(c.firstAssignment("a"))
	eventually(t, "a leading, fence held", 5*time.Second, func() bool {
		st, _ := a.mgr.Status(testShard)
		return st.Role == replication.RoleLeader
	})
	cl := dial(t, a)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	recs := []record.Record{{Payload: []byte("x")}}
	_, err := cl.Append(ctx, testShard, recs, nil)
	var we *wire.Error
	if !errors.As(err, &we) || we.Code != wire.CodeStorageFull {
		t.Fatalf("append to a leader whose fence is held: %v, want StorageFull", err)
	}
	// Hold long enough for more Readies than the persister takes at once.
	st0, _ := a.mgr.Status(testShard)
	eventually(t, "50 passes while held", 10*time.Second, func() bool {
		st, _ := a.mgr.Status(testShard)
		return st.Pass >= st0.Pass+50
	})
	if st, err := a.mgr.Status(testShard); err != nil || st.FenceCommitted {
		t.Fatalf("leader short of space: status %+v, %v; want running, fence not committed", st, err)
	}
	ff.set(a.dir, 1<<40)
	c.waitLeading(a)
	appendAllCatchUp(ctx, t, c, cl, recs)
}

// TestFullDiskLeaderRefusedBatchIsNotFatal: a client batch that passed the
// leader's space check but is refused by its store (the disk filled in
// between) is answered StorageFull, never acknowledged, and the shard
// keeps running; once space returns appends are taken and every replica
// catches up.
func TestFullDiskLeaderRefusedBatchIsNotFatal(t *testing.T) {
	const floor = 64 << 20
	ff := &freeByDir{free: map[string]uint64{}}
	c := newClusterCfg(t, logstore.FsyncOnCommit, t.TempDir, 20*time.Millisecond, func(c *cluster) {
		c.minFree, c.freeSpace = floor, ff.get
	}, "a", "b", "c")
	c.ensure(replication.AckQuorum, "a", "b", "c")
	c.assign(c.firstAssignment("a"))
	a := c.nodes["a"]
	c.waitLeading(a)
	dl, err := a.mgr.Shards().DataLog(testShard)
	if err != nil {
		t.Fatal(err)
	}
	sub := dl.(server.Submitter)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	recs := []record.Record{{Payload: []byte("x")}}
	// Proposals are queued while the store is not yet known full, then the
	// store learns it is (a measure between the check and the write):
	// those not written yet are refused by the store. The race is tried
	// until the store refused some.
	for attempt := 0; ; attempt++ {
		if attempt == 20 {
			t.Fatalf("the store refused no queued append in %d attempts", attempt)
		}
		var waits []server.AppendWait
		for i := 0; i < 64; i++ {
			if i == 32 {
				ff.set(a.dir, 0)
				if err := a.store.CheckSpace(); err != nil {
					t.Fatal(err)
				}
			}
			w, err := sub.SubmitAppend(ctx, recs, nil)
			if err != nil {
				if i < 32 || !errors.Is(err, record.ErrStorageFull) {
					t.Fatalf("append %d: %v", i, err)
				}
				continue
			}
			waits = append(waits, w)
		}
		refused := 0
		for i, w := range waits {
			_, err := w(ctx)
			switch {
			case err == nil:
			case errors.Is(err, record.ErrStorageFull):
				refused++
			default:
				t.Fatalf("append %d queued before the disk filled: %v, want success or StorageFull", i, err)
			}
		}
		ff.set(a.dir, 1<<40)
		if err := a.store.CheckSpace(); err != nil {
			t.Fatal(err)
		}
		if refused > 0 {
			t.Logf("attempt %d: the store refused %d queued appends", attempt, refused)
			break
		}
	}
	if _, err := a.mgr.Status(testShard); err != nil {
		t.Fatalf("leader whose store refused a batch: %v; want it running", err)
	}
	c.waitLeading(a)
	cl := dial(t, a)
	appendAllCatchUp(ctx, t, c, cl, recs)
}

// TestStatusReportsFailedReplica: a replica whose store fails for a reason
// other than space stops, and Status says so with the store's error.
func TestStatusReportsFailedReplica(t *testing.T) {
	c := newCluster(t, logstore.FsyncOnCommit, "a", "b", "c")
	c.ensure(replication.AckQuorum, "a", "b", "c")
	c.assign(c.firstAssignment("a"))
	a, b := c.nodes["a"], c.nodes["b"]
	c.waitLeading(a)
	if _, err := b.mgr.Status(testShard); err != nil {
		t.Fatalf("healthy follower: %v", err)
	}
	if err := b.store.Close(); err != nil {
		t.Fatal(err)
	}
	cl := dial(t, a)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if _, err := cl.Append(ctx, testShard, []record.Record{{Payload: []byte("x")}}, nil); err != nil {
		t.Fatal(err)
	}
	eventually(t, "b reported failed", 10*time.Second, func() bool {
		_, err := b.mgr.Status(testShard)
		return errors.Is(err, record.ErrClosed)
	})
}
