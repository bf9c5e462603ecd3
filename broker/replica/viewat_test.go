package replica

import (
	"testing"
	"time"

	"felix.dev/felix/broker/logstore"
	"felix.dev/felix/broker/replication"
)

// reportTimes is one OnReport call: the report's pass, the viewAt it came
// with and when it was delivered.
type reportTimes struct {
	pass      uint64
	viewAt    time.Time
	delivered time.Time
}

// TestCP1_ReportViewAtIsThePassStart: OnReport's viewAt is when the pass
// the report describes started, a lower bound on every answer it counts:
// set, never after the report's delivery, and for pass P no later than
// the delivery of pass P-1's last report (pass P starts at the tick that
// ends P-1, which reports P-1). A viewAt stamped at delivery would be after that.
func TestCP1_ReportViewAtIsThePassStart(t *testing.T) {
	c := newCluster(t, logstore.FsyncPeriodic, "a", "b", "c")
	c.ensure(replication.AckQuorum, "a", "b", "c")
	c.assign(c.firstAssignment("a"))
	a := c.nodes["a"]
	c.waitLeading(a)
	var got []reportTimes
	eventually(t, "ten passes reported", 10*time.Second, func() bool {
		a.repMu.Lock()
		defer a.repMu.Unlock()
		got = append(got[:0], a.viewAts...)
		return len(got) >= 10
	})
	last := map[uint64]reportTimes{}
	for _, r := range got {
		if r.viewAt.IsZero() {
			t.Fatalf("report of pass %d without viewAt", r.pass)
		}
		if r.viewAt.After(r.delivered) {
			t.Fatalf("pass %d: viewAt %v after its delivery %v", r.pass, r.viewAt, r.delivered)
		}
		last[r.pass] = r // the report made as the pass ended (a fence commit reports mid-pass too)
	}
	checked := 0
	for p, r := range last {
		prev, ok := last[p-1]
		if !ok {
			continue
		}
		checked++
		if r.viewAt.After(prev.delivered) {
			t.Fatalf("pass %d: viewAt %v after pass %d's report was delivered (%v): not the pass's start", p, r.viewAt, p-1, prev.delivered)
		}
		if !r.viewAt.After(prev.viewAt) {
			t.Fatalf("pass %d: viewAt %v not after pass %d's %v", p, r.viewAt, p-1, prev.viewAt)
		}
	}
	if checked == 0 {
		t.Fatalf("no consecutive passes reported: %+v", got)
	}
}
