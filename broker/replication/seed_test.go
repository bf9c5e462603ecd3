package replication

import (
	"fmt"
	"testing"
	"time"

	"felix.dev/felix/broker/placement"
	"felix.dev/felix/broker/record"
)

// controlPlane is the test's stand-in for the operator: a registry with
// heartbeats, the latest report, and placement.Decide.
type controlPlane struct {
	c          *cluster
	now        time.Time
	registered map[NodeID]time.Time
	heartbeat  map[NodeID]time.Time
	down       map[NodeID]bool
	report     *placement.Report
}

var dbgDecisions bool

const (
	cpNodeExpiry = 3 * time.Second
	cpHeartbeat  = time.Second
)

func newControlPlane(c *cluster) *controlPlane {
	cp := &controlPlane{c: c, now: time.Unix(1_000_000, 0), registered: map[NodeID]time.Time{},
		heartbeat: map[NodeID]time.Time{}, down: map[NodeID]bool{}}
	for _, n := range c.order {
		cp.registered[n] = cp.now
		cp.heartbeat[n] = cp.now
	}
	return cp
}

// step advances the clock one heartbeat, renews live brokers' heartbeats,
// marks expired ones Down and takes in the leader's latest report.
func (cp *controlPlane) step() {
	cp.now = cp.now.Add(cpHeartbeat)
	for _, n := range cp.c.order {
		if cp.c.nodes[n].up {
			cp.heartbeat[n] = cp.now
			cp.down[n] = false
		} else if cp.now.Sub(cp.heartbeat[n]) > cpNodeExpiry {
			cp.down[n] = true
		}
	}
	if l := cp.c.assign.Leader; l != "" && cp.c.nodes[l].up {
		if rep := cp.c.reports[l]; rep != nil && rep.Epoch == cp.c.epoch {
			cp.report = toPlacementReport(rep, cp.now)
			cp.c.reports[l] = nil
		}
	}
}

// restarted records a new registration.
func (cp *controlPlane) restarted(n NodeID) {
	cp.registered[n] = cp.now
	cp.heartbeat[n] = cp.now
	cp.down[n] = false
}

func toPlacementReport(r *Report, at time.Time) *placement.Report {
	p := &placement.Report{Leader: string(r.Leader), LeaderIncarnation: r.LeaderIncarnation,
		LeaderStorageID: string(r.LeaderStorageID), Epoch: r.Epoch, TakenAt: at,
		Position: r.Position[record.LogData]}
	for _, f := range r.Followers {
		p.Followers = append(p.Followers, placement.FollowerReport{Broker: string(f.Node),
			StorageID: string(f.StorageID), CaughtUp: f.CaughtUp, Confirmed: f.Confirmed[record.LogData]})
	}
	return p
}

func (cp *controlPlane) input() placement.Input {
	in := placement.Input{Now: cp.now, NodeExpiry: cpNodeExpiry, Heartbeat: cpHeartbeat, Report: cp.report,
		Brokers: map[string]placement.Broker{}}
	for _, n := range cp.c.order {
		nd := cp.c.nodes[n]
		st := placement.Up
		if cp.down[n] {
			st = placement.Down
		}
		in.Replicas = append(in.Replicas, string(n))
		in.Brokers[string(n)] = placement.Broker{StorageID: string(nd.sid), Incarnation: nd.inc,
			RegisteredAt: cp.registered[n], State: st, LastHeartbeat: cp.heartbeat[n]}
	}
	if a := cp.c.assign; a.Epoch > 0 {
		in.Assignment = &placement.Assignment{Leader: string(a.Leader), Epoch: a.Epoch, LeaderIncarnation: a.LeaderIncarnation,
			Counted: map[string]string{}}
		for n, id := range a.Counted {
			in.Assignment.Counted[string(n)] = string(id)
		}
	}
	return in
}

// decide runs placement and applies a promotion.
func (cp *controlPlane) decide() placement.Decision {
	d := placement.Decide(cp.input())
	if dbgDecisions && d.Action != placement.Keep {
		in := cp.input()
		cp.c.t.Logf("decide: %+v\n  report %+v\n  brokers %+v", d, in.Report, in.Brokers)
	}
	if d.Action == placement.Promote {
		counted := map[NodeID]StorageID{}
		for n, id := range d.Counted {
			counted[NodeID(n)] = StorageID(id)
		}
		cp.c.setAssign(Assignment{Leader: NodeID(d.Leader), Epoch: d.Epoch, LeaderIncarnation: d.LeaderIncarnation, Counted: counted})
	}
	return d
}

// run ticks the cluster and the control plane together.
func (cp *controlPlane) run(ticks int) {
	for i := 0; i < ticks; i++ {
		cp.c.tick(1)
		cp.step()
	}
}

// seedStory builds the state of the seed "The follower that forgot": five
// replicas, Quorum, every acknowledged record on A, B and C only (D and E
// cut off from A while it was written), then an idle shard; C is wiped and
// comes back empty under a new storage id. cutC keeps A's shipping from
// reaching the new C, so C stays empty.
func seedStory(t *testing.T, rules Rules) (*cluster, *controlPlane, []ProposalID) {
	t.Helper()
	c := newCluster(t, []string{"a", "b", "c", "d", "e"}, 1, rules)
	cp := newControlPlane(c)
	if d := cp.decide(); d.Action != placement.Promote || d.Leader != "a" || d.Epoch != 1 {
		t.Fatalf("first assignment: %+v", d)
	}
	c.stabilize()
	cut := map[[2]NodeID]bool{{"a", "d"}: true, {"a", "e"}: true}
	c.drop = func(m Message) bool { return cut[[2]NodeID{m.From, m.To}] }
	var acked []ProposalID
	for i := 1; i <= 5; i++ {
		id := ProposalID(i)
		c.propose("a", id, AckQuorum, fmt.Sprintf("r%d", i))
		c.stabilize()
		if a, ok := c.acks[id]; !ok || a.Err != nil {
			t.Fatalf("proposal %d not acknowledged: %+v", i, a)
		}
		acked = append(acked, id)
	}
	cp.run(3) // idle passes; reports say b and c are caught up, d and e not
	if cp.report == nil {
		t.Fatal("no report")
	}
	for _, f := range cp.report.Followers {
		want := f.Broker == "b" || f.Broker == "c"
		if f.CaughtUp != want {
			t.Fatalf("before the wipe: %s caught up = %t", f.Broker, f.CaughtUp)
		}
	}
	c.crash("c")
	c.start("c", true) // wiped: empty directory, new storage id
	cp.restarted("c")
	cut[[2]NodeID{"a", "c"}] = true
	return c, cp, acked
}

// assertNoLoss checks that every acknowledged record is in the leader's
// data log, committed.
func assertNoLoss(t *testing.T, c *cluster, leader NodeID, n int) {
	t.Helper()
	nd := c.nodes[leader]
	st := nd.r.Status()
	var got []string
	for _, r := range nd.store.logs[record.LogData] {
		if r.Kind == record.KindData && r.Offset < st.Committed[record.LogData] {
			got = append(got, string(r.Payload))
		}
	}
	for i := 1; i <= n; i++ {
		want := fmt.Sprintf("r%d", i)
		found := false
		for _, g := range got {
			if g == want {
				found = true
			}
		}
		if !found {
			t.Fatalf("acknowledged record %s lost: leader %s holds committed %v (log %s)", want, leader, got,
				nd.store.render(record.LogData))
		}
	}
}

// TestRP6_SeedStory_WipedFollowerNeverPromoted is the seed's story (issue 6
// item 6): C wiped and back empty, A dies: C is never promoted, B is, and no
// acknowledged record is lost.
func TestRP6_SeedStory_WipedFollowerNeverPromoted(t *testing.T) {
	for _, reportAfterWipe := range []bool{false, true} {
		t.Run(fmt.Sprintf("reportAfterWipe=%t", reportAfterWipe), func(t *testing.T) {
			c, cp, acked := seedStory(t, Rules{})
			if reportAfterWipe {
				// A looks at C's new connection, resets its cursor [RP-3]
				// and reports C under the new id, not caught up.
				cp.run(2)
				for _, f := range cp.report.Followers {
					if f.Broker == "c" && (f.CaughtUp || f.StorageID != string(c.nodes["c"].sid)) {
						t.Fatalf("report after the wipe: %+v", f)
					}
				}
			}
			c.crash("a")
			c.drop = nil
			for i := 0; i < 10 && cp.c.assign.Leader == "a"; i++ {
				cp.run(1)
				d := cp.decide()
				if d.Action == placement.Promote && d.Leader == "c" {
					t.Fatalf("wiped C promoted: %+v", d)
				}
			}
			if c.assign.Leader != "b" || c.assign.Epoch != 2 {
				t.Fatalf("assignment %+v, want b at epoch 2", c.assign)
			}
			if _, ok := c.assign.Counted["c"]; ok && !reportAfterWipe {
				t.Fatalf("C counted under its lost copy: %+v", c.assign.Counted)
			}
			cp.run(3)
			if got := c.leader(); got != "b" {
				t.Fatalf("serving leader %q, want b\n%s", got, c.statusLines())
			}
			assertNoLoss(t, c, "b", len(acked))
			// The new leader serves, and C is copied again.
			c.propose("b", 100, AckQuorum, "after")
			c.stabilize()
			if a := c.acks[100]; a.Err != nil {
				t.Fatalf("new leader refused: %v", a.Err)
			}
			cp.run(2)
			if got, want := c.nodes["c"].store.render(record.LogData), c.nodes["b"].store.render(record.LogData); got != want {
				t.Fatalf("c not caught up:\n c: %s\n b: %s", got, want)
			}
		})
	}
}

// TestRP6_SeedStory_WaitsWithBDown: with B also down, no replica may lead
// and the shard waits with a reason [CP-3].
func TestRP6_SeedStory_WaitsWithBDown(t *testing.T) {
	c, cp, _ := seedStory(t, Rules{})
	c.crash("a")
	c.crash("b")
	for i := 0; i < 20; i++ {
		cp.run(1)
		d := cp.decide()
		if d.Action == placement.Promote {
			t.Fatalf("promoted %s with A and B down: %+v", d.Leader, d)
		}
		if d.Action == placement.Wait && d.Reason == placement.ReasonNoEligibleFollower {
			return
		}
	}
	t.Fatalf("shard did not wait visibly: %+v", cp.decide())
}

// TestRP6_SilentFollowersStayCaughtUp is the nemesis-h stall of 2 December
// (docs/testing.md): both followers hold everything committed and keep
// their connections, but their answers stop arriving within the leader's
// passes (their disks or the machine stall) for several passes; the
// leader dies then. Its last report must still call them caught up under
// their ids, or placement has no follower to promote and the shard waits
// for ever [CP-3]. Nothing is counted meanwhile [RP-5]: the record
// proposed during the silence is not acknowledged. One follower is
// promoted and no acknowledged record is lost.
func TestRP6_SilentFollowersStayCaughtUp(t *testing.T) {
	c := newCluster(t, []string{"a", "b", "c"}, 1, Rules{})
	cp := newControlPlane(c)
	if d := cp.decide(); d.Action != placement.Promote || d.Leader != "a" {
		t.Fatalf("first assignment: %+v", d)
	}
	c.stabilize()
	for i := 1; i <= 5; i++ {
		c.propose("a", ProposalID(i), AckQuorum, fmt.Sprintf("r%d", i))
		c.stabilize()
		if a, ok := c.acks[ProposalID(i)]; !ok || a.Err != nil {
			t.Fatalf("proposal %d not acknowledged: %+v", i, a)
		}
	}
	cp.run(2)
	for _, f := range cp.report.Followers {
		if !f.CaughtUp {
			t.Fatalf("before the silence: %+v", f)
		}
	}
	c.drop = func(m Message) bool { return m.From == "b" || m.From == "c" }
	c.propose("a", 6, AckQuorum, "r6")
	c.tick(1) // reports the pass before the silence
	cp.step()
	for i := 0; i < 5; i++ {
		c.tick(1)
		rep := c.reports["a"]
		for _, f := range rep.Followers {
			if f.Answered || f.Confirmed[record.LogData] < rep.Position[record.LogData] {
				t.Fatalf("pass %d of the silence: %s answered=%t confirmed=%d position=%d",
					rep.Pass, f.Node, f.Answered, f.Confirmed[record.LogData], rep.Position[record.LogData])
			}
		}
		cp.step()
	}
	if a, ok := c.acks[6]; ok && a.Err == nil {
		t.Fatalf("r6 acknowledged with no follower answering: %+v", a)
	}
	for _, f := range cp.report.Followers {
		if !f.CaughtUp {
			t.Errorf("the leader's last report before it died: %+v (a follower that only stopped answering is reported behind)", f)
		}
	}
	c.crash("a")
	c.drop = nil
	for i := 0; i < 10 && c.assign.Leader == "a"; i++ {
		cp.run(1)
		if d := cp.decide(); d.Action == placement.Wait && cp.down["a"] {
			t.Fatalf("the shard waits after its leader died: %+v", d)
		}
	}
	if c.assign.Leader == "a" || c.assign.Epoch != 2 {
		t.Fatalf("assignment %+v, want b or c at epoch 2", c.assign)
	}
	cp.run(3)
	if got := c.leader(); got != c.assign.Leader {
		t.Fatalf("serving leader %q, want %s\n%s", got, c.assign.Leader, c.statusLines())
	}
	assertNoLoss(t, c, c.assign.Leader, 5)
}

// A follower silent for longer than CaughtUpGracePasses over a connection
// that stays open (a partition, a frozen process) is reported behind, as
// [RP-4] wants of a follower that does not answer, while the other, still
// answering, stays caught up.
func TestRP6_LongSilenceReportedBehind(t *testing.T) {
	c := newCluster(t, []string{"a", "b", "c"}, 1, Rules{})
	cp := newControlPlane(c)
	if d := cp.decide(); d.Action != placement.Promote || d.Leader != "a" {
		t.Fatalf("first assignment: %+v", d)
	}
	c.stabilize()
	c.propose("a", 1, AckQuorum, "r1")
	c.stabilize()
	cp.run(2)
	c.drop = func(m Message) bool { return m.From == "b" }
	caughtUp := func() map[NodeID]bool {
		out := map[NodeID]bool{}
		for _, f := range c.reports["a"].Followers {
			out[f.Node] = f.CaughtUp
		}
		return out
	}
	for i := 1; i <= CaughtUpGracePasses; i++ {
		c.tick(1)
		if got := caughtUp(); !got["b"] || !got["c"] {
			t.Fatalf("pass %d of b's silence, within the grace: caught up %v", i, got)
		}
	}
	for i := 0; i < 3; i++ {
		c.tick(1)
	}
	if got := caughtUp(); got["b"] || !got["c"] {
		t.Fatalf("after %d passes of b's silence: caught up %v, want b behind and c caught up", CaughtUpGracePasses+3, got)
	}
}
