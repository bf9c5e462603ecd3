package placement

import (
	"testing"
	"time"
)

var t0 = time.Unix(1_000_000, 0)

const (
	expiry = 10 * time.Second
	hb     = 2 * time.Second
	// limit is ReportExpiry(expiry, hb) = 22s.
	limit = 22 * time.Second
)

// world is a five-replica shard whose leader a (incarnation 1, epoch 3)
// reported at t0: b and c caught up (b further), d not, e absent.
func world() Input {
	return Input{
		Replicas: []string{"a", "b", "c", "d", "e"},
		Brokers: map[string]Broker{
			"a": {StorageID: "A", Incarnation: 1, State: Down, LastHeartbeat: t0.Add(time.Second)},
			"b": {StorageID: "B", Incarnation: 4, State: Up, LastHeartbeat: t0.Add(30 * time.Second)},
			"c": {StorageID: "C", Incarnation: 5, State: Up, LastHeartbeat: t0.Add(30 * time.Second)},
			"d": {StorageID: "D", Incarnation: 6, State: Up, LastHeartbeat: t0.Add(30 * time.Second)},
			"e": {StorageID: "E", Incarnation: 7, State: Up, LastHeartbeat: t0.Add(30 * time.Second)},
		},
		Assignment: &Assignment{Leader: "a", Epoch: 3, LeaderIncarnation: 1},
		Report: &Report{Leader: "a", LeaderIncarnation: 1, LeaderStorageID: "A", Epoch: 3, TakenAt: t0, ViewAt: t0.Add(-200 * time.Millisecond), Position: 100,
			Followers: []FollowerReport{
				{Broker: "b", StorageID: "B", CaughtUp: true, Confirmed: 120},
				{Broker: "c", StorageID: "C", CaughtUp: true, Confirmed: 110},
				{Broker: "d", StorageID: "D", CaughtUp: false, Confirmed: 50},
			}},
		Now:        t0.Add(5 * time.Second),
		NodeExpiry: expiry,
		Heartbeat:  hb,
	}
}

func TestCP2_ReportExpiryFormula(t *testing.T) {
	if got := ReportExpiry(expiry, hb); got != limit {
		t.Fatalf("ReportExpiry = %v, want %v", got, limit)
	}
}

// TestCP1_IDs: equal ids count, a different id never counts, a missing id
// counts only from a fresh report taken at the current incarnation.
func TestCP1_IDs(t *testing.T) {
	cases := []struct {
		name       string
		edit       func(in *Input)
		wantAction Action
		wantLeader string
		wantReason Reason
	}{
		{"equal ids: highest confirmed wins", func(*Input) {}, Promote, "b", ReasonLeaderUnavailable},
		{"different id never counts, however fresh", func(in *Input) {
			setBroker(in, "b", func(b *Broker) { b.StorageID = "B2" })
		}, Promote, "c", ReasonLeaderUnavailable},
		{"different ids everywhere: wait", func(in *Input) {
			setBroker(in, "b", func(b *Broker) { b.StorageID = "B2" })
			setBroker(in, "c", func(b *Broker) { b.StorageID = "C2" })
		}, Wait, "", ReasonNoEligibleFollower},
		{"missing reported id, fresh report after registration: counts", func(in *Input) {
			in.Report.Followers[0].StorageID = ""
			setBroker(in, "b", func(b *Broker) { b.StorageID = ""; b.RegisteredAt = t0.Add(-time.Minute) })
		}, Promote, "b", ReasonLeaderUnavailable},
		{"missing id, broker re-registered after the report: never", func(in *Input) {
			in.Report.Followers[0].StorageID = ""
			setBroker(in, "b", func(b *Broker) { b.StorageID = ""; b.RegisteredAt = t0.Add(time.Second) })
		}, Promote, "c", ReasonLeaderUnavailable},
		{"missing id on the registry side only: treated as missing", func(in *Input) {
			setBroker(in, "b", func(b *Broker) { b.StorageID = ""; b.RegisteredAt = t0.Add(time.Second) })
		}, Promote, "c", ReasonLeaderUnavailable},
		{"missing id, report expired by now: never (not even held)", func(in *Input) {
			in.Report.Followers[0].StorageID = ""
			setBroker(in, "b", func(b *Broker) { b.StorageID = ""; b.RegisteredAt = t0.Add(-time.Minute) })
			setBroker(in, "c", func(b *Broker) { b.StorageID = "C2" })
			in.Now = t0.Add(limit + time.Second)
		}, Wait, "", ReasonReportExpired},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			in := world()
			tc.edit(&in)
			d := Decide(in)
			if d.Action != tc.wantAction || d.Leader != tc.wantLeader || d.Reason != tc.wantReason {
				t.Fatalf("got %v %q %v, want %v %q %v; candidates %+v", d.Action, d.Leader, d.Reason,
					tc.wantAction, tc.wantLeader, tc.wantReason, d.Candidates)
			}
			if d.Action == Promote && d.Epoch != 4 {
				t.Fatalf("epoch %d, want 4", d.Epoch)
			}
		})
	}
}

// TestCP1_CountedIDs: the promotion names the ids the new leader's fence
// may count: id-matching replicas (dead leader included), never a changed
// id.
func TestCP1_CountedIDs(t *testing.T) {
	in := world()
	setBroker(&in, "c", func(b *Broker) { b.StorageID = "C2" })
	d := Decide(in)
	want := map[string]string{"a": "A", "b": "B", "d": "D"}
	if len(d.Counted) != len(want) {
		t.Fatalf("counted %v, want %v", d.Counted, want)
	}
	for k, v := range want {
		if d.Counted[k] != v {
			t.Fatalf("counted %v, want %v", d.Counted, want)
		}
	}
	if d.LeaderIncarnation != 4 {
		t.Fatalf("leader incarnation %d, want b's 4", d.LeaderIncarnation)
	}
}

// TestCP2_ReportAge: fresh and expired reports; a dead leader's held report
// is measured to its last heartbeat only while it is still the assigned
// leader at the incarnation that made the report, and only for id-matching
// followers.
func TestCP2_ReportAge(t *testing.T) {
	late := t0.Add(limit + 10*time.Second)
	cases := []struct {
		name       string
		edit       func(in *Input)
		wantAction Action
		wantLeader string
	}{
		{"fresh report", func(*Input) {}, Promote, "b"},
		{"expired report, leader restarted with its id: the leader again", func(in *Input) {
			in.Now = late
			setBroker(in, "a", func(b *Broker) { b.State = Up; b.Incarnation = 2; b.LastHeartbeat = late })
		}, Promote, "a"},
		{"expired report, leader restarted with a new id: wait", func(in *Input) {
			in.Now = late
			setBroker(in, "a", func(b *Broker) { b.State = Up; b.Incarnation = 2; b.LastHeartbeat = late; b.StorageID = "A2" })
		}, Wait, ""},
		{"expired by now but held: dead leader's last heartbeat 1s after the report", func(in *Input) {
			in.Now = late
		}, Promote, "b"},
		{"held report, leader Left: still held", func(in *Input) {
			in.Now = late
			setBroker(in, "a", func(b *Broker) { b.State = Left })
		}, Promote, "b"},
		{"held only while the leader's heartbeat is within the limit", func(in *Input) {
			in.Now = late
			setBroker(in, "a", func(b *Broker) { b.LastHeartbeat = t0.Add(limit + time.Second) })
		}, Wait, ""},
		{"not held when the assignment moved on to another leader", func(in *Input) {
			in.Now = late
			in.Assignment = &Assignment{Leader: "b", Epoch: 4, LeaderIncarnation: 3} // b restarted since
		}, Wait, ""},
		{"not held when the leader re-registered since the report", func(in *Input) {
			in.Now = late
			setBroker(in, "a", func(b *Broker) { b.Incarnation = 2 })
			in.Assignment.LeaderIncarnation = 1
		}, Wait, ""},
		{"not held for a missing-id follower", func(in *Input) {
			in.Now = late
			in.Report.Followers[0].StorageID = ""
			in.Report.Followers[1].StorageID = ""
			setBroker(in, "b", func(b *Broker) { b.StorageID = "" })
			setBroker(in, "c", func(b *Broker) { b.StorageID = "" })
		}, Wait, ""},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			in := world()
			tc.edit(&in)
			d := Decide(in)
			if d.Action != tc.wantAction || d.Leader != tc.wantLeader {
				t.Fatalf("got %v %q (%v), want %v %q; candidates %+v", d.Action, d.Leader, d.Reason,
					tc.wantAction, tc.wantLeader, d.Candidates)
			}
			if d.Action == Wait && d.Reason == ReasonNone {
				t.Fatalf("wait without a reason")
			}
		})
	}
}

// TestCP3_NoEligibleFollowerWaits: none eligible -> Wait with a reason.
func TestCP3_NoEligibleFollowerWaits(t *testing.T) {
	cases := []struct {
		name string
		edit func(in *Input)
		want Reason
	}{
		{"none caught up", func(in *Input) {
			for i := range in.Report.Followers {
				in.Report.Followers[i].CaughtUp = false
			}
		}, ReasonNoEligibleFollower},
		{"caught-up followers down", func(in *Input) {
			setBroker(in, "b", func(b *Broker) { b.State = Down })
			setBroker(in, "c", func(b *Broker) { b.State = Left })
		}, ReasonNoEligibleFollower},
		{"no report", func(in *Input) { in.Report = nil }, ReasonNoReport},
		{"nobody up", func(in *Input) {
			for _, n := range in.Replicas {
				setBroker(in, n, func(b *Broker) { b.State = Down })
			}
		}, ReasonNoReplicaUp},
		{"expired", func(in *Input) {
			in.Now = t0.Add(limit + time.Minute)
			setBroker(in, "a", func(b *Broker) { b.LastHeartbeat = in.Now })
		}, ReasonReportExpired},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			in := world()
			tc.edit(&in)
			d := Decide(in)
			if d.Action != Wait || d.Reason != tc.want {
				t.Fatalf("got %v %v, want Wait %v; candidates %+v", d.Action, d.Reason, tc.want, d.Candidates)
			}
		})
	}
}

// TestCP3_KeepAndRestartedLeader: a live leader at its assigned
// incarnation is kept; a restarted one is promoted again at a new epoch
// (it may be the best candidate itself).
func TestCP3_KeepAndRestartedLeader(t *testing.T) {
	in := world()
	setBroker(&in, "a", func(b *Broker) { b.State = Up })
	if d := Decide(in); d.Action != Keep || d.Leader != "a" || d.Epoch != 3 {
		t.Fatalf("live leader: %+v", d)
	}
	setBroker(&in, "a", func(b *Broker) { b.Incarnation = 2; b.RegisteredAt = t0.Add(time.Second) })
	in.Report.Position = 200
	d := Decide(in)
	if d.Action != Promote || d.Leader != "a" || d.Epoch != 4 || d.LeaderIncarnation != 2 || d.Reason != ReasonLeaderRestarted {
		t.Fatalf("restarted leader: %+v", d)
	}
}

// TestCP_FirstAssignment: a new shard gets epoch 1 with the first Up
// replica in replica-set order, counting every registered id.
func TestCP_FirstAssignment(t *testing.T) {
	in := world()
	in.Assignment, in.Report = nil, nil
	d := Decide(in)
	if d.Action != Promote || d.Leader != "b" || d.Epoch != 1 || d.Reason != ReasonNewShard || len(d.Counted) != 5 {
		t.Fatalf("first assignment: %+v", d)
	}
	for _, n := range in.Replicas {
		setBroker(&in, n, func(b *Broker) { b.State = Down })
	}
	if d := Decide(in); d.Action != Wait || d.Reason != ReasonNoReplicaUp {
		t.Fatalf("nobody up: %+v", d)
	}
}

// TestCP1_FirstAssignmentCountsOnlyRegistered: a replica that has not
// registered yet is not counted (it has no id to be counted under, and one
// counted under "" could never join the fence after registering); a new
// shard waits until a majority can be counted.
func TestCP1_FirstAssignmentCountsOnlyRegistered(t *testing.T) {
	in := world()
	in.Assignment, in.Report = nil, nil
	for _, n := range []string{"c", "d", "e"} {
		setBroker(&in, n, func(b *Broker) { *b = Broker{} })
	}
	if d := Decide(in); d.Action != Wait || d.Reason != ReasonTooFewRegistered {
		t.Fatalf("two of five registered: %+v", d)
	}
	setBroker(&in, "c", func(b *Broker) { *b = Broker{StorageID: "C", Incarnation: 1, State: Up} })
	d := Decide(in)
	if d.Action != Promote || d.Reason != ReasonNewShard || len(d.Counted) != 3 {
		t.Fatalf("three of five registered: %+v", d)
	}
	for _, n := range []string{"d", "e"} {
		if _, ok := d.Counted[n]; ok {
			t.Errorf("unregistered %s counted: %v", n, d.Counted)
		}
	}
}

// TestCP_CandidateOrder: ranking is a sort — confirmed, then id match
// before missing id, then name — and deterministic.
func TestCP_CandidateOrder(t *testing.T) {
	in := world()
	in.Report.Followers[1].Confirmed = 120 // c ties b
	d := Decide(in)
	if d.Leader != "b" {
		t.Fatalf("tie broken by name: got %q", d.Leader)
	}
	in.Report.Followers[0].StorageID = "" // b now a missing id
	setBroker(&in, "b", func(b *Broker) { b.StorageID = ""; b.RegisteredAt = t0.Add(-time.Hour) })
	if d := Decide(in); d.Leader != "c" {
		t.Fatalf("id match before missing id: got %q", d.Leader)
	}
	for i := 0; i < 20; i++ {
		if d2 := Decide(in); d2.Leader != "c" {
			t.Fatal("not deterministic")
		}
	}
}

// TestCP1_TwinCountsChangedID: the twin switch makes a changed id count.
func TestCP1_TwinCountsChangedID(t *testing.T) {
	in := world()
	setBroker(&in, "b", func(b *Broker) { b.StorageID = "B2" })
	in.Twin.DisableIDCheck = true
	if d := Decide(in); d.Leader != "b" {
		t.Fatalf("twin should promote b: %+v", d)
	}
}

func setBroker(in *Input, n string, f func(*Broker)) {
	b := in.Brokers[n]
	f(&b)
	in.Brokers[n] = b
}
