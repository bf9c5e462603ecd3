package placement

import (
	"testing"
	"time"
)

// TestCP1_ViewTakenBeforeRegistrationNotFresh: the report's write time
// bounds its view's time only from above. b (no storage ids) is wiped and
// registers again at t0-2s; the leader's report, written at t0 (after the
// registration), still carries a view of b's old copy taken before it.
// Only the leader's own time of the view (ViewAt, less the clock-skew
// bound) at or after the registration makes b fresh; a report without
// ViewAt (an older broker) never does.
func TestCP1_ViewTakenBeforeRegistrationNotFresh(t *testing.T) {
	const skew = time.Second
	reg := t0.Add(-2 * time.Second)
	base := func() Input {
		in := world()
		in.MaxClockSkew = skew
		in.Report.Followers[0].StorageID = ""
		setBroker(&in, "b", func(b *Broker) { b.StorageID = ""; b.RegisteredAt = reg })
		setBroker(&in, "c", func(b *Broker) { b.StorageID = "C2" }) // b is the only candidate
		return in
	}
	cases := []struct {
		name   string
		viewAt time.Time
		fresh  bool
	}{
		{"view taken before the registration, written after it", reg.Add(-500 * time.Millisecond), false},
		{"view taken after the registration, within the skew", reg.Add(skew / 2), false},
		{"view taken one skew before the registration's end", reg.Add(skew - time.Millisecond), false},
		{"view taken one skew after the registration", reg.Add(skew), true},
		{"view taken well after the registration", reg.Add(skew + 500*time.Millisecond), true},
		{"report without ViewAt (an older broker)", time.Time{}, false},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			in := base()
			in.Report.ViewAt = tc.viewAt
			if !in.Report.TakenAt.After(reg) {
				t.Fatalf("setup: the write (%v) must come after the registration (%v)", in.Report.TakenAt, reg)
			}
			d := Decide(in)
			_, counted := d.Counted["b"]
			switch {
			case tc.fresh && (d.Action != Promote || d.Leader != "b" || !counted || verdictOf(d, "b") != Eligible):
				t.Fatalf("got %v %q (%v) counted %v, want b promoted and counted; candidates %+v", d.Action, d.Leader, d.Reason, d.Counted, d.Candidates)
			case !tc.fresh && (d.Action == Promote || counted || verdictOf(d, "b") != IDMissingStale):
				t.Fatalf("got %v %q counted %v, want Wait with b IDMissingStale; candidates %+v", d.Action, d.Leader, d.Counted, d.Candidates)
			}
		})
	}
}
