package replica

import "testing"

// Every acknowledged proposal is one observation of the leader's commit
// latency; followers observe none.
func TestCommitLatencyCountsAcknowledgedProposals(t *testing.T) {
	c := newMaintCluster(t)
	const batches = 7
	appendBatches(t, dial(t, c.nodes["a"]), "m", batches, 3)
	count := func(n *node) uint64 {
		t.Helper()
		mfs, err := n.registry.Gather()
		if err != nil {
			t.Fatal(err)
		}
		for _, mf := range mfs {
			if mf.GetName() == "felix_replication_commit_latency_seconds" {
				return mf.GetMetric()[0].GetHistogram().GetSampleCount()
			}
		}
		t.Fatal("felix_replication_commit_latency_seconds is not registered")
		return 0
	}
	if got := count(c.nodes["a"]); got < batches {
		t.Fatalf("leader observed %d commit latencies, want at least %d (one per acknowledged append)", got, batches)
	}
	if got := count(c.nodes["b"]); got != 0 {
		t.Fatalf("follower observed %d commit latencies, want 0", got)
	}
}
