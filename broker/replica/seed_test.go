package replica

import (
	"bytes"
	"os"
	"testing"
	"time"

	"felix.dev/felix/broker/logstore"
	"felix.dev/felix/broker/placement"
	"felix.dev/felix/broker/record"
	"felix.dev/felix/broker/replication"
)

// The seed's story on real parts, three replicas: the shard goes idle, C
// loses its disk and comes back empty under a new id, the leader's idle
// passes notice (its report names C's new id, not caught up), A dies.
// Placement promotes B, never C; B fences with C counted under its new id,
// and every record acknowledged under Quorum is readable from B [RP-3]
// [RP-4] [CP-1].
func TestSeed000_WipedFollowerIsNeverPromotedAndNothingIsLost(t *testing.T) {
	c := newCluster(t, logstore.FsyncPeriodic, "a", "b", "c")
	c.ensure(replication.AckQuorum, "a", "b", "c")
	first := c.firstAssignment("a")
	c.assign(first)
	a := c.nodes["a"]
	c.waitLeading(a)
	acked := appendN(t, dial(t, a), "r", 50)

	// Idle from here on. C loses its directory and comes back empty; it
	// registers again (new id, next incarnation) but has not yet heard
	// the current epoch, so it answers nothing.
	old := c.nodes["c"]
	old.stop()
	if err := os.RemoveAll(old.dir); err != nil {
		t.Fatal(err)
	}
	fresh := c.start("c", t.TempDir(), old.incarnation+1)
	c.ensure(replication.AckQuorum, "c")
	newID := replication.StorageID(fresh.id.String())

	var rep replication.Report
	eventually(t, "a report naming C's new id", 10*time.Second, func() bool {
		r, ok := a.lastReport()
		if !ok {
			return false
		}
		for _, f := range r.Followers {
			if f.Node == "c" && f.StorageID == newID {
				if f.CaughtUp || f.Confirmed[record.LogData] != 0 {
					t.Fatalf("C counted at its old position under its new id: %+v", f)
				}
				rep = r
				return true
			}
		}
		return false
	})

	a.stop()
	in := placementInput(c, rep, first, "a", time.Now())
	d := placement.Decide(in)
	if d.Action != placement.Promote || d.Leader != "b" {
		t.Fatalf("placement: %+v, want B promoted", d)
	}
	for _, cand := range d.Candidates {
		if cand.Broker == "c" && cand.Verdict == placement.Eligible {
			t.Fatalf("the wiped follower was eligible: %+v", cand)
		}
	}
	next := replication.Assignment{Leader: "b", Epoch: d.Epoch, LeaderIncarnation: d.LeaderIncarnation,
		Counted: map[replication.NodeID]replication.StorageID{}}
	for k, v := range d.Counted {
		next.Counted[replication.NodeID(k)] = replication.StorageID(v)
	}
	c.assign(next)
	b := c.nodes["b"]
	c.waitLeading(b)
	got := readAll(t, b)
	for off, p := range acked {
		if !bytes.Equal(got[off], p) {
			t.Fatalf("acknowledged record %d lost: %q on B, want %q", off, got[off], p)
		}
	}
	// C was rebuilt from B under the new epoch.
	eventually(t, "C copied from B", 10*time.Second, func() bool {
		lg, ok := fresh.store.Lookup(record.LogID{ShardID: testShard, Log: record.LogData})
		blg, _ := b.store.Lookup(record.LogID{ShardID: testShard, Log: record.LogData})
		return ok && lg.Describe().Durable == blg.Describe().Tail
	})
}
