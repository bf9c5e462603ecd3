package replica

import (
	"testing"
	"time"

	"felix.dev/felix/broker/logstore"
	"felix.dev/felix/broker/record"
	"felix.dev/felix/broker/replication"
	"felix.dev/felix/broker/wire"
)

// A follower whose broker does not accept wire.FeatureShipBundle (an older
// broker) is sent one frame per message and replicates as before, next to
// one that takes bundles; both are asked every pass, and both catch up
// [RP-4] (issue 31).
func TestBundlesOnlyWhereAccepted(t *testing.T) {
	c := newClusterCfg(t, logstore.FsyncPeriodic, t.TempDir, 20*time.Millisecond, func(c *cluster) {
		c.features = map[replication.NodeID]wire.Features{"c": wire.KnownFeatures &^ wire.FeatureShipBundle}
	}, "a", "b", "c")
	c.ensure(replication.AckQuorum, "a", "b", "c")
	c.assign(c.firstAssignment("a"))
	a := c.nodes["a"]
	c.waitLeading(a)
	acked := appendN(t, dial(t, a), "r", 20)

	for _, tc := range []struct {
		node    replication.NodeID
		bundles bool
	}{{"b", true}, {"c", false}} {
		conn, _, ok := a.mgr.pool.Current(tc.node)
		if !ok {
			t.Fatalf("no connection to %s", tc.node)
		}
		if got := a.mgr.pool.Bundles(tc.node, conn); got != tc.bundles {
			t.Fatalf("bundles to %s: %v, want %v", tc.node, got, tc.bundles)
		}
	}
	r0, _ := a.lastReport()
	eventually(t, "both followers caught up on an idle shard, passes later", 10*time.Second, func() bool {
		r, ok := a.lastReport()
		if !ok || r.Pass < r0.Pass+5 || len(r.Followers) != 2 {
			return false
		}
		for _, f := range r.Followers {
			if !f.CaughtUp || f.Confirmed[record.LogData] < uint64(len(acked)) {
				return false
			}
		}
		return true
	})
}
