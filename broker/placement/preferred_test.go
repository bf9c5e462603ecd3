package placement

import (
	"testing"
	"time"
)

// healthy is world() with its leader a alive and a fresh report; the
// preferred replica is b, registered long ago.
func healthy() Input {
	in := world()
	setBroker(&in, "a", func(b *Broker) { b.State = Up; b.LastHeartbeat = in.Now })
	for _, n := range []string{"b", "c", "d", "e"} {
		setBroker(&in, n, func(b *Broker) { b.RegisteredAt = t0.Add(-time.Hour) })
	}
	in.Preferred = "b"
	in.PreferredAfter = 30 * time.Second
	return in
}

// TestPreferredLeader: with the leader healthy, leadership moves to the
// preferred replica only when it is caught up under its registered id in
// the current leader's fresh report, has settled, and a majority is
// counted; in every other case the assignment is kept.
func TestPreferredLeader(t *testing.T) {
	cases := []struct {
		name    string
		edit    func(in *Input)
		action  Action
		leader  string
		recheck time.Duration
	}{
		{"caught up under its id: planned promotion", func(*Input) {}, Promote, "b", 0},
		{"balancing off", func(in *Input) { in.Preferred = "" }, Keep, "a", 0},
		{"preferred already leads", func(in *Input) { in.Preferred = "a" }, Keep, "a", 0},
		{"preferred not a replica", func(in *Input) { in.Preferred = "z" }, Keep, "a", 0},
		{"preferred not caught up", func(in *Input) { in.Preferred = "d" }, Keep, "a", 0},
		{"preferred not in the report", func(in *Input) { in.Preferred = "e" }, Keep, "a", 0},
		{"preferred down", func(in *Input) {
			setBroker(in, "b", func(b *Broker) { b.State = Down })
		}, Keep, "a", 0},
		{"preferred lost its disk since the report [CP-1]", func(in *Input) {
			setBroker(in, "b", func(b *Broker) { b.StorageID = "B2" })
		}, Keep, "a", 0},
		{"preferred without an id is never a planned choice", func(in *Input) {
			in.Report.Followers[0].StorageID = ""
			setBroker(in, "b", func(b *Broker) { b.StorageID = "" })
		}, Keep, "a", 0},
		{"preferred restarted 10s ago: settle first", func(in *Input) {
			setBroker(in, "b", func(b *Broker) { b.RegisteredAt = in.Now.Add(-10 * time.Second) })
		}, Keep, "a", 20 * time.Second},
		{"report expired [CP-2]", func(in *Input) { in.Now = t0.Add(limit + time.Second) }, Keep, "a", 0},
		{"report of an earlier epoch", func(in *Input) { in.Assignment.Epoch = 4 }, Keep, "a", 0},
		{"report of an earlier incarnation of the leader", func(in *Input) {
			in.Assignment.LeaderIncarnation = 2
			setBroker(in, "a", func(b *Broker) { b.Incarnation = 2 })
		}, Keep, "a", 0},
		{"too few counted for the new leader's recovery", func(in *Input) {
			setBroker(in, "a", func(b *Broker) { b.StorageID = "A2" })
			setBroker(in, "c", func(b *Broker) { b.StorageID = "C2" })
		}, Keep, "a", 0},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			in := healthy()
			tc.edit(&in)
			d := Decide(in)
			if d.Action != tc.action || d.Leader != tc.leader || d.RecheckAfter != tc.recheck {
				t.Fatalf("got %s %s recheck %v (%s), want %s %s recheck %v", d.Action, d.Leader, d.RecheckAfter, d.Reason,
					tc.action, tc.leader, tc.recheck)
			}
			if d.Action != Promote {
				return
			}
			if d.Reason != ReasonPreferredLeader || d.Epoch != in.Assignment.Epoch+1 ||
				d.LeaderIncarnation != in.Brokers[d.Leader].Incarnation {
				t.Fatalf("promotion %+v: want reason PreferredLeader at epoch %d, incarnation %d", d,
					in.Assignment.Epoch+1, in.Brokers[d.Leader].Incarnation)
			}
			// The fence counts the old leader and the caught-up replicas
			// under the ids they hold now, and nothing else.
			want := map[string]string{"a": "A", "b": "B", "c": "C", "d": "D"}
			if len(d.Counted) != len(want) {
				t.Fatalf("counted %v, want %v", d.Counted, want)
			}
			for n, id := range want {
				if d.Counted[n] != id {
					t.Fatalf("counted %v, want %v", d.Counted, want)
				}
			}
		})
	}
}

// TestPreferredLeader_ConvergesAndStays: once the preferred replica leads,
// the same inputs keep it (no flapping back).
func TestPreferredLeader_ConvergesAndStays(t *testing.T) {
	in := healthy()
	d := Decide(in)
	if d.Action != Promote {
		t.Fatalf("first decision %s, want Promote", d.Action)
	}
	in.Assignment = &Assignment{Leader: d.Leader, Epoch: d.Epoch, LeaderIncarnation: d.LeaderIncarnation, Counted: d.Counted}
	in.Report = &Report{Leader: "b", LeaderIncarnation: 4, LeaderStorageID: "B", Epoch: d.Epoch, TakenAt: in.Now,
		ViewAt: in.Now, Position: 130, Followers: []FollowerReport{
			{Broker: "a", StorageID: "A", CaughtUp: true, Confirmed: 130},
			{Broker: "c", StorageID: "C", CaughtUp: true, Confirmed: 130},
		}}
	if d2 := Decide(in); d2.Action != Keep || d2.Leader != "b" {
		t.Fatalf("second decision %s %s, want Keep b", d2.Action, d2.Leader)
	}
}

// TestLeaderDrain: a healthy leader that is draining hands leadership to
// a replica caught up under its registered id (the preferred one when it
// qualifies, else the one that confirmed the most), at once, in a planned
// promotion; when none qualifies it keeps the shard; a draining replica is
// never a planned target.
func TestLeaderDrain(t *testing.T) {
	drain := func(names ...string) func(in *Input) {
		return func(in *Input) {
			in.Draining = map[string]bool{}
			for _, n := range names {
				in.Draining[n] = true
			}
		}
	}
	cases := []struct {
		name   string
		edit   func(in *Input)
		action Action
		leader string
		reason Reason
	}{
		{"nothing draining: balance as usual", func(*Input) {}, Promote, "b", ReasonPreferredLeader},
		{"leader draining: to the preferred replica", drain("a"), Promote, "b", ReasonLeaderDrain},
		{"leader draining, balancing off: the one that confirmed the most", func(in *Input) {
			drain("a")(in)
			in.Preferred = ""
		}, Promote, "b", ReasonLeaderDrain},
		{"leader draining, preferred just restarted: no settle time", func(in *Input) {
			drain("a")(in)
			setBroker(in, "b", func(b *Broker) { b.RegisteredAt = in.Now.Add(-time.Second) })
		}, Promote, "b", ReasonLeaderDrain},
		{"leader and preferred draining: the next caught-up replica", drain("a", "b"), Promote, "c", ReasonLeaderDrain},
		{"preferred lost its disk [CP-1]: the next caught-up replica", func(in *Input) {
			drain("a")(in)
			setBroker(in, "b", func(b *Broker) { b.StorageID = "B2" })
		}, Promote, "c", ReasonLeaderDrain},
		{"no other replica caught up: the leader stays", func(in *Input) {
			drain("a", "b", "c")(in)
		}, Keep, "a", ReasonNone},
		{"preferred draining, leader not: no balance to it", drain("b"), Keep, "a", ReasonNone},
		{"report expired [CP-2]: the leader stays", func(in *Input) {
			drain("a")(in)
			in.Now = t0.Add(limit + time.Second)
		}, Keep, "a", ReasonNone},
		{"too few counted: the leader stays", func(in *Input) {
			drain("a")(in)
			setBroker(in, "c", func(b *Broker) { b.StorageID = "C2" })
			setBroker(in, "d", func(b *Broker) { b.StorageID = "D2" })
			setBroker(in, "b", func(b *Broker) { b.StorageID = "B2" })
		}, Keep, "a", ReasonNone},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			in := healthy()
			tc.edit(&in)
			d := Decide(in)
			if d.Action != tc.action || d.Leader != tc.leader || (d.Action == Promote && d.Reason != tc.reason) {
				t.Fatalf("got %s %s (%s), want %s %s (%s)", d.Action, d.Leader, d.Reason, tc.action, tc.leader, tc.reason)
			}
			if d.Action == Promote && (d.Epoch != in.Assignment.Epoch+1 || d.Counted[d.Leader] != in.Brokers[d.Leader].StorageID) {
				t.Fatalf("promotion %+v: want epoch %d counting %s under its registered id", d, in.Assignment.Epoch+1, d.Leader)
			}
		})
	}
}

// TestLeaderDrain_NewShard: a new shard's first leader is the first Up
// replica that is not draining, a draining one only when no other is up.
func TestLeaderDrain_NewShard(t *testing.T) {
	in := healthy()
	in.Assignment, in.Report = nil, nil
	in.Draining = map[string]bool{"b": true}
	if d := Decide(in); d.Action != Promote || d.Leader != "a" {
		t.Fatalf("got %s %s, want a (first Up, not draining)", d.Action, d.Leader)
	}
	in.Draining = map[string]bool{"a": true}
	if d := Decide(in); d.Action != Promote || d.Leader != "b" {
		t.Fatalf("got %s %s, want b (a drains)", d.Action, d.Leader)
	}
	in.Draining = map[string]bool{"a": true, "b": true, "c": true, "d": true, "e": true}
	if d := Decide(in); d.Action != Promote || d.Leader != "a" {
		t.Fatalf("got %s %s, want a (every replica drains: the first up)", d.Action, d.Leader)
	}
}
