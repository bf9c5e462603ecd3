package replica

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"os"
	"testing"
	"time"

	"felix.dev/felix/broker/logstore"
	"felix.dev/felix/broker/placement"
	"felix.dev/felix/broker/record"
	"felix.dev/felix/broker/replication"
	"felix.dev/felix/broker/wire"
)

// appendN appends n single-record batches through cl and returns the
// acknowledged offsets' payloads.
func appendN(t *testing.T, cl interface {
	Append(context.Context, record.ShardID, []record.Record, *uint64) (wire.AppendOK, error)
}, prefix string, n int) map[uint64][]byte {
	t.Helper()
	acked := map[uint64][]byte{}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	for i := 0; i < n; i++ {
		p := []byte(fmt.Sprintf("%s-%d", prefix, i))
		ok, err := cl.Append(ctx, testShard, []record.Record{{Payload: p}}, nil)
		if err != nil {
			t.Fatalf("append %d: %v", i, err)
		}
		acked[ok.First] = p
	}
	return acked
}

// placementInput turns the last report of the dead leader into
// placement's input, as the control plane would.
func placementInput(c *cluster, rep replication.Report, cur replication.Assignment, down replication.NodeID, now time.Time) placement.Input {
	in := placement.Input{
		Brokers: map[string]placement.Broker{}, Now: now,
		NodeExpiry: 10 * time.Second, Heartbeat: time.Second,
		Assignment: &placement.Assignment{Leader: string(cur.Leader), Epoch: cur.Epoch, LeaderIncarnation: cur.LeaderIncarnation,
			Counted: map[string]string{}},
		Report: &placement.Report{Leader: string(rep.Leader), LeaderIncarnation: rep.LeaderIncarnation,
			LeaderStorageID: string(rep.LeaderStorageID), Epoch: rep.Epoch, TakenAt: now.Add(-time.Second),
			Position: rep.Position[record.LogData]},
	}
	for _, r := range c.replicas() {
		in.Replicas = append(in.Replicas, string(r))
		n := c.nodes[r]
		b := placement.Broker{StorageID: n.id.String(), Incarnation: n.incarnation, State: placement.Up,
			LastHeartbeat: now, RegisteredAt: now.Add(-time.Hour)}
		if r == down {
			b.State = placement.Down
			b.LastHeartbeat = now.Add(-time.Second)
		}
		in.Brokers[string(r)] = b
	}
	for k, v := range cur.Counted {
		in.Assignment.Counted[string(k)] = string(v)
	}
	for _, f := range rep.Followers {
		in.Report.Followers = append(in.Report.Followers, placement.FollowerReport{Broker: string(f.Node),
			StorageID: string(f.StorageID), CaughtUp: f.CaughtUp, Confirmed: f.Confirmed[record.LogData]})
	}
	return in
}

// Every record acknowledged under Quorum by a leader that then stops is
// readable from the leader placement promotes next, which fences first.
func TestRP_QuorumFailoverKeepsAcknowledgedRecords(t *testing.T) {
	c := newCluster(t, logstore.FsyncPeriodic, "a", "b", "c")
	c.ensure(replication.AckQuorum, "a", "b", "c")
	first := c.firstAssignment("a")
	c.assign(first)
	c.waitLeading(c.nodes["a"])

	cl := dial(t, c.nodes["a"])
	acked := appendN(t, cl, "r", 300)

	// Followers refuse clients with a hint naming the leader.
	_, err := dial(t, c.nodes["b"]).Append(context.Background(), testShard, []record.Record{{Payload: []byte("x")}}, nil)
	var we *wire.Error
	if !errors.As(err, &we) || we.Code != wire.CodeNotLeader || we.Leader != c.nodes["a"].addr {
		t.Fatalf("append to a follower: %v, want NotLeader naming %s", err, c.nodes["a"].addr)
	}

	// Wait for a report that counts both followers caught up at the
	// acknowledged tail, as the control plane would before a failover.
	var rep replication.Report
	eventually(t, "a report with both followers caught up", 10*time.Second, func() bool {
		r, ok := c.nodes["a"].lastReport()
		if !ok || r.Position[record.LogData] < 301 {
			return false
		}
		for _, f := range r.Followers {
			if !f.CaughtUp {
				return false
			}
		}
		rep = r
		return true
	})

	c.nodes["a"].stop()
	d := placement.Decide(placementInput(c, rep, first, "a", time.Now()))
	if d.Action != placement.Promote || d.Leader == "a" {
		t.Fatalf("placement: %+v", d)
	}
	next := replication.Assignment{Leader: replication.NodeID(d.Leader), Epoch: d.Epoch, LeaderIncarnation: d.LeaderIncarnation,
		Counted: map[replication.NodeID]replication.StorageID{}}
	for k, v := range d.Counted {
		next.Counted[replication.NodeID(k)] = replication.StorageID(v)
	}
	c.assign(next)
	leader := c.nodes[next.Leader]
	c.waitLeading(leader)

	got := readAll(t, leader)
	for off, p := range acked {
		if !bytes.Equal(got[off], p) {
			t.Fatalf("acknowledged record %d: %q on the new leader, want %q", off, got[off], p)
		}
	}
	// The new leader fenced at its epoch before serving.
	raw := readAllRaw(t, leader, record.LogData)
	var fence *record.Record
	for i := range raw {
		if raw[i].Kind == record.KindFence && raw[i].Epoch == next.Epoch {
			fence = &raw[i]
		}
	}
	if fence == nil || fence.Offset < 301 {
		t.Fatalf("no fence at epoch %d after the acknowledged records: %+v", next.Epoch, fence)
	}
	// And serves new appends.
	more := appendN(t, dial(t, leader), "s", 10)
	for off := range more {
		if off <= fence.Offset {
			t.Fatalf("append after failover at %d, not after the fence at %d", off, fence.Offset)
		}
	}
}

// readAll reads every committed data record of the test shard from n
// through a client.
func readAll(t *testing.T, n *node) map[uint64][]byte {
	t.Helper()
	cl := dial(t, n)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	out := map[uint64][]byte{}
	next := uint64(0)
	for {
		res, err := cl.Read(ctx, wire.ReadRequest{Shard: testShard, Offset: next, MaxRecords: 1000})
		if err != nil {
			t.Fatalf("read from %d: %v", next, err)
		}
		for _, r := range res.Records {
			out[r.Offset] = r.Payload
		}
		if res.Next == next {
			return out
		}
		next = res.Next
	}
}

// [RP-3] A follower that comes back with a wiped directory (new storage
// id) is reset on all four logs and copied again from the shard's base;
// the leader's report names the new id only once it has answered.
func TestRP3_WipedFollowerIsResetOnEveryLogAndCopied(t *testing.T) {
	c := newCluster(t, logstore.FsyncPeriodic, "a", "b", "c")
	c.ensure(replication.AckQuorum, "a", "b", "c")
	c.assign(c.firstAssignment("a"))
	a := c.nodes["a"]
	c.waitLeading(a)
	appendN(t, dial(t, a), "r", 100)

	old := c.nodes["c"]
	oldID := replication.StorageID(old.id.String())
	old.stop()
	if err := os.RemoveAll(old.dir); err != nil {
		t.Fatal(err)
	}
	fresh := c.start("c", t.TempDir(), old.incarnation+1)
	newID := replication.StorageID(fresh.id.String())
	if newID == oldID {
		t.Fatal("test bug: the wiped follower kept its id")
	}
	c.ensure(replication.AckQuorum, "c")
	if err := fresh.mgr.SetKnownEpoch(testShard, 1); err != nil {
		t.Fatal(err)
	}

	eventually(t, "the wiped follower copied again", 10*time.Second, func() bool {
		for _, l := range record.LogKinds {
			want := readAllRaw(t, a, l)
			lg, ok := fresh.store.Lookup(record.LogID{ShardID: testShard, Log: l})
			if !ok || lg.Describe().Tail != uint64(len(want)) {
				return false
			}
		}
		r, ok := a.lastReport()
		if !ok {
			return false
		}
		for _, f := range r.Followers {
			if f.Node == "c" {
				return f.StorageID == newID && f.CaughtUp
			}
		}
		return false
	})
	for _, l := range record.LogKinds {
		want, got := readAllRaw(t, a, l), readAllRaw(t, fresh, l)
		if len(want) != len(got) {
			t.Fatalf("%s log: %d records copied, want %d", l, len(got), len(want))
		}
		for i := range want {
			if want[i].Offset != got[i].Offset || want[i].Epoch != got[i].Epoch || want[i].Kind != got[i].Kind ||
				!bytes.Equal(want[i].Payload, got[i].Payload) {
				t.Fatalf("%s log record %d: %+v, want %+v", l, i, got[i], want[i])
			}
		}
	}
}

// [RP-4] On an idle shard every pass still asks each follower where it is:
// a follower that stops answering stops being reported caught up, and is
// reported caught up again once it is back, with no append in between.
func TestRP4_IdleShardPassesAskTheFollower(t *testing.T) {
	c := newCluster(t, logstore.FsyncPeriodic, "a", "b", "c")
	c.ensure(replication.AckQuorum, "a", "b", "c")
	first := c.firstAssignment("a")
	c.assign(first)
	a := c.nodes["a"]
	c.waitLeading(a)
	appendN(t, dial(t, a), "r", 5)

	caughtUp := func(n replication.NodeID) func() bool {
		return func() bool {
			r, ok := a.lastReport()
			if !ok {
				return false
			}
			for _, f := range r.Followers {
				if f.Node == n {
					return f.CaughtUp
				}
			}
			return false
		}
	}
	eventually(t, "b caught up", 10*time.Second, caughtUp("b"))
	b := c.nodes["b"]
	dir, inc := b.dir, b.incarnation
	oldConn, _, _ := a.mgr.pool.Current("b")
	b.stop()
	eventually(t, "b no longer caught up on an idle shard", 10*time.Second, func() bool { return !caughtUp("b")() })

	// Back with the same directory (a clean restart keeps the id). Until
	// the control plane tells it the current epoch it answers no shipping,
	// so it is not counted, however many passes go by.
	id := b.id
	nb := c.startWithID("b", dir, inc+1, id)
	c.ensure(replication.AckQuorum, "b")
	eventually(t, "the leader connected to the restarted follower", 10*time.Second, func() bool {
		conn, _, ok := a.mgr.pool.Current("b")
		return ok && conn != oldConn
	})
	r0, _ := a.lastReport()
	eventually(t, "five more passes", 10*time.Second, func() bool {
		r, _ := a.lastReport()
		return r.Pass >= r0.Pass+5
	})
	if caughtUp("b")() {
		t.Fatal("a restarted follower was counted before it learned the current epoch")
	}
	if err := nb.mgr.SetKnownEpoch(testShard, first.Epoch); err != nil {
		t.Fatal(err)
	}
	eventually(t, "b caught up again without appends", 10*time.Second, caughtUp("b"))
}
