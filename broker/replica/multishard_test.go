package replica

import (
	"context"
	"fmt"
	"testing"
	"time"

	"felix.dev/felix/broker/logstore"
	"felix.dev/felix/broker/record"
	"felix.dev/felix/broker/replication"
	"felix.dev/felix/broker/wire"
)

// Shards share a broker's peer connections in both directions: with two
// shards led by different brokers, each leader's appends reach its
// followers and are served by it, and each broker refuses the shard it
// follows with the right leader's address.
func TestShardsShareConnectionsBothWays(t *testing.T) {
	c := newCluster(t, logstore.FsyncPeriodic, "a", "b", "c")
	shards := []record.ShardID{{Stream: "s", Shard: 0}, {Stream: "s", Shard: 1}}
	leaders := []replication.NodeID{"a", "b"}
	for i, sh := range shards {
		a := c.firstAssignment(leaders[i])
		for _, n := range c.nodes {
			if err := n.mgr.EnsureShard(sh, c.replicas(), replication.AckQuorum, 0); err != nil {
				t.Fatal(err)
			}
			if err := n.mgr.SetAssignment(sh, a); err != nil {
				t.Fatal(err)
			}
		}
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	for i, sh := range shards {
		leader := c.nodes[leaders[i]]
		eventually(t, "leading "+sh.String(), 10*time.Second, func() bool {
			st, err := leader.mgr.Status(sh)
			return err == nil && st.Role == replication.RoleLeader && st.FenceCommitted
		})
		cl := dial(t, leader)
		for j := 0; j < 20; j++ {
			if _, err := cl.Append(ctx, sh, []record.Record{{Payload: []byte(fmt.Sprintf("%d-%d", i, j))}}, nil); err != nil {
				t.Fatalf("%s append %d: %v", sh, j, err)
			}
		}
		res, err := cl.Read(ctx, wire.ReadRequest{Shard: sh, Offset: 1, MaxRecords: 100})
		if err != nil || len(res.Records) != 20 {
			t.Fatalf("%s: read %d records, %v", sh, len(res.Records), err)
		}
		other := c.nodes[leaders[1-i]]
		_, err = dial(t, other).Describe(ctx, sh)
		if wireCode(err) != wire.CodeNotLeader {
			t.Fatalf("%s on %s: %v, want NotLeader", sh, other.name, err)
		}
	}
}
