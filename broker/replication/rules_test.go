package replication

import (
	"errors"
	"fmt"
	"testing"

	"felix.dev/felix/broker/record"
)

// started returns a cluster whose first assignment made leader serve,
// with n Quorum records acknowledged.
func started(t *testing.T, names []string, leader NodeID, n int, rules Rules) *cluster {
	t.Helper()
	c := newCluster(t, names, 1, rules)
	c.promote(leader, c.registered())
	c.stabilize()
	if c.leader() != leader {
		t.Fatalf("leader %q not serving:\n%s", leader, c.statusLines())
	}
	for i := 1; i <= n; i++ {
		c.propose(leader, ProposalID(i), AckQuorum, fmt.Sprintf("r%d", i))
		c.stabilize()
		if a := c.acks[ProposalID(i)]; a.Err != nil || a.End == 0 {
			t.Fatalf("proposal %d: %+v", i, a)
		}
	}
	return c
}

// TestRP3_NewIDResetsCursorOnEveryLog: a follower whose connection
// presents a different storage id starts over at the shard's base with
// nothing confirmed, on all four logs; the same id keeps its place; a
// failed lookup leaves the cursor alone.
func TestRP3_NewIDResetsCursorOnEveryLog(t *testing.T) {
	cases := []struct {
		name          string
		event         func(c *cluster)
		wantConfirmed func(tail uint64) uint64
		wantID        StorageID
	}{
		{"same id keeps the cursor", func(c *cluster) {
			c.nextConn++
			c.nodes["a"].r.Connected("b", c.nextConn, "b-sid2")
		}, func(tail uint64) uint64 { return tail }, "b-sid2"},
		{"different id resets to base", func(c *cluster) {
			c.nextConn++
			c.nodes["a"].r.Connected("b", c.nextConn, "b-new")
		}, func(uint64) uint64 { return 0 }, "b-new"},
		{"failed lookup leaves the cursor alone", func(c *cluster) {
			c.nodes["a"].r.LookupFailed("b")
			c.nodes["a"].r.Tick() // a new pass starts an exchange with b
		}, func(tail uint64) uint64 { return tail }, "b-sid2"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			c := started(t, []string{"a", "b", "c"}, "a", 3, Rules{})
			c.tick(1)
			a := c.nodes["a"].r
			tc.event(c)
			p := a.peers["b"]
			if p.cursorID != tc.wantID {
				t.Fatalf("cursor id %q, want %q", p.cursorID, tc.wantID)
			}
			for _, l := range record.LogKinds {
				tail := a.logs[l].tail
				if got, want := p.cursors[l].confirmed, tc.wantConfirmed(tail); got != want {
					t.Errorf("%s: confirmed %d, want %d (tail %d)", l, got, want, tail)
				}
			}
		})
	}
}

// TestRP3_TwinCountsAnEmptyFollower shows the reset is load-bearing: with
// it off, a wiped follower keeps the confirmed position of the copy it lost.
func TestRP3_TwinCountsAnEmptyFollower(t *testing.T) {
	for _, twin := range []bool{false, true} {
		c := started(t, []string{"a", "b", "c"}, "a", 3, Rules{DisableIDReset: twin})
		c.tick(1)
		c.crash("b")
		c.start("b", true)
		c.drop = func(m Message) bool { return m.From == "a" && m.To == "b" && len(m.Records) > 0 }
		c.tick(2)
		rep := c.reports["a"]
		var b FollowerReport
		for _, f := range rep.Followers {
			if f.Node == "b" {
				b = f
			}
		}
		if len(c.nodes["b"].store.logs[record.LogData]) != 0 {
			t.Fatalf("b should still be empty")
		}
		if twin != b.CaughtUp {
			t.Fatalf("twin=%t: report counts empty b as caught up = %t: %+v", twin, b.CaughtUp, b)
		}
	}
}

// TestRP4_IdlePassAsksEveryFollower: on an idle shard every pass sends one
// request per log to every follower, and a follower that does not answer is
// not counted. Its report line says it did not answer; it stays caught up
// only under a storage id, over the connection it answered on (below, and
// TestRP6_SilentFollowersStayCaughtUp).
func TestRP4_IdlePassAsksEveryFollower(t *testing.T) {
	c := started(t, []string{"a", "b", "c"}, "a", 2, Rules{})
	c.tick(1)
	a := c.nodes["a"].r
	a.Tick()
	rd := a.Ready()
	asked := map[NodeID]int{}
	for _, m := range rd.Messages {
		if m.Type == MsgAppend && len(m.Records) == 0 {
			asked[m.To]++
		}
	}
	a.Advance(rd)
	if asked["b"] != numLogs || asked["c"] != numLogs {
		t.Fatalf("idle pass asked %v, want %d per follower", asked, numLogs)
	}
	c.queue = append(c.queue, rd.Messages...)
	c.drop = func(m Message) bool { return m.From == "c" }
	c.stabilize()
	c.tick(1)
	for _, f := range c.reports["a"].Followers {
		if want := f.Node == "b"; f.Answered != want || !f.CaughtUp {
			t.Fatalf("%s: answered=%t caught-up=%t, want answered=%t, caught up", f.Node, f.Answered, f.CaughtUp, want)
		}
	}
}

// TestRP4_SilentFollowerWithoutIDNotCaughtUp: a follower that presents no
// storage id is caught up only in a pass it answered: only asking can show
// that it lost its log [RP-4], and placement takes the pass's start as a
// lower bound of when it answered [CP-1]. A follower with an id that comes
// back over a new connection (a restart, a reconnect) is caught up again
// only once it answers over it.
func TestRP4_SilentFollowerWithoutIDNotCaughtUp(t *testing.T) {
	caughtUp := func(c *cluster, n NodeID) (answered, caughtUp bool) {
		t.Helper()
		for _, f := range c.reports["a"].Followers {
			if f.Node == n {
				return f.Answered, f.CaughtUp
			}
		}
		t.Fatalf("no report line for %s", n)
		return false, false
	}
	t.Run("no id", func(t *testing.T) {
		c := started(t, []string{"a", "b", "c"}, "a", 2, Rules{})
		c.nodes["c"].sid = "" // an older build: its connections present no id
		c.connect("a", "c")
		c.tick(2)
		if ans, up := caughtUp(c, "c"); !ans || !up {
			t.Fatalf("c without an id, answering: answered=%t caught-up=%t", ans, up)
		}
		c.drop = func(m Message) bool { return m.From == "c" }
		c.tick(2) // the first reports the pass before the silence
		if ans, up := caughtUp(c, "c"); ans || up {
			t.Fatalf("silent c without an id: answered=%t caught-up=%t, want neither", ans, up)
		}
	})
	t.Run("new connection", func(t *testing.T) {
		c := started(t, []string{"a", "b", "c"}, "a", 2, Rules{})
		c.tick(1)
		c.drop = func(m Message) bool { return m.From == "c" }
		c.connect("a", "c") // same id, new connection
		c.tick(2)
		if ans, up := caughtUp(c, "c"); ans || up {
			t.Fatalf("c silent over a new connection: answered=%t caught-up=%t, want neither", ans, up)
		}
		c.drop = nil
		c.tick(2)
		if ans, up := caughtUp(c, "c"); !ans || !up {
			t.Fatalf("c answering over its new connection: answered=%t caught-up=%t", ans, up)
		}
	})
}

// TestRP4_TwinEndsUpToDateWithoutAsking: with the rule off an idle pass
// counts a silent follower.
func TestRP4_TwinEndsUpToDateWithoutAsking(t *testing.T) {
	c := started(t, []string{"a", "b", "c"}, "a", 2, Rules{DisableIdleProbe: true})
	c.tick(1)
	c.drop = func(m Message) bool { return m.From == "c" }
	c.tick(2)
	for _, f := range c.reports["a"].Followers {
		if f.Node == "c" && !f.CaughtUp {
			t.Fatalf("twin should report silent c caught up: %+v", f)
		}
	}
}

// TestRP5_QuorumCountsOnlyThisPassAnswers: five replicas; b answers
// holding a record in one pass, then its lookup fails; in the next pass
// only c answers. a + c are two of five: nothing commits. The twin that
// counts b's stale answer commits.
func TestRP5_QuorumCountsOnlyThisPassAnswers(t *testing.T) {
	for _, twin := range []bool{false, true} {
		t.Run(fmt.Sprintf("twin=%t", twin), func(t *testing.T) {
			c := started(t, []string{"a", "b", "c", "d", "e"}, "a", 1, Rules{DisablePassCounting: twin})
			c.tick(1)
			cut := map[NodeID]bool{"c": true, "d": true, "e": true}
			c.drop = func(m Message) bool { return cut[m.From] || cut[m.To] }
			c.propose("a", 10, AckQuorum, "x")
			c.stabilize()
			a := c.nodes["a"].r
			if a.peers["b"].cursors[record.LogData].confirmed != a.logs[record.LogData].tail {
				t.Fatalf("b should hold the record")
			}
			a.LookupFailed("b")
			cut = map[NodeID]bool{"b": true, "d": true, "e": true}
			c.tick(1)
			_, acked := c.acks[10]
			if acked != twin {
				t.Fatalf("acknowledged=%t with a and c answering this pass (twin=%t)", acked, twin)
			}
			// b comes back (same id) and answers: now three of five.
			c.nextConn++
			c.conns[[2]NodeID{"a", "b"}] = c.nextConn
			a.Connected("b", c.nextConn, c.nodes["b"].sid)
			cut = map[NodeID]bool{"d": true, "e": true}
			c.stabilize()
			if ack, ok := c.acks[10]; !ok || ack.Err != nil {
				t.Fatalf("not acknowledged with a, b, c answering: %+v", ack)
			}
		})
	}
}

// TestRP5_CommittedNeverMovesBack: marks only rise, through passes where
// nobody answers.
func TestRP5_CommittedNeverMovesBack(t *testing.T) {
	c := started(t, []string{"a", "b", "c"}, "a", 3, Rules{})
	a := c.nodes["a"].r
	before := a.Status().Committed
	c.drop = func(m Message) bool { return true }
	c.tick(3)
	after := a.Status().Committed
	for l := range before {
		if after[l] < before[l] {
			t.Fatalf("%s committed moved back %d -> %d", record.LogKind(l), before[l], after[l])
		}
	}
}

// TestAckModes: Leader acknowledges on the leader's disk, Quorum on a
// majority, All on every replica.
func TestAckModes(t *testing.T) {
	cases := []struct {
		mode      AckMode
		cut       []NodeID
		wantAcked bool
	}{
		{AckLeader, []NodeID{"b", "c"}, true},
		{AckQuorum, []NodeID{"c"}, true},
		{AckQuorum, []NodeID{"b", "c"}, false},
		{AckAll, nil, true},
		{AckAll, []NodeID{"c"}, false},
	}
	for _, tc := range cases {
		t.Run(fmt.Sprintf("%s-cut%v", tc.mode, tc.cut), func(t *testing.T) {
			c := started(t, []string{"a", "b", "c"}, "a", 0, Rules{})
			cut := map[NodeID]bool{}
			for _, n := range tc.cut {
				cut[n] = true
			}
			c.drop = func(m Message) bool { return cut[m.From] || cut[m.To] }
			c.propose("a", 7, tc.mode, "x")
			c.tick(2)
			ack, ok := c.acks[7]
			if ok != tc.wantAcked || (ok && ack.Err != nil) {
				t.Fatalf("acked=%t %+v, want %t", ok, ack, tc.wantAcked)
			}
		})
	}
}

// TestProposeRefusals: non-leaders refuse with ErrNotLeader naming the
// leader; a tail-conditional batch refuses with the current tail [TR-1].
func TestProposeRefusals(t *testing.T) {
	c := started(t, []string{"a", "b", "c"}, "a", 2, Rules{})
	c.nodes["b"].r.Propose(Proposal{ID: 1, Log: record.LogData, Records: []record.Record{{}}, Mode: AckQuorum})
	c.nodes["a"].r.Propose(Proposal{ID: 2, Log: record.LogData, Records: []record.Record{{}}, Mode: AckQuorum,
		ExpectTail: true, ExpectedTail: 1})
	c.stabilize()
	var nl *NotLeaderError
	if err := c.acks[1].Err; !errors.As(err, &nl) || nl.Leader != "a" || !errors.Is(err, ErrNotLeader) {
		t.Fatalf("follower proposal: %v", err)
	}
	var om *record.OffsetMismatchError
	if err := c.acks[2].Err; !errors.As(err, &om) || om.Tail != 3 {
		t.Fatalf("conditional proposal: %v", err)
	}
}

// TestRP6_ReportSameAsIgnoresPass: consecutive idle passes give reports
// that differ only in their pass; a follower's change shows.
func TestRP6_ReportSameAsIgnoresPass(t *testing.T) {
	c := started(t, []string{"a", "b", "c"}, "a", 2, Rules{})
	c.tick(1)
	r1 := c.reports["a"]
	c.tick(1)
	r2 := c.reports["a"]
	if r1 == r2 || r1.Pass == r2.Pass || !r1.SameAs(r2) {
		t.Fatalf("idle reports should be the same apart from the pass: %+v %+v", r1, r2)
	}
	c.drop = func(m Message) bool { return m.From == "c" }
	c.tick(2)
	if r3 := c.reports["a"]; r3.SameAs(r2) {
		t.Fatalf("report should change when c stops answering: %s", renderReport(r3))
	}
}
