package replica

import (
	"context"
	"testing"
	"time"

	"felix.dev/felix/broker/logstore"
	"felix.dev/felix/broker/record"
	"felix.dev/felix/broker/replication"
	"felix.dev/felix/broker/wire"
)

// [TR-2] Under ack Leader a data batch is acknowledged once the leader
// persisted it, but a trim only once it is committed, when its floor has
// moved: a reader asking below an acknowledged trim's floor is refused
// with the trim's tag, never served. With both followers down the trim is
// persisted on the leader but not acknowledged (and readers still see the
// records below it: nobody was told they are gone); once a follower is
// back it commits, is acknowledged, and the read right after is refused.
func TestTR2_LeaderModeTrimAcknowledgedOnlyOnceItsFloorMoved(t *testing.T) {
	c := newCluster(t, logstore.FsyncPeriodic, "a", "b", "c")
	c.ensure(replication.AckLeader, "a", "b", "c")
	c.assign(c.firstAssignment("a"))
	a := c.nodes["a"]
	c.waitLeading(a)
	cl := dial(t, a)
	appendN(t, cl, "r", 3) // 0 fence, 1..3 data
	bDir := c.nodes["b"].dir
	c.nodes["b"].stop()
	c.nodes["c"].stop()

	tag := []record.Header{{Key: "epoch", Value: []byte("7")}}
	ctx, cancel := context.WithTimeout(context.Background(), 500*time.Millisecond)
	_, err := cl.Trim(ctx, wire.TrimRequest{Shard: testShard, Floor: 3, ExpectTail: 4, Headers: tag})
	cancel()
	if err == nil {
		// Acknowledged: no reader may be served below its floor now.
		res, rerr := cl.Read(context.Background(), wire.ReadRequest{Shard: testShard, Offset: 1})
		t.Fatalf("Leader-mode trim acknowledged with both followers down; a read from 1 then got %d records (%v)",
			len(res.Records), rerr)
	}
	lg := dataLogOf(t, a)
	eventually(t, "the trim persisted on the leader", 5*time.Second, func() bool { return lg.Describe().Durable == 5 })

	c.start("b", bDir, 2)
	c.ensure(replication.AckLeader, "b")
	st, err := a.mgr.Status(testShard)
	if err != nil {
		t.Fatal(err)
	}
	if err := c.nodes["b"].mgr.SetKnownEpoch(testShard, st.Epoch); err != nil {
		t.Fatal(err)
	}
	// A trim at the same floor again: the first one is not committed, so
	// this one is a record too; its acknowledgement needs b.
	ctx, cancel = context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	tr, err := cl.Trim(ctx, wire.TrimRequest{Shard: testShard, Floor: 3, ExpectTail: 5, Headers: tag})
	if err != nil || tr.Floor != 3 {
		t.Fatalf("trim with a follower back: %+v %v", tr, err)
	}
	_, err = cl.Read(ctx, wire.ReadRequest{Shard: testShard, Offset: 1})
	if wireCode(err) != wire.CodeCursorTooOld {
		t.Fatalf("read below an acknowledged trim's floor: %v, want CursorTooOld", err)
	}
}

// [TR-4] A newly promoted leader refuses reads (Unavailable, retryable)
// from the moment its fence is written until the fence is committed and
// that commit applied to its logs: until then its floor is the one it knew
// as a follower, which may lag a trim the previous leader committed and
// acknowledged. The shard is driven by hand: b answers the probe, so a
// writes its fence, but b never answers the fence's appends.
func TestTR4_NewLeaderRefusesReadsUntilItsFenceCommits(t *testing.T) {
	st, err := logstore.Open(logstore.Options{Dir: t.TempDir(), Fsync: logstore.FsyncPeriodic})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = st.Close() })
	m, err := NewManager(Options{Store: st, Self: "a", SelfStorageID: [16]byte{1}, Incarnation: 1,
		PassInterval: time.Hour, // no pass: the test feeds every answer
		Resolve:      func(replication.NodeID) (string, error) { return "127.0.0.1:1", nil }})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(m.Close)
	if err := m.EnsureShard(testShard, []replication.NodeID{"a", "b", "c"}, replication.AckQuorum, 0); err != nil {
		t.Fatal(err)
	}
	s, err := m.shard(testShard)
	if err != nil {
		t.Fatal(err)
	}
	const conn = replication.ConnID(1 << 40) // a connection of the test's own
	s.post(event{kind: evConnected, node: "b", conn: conn, sid: "b-id"})
	_, selfID := m.o.selfIDs()
	if err := m.SetAssignment(testShard, replication.Assignment{Leader: "a", Epoch: 1, LeaderIncarnation: 1,
		Counted: map[replication.NodeID]replication.StorageID{"a": selfID, "b": "b-id"}}); err != nil {
		t.Fatal(err)
	}
	status := func() replication.Status {
		st, err := m.Status(testShard)
		if err != nil {
			t.Fatal(err)
		}
		return st
	}
	eventually(t, "a recovering", 5*time.Second, func() bool { return status().Role == replication.RoleRecovering })
	s.post(event{kind: evStep, msg: replication.Message{Type: replication.MsgProbeResp, From: "b", To: "a",
		Conn: conn, Epoch: 1, Pass: status().Pass}})
	eventually(t, "a's fence written", 5*time.Second, func() bool {
		st := status()
		return st.Role == replication.RoleLeader && st.Persisted[record.LogData] == 1
	})
	if status().FenceCommitted {
		t.Fatal("the fence committed without b's answer")
	}
	read := func() error {
		l, err := m.Shards().DataLog(testShard)
		if err != nil {
			return err
		}
		_, err = l.Read(logstore.FromEarliest, logstore.ReadOptions{})
		return err
	}
	if err := read(); wireCode(err) != wire.CodeUnavailable {
		t.Fatalf("read at a leader whose fence is not committed: %v, want Unavailable", err)
	}
	// b answers the fence on every log: the fence commits, reads are served.
	pass := status().Pass
	for _, l := range record.LogKinds {
		s.post(event{kind: evStep, msg: replication.Message{Type: replication.MsgAppendResp, From: "b", To: "a",
			Conn: conn, Epoch: 1, Pass: pass, Log: l, Match: true, MatchEnd: 1}})
	}
	eventually(t, "a's fence committed", 5*time.Second, func() bool { return status().FenceCommitted })
	eventually(t, "reads served", 5*time.Second, func() bool { return read() == nil })
}
