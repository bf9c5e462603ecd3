package replica

import (
	"context"
	"testing"
	"time"

	"felix.dev/felix/broker/logstore"
	"felix.dev/felix/broker/record"
	"felix.dev/felix/broker/replication"
)

// Each stream's ack mode decides which replicas must hold a batch before
// its client hears back: the leader alone, a majority, or every replica.
func TestAckModesWaitForTheirReplicas(t *testing.T) {
	for _, tc := range []struct {
		mode  replication.AckMode
		down  []replication.NodeID
		acked bool
		// readable: Leader streams serve what the leader acknowledged;
		// Quorum and All streams serve committed (majority) records.
		readable bool
	}{
		{replication.AckLeader, []replication.NodeID{"b", "c"}, true, true},
		{replication.AckQuorum, []replication.NodeID{"c"}, true, true},
		{replication.AckQuorum, []replication.NodeID{"b", "c"}, false, false},
		{replication.AckAll, nil, true, true},
		{replication.AckAll, []replication.NodeID{"c"}, false, true},
	} {
		t.Run(tc.mode.String()+"/down="+string(joinNodes(tc.down)), func(t *testing.T) {
			c := newCluster(t, logstore.FsyncPeriodic, "a", "b", "c")
			c.ensure(tc.mode, "a", "b", "c")
			c.assign(c.firstAssignment("a"))
			a := c.nodes["a"]
			c.waitLeading(a)
			cl := dial(t, a)
			for _, n := range tc.down {
				c.nodes[n].stop()
			}
			ctx, cancel := context.WithTimeout(context.Background(), 500*time.Millisecond)
			defer cancel()
			ok, err := cl.Append(ctx, testShard, []record.Record{{Payload: []byte("p")}}, nil)
			if tc.acked != (err == nil) {
				t.Fatalf("acknowledged: %v (%+v), want %v", err == nil, ok, tc.acked)
			}
			if tc.readable {
				eventually(t, "the record readable", 5*time.Second, func() bool { return len(readAll(t, a)) == 1 })
			} else if got := readAll(t, a); len(got) != 0 {
				t.Fatalf("reader saw %d uncommitted records", len(got))
			}
		})
	}
}

func joinNodes(ns []replication.NodeID) replication.NodeID {
	out := replication.NodeID("")
	for i, n := range ns {
		if i > 0 {
			out += ","
		}
		out += n
	}
	if out == "" {
		out = "none"
	}
	return out
}
