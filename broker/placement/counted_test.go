package placement

import (
	"testing"
	"time"
)

// three is the nemesis-h stall of issue 25 as placement saw it: a
// three-replica shard led by a at epoch 3, whose last report names b
// under the id B it had before a power cut and c caught up under C. b
// registered again as B2 (its boot changed, so its id rotated) before a
// named B2 in a report, and then a lost power too and came back as A2.
func three() Input {
	return Input{
		Replicas: []string{"a", "b", "c"},
		Brokers: map[string]Broker{
			"a": {StorageID: "A2", Incarnation: 2, State: Up, RegisteredAt: t0.Add(4 * time.Second), LastHeartbeat: t0.Add(5 * time.Second)},
			"b": {StorageID: "B2", Incarnation: 6, State: Up, RegisteredAt: t0.Add(-time.Second), LastHeartbeat: t0.Add(5 * time.Second)},
			"c": {StorageID: "C", Incarnation: 5, State: Up, LastHeartbeat: t0.Add(5 * time.Second)},
		},
		Assignment: &Assignment{Leader: "a", Epoch: 3, LeaderIncarnation: 1, Counted: map[string]string{"a": "A", "b": "B", "c": "C"}},
		Report: &Report{Leader: "a", LeaderIncarnation: 1, LeaderStorageID: "A", Epoch: 3, TakenAt: t0.Add(-2 * time.Second),
			ViewAt: t0.Add(-2 * time.Second), Position: 100,
			Followers: []FollowerReport{
				{Broker: "b", StorageID: "B", CaughtUp: false, Confirmed: 90},
				{Broker: "c", StorageID: "C", CaughtUp: true, Confirmed: 100},
			}},
		Now:        t0.Add(5 * time.Second),
		NodeExpiry: expiry,
		Heartbeat:  hb,
	}
}

// TestCP3_TooFewCountedWaits: c is caught up under the id it still has,
// but it is the only replica a new leader could count: a and b both lost
// the copies they were counted under. A recovering leader fences only
// with a quorum counted under the assignment's ids, so promoting c would
// leave the shard recovering for ever, with no report and no reason
// given (the stall). Placement waits, with a reason, instead [CP-3]; and
// it promotes c as soon as a quorum can be counted.
func TestCP3_TooFewCountedWaits(t *testing.T) {
	in := three()
	d := Decide(in)
	if d.Action != Wait || d.Reason != ReasonTooFewCounted {
		t.Fatalf("got %v %q at epoch %d counting %v (%v); want Wait %v: a leader counting %v of 3 replicas can never fence",
			d.Action, d.Leader, d.Epoch, d.Counted, d.Reason, ReasonTooFewCounted, d.Counted)
	}
	if verdictOf(d, "c") != Eligible || verdictOf(d, "a") != IDChanged || verdictOf(d, "b") != IDChanged {
		t.Fatalf("verdicts %+v, want c Eligible, a and b IDChanged", d.Candidates)
	}

	// Had a named B2 in its last report, b would count under B2: c
	// leads, copies its log to b, and fences with it.
	in.Report.Followers[0].StorageID = "B2"
	d = Decide(in)
	if d.Action != Promote || d.Leader != "c" || d.Counted["b"] != "B2" || d.Counted["c"] != "C" {
		t.Fatalf("b reported under B2: got %v %q counting %v (%v), want c promoted counting b:B2 and c:C", d.Action, d.Leader, d.Counted, d.Reason)
	}
	// A plain restart of a (same id) keeps a counted: a quorum.
	in = three()
	setBroker(&in, "a", func(b *Broker) { b.StorageID = "A" })
	d = Decide(in)
	if d.Action != Promote || d.Counted["a"] != "A" || d.Counted["c"] != "C" {
		t.Fatalf("a kept its id: got %v %q counting %v (%v), want a promotion counting a:A and c:C", d.Action, d.Leader, d.Counted, d.Reason)
	}
}

// TestCP3_RestartedLeaderTooFewCountedWaits: a restarted leader that kept
// its id is not promoted again when it is the only replica still counted.
func TestCP3_RestartedLeaderTooFewCountedWaits(t *testing.T) {
	in := three()
	setBroker(&in, "a", func(b *Broker) { b.StorageID = "A" })
	setBroker(&in, "c", func(b *Broker) { b.StorageID = "C2" })
	d := Decide(in)
	if d.Action != Wait || d.Reason != ReasonTooFewCounted {
		t.Fatalf("got %v %q counting %v (%v), want Wait %v", d.Action, d.Leader, d.Counted, d.Reason, ReasonTooFewCounted)
	}
	setBroker(&in, "c", func(b *Broker) { b.StorageID = "C" })
	if d := Decide(in); d.Action != Promote {
		t.Fatalf("c back under C: got %v (%v), want a promotion", d.Action, d.Reason)
	}
}

// TestCP3_AssignedLeaderThatCannotFenceWaits: c was promoted at epoch 4
// counting a and c, and a lost its copy before c fenced (c has not
// reported at epoch 4). c can never fence: the assignment stays, and the
// shard says why it does not serve. Once c has reported at its epoch
// (its fence is committed) the counted ids no longer matter.
func TestCP3_AssignedLeaderThatCannotFenceWaits(t *testing.T) {
	in := three()
	in.Assignment = &Assignment{Leader: "c", Epoch: 4, LeaderIncarnation: 5, Counted: map[string]string{"a": "A", "c": "C"}}
	d := Decide(in)
	if d.Action != Wait || d.Reason != ReasonTooFewCounted || d.Leader != "c" || d.Epoch != 4 {
		t.Fatalf("got %+v, want Wait %v keeping c at epoch 4", d, ReasonTooFewCounted)
	}
	if verdictOf(d, "a") != IDChanged || verdictOf(d, "b") != NotCounted || verdictOf(d, "c") != Eligible {
		t.Fatalf("verdicts %+v, want a IDChanged, b NotCounted, c Eligible", d.Candidates)
	}
	// a back under the id it was counted under: c can fence.
	setBroker(&in, "a", func(b *Broker) { b.StorageID = "A" })
	if d := Decide(in); d.Action != Keep {
		t.Fatalf("a holds A: got %v (%v), want Keep", d.Action, d.Reason)
	}
	// c fenced (it reported at epoch 4): a later loss does not matter.
	setBroker(&in, "a", func(b *Broker) { b.StorageID = "A3" })
	in.Report = &Report{Leader: "c", LeaderIncarnation: 5, LeaderStorageID: "C", Epoch: 4, TakenAt: t0, Position: 100}
	if d := Decide(in); d.Action != Keep {
		t.Fatalf("c fenced: got %v (%v), want Keep", d.Action, d.Reason)
	}
}
