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
