package replication

import "testing"

// TestLogViewIssuedStaysBounded: Readies always in flight (the next one
// issued before the oldest is advanced, for ever) keep the view's list of
// issued tails small, and each Advance makes the oldest Ready's tail the
// stable position, in order. Without the compaction in ready the list's
// array grows with every Ready.
func TestLogViewIssuedStaysBounded(t *testing.T) {
	var v logView
	v.tail = 1
	v.ready()
	for i := uint64(2); i < 100_000; i++ {
		v.tail = i
		v.ready()
		v.advance()
		if v.stable != i-1 {
			t.Fatalf("after Ready %d: stable %d, want %d", i, v.stable, i-1)
		}
		if cap(v.issued) > 16 {
			t.Fatalf("after Ready %d: %d issued tails kept (cap %d), want a handful", i, len(v.issued)-v.issuedHead, cap(v.issued))
		}
	}
	v.advance()
	if v.stable != 99_999 || len(v.issued) != 0 {
		t.Fatalf("drained: stable %d, %d issued left", v.stable, len(v.issued))
	}
}

// TestLogViewIssuedDrainsInLinearTime: a pile of Readies (a disk-full
// hold) drains in order; lowering the pending ones touches only those
// not yet advanced.
func TestLogViewIssuedDrainsInLinearTime(t *testing.T) {
	var v logView
	for i := uint64(1); i <= 1000; i++ {
		v.tail = i
		v.ready()
	}
	for i := uint64(1); i <= 500; i++ {
		v.advance()
		if v.stable != i {
			t.Fatalf("advance %d: stable %d", i, v.stable)
		}
	}
	v.lowerIssued(700)
	if v.issued[0] != 1 {
		t.Fatalf("an advanced entry was lowered: %d", v.issued[0])
	}
	for i := uint64(501); i <= 1000; i++ {
		v.advance()
		if want := min(i, 700); v.stable != want {
			t.Fatalf("advance %d: stable %d, want %d", i, v.stable, want)
		}
	}
}
