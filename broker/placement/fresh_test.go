package placement

import (
	"testing"
	"time"
)

// TestCP1_MissingIDCountsOnlyForAnOlderBuild: a follower registered with
// an id that the report does not name never counts, however fresh the
// report: the report's time (its write) bounds the leader's view only from
// above. A follower registered without an id (an older build) counts,
// under "", only from a fresh report taken at or after its current
// registration. A renewal that vouches for the report after the
// registration does not make it taken after it.
func TestCP1_MissingIDCountsOnlyForAnOlderBuild(t *testing.T) {
	// b and c are the only caught-up followers; c's id changed, so only b
	// can be promoted, and only when its line counts.
	base := func() Input {
		in := world()
		setBroker(&in, "c", func(b *Broker) { b.StorageID = "C2" })
		return in
	}
	cases := []struct {
		name        string
		edit        func(in *Input)
		wantLeader  string
		wantVerdict Verdict
		wantCounted string // b's counted id; "-" when b is not counted
	}{
		{"report names no id, written after the registration: never", func(in *Input) {
			in.Report.Followers[0].StorageID = ""
			setBroker(in, "b", func(b *Broker) { b.RegisteredAt = t0.Add(-time.Minute) })
		}, "", IDNotReported, "-"},
		{"report names no id, written at the registration instant: never", func(in *Input) {
			in.Report.Followers[0].StorageID = ""
			setBroker(in, "b", func(b *Broker) { b.RegisteredAt = t0 })
		}, "", IDNotReported, "-"},
		{"report names no id, registered after the write: never", func(in *Input) {
			in.Report.Followers[0].StorageID = ""
			setBroker(in, "b", func(b *Broker) { b.RegisteredAt = t0.Add(time.Second) })
		}, "", IDNotReported, "-"},
		{"report names no id, renewal vouched after the registration: never", func(in *Input) {
			in.Report.Followers[0].StorageID = ""
			setBroker(in, "b", func(b *Broker) { b.RegisteredAt = t0.Add(time.Second) })
			in.Report.VouchedAt = t0.Add(2 * time.Second)
		}, "", IDNotReported, "-"},
		{"registration has no id, registered after the write, renewal vouched after the registration: never", func(in *Input) {
			in.Report.Followers[0].StorageID = ""
			setBroker(in, "b", func(b *Broker) { b.StorageID = ""; b.RegisteredAt = t0.Add(time.Second) })
			in.Report.VouchedAt = t0.Add(2 * time.Second)
		}, "", IDMissingStale, "-"},
		{"registration has no id, registered before the write: counts under no id", func(in *Input) {
			in.Report.Followers[0].StorageID = ""
			setBroker(in, "b", func(b *Broker) { b.StorageID = ""; b.RegisteredAt = t0.Add(-time.Minute) })
		}, "b", Eligible, ""},
		{"registration has no id, report names one, registered before the write: counts under no id", func(in *Input) {
			setBroker(in, "b", func(b *Broker) { b.StorageID = ""; b.RegisteredAt = t0.Add(-time.Minute) })
		}, "b", Eligible, ""},
		{"registration has no id, expired by now: never", func(in *Input) {
			in.Report.Followers[0].StorageID = ""
			setBroker(in, "b", func(b *Broker) { b.StorageID = ""; b.RegisteredAt = t0.Add(-time.Minute) })
			in.Now = t0.Add(limit + time.Second)
		}, "", IDMissingStale, "-"},
		{"registration has no id, vouched for recently: still fresh past the write's expiry", func(in *Input) {
			in.Report.Followers[0].StorageID = ""
			setBroker(in, "b", func(b *Broker) { b.StorageID = ""; b.RegisteredAt = t0.Add(-time.Minute) })
			in.Report.VouchedAt = t0.Add(limit)
			in.Now = t0.Add(limit + time.Second)
		}, "b", Eligible, ""},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			in := base()
			tc.edit(&in)
			d := Decide(in)
			if tc.wantLeader != "" && (d.Action != Promote || d.Leader != tc.wantLeader) {
				t.Fatalf("got %v %q (%v), want Promote %q; candidates %+v", d.Action, d.Leader, d.Reason, tc.wantLeader, d.Candidates)
			}
			if tc.wantLeader == "" && d.Action != Wait {
				t.Fatalf("got %v %q, want Wait; candidates %+v", d.Action, d.Leader, d.Candidates)
			}
			if got := verdictOf(d, "b"); got != tc.wantVerdict {
				t.Fatalf("b's verdict %v, want %v; candidates %+v", got, tc.wantVerdict, d.Candidates)
			}
			if d.Action == Promote {
				id, ok := d.Counted["b"]
				if tc.wantCounted == "-" && ok || tc.wantCounted != "-" && (!ok || id != tc.wantCounted) {
					t.Fatalf("counted %v, want b under %q", d.Counted, tc.wantCounted)
				}
			}
		})
	}
}

// TestCP1_FreshnessIsTheViewsTimeNotTheRenewals: the wiped older-build
// follower. The leader's report, written at t0, says b (no storage ids)
// is caught up. b loses its disk and registers again at t0+1s; the
// leader's renewals keep vouching for its unchanged report until it dies
// at t0+3s (the caught-up flip that would have followed was still held
// back). The report's view predates b's incarnation, so b is not counted;
// with the twin (freshness from the renewal) it is promoted.
func TestCP1_FreshnessIsTheViewsTimeNotTheRenewals(t *testing.T) {
	wiped := func() Input {
		in := world()
		in.Report.Followers[0].StorageID = ""
		setBroker(&in, "b", func(b *Broker) { b.StorageID = ""; b.Incarnation = 5; b.RegisteredAt = t0.Add(time.Second) })
		setBroker(&in, "c", func(b *Broker) { b.StorageID = "C2" })
		setBroker(&in, "a", func(b *Broker) { b.LastHeartbeat = t0.Add(3 * time.Second) })
		in.Report.VouchedAt = t0.Add(3 * time.Second)
		in.Now = t0.Add(15 * time.Second)
		return in
	}
	for _, twin := range []bool{false, true} {
		in := wiped()
		in.Twin.FreshnessFromRenewal = twin
		d := Decide(in)
		switch {
		case !twin && (d.Action != Wait || d.Reason != ReasonReportExpired || verdictOf(d, "b") != IDMissingStale):
			t.Fatalf("rule on: got %v %q (%v), want Wait ReportExpired with b IDMissingStale; candidates %+v", d.Action, d.Leader, d.Reason, d.Candidates)
		case !twin:
			if _, ok := d.Counted["b"]; ok {
				t.Fatalf("rule on: b counted %v", d.Counted)
			}
		case twin && (d.Action != Promote || d.Leader != "b"):
			t.Fatalf("twin: got %v %q, want the wiped b promoted; candidates %+v", d.Action, d.Leader, d.Candidates)
		}
	}
}

// TestCP1_FrozenViewRefreshedAfterReregistration: the leader took its
// view (b caught up, no id named for it) before b lost its disk; b
// registers again at t0-2s under a new id B; the leader's periodic refresh
// re-writes the frozen view at t0, after the registration. The write time
// says nothing about when the view was taken, so b must not count, in this
// round or, through the assignment, in the next.
func TestCP1_FrozenViewRefreshedAfterReregistration(t *testing.T) {
	in := world()
	in.Report.Followers[0].StorageID = "" // the view predates b's id
	setBroker(&in, "b", func(b *Broker) { b.StorageID = "B"; b.Incarnation = 7; b.RegisteredAt = t0.Add(-2 * time.Second) })
	setBroker(&in, "c", func(b *Broker) { b.StorageID = "C2" })
	in.Now = t0.Add(5 * time.Second)
	d := Decide(in)
	if d.Action != Wait || verdictOf(d, "b") != IDNotReported {
		t.Fatalf("got %v %q (%v), b %v, want Wait with b IDNotReported; candidates %+v", d.Action, d.Leader, d.Reason, verdictOf(d, "b"), d.Candidates)
	}
	if id, ok := d.Counted["b"]; ok {
		t.Fatalf("b counted under %q from a frozen view", id)
	}
	// The next round, after c's copy is back under its old id: b's line
	// still names no id; nothing from the first round may count b.
	setBroker(&in, "c", func(b *Broker) { b.StorageID = "C" })
	d = Decide(in)
	if d.Action != Promote || d.Leader != "c" {
		t.Fatalf("got %v %q (%v), want c promoted; candidates %+v", d.Action, d.Leader, d.Reason, d.Candidates)
	}
	if id, ok := d.Counted["b"]; ok {
		t.Fatalf("b counted under %q; want it left out of recovery and fence", id)
	}
}

// TestCP1_MissingIDCountNotCarriedOver: an older-build follower counted
// (under "") by the current assignment is not counted again from a later
// report that is not fresh at its incarnation.
func TestCP1_MissingIDCountNotCarriedOver(t *testing.T) {
	in := world()
	in.Report.Followers[0].StorageID = ""
	in.Assignment.Counted = map[string]string{"a": "A", "b": "", "c": "C"}
	setBroker(&in, "b", func(b *Broker) { b.StorageID = ""; b.Incarnation = 7; b.RegisteredAt = t0.Add(time.Second) })
	in.Now = t0.Add(5 * time.Second)
	d := Decide(in)
	if d.Action != Promote || d.Leader != "c" {
		t.Fatalf("got %v %q (%v), want c promoted; candidates %+v", d.Action, d.Leader, d.Reason, d.Candidates)
	}
	if id, ok := d.Counted["b"]; ok {
		t.Fatalf("b counted under %q from a report taken before its incarnation", id)
	}
}

// TestCP2_VouchedReportLivesLonger: a renewal that vouches for the report
// extends its life for id-matching followers, and a dead leader's held
// report is measured from the later of its write and its last vouching.
func TestCP2_VouchedReportLivesLonger(t *testing.T) {
	in := world()
	in.Now = t0.Add(limit + 30*time.Second)
	setBroker(&in, "a", func(b *Broker) { b.LastHeartbeat = in.Now })
	if d := Decide(in); d.Action != Wait || d.Reason != ReasonReportExpired {
		t.Fatalf("unvouched: got %v %q (%v), want Wait ReportExpired", d.Action, d.Leader, d.Reason)
	}
	in.Report.VouchedAt = t0.Add(30 * time.Second)
	if d := Decide(in); d.Action != Promote || d.Leader != "b" {
		t.Fatalf("vouched 30s later: got %v %q (%v), want b promoted", d.Action, d.Leader, d.Reason)
	}
	in.Report.VouchedAt = t0.Add(-time.Hour) // before the write: the write counts
	if d := Decide(in); d.Action != Wait {
		t.Fatalf("vouched before the write: got %v %q, want Wait", d.Action, d.Leader)
	}
}

func verdictOf(d Decision, n string) Verdict {
	for _, c := range d.Candidates {
		if c.Broker == n {
			return c.Verdict
		}
	}
	return 0
}
