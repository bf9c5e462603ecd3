package replication

import (
	"errors"
	"fmt"
	"testing"

	"felix.dev/felix/broker/record"
)

// TestFence_ChangedIDCannotStandIn: records acknowledged by {a, c}; c is
// wiped (new id) and a dies. b is promoted with the ids placement counted
// before the wipe. b's recovery may not count c's new copy, so it waits
// instead of fencing over c's empty log; when a returns with its id, b
// copies a's log and nothing is lost. The twin without the check fences
// with the empty c and loses the records.
func TestFence_ChangedIDCannotStandIn(t *testing.T) {
	for _, twin := range []bool{false, true} {
		t.Run(fmt.Sprintf("twin=%t", twin), func(t *testing.T) {
			c := started(t, []string{"a", "b", "c"}, "a", 0, Rules{DisableFenceIDCheck: twin})
			counted := c.registered()
			c.drop = func(m Message) bool { return m.To == "b" || m.From == "b" }
			for i := 1; i <= 3; i++ {
				c.propose("a", ProposalID(i), AckQuorum, fmt.Sprintf("r%d", i))
			}
			c.stabilize()
			for i := 1; i <= 3; i++ {
				if a := c.acks[ProposalID(i)]; a.Err != nil || a.End == 0 {
					t.Fatalf("proposal %d: %+v", i, a)
				}
			}
			c.drop = nil
			c.crash("c")
			c.start("c", true)
			c.crash("a")
			c.promote("b", counted)
			c.tick(3)
			if twin {
				if c.leader() != "b" {
					t.Fatalf("twin: b should have fenced with the empty c:\n%s", c.statusLines())
				}
				for _, r := range c.nodes["b"].store.logs[record.LogData] {
					if string(r.Payload) == "r1" {
						t.Fatalf("twin: b unexpectedly holds r1")
					}
				}
				return
			}
			if st := c.nodes["b"].r.Status(); st.Role != RoleRecovering {
				t.Fatalf("b should still be recovering, is %s:\n%s", st.Role, c.statusLines())
			}
			c.nodes["b"].r.Propose(Proposal{ID: 50, Log: record.LogData, Records: []record.Record{{}}, Mode: AckLeader})
			c.stabilize()
			if err := c.acks[50].Err; !errors.Is(err, ErrRecovering) {
				t.Fatalf("recovering leader accepted a proposal: %v", err)
			}
			c.start("a", false) // same directory, same id
			c.tick(3)
			if c.leader() != "b" {
				t.Fatalf("b not serving after a returned:\n%s", c.statusLines())
			}
			assertNoLoss(t, c, "b", 3)
		})
	}
}

// TestFence_StaleLeaderCannotGatherQuorum: a leads epoch 1 and misses its
// demotion; b is promoted at epoch 2 and fences with c. a's later
// proposals gather no quorum: c refuses epoch 1, a learns epoch 2 and
// refuses the proposal as fenced. Also when c restarts with a new id: it
// learns epoch 2 from the control plane before it accepts shipping.
func TestFence_StaleLeaderCannotGatherQuorum(t *testing.T) {
	for _, restartC := range []bool{false, true} {
		t.Run(fmt.Sprintf("restartC=%t", restartC), func(t *testing.T) {
			c := started(t, []string{"a", "b", "c"}, "a", 2, Rules{})
			// a never hears of the new assignment, nor from b.
			c.drop = func(m Message) bool {
				return (m.From == "a" && m.To == "b") || (m.From == "b" && m.To == "a")
			}
			c.nodes["a"].up = false
			c.promote("b", c.registered())
			c.nodes["a"].up = true
			c.stabilize()
			if c.nodes["b"].r.Status().Role != RoleLeader {
				t.Fatalf("b not leading:\n%s", c.statusLines())
			}
			if restartC {
				c.crash("c")
				c.start("c", true)
			}
			if st := c.nodes["a"].r.Status(); st.Role != RoleLeader || st.Epoch != 1 {
				t.Fatalf("a should still believe it leads epoch 1: %+v", st)
			}
			c.propose("a", 9, AckQuorum, "stale")
			c.tick(2)
			ack, ok := c.acks[9]
			if !ok || !errors.Is(ack.Err, ErrFenced) {
				t.Fatalf("stale leader's proposal: %+v (ok=%t)", ack, ok)
			}
			if st := c.nodes["a"].r.Status(); st.Role != RoleFollower || st.Epoch != 2 {
				t.Fatalf("a did not step down: %+v", st)
			}
		})
	}
}

// TestFence_UnknownEpochAnswersNothing: a replica restarted without
// learning the current epoch answers no shipping at all.
func TestFence_UnknownEpochAnswersNothing(t *testing.T) {
	st := &memLog{}
	r, err := New(Config{Self: "c", SelfStorageID: "c2", Incarnation: 2, Replicas: []NodeID{"a", "b", "c"}, Log: st}, State{})
	if err != nil {
		t.Fatal(err)
	}
	r.Step(Message{Type: MsgAppend, From: "a", To: "c", Conn: 1, Epoch: 1, Pass: 1, Log: record.LogData,
		Records: []record.Record{{Offset: 0, Epoch: 1, Kind: record.KindFence}}})
	r.Step(Message{Type: MsgProbe, From: "a", To: "c", Conn: 1, Epoch: 1, Pass: 1})
	if rd := r.Ready(); !rd.Empty() {
		t.Fatalf("answered before knowing the epoch: %+v", rd)
	}
	r.SetKnownEpoch(2)
	r.Step(Message{Type: MsgAppend, From: "a", To: "c", Conn: 1, Epoch: 1, Pass: 1, Log: record.LogData})
	rd := r.Ready()
	if len(rd.Messages) != 1 || rd.Messages[0].Type != MsgRefuse || rd.Messages[0].Epoch != 2 || len(rd.Writes) != 0 {
		t.Fatalf("stale epoch not refused: %+v", rd)
	}
}

// TestFence_RestartedLeaderNeedsNewEpoch: an assignment made for an
// earlier incarnation of this broker is not led; the same broker at a new
// epoch and its new incarnation is.
func TestFence_RestartedLeaderNeedsNewEpoch(t *testing.T) {
	c := started(t, []string{"a", "b", "c"}, "a", 2, Rules{})
	c.crash("a")
	c.start("a", false) // replays the old assignment (epoch 1, incarnation 1)
	c.tick(2)
	if st := c.nodes["a"].r.Status(); st.Role != RoleFollower {
		t.Fatalf("restarted a leads its old epoch: %+v", st)
	}
	c.promote("a", c.registered())
	c.tick(2)
	if c.leader() != "a" || c.nodes["a"].r.Status().Epoch != 2 {
		t.Fatalf("a not leading epoch 2:\n%s", c.statusLines())
	}
	assertNoLoss(t, c, "a", 2)
}

// TestFollower_TruncatesDivergentSuffix: a record a wrote alone (Leader
// mode, never committed) is truncated from a when it rejoins b's epoch.
func TestFollower_TruncatesDivergentSuffix(t *testing.T) {
	c := started(t, []string{"a", "b", "c"}, "a", 2, Rules{})
	c.drop = func(m Message) bool { return m.From == "a" || m.To == "a" }
	c.propose("a", 5, AckLeader, "lonely")
	c.stabilize()
	if a := c.acks[5]; a.Err != nil {
		t.Fatalf("leader-mode ack: %+v", a)
	}
	c.crash("a")
	c.drop = nil
	c.promote("b", c.registered())
	c.propose("b", 6, AckQuorum, "r3")
	c.tick(2)
	c.start("a", false)
	c.tick(3)
	got, want := c.nodes["a"].store.render(record.LogData), c.nodes["b"].store.render(record.LogData)
	if got != want {
		t.Fatalf("a did not converge:\n a: %s\n b: %s", got, want)
	}
	for _, r := range c.nodes["a"].store.logs[record.LogData] {
		if string(r.Payload) == "lonely" {
			t.Fatalf("divergent record survived")
		}
	}
}

// TestRecovery_CopiesBestLogOfQuorum: records acknowledged by {a, c} after
// the report that made b eligible. a dies and b is promoted: b's recovery
// finds the longer log on c, copies it, and only then fences, so nothing
// acknowledged is lost.
func TestRecovery_CopiesBestLogOfQuorum(t *testing.T) {
	c := started(t, []string{"a", "b", "c"}, "a", 2, Rules{})
	c.tick(1)
	c.drop = func(m Message) bool { return m.To == "b" || m.From == "b" }
	for i := 3; i <= 12; i++ { // more than one Fetch batch (MaxBatch 4)
		c.propose("a", ProposalID(i), AckQuorum, fmt.Sprintf("r%d", i))
	}
	c.stabilize()
	for i := 3; i <= 12; i++ {
		if a := c.acks[ProposalID(i)]; a.Err != nil || a.End == 0 {
			t.Fatalf("proposal %d: %+v", i, a)
		}
	}
	c.drop = nil
	c.crash("a")
	c.promote("b", c.registered())
	c.tick(3)
	if c.leader() != "b" {
		t.Fatalf("b not serving:\n%s", c.statusLines())
	}
	assertNoLoss(t, c, "b", 12)
}
