package replica

import (
	"bytes"
	"context"
	"fmt"
	"os"
	"sync"
	"testing"
	"time"

	"felix.dev/felix/broker/logstore"
	"felix.dev/felix/broker/placement"
	"felix.dev/felix/broker/record"
	"felix.dev/felix/broker/replication"
)

// Followers restart (one keeps its directory, one loses it) while clients
// append under Quorum; afterwards the leader stops and the replica
// placement promotes serves every acknowledged record.
func TestRP_AcknowledgedRecordsSurviveFollowerChurnAndFailover(t *testing.T) {
	c := newCluster(t, logstore.FsyncPeriodic, "a", "b", "c")
	c.ensure(replication.AckQuorum, "a", "b", "c")
	first := c.firstAssignment("a")
	c.assign(first)
	a := c.nodes["a"]
	c.waitLeading(a)

	var mu sync.Mutex
	acked := map[uint64][]byte{}
	stop := make(chan struct{})
	var wg sync.WaitGroup
	for w := 0; w < 4; w++ {
		cl := dial(t, a)
		wg.Add(1)
		go func(w int) {
			defer wg.Done()
			for i := 0; ; i++ {
				select {
				case <-stop:
					return
				default:
				}
				p := []byte(fmt.Sprintf("w%d-%d", w, i))
				ctx, cancel := context.WithTimeout(context.Background(), 200*time.Millisecond)
				ok, err := cl.Append(ctx, testShard, []record.Record{{Payload: p}}, nil)
				cancel()
				if err == nil {
					mu.Lock()
					acked[ok.First] = p
					mu.Unlock()
				}
			}
		}(w)
	}
	count := func() int {
		mu.Lock()
		defer mu.Unlock()
		return len(acked)
	}
	eventually(t, "appends flowing", 10*time.Second, func() bool { return count() > 50 })

	// B restarts keeping its directory and id.
	b := c.nodes["b"]
	b.stop()
	nb := c.startWithID("b", b.dir, b.incarnation+1, b.id)
	c.ensure(replication.AckQuorum, "b")
	if err := nb.mgr.SetKnownEpoch(testShard, first.Epoch); err != nil {
		t.Fatal(err)
	}
	n0 := count()
	eventually(t, "appends flowing after B's restart", 10*time.Second, func() bool { return count() > n0+50 })

	// C loses its directory.
	oc := c.nodes["c"]
	oc.stop()
	if err := os.RemoveAll(oc.dir); err != nil {
		t.Fatal(err)
	}
	nc := c.start("c", t.TempDir(), oc.incarnation+1)
	c.ensure(replication.AckQuorum, "c")
	if err := nc.mgr.SetKnownEpoch(testShard, first.Epoch); err != nil {
		t.Fatal(err)
	}
	n1 := count()
	eventually(t, "appends flowing after C's wipe", 10*time.Second, func() bool { return count() > n1+50 })
	close(stop)
	wg.Wait()

	var rep replication.Report
	eventually(t, "both followers caught up", 10*time.Second, func() bool {
		r, ok := a.lastReport()
		if !ok {
			return false
		}
		for _, f := range r.Followers {
			if !f.CaughtUp {
				return false
			}
		}
		rep = r
		return true
	})
	a.stop()
	d := placement.Decide(placementInput(c, rep, first, "a", time.Now()))
	if d.Action != placement.Promote {
		t.Fatalf("placement: %+v", d)
	}
	next := replication.Assignment{Leader: replication.NodeID(d.Leader), Epoch: d.Epoch, LeaderIncarnation: d.LeaderIncarnation,
		Counted: map[replication.NodeID]replication.StorageID{}}
	for k, v := range d.Counted {
		next.Counted[replication.NodeID(k)] = replication.StorageID(v)
	}
	c.assign(next)
	leader := c.nodes[next.Leader]
	c.waitLeading(leader)
	got := readAll(t, leader)
	for off, p := range acked {
		if !bytes.Equal(got[off], p) {
			t.Fatalf("acknowledged record %d: %q on %s, want %q", off, got[off], leader.name, p)
		}
	}
	t.Logf("%d acknowledged records, all readable from %s", len(acked), leader.name)
}
