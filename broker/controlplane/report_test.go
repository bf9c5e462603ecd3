package controlplane

import (
	"errors"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/rest"
	clocktesting "k8s.io/utils/clock/testing"

	felixv1 "felix.dev/felix/api/v1alpha1"
)

func testClient(t *testing.T, clk *clocktesting.FakeClock) *Client {
	t.Helper()
	c, err := New(Config{REST: &rest.Config{Host: "https://127.0.0.1:1"}, Namespace: "n", Cluster: "c", Broker: "c-0",
		HeartbeatInterval: 2 * time.Second, NodeExpiry: 10 * time.Second, Clock: clk})
	if err != nil {
		t.Fatal(err)
	}
	return c
}

func rep(pos int64, followers ...felixv1.FollowerReport) felixv1.ShardReport {
	return felixv1.ShardReport{Leader: "c-0", LeaderIncarnation: 3, LeaderStorageID: "aa", Epoch: 2, Position: pos, Followers: followers}
}

func TestRP6_SamePlacementIgnoresPositions(t *testing.T) {
	f := func(n, id string, up bool, conf int64) felixv1.FollowerReport {
		return felixv1.FollowerReport{Name: n, StorageID: id, CaughtUp: up, Confirmed: conf}
	}
	base := rep(10, f("c-1", "bb", true, 10), f("c-2", "cc", false, 4))
	tests := []struct {
		name string
		b    felixv1.ShardReport
		same bool
	}{
		{"positions moved", rep(99, f("c-2", "cc", false, 50), f("c-1", "bb", true, 99)), true},
		{"caught up flipped", rep(10, f("c-1", "bb", true, 10), f("c-2", "cc", true, 10)), false},
		{"follower id changed", rep(10, f("c-1", "bx", true, 10), f("c-2", "cc", false, 4)), false},
		{"follower gone", rep(10, f("c-1", "bb", true, 10)), false},
		{"epoch", func() felixv1.ShardReport { r := base; r.Epoch = 3; return r }(), false},
		{"incarnation", func() felixv1.ShardReport { r := base; r.LeaderIncarnation = 4; return r }(), false},
		{"leader id", func() felixv1.ShardReport { r := base; r.LeaderStorageID = "zz"; return r }(), false},
		{"groups moved", func() felixv1.ShardReport {
			r := base
			r.Groups, r.GroupsOmitted = []felixv1.GroupReport{{Name: "billing", Committed: 3, Lag: 7}}, 2
			return r
		}(), true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := samePlacement(base, tt.b); got != tt.same {
				t.Fatalf("samePlacement = %v; want %v", got, tt.same)
			}
		})
	}
}

// TestRP6_RefreshOncePerIntervalSpread: every shard is due exactly once
// per refresh interval, at phases spread across it.
func TestRP6_RefreshOncePerIntervalSpread(t *testing.T) {
	const refresh = 5 * time.Minute
	t0 := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	buckets := make([]int, 10)
	for i := 0; i < 1000; i++ {
		name := "s-" + string(rune('a'+i%26)) + time.Duration(i).String()
		next := nextRefresh(name, t0, refresh)
		if !next.After(t0) || next.After(t0.Add(refresh)) {
			t.Fatalf("%s: next refresh %s not within (t0, t0+refresh]", name, next.Sub(t0))
		}
		if again := nextRefresh(name, next, refresh); again.Sub(next) != refresh {
			t.Fatalf("%s: refreshes %s apart; want %s", name, again.Sub(next), refresh)
		}
		buckets[int(next.Sub(t0)*10/refresh)%10]++
	}
	for i, n := range buckets {
		if n < 60 || n > 140 {
			t.Fatalf("refresh phases not spread: bucket %d holds %d of 1000 (%v)", i, n, buckets)
		}
	}
}

// TestRP6_WriteOnChangeAndCurrent: a change placement reads is due at
// once; a position-only change is not; Current turns false once a change
// waits longer than a heartbeat.
func TestRP6_WriteOnChangeAndCurrent(t *testing.T) {
	clk := clocktesting.NewFakeClock(time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC))
	w := testClient(t, clk).NewReportWriter(ReportOptions{})
	up := felixv1.FollowerReport{Name: "c-1", StorageID: "bb", CaughtUp: true}
	w.Set("s-0", rep(1, up))
	if due := w.due(); len(due) != 1 || due[0] != "s-0" {
		t.Fatalf("new report due = %v", due)
	}
	// Pretend it was written.
	w.mu.Lock()
	st := w.shards["s-0"]
	written := st.want
	st.written, st.writtenAt, st.dirtySince = &written, clk.Now(), time.Time{}
	w.mu.Unlock()
	w.Set("s-0", rep(50, felixv1.FollowerReport{Name: "c-1", StorageID: "bb", CaughtUp: true, Confirmed: 50}))
	if due := w.due(); len(due) != 0 {
		t.Fatalf("position-only change due = %v; want nothing before the refresh", due)
	}
	if !w.Current() {
		t.Fatal("not current with nothing pending")
	}
	w.Set("s-0", rep(60, felixv1.FollowerReport{Name: "c-1", StorageID: "bb", CaughtUp: false}))
	if due := w.due(); len(due) != 0 {
		t.Fatalf("caught-up flip due at once = %v; want it held for half a heartbeat", due)
	}
	clk.Step(time.Second)
	if due := w.due(); len(due) != 1 {
		t.Fatalf("caught-up flip held for half a heartbeat: due = %v", due)
	}
	if !w.Current() {
		t.Fatal("a change pending for less than a heartbeat counts as behind")
	}
	clk.Step(1500 * time.Millisecond)
	if w.Current() {
		t.Fatal("a change pending for more than a heartbeat counts as current")
	}
	// Setting it back to what was written clears it.
	w.Set("s-0", rep(70, up))
	if !w.Current() {
		t.Fatal("reverting to the written report left it pending")
	}
	w.Drop("s-0")
	if due := w.due(); len(due) != 0 {
		t.Fatalf("dropped shard due: %v", due)
	}
}

// TestRP6_CaughtUpFlipsHeldHalfAHeartbeat: a follower that flips between
// caught up and behind from one pass to the next (a busy shard) costs no
// write; a flip that holds for half a heartbeat is due, inside the
// heartbeat Current promises; a change of anything else is due at once,
// and so is a flip that comes with one.
func TestRP6_CaughtUpFlipsHeldHalfAHeartbeat(t *testing.T) {
	clk := clocktesting.NewFakeClock(time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC))
	w := testClient(t, clk).NewReportWriter(ReportOptions{}) // heartbeat 2 s
	up := felixv1.FollowerReport{Name: "c-1", StorageID: "bb", CaughtUp: true}
	behind := felixv1.FollowerReport{Name: "c-1", StorageID: "bb"}
	w.Set("s-0", rep(1, up))
	w.mu.Lock()
	written := w.shards["s-0"].want
	w.shards["s-0"].written, w.shards["s-0"].writtenAt, w.shards["s-0"].dirtySince = &written, clk.Now(), time.Time{}
	w.mu.Unlock()

	for pass := 0; pass < 40; pass++ { // 4 s of 100 ms passes, flipping
		if pass%2 == 0 {
			w.Set("s-0", rep(int64(pass), behind))
		} else {
			w.Set("s-0", rep(int64(pass), up))
		}
		if due := w.due(); len(due) != 0 {
			t.Fatalf("pass %d: flapping follower due = %v", pass, due)
		}
		if !w.Current() {
			t.Fatalf("pass %d: not current while flapping", pass)
		}
		clk.Step(100 * time.Millisecond)
	}

	w.Set("s-0", rep(50, behind))
	clk.Step(900 * time.Millisecond)
	if due := w.due(); len(due) != 0 {
		t.Fatalf("flip held 0.9 s due = %v", due)
	}
	clk.Step(100 * time.Millisecond)
	if due := w.due(); len(due) != 1 {
		t.Fatalf("flip held 1 s (half a heartbeat): due = %v", due)
	}
	if !w.Current() {
		t.Fatal("a flip held for half a heartbeat is not yet late")
	}

	// A storage id change goes at once, and takes the flip with it.
	w.Set("s-0", rep(60, felixv1.FollowerReport{Name: "c-1", StorageID: "b2"}))
	if due := w.due(); len(due) != 1 {
		t.Fatalf("id change due = %v", due)
	}
	w.Set("s-0", rep(61, felixv1.FollowerReport{Name: "c-1", StorageID: "b2", CaughtUp: true}))
	if due := w.due(); len(due) != 1 {
		t.Fatalf("id change followed by a flip: due = %v; want still at once", due)
	}
}

func TestID4_RenewBeforeRegisterRefused(t *testing.T) {
	clk := clocktesting.NewFakeClock(time.Now())
	c := testClient(t, clk)
	if err := c.Renew(t.Context(), true); !errors.Is(err, ErrNotRegistered) {
		t.Fatalf("Renew before Register: %v; want ErrNotRegistered", err)
	}
	if _, err := New(Config{}); !errors.Is(err, ErrConfig) {
		t.Fatalf("New with empty config: %v", err)
	}
}

// TestCP1_RefreshWritesOnlyANewView: the periodic refresh re-writes a
// shard's report only when the leader Set a view since the last write. A
// leader whose view stopped moving (its shard loop stalled) leaves the
// stored report with its old write time, which the operator takes as when
// the report was taken: a follower that registered since must not count
// from that old view [CP-1].
func TestCP1_RefreshWritesOnlyANewView(t *testing.T) {
	clk := clocktesting.NewFakeClock(time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC))
	w := testClient(t, clk).NewReportWriter(ReportOptions{Refresh: time.Minute})
	w.Set("s-0", rep(1, felixv1.FollowerReport{Name: "c-1", CaughtUp: true}))
	w.mu.Lock()
	st := w.shards["s-0"]
	written := st.want
	st.written, st.writtenAt, st.dirtySince, st.writtenSets = &written, clk.Now(), time.Time{}, st.sets
	w.mu.Unlock()
	clk.Step(3 * time.Minute)
	if due := w.due(); len(due) != 0 {
		t.Fatalf("refresh of a view written already due = %v; want nothing until the next Set", due)
	}
	w.Set("s-0", rep(2, felixv1.FollowerReport{Name: "c-1", CaughtUp: true, Confirmed: 2}))
	if due := w.due(); len(due) != 1 || due[0] != "s-0" {
		t.Fatalf("refresh of a new view: due = %v, want s-0", due)
	}
	w.Invalidate("s-0")
	w.mu.Lock()
	w.shards["s-0"].writtenSets = w.shards["s-0"].sets
	w.mu.Unlock()
	if due := w.due(); len(due) != 0 {
		t.Fatalf("invalidated, no view Set since the last write: due = %v; want the next Set's", due)
	}
}

// TestCP1_ReportKeepsTheViewsViewAt: the writer stores the time the
// caller gave for its view, however late the view is written, and never
// stamps one of its own: a write's (or Set's) time is an upper bound on
// when the view was taken, and [CP-1] needs a lower bound.
func TestCP1_ReportKeepsTheViewsViewAt(t *testing.T) {
	clk := clocktesting.NewFakeClock(time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC))
	w := testClient(t, clk).NewReportWriter(ReportOptions{Refresh: time.Minute})
	viewAt := metav1.NewMicroTime(clk.Now().Add(-300 * time.Millisecond))
	r := rep(1, felixv1.FollowerReport{Name: "c-1", CaughtUp: true})
	r.ViewAt = &viewAt
	w.Set("s-0", r)
	w.Set("s-1", rep(1, felixv1.FollowerReport{Name: "c-1", CaughtUp: true}))
	clk.Step(2 * time.Second) // the write waits (hold, rate cap)
	w.mu.Lock()
	want0, want1 := w.shards["s-0"].want, w.shards["s-1"].want
	w.mu.Unlock()
	got := writtenReport(want0, clk.Now())
	if got.ViewAt == nil || !got.ViewAt.Equal(&viewAt) {
		t.Fatalf("written ViewAt = %v, want the view's %v", got.ViewAt, viewAt)
	}
	if !got.TakenAt.Time.Equal(clk.Now()) {
		t.Fatalf("written TakenAt = %v, want the write's time %v", got.TakenAt, clk.Now())
	}
	if got := writtenReport(want1, clk.Now()); got.ViewAt != nil {
		t.Fatalf("a view Set without ViewAt is written with ViewAt %v; want none", got.ViewAt)
	}
	// The caller's copy is not shared: changing it does not move the view's time.
	viewAt.Time = viewAt.Add(time.Hour)
	w.mu.Lock()
	stored := w.shards["s-0"].want.ViewAt
	w.mu.Unlock()
	if stored.Equal(&viewAt) {
		t.Fatalf("stored ViewAt follows the caller's later change")
	}
}
