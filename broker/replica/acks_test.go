package replica

import (
	"context"
	"testing"
	"time"

	"felix.dev/felix/broker/record"
	"felix.dev/felix/broker/wire"
)

// Per-record acknowledgement and the dead-letter log across a leader
// change: the delivery counts one leader recorded are the next one's (a
// record delivered its maximum number of times on the first leader is
// dead-lettered at its next due fetch on the second, not delivered
// again), and a record redriven by the first leader is not redriven again
// by the second (the second answers with the first's offset).
func TestAcksSurviveLeaderChange(t *testing.T) {
	c, meta := routedCluster(t)
	assignReplicas(t, c, meta, replicaAssignment(c, "a", 1))
	c.waitLeading(c.nodes["a"])
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()

	ca := dial(t, c.nodes["a"])
	if _, err := ca.Append(ctx, testShard, []record.Record{{Payload: []byte("x")}, {Payload: []byte("y")}}, nil); err != nil {
		t.Fatal(err)
	}
	if _, err := ca.GroupClaim(ctx, testShard, "g", "m1"); err != nil {
		t.Fatal(err)
	}
	if _, err := ca.GroupAckConfig(ctx, wire.GroupAckConfigRequest{Shard: testShard, Group: "g", Member: "m1", Generation: 1,
		MaxDeliveries: 2, AckWaitMillis: 3_600_000, MaxInFlight: 4}); err != nil {
		t.Fatal(err)
	}
	req := wire.GroupFetchRequest{Shard: testShard, Group: "g", Member: "m1", Generation: 1, MaxRecords: 1}
	// fetch delivers the lowest due or new record after a nak of off.
	fetchAfterNak := func(cl interface {
		GroupNak(context.Context, record.ShardID, string, string, uint64, []uint64) (wire.GroupNakOK, error)
		GroupFetch(context.Context, wire.GroupFetchRequest) (wire.GroupFetchOK, error)
	}, off uint64) wire.GroupFetchOK {
		t.Helper()
		if _, err := cl.GroupNak(ctx, testShard, "g", "m1", 1, []uint64{off}); err != nil {
			t.Fatal(err)
		}
		out, err := cl.GroupFetch(ctx, req)
		if err != nil {
			t.Fatal(err)
		}
		return out
	}
	out, err := ca.GroupFetch(ctx, wire.GroupFetchRequest{Shard: testShard, Group: "g", Member: "m1", Generation: 1})
	if err != nil || len(out.Deliveries) != 2 {
		t.Fatalf("first fetch: %+v %v", out, err)
	}
	x, y := out.Deliveries[0].Record.Offset, out.Deliveries[1].Record.Offset // the leader's fence may sit below them
	if out := fetchAfterNak(ca, x); len(out.Deliveries) != 1 || out.Deliveries[0].Record.Offset != x || out.Deliveries[0].Deliveries != 2 {
		t.Fatalf("second delivery of x: %+v", out)
	}
	if out := fetchAfterNak(ca, x); out.DeadLettered != 1 {
		t.Fatalf("fetch after x's last delivery: %+v, want it dead-lettered", out)
	}
	if out := fetchAfterNak(ca, y); len(out.Deliveries) != 1 || out.Deliveries[0].Record.Offset != y || out.Deliveries[0].Deliveries != 2 {
		t.Fatalf("second delivery of y: %+v", out)
	}
	dl, err := ca.DeadLetterRead(ctx, testShard, 0, 0)
	if err != nil || len(dl.Entries) != 1 || dl.Entries[0].Offset != x || string(dl.Entries[0].Payload) != "x" {
		t.Fatalf("dead letters on the first leader: %+v %v", dl, err)
	}
	entry := dl.Entries[0].Entry
	first, err := ca.DeadLetterRedrive(ctx, testShard, entry)
	if err != nil || first.Already {
		t.Fatalf("redrive on the first leader: %+v %v", first, err)
	}

	c.nodes["a"].stop()
	assignReplicas(t, c, meta, replicaAssignment(c, "b", 2))
	c.waitLeading(c.nodes["b"])
	cb := dial(t, c.nodes["b"])
	var again wire.DeadLetterRedriveOK
	eventually(t, "the new leader serves the dead-letter log", 20*time.Second, func() bool {
		again, err = cb.DeadLetterRedrive(ctx, testShard, entry)
		return err == nil
	})
	if !again.Already || again.DataOffset != first.DataOffset {
		t.Fatalf("redrive on the new leader: %+v, want already at %d", again, first.DataOffset)
	}
	eventually(t, "the new leader serves the group", 20*time.Second, func() bool {
		_, err := cb.GroupNak(ctx, testShard, "g", "m1", 1, []uint64{y})
		return err == nil
	})
	if out, err = cb.GroupFetch(ctx, wire.GroupFetchRequest{Shard: testShard, Group: "g", Member: "m1", Generation: 1, MaxRecords: 0}); err != nil || out.DeadLettered != 1 {
		t.Fatalf("fetch on the new leader after y's last delivery: %+v %v, want it dead-lettered (its count kept)", out, err)
	}
	if dl, err := cb.DeadLetterRead(ctx, testShard, 0, 0); err != nil || len(dl.Entries) != 2 || !dl.Entries[0].Redriven || dl.Entries[1].Offset != y {
		t.Fatalf("dead letters on the new leader: %+v %v", dl, err)
	}
	res, err := cb.Read(ctx, wire.ReadRequest{Shard: testShard, From: wire.FromOffset, MaxRecords: 100})
	if err != nil {
		t.Fatal(err)
	}
	var xs []uint64
	for _, r := range res.Records {
		if string(r.Payload) == "x" {
			xs = append(xs, r.Offset)
		}
	}
	if len(xs) != 2 || xs[1] != first.DataOffset {
		t.Fatalf("records x in the data log at %v, want the original and one redriven copy at %d", xs, first.DataOffset)
	}
}
