package replica

import (
	"context"
	"errors"
	"testing"
	"time"

	"felix.dev/felix/broker/logstore"
	"felix.dev/felix/broker/record"
	"felix.dev/felix/broker/replication"
	"felix.dev/felix/broker/wire"
)

func u64(v uint64) *uint64 { return &v }

func wireCode(err error) wire.Code {
	var we *wire.Error
	if errors.As(err, &we) {
		return we.Code
	}
	return 0
}

// [TR-1] [TR-2] [TR-3] Conditional appends and trims go through the
// leader's tail: a trim is a record under the tail check, a trim at or
// below the floor writes nothing but still checks the tail, and the floor
// moves once the trim is committed.
func TestTR3_ReplicatedTrimChecksTheLeadersTail(t *testing.T) {
	c := newCluster(t, logstore.FsyncPeriodic, "a", "b", "c")
	c.ensure(replication.AckQuorum, "a", "b", "c")
	c.assign(c.firstAssignment("a"))
	a := c.nodes["a"]
	c.waitLeading(a)
	cl := dial(t, a)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()

	// Offset 0 is the fence; 1..5 data.
	for i := 0; i < 5; i++ {
		if _, err := cl.Append(ctx, testShard, []record.Record{{Payload: []byte{byte(i)}}}, nil); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := cl.Append(ctx, testShard, []record.Record{{Payload: []byte("x")}}, u64(3)); wireCode(err) != wire.CodeOffsetMismatch {
		t.Fatalf("append at a stale tail: %v", err)
	}
	ok, err := cl.Append(ctx, testShard, []record.Record{{Payload: []byte("y")}}, u64(6))
	if err != nil || ok.First != 6 || ok.Tail != 7 {
		t.Fatalf("append at the tail: %+v %v", ok, err)
	}
	tr, err := cl.Trim(ctx, wire.TrimRequest{Shard: testShard, Floor: 4, ExpectTail: 7, Headers: []record.Header{{Key: "epoch", Value: []byte("2")}}})
	if err != nil || tr.Tail != 8 || tr.Floor != 4 {
		t.Fatalf("trim: %+v %v", tr, err)
	}
	// Once committed, the floor moves on the leader.
	_, err = cl.Read(ctx, wire.ReadRequest{Shard: testShard, Offset: 1})
	if wireCode(err) != wire.CodeCursorTooOld {
		t.Fatalf("read below the committed trim's floor: %v", err)
	}
	// A no-op trim (floor at or below 4) still checks the tail...
	if _, err := cl.Trim(ctx, wire.TrimRequest{Shard: testShard, Floor: 2, ExpectTail: 5}); wireCode(err) != wire.CodeOffsetMismatch {
		t.Fatalf("no-op trim at a stale tail: %v", err)
	}
	// ...and with the right tail answers it, writing nothing.
	tr, err = cl.Trim(ctx, wire.TrimRequest{Shard: testShard, Floor: 2, ExpectTail: 8})
	if err != nil || tr.Tail != 8 || tr.Floor != 4 {
		t.Fatalf("no-op trim: %+v %v", tr, err)
	}
	// A floor above the trim's own offset is refused once the tail matched.
	if _, err := cl.Trim(ctx, wire.TrimRequest{Shard: testShard, Floor: 20, ExpectTail: 8}); wireCode(err) != wire.CodeBadRequest {
		t.Fatalf("floor above the trim: %v", err)
	}
	d, err := cl.Describe(ctx, testShard)
	if err != nil || d.Tail != 8 || d.Floor != 4 {
		t.Fatalf("describe: %+v %v", d, err)
	}
	// The trim record was shipped and the followers' floors moved too.
	eventually(t, "followers' floors", 5*time.Second, func() bool {
		for _, nm := range []replication.NodeID{"b", "c"} {
			lg, _ := c.nodes[nm].store.Lookup(record.LogID{ShardID: testShard, Log: record.LogData})
			if lg.Describe().Floor != 4 {
				return false
			}
		}
		return true
	})
}

// Reads of a Quorum stream serve only committed records: with both
// followers gone an append is persisted on the leader but never
// acknowledged, and no reader sees it.
func TestRP_QuorumReadsServeOnlyCommitted(t *testing.T) {
	c := newCluster(t, logstore.FsyncPeriodic, "a", "b", "c")
	c.ensure(replication.AckQuorum, "a", "b", "c")
	c.assign(c.firstAssignment("a"))
	a := c.nodes["a"]
	c.waitLeading(a)
	cl := dial(t, a)
	appendN(t, cl, "r", 3) // offsets 1..3
	c.nodes["b"].stop()
	c.nodes["c"].stop()

	ctx, cancel := context.WithTimeout(context.Background(), 300*time.Millisecond)
	_, err := cl.Append(ctx, testShard, []record.Record{{Payload: []byte("unacked")}}, nil)
	cancel()
	if err == nil {
		t.Fatal("an append was acknowledged under Quorum with both followers down")
	}
	lg, _ := a.store.Lookup(record.LogID{ShardID: testShard, Log: record.LogData})
	eventually(t, "the unacknowledged record persisted on the leader", 5*time.Second, func() bool {
		return lg.Describe().Durable == 5
	})
	got := readAll(t, a)
	if len(got) != 3 {
		t.Fatalf("reader saw %d records, want the 3 committed ones: %v", len(got), got)
	}
	if _, ok := got[4]; ok {
		t.Fatal("reader saw the unacknowledged record")
	}
}
