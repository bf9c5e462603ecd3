package replica

import (
	"context"
	"errors"
	"testing"
	"time"

	"felix.dev/felix/broker/client"
	"felix.dev/felix/broker/record"
	"felix.dev/felix/broker/wire"
)

// A consumer group's owner, generation and committed offset acknowledged
// by one leader are served by the next, which folds its own replica of the
// group log. The new leader starts the owner's lease afresh (another
// member's claim is refused), the owner commits on under its generation,
// and after it leaves another member resumes after the committed offset.
func TestGroupSurvivesLeaderChange(t *testing.T) {
	c, meta := routedCluster(t)
	assignReplicas(t, c, meta, replicaAssignment(c, "a", 1))
	c.waitLeading(c.nodes["a"])
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()

	ca := dial(t, c.nodes["a"])
	cl, err := ca.GroupClaim(ctx, testShard, "g", "m1")
	if err != nil || cl.Generation != 1 {
		t.Fatalf("claim: %+v %v", cl, err)
	}
	if _, err := ca.GroupCommit(ctx, testShard, "g", "m1", 1, 5); err != nil {
		t.Fatal(err)
	}

	c.nodes["a"].stop()
	assignReplicas(t, c, meta, replicaAssignment(c, "b", 2))
	c.waitLeading(c.nodes["b"])
	cb := dial(t, c.nodes["b"])
	var d wire.GroupDescribeOK
	eventually(t, "the new leader serves groups", 20*time.Second, func() bool {
		d, err = cb.GroupDescribe(ctx, testShard, "g")
		return err == nil
	})
	if len(d.Groups) != 1 || d.Groups[0].Owner != "m1" || d.Groups[0].Generation != 1 || d.Groups[0].Committed != 5 {
		t.Fatalf("groups on the new leader: %+v", d)
	}
	if _, err := cb.GroupClaim(ctx, testShard, "g", "m2"); !errors.Is(err, wire.ErrGroupFenced) {
		t.Fatalf("claim of a shard whose owner's lease the new leader started afresh: %v, want GroupFenced", err)
	}
	if _, err := cb.GroupCommit(ctx, testShard, "g", "m1", 1, 6); err != nil {
		t.Fatalf("commit by the owner on the new leader: %v", err)
	}
	if _, err := cb.GroupLeave(ctx, testShard, "g", "m1", 1); err != nil {
		t.Fatal(err)
	}
	cl, err = cb.GroupClaim(ctx, testShard, "g", "m2")
	if err != nil || cl.Generation != 2 || cl.Committed != 6 {
		t.Fatalf("claim after the leave: %+v %v, want generation 2 from 6", cl, err)
	}
	if _, err := cb.GroupCommit(ctx, testShard, "g", "m1", 1, 7); !errors.Is(err, wire.ErrGroupFenced) {
		t.Fatalf("commit by the former owner: %v, want GroupFenced", err)
	}
}

// Two GroupConsumers of one group share a shard: the first claims it and
// commits what it processed; the second owns nothing while the first
// does; after the first leaves, the second claims the shard and resumes
// after the committed offset; the first's late commit is refused.
func TestGroupConsumerResumesAfterCommit(t *testing.T) {
	c, meta := routedCluster(t)
	assignReplicas(t, c, meta, replicaAssignment(c, "a", 1))
	c.waitLeading(c.nodes["a"])
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	cl, err := client.NewCluster(ctx, client.ClusterOptions{Attempts: 20}, c.nodes["d"].addr)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = cl.Close() })
	appendN := func(n int) {
		t.Helper()
		recs := make([]record.Record, n)
		for i := range recs {
			recs[i] = record.Record{Payload: []byte{byte(i)}}
		}
		if _, err := cl.Append(ctx, testShard, recs, nil); err != nil {
			t.Fatal(err)
		}
	}
	member := func(name string) *client.GroupConsumer {
		g, err := client.NewGroupConsumer(cl, client.GroupConsumerOptions{Stream: testShard.Stream, Shards: []uint32{testShard.Shard}, Group: "g", Member: name})
		if err != nil {
			t.Fatal(err)
		}
		return g
	}
	appendN(5)
	first, second := member("first"), member("second")
	batches, err := first.Poll(ctx)
	if err != nil || len(batches) != 1 || len(batches[0].Records) != 5 {
		t.Fatalf("first poll: %+v %v, want the 5 records", batches, err)
	}
	committed := batches[0].Next
	if err := first.Commit(ctx, testShard, batches[0].Next); err != nil {
		t.Fatal(err)
	}
	if batches, err := second.Poll(ctx); err != nil || len(batches) != 0 || len(second.Owned()) != 0 {
		t.Fatalf("second poll while the first owns the shard: %+v %v owned %v", batches, err, second.Owned())
	}
	gen := first.Owned()[testShard.Shard]
	if err := first.Close(ctx); err != nil {
		t.Fatal(err)
	}
	appendN(3)
	batches, err = second.Poll(ctx)
	if err != nil || len(batches) != 1 || len(batches[0].Records) != 3 || batches[0].Records[0].Offset != committed || batches[0].Generation != gen+1 {
		t.Fatalf("second poll after the first left: %+v %v, want 3 records from %d at generation %d", batches, err, committed, gen+1)
	}
	if _, err := cl.GroupCommit(ctx, testShard, "g", "first", gen, committed+3); !errors.Is(err, wire.ErrGroupFenced) {
		t.Fatalf("late commit of the first member: %v, want GroupFenced", err)
	}
	if err := second.Commit(ctx, testShard, batches[0].Next); err != nil {
		t.Fatal(err)
	}
	d, err := cl.GroupDescribe(ctx, testShard, "g")
	if err != nil || len(d.Groups) != 1 || d.Groups[0].Committed != batches[0].Next || d.Groups[0].Lag != 0 || d.Groups[0].Owner != "second" {
		t.Fatalf("describe: %+v %v", d, err)
	}
}
