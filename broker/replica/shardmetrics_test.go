package replica

import (
	"strconv"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	dto "github.com/prometheus/client_model/go"

	"felix.dev/felix/broker/replication"
)

// shardGauges scrapes a ShardCollector of n's Manager and returns the
// testShard's felix_shard_* values by name, the follower lag by follower.
func shardGauges(t *testing.T, n *node) (map[string]float64, map[string]float64) {
	t.Helper()
	reg := prometheus.NewRegistry()
	if err := reg.Register(NewShardCollector(n.mgr)); err != nil {
		t.Fatal(err)
	}
	mfs, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	labels := func(m *dto.Metric) map[string]string {
		out := map[string]string{}
		for _, l := range m.GetLabel() {
			out[l.GetName()] = l.GetValue()
		}
		return out
	}
	gauges, lag := map[string]float64{}, map[string]float64{}
	for _, mf := range mfs {
		for _, m := range mf.GetMetric() {
			l := labels(m)
			if l["stream"] != testShard.Stream || l["shard"] != strconv.Itoa(int(testShard.Shard)) {
				t.Fatalf("%s: series of a shard the node does not hold: %v", mf.GetName(), l)
			}
			if mf.GetName() == MetricShardFollowerLag {
				lag[l["follower"]] = m.GetGauge().GetValue()
				continue
			}
			gauges[mf.GetName()] = m.GetGauge().GetValue()
		}
	}
	return gauges, lag
}

// The per-shard gauges of a held shard: positions on every replica, leader
// 1 on the leader only, and the follower lag on the leader, which grows
// for a follower that stopped.
func TestShardCollector(t *testing.T) {
	c := newMaintCluster(t)
	appendBatches(t, dial(t, c.nodes["a"]), "m", 5, 3)

	var lead, lag map[string]float64
	eventually(t, "leader's followers confirm every committed record", 10*time.Second, func() bool {
		lead, lag = shardGauges(t, c.nodes["a"])
		return len(lag) == 2 && lag["b"] == 0 && lag["c"] == 0
	})
	if lead[MetricShardLeader] != 1 {
		t.Errorf("leader: %s = %v; want 1", MetricShardLeader, lead[MetricShardLeader])
	}
	if lead[MetricShardCommitted] < 15 || lead[MetricShardTail] < lead[MetricShardCommitted] {
		t.Errorf("leader: committed %v tail %v; want committed >= 15 (records appended), tail >= committed",
			lead[MetricShardCommitted], lead[MetricShardTail])
	}
	if _, ok := lead[MetricShardFloor]; !ok {
		t.Errorf("leader: no %s", MetricShardFloor)
	}
	for _, name := range []replication.NodeID{"b", "c"} {
		g, l := shardGauges(t, c.nodes[name])
		if g[MetricShardLeader] != 0 || len(l) != 0 {
			t.Errorf("follower %s: leader %v, lag %v; want 0 and no lag series", name, g[MetricShardLeader], l)
		}
		for _, m := range []string{MetricShardTail, MetricShardCommitted, MetricShardFloor} {
			if _, ok := g[m]; !ok {
				t.Errorf("follower %s: no %s", name, m)
			}
		}
	}

	// c stops; a and b still commit, c falls behind.
	c.nodes["c"].stop()
	appendBatches(t, dial(t, c.nodes["a"]), "n", 4, 5)
	eventually(t, "the stopped follower's lag covers what it missed", 10*time.Second, func() bool {
		_, lag = shardGauges(t, c.nodes["a"])
		return lag["c"] >= 20 && lag["b"] == 0
	})

	// A removed shard's series go with it.
	c.nodes["b"].mgr.RemoveShard(testShard)
	if g, l := shardGauges(t, c.nodes["b"]); len(g) != 0 || len(l) != 0 {
		t.Errorf("after RemoveShard: %v %v; want no series", g, l)
	}
}
