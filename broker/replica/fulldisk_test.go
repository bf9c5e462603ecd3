package replica

import (
	"context"
	"errors"
	"sync"
	"testing"
	"time"

	"felix.dev/felix/broker/logstore"
	"felix.dev/felix/broker/record"
	"felix.dev/felix/broker/replication"
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
	if err == nil && st.Persisted[record.LogData] > info.Durable {
		t.Fatalf("full follower claims %d persisted, its store holds %d durably", st.Persisted[record.LogData], info.Durable)
	}
	if info.Tail >= tail {
		t.Fatalf("full follower stored up to %d, the leader's tail %d: nothing should have landed", info.Tail, tail)
	}
}
