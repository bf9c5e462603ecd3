package controlplane

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	clocktesting "k8s.io/utils/clock/testing"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/client/fake"
	"sigs.k8s.io/controller-runtime/pkg/client/interceptor"

	felixv1 "felix.dev/felix/api/v1alpha1"
)

// recordedWrites captures the reports a writer applies, in order.
type recordedWrites struct {
	mu   sync.Mutex
	reps []felixv1.ShardReport
}

func (r *recordedWrites) all() []felixv1.ShardReport {
	r.mu.Lock()
	defer r.mu.Unlock()
	return append([]felixv1.ShardReport(nil), r.reps...)
}

// recordingClient makes c's status writes land in a recordedWrites.
func recordingClient(t *testing.T, c *Client) *recordedWrites {
	t.Helper()
	rec := &recordedWrites{}
	base := fake.NewClientBuilder().WithScheme(NewScheme()).Build()
	c.c = interceptor.NewClient(base, interceptor.Funcs{
		SubResourcePatch: func(_ context.Context, _ client.Client, _ string, obj client.Object, patch client.Patch, _ ...client.SubResourcePatchOption) error {
			data, err := patch.Data(obj)
			if err != nil {
				return err
			}
			var body struct {
				Status struct {
					Report felixv1.ShardReport `json:"report"`
				} `json:"status"`
			}
			if err := json.Unmarshal(data, &body); err != nil {
				return fmt.Errorf("patch body %s: %w", data, err)
			}
			rec.mu.Lock()
			rec.reps = append(rec.reps, body.Status.Report)
			rec.mu.Unlock()
			return nil
		},
	})
	return rec
}

// writeDue writes every shard due now, as Run would.
func writeDue(t *testing.T, w *ReportWriter) {
	t.Helper()
	for _, shard := range w.due() {
		w.write(t.Context(), shard)
	}
}

// TestRP6_GroupsRideAlong: consumer groups ride along with the report
// like positions do. A change of group positions alone (the hook's
// answer, or the groups of a Set view) writes nothing; the next write
// (a change placement reads, or the refresh of a new view) carries the
// groups of its own time.
func TestRP6_GroupsRideAlong(t *testing.T) {
	clk := clocktesting.NewFakeClock(time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC))
	c := testClient(t, clk)
	rec := recordingClient(t, c)
	var mu sync.Mutex
	positions := []GroupPosition{{Group: "billing", Committed: 7, Lag: 3}}
	set := func(ps ...GroupPosition) {
		mu.Lock()
		positions = ps
		mu.Unlock()
	}
	w := c.NewReportWriter(ReportOptions{Refresh: time.Minute, Groups: func(shard string) ([]GroupPosition, error) {
		if shard != "s-0" {
			return nil, fmt.Errorf("asked for %s", shard)
		}
		mu.Lock()
		defer mu.Unlock()
		return append([]GroupPosition(nil), positions...), nil
	}})
	up := felixv1.FollowerReport{Name: "c-1", StorageID: "bb", CaughtUp: true}

	w.Set("s-0", rep(10, up))
	writeDue(t, w)
	got := rec.all()
	if len(got) != 1 || len(got[0].Groups) != 1 || got[0].Groups[0] != (felixv1.GroupReport{Name: "billing", Committed: 7, Lag: 3}) {
		t.Fatalf("first write: %+v, want billing at 7, lag 3", got)
	}

	// Groups move, and a view differing from the written one in its
	// groups alone is Set: nothing is written.
	set(GroupPosition{Group: "billing", Committed: 10, Lag: 0}, GroupPosition{Group: "audit", Committed: 2, Lag: 8})
	groupsOnly := rep(10, up)
	groupsOnly.Groups = []felixv1.GroupReport{{Name: "other", Committed: 1, Lag: 9}}
	w.Set("s-0", groupsOnly)
	clk.Step(time.Second) // past the caught-up hold: nothing else is pending
	writeDue(t, w)
	if n := len(rec.all()); n != 1 {
		t.Fatalf("a change of groups alone wrote %d reports; want none", n-1)
	}
	if !w.Current() {
		t.Fatal("a change of groups alone counts as a pending change")
	}

	// A change placement reads is written at once, with the groups of its time.
	w.Set("s-0", rep(12, up, felixv1.FollowerReport{Name: "c-2", StorageID: "cc"}))
	writeDue(t, w)
	got = rec.all()
	if len(got) != 2 {
		t.Fatalf("a new follower: %d writes, want 2", len(got))
	}
	want := []felixv1.GroupReport{{Name: "audit", Committed: 2, Lag: 8}, {Name: "billing", Committed: 10, Lag: 0}}
	if fmt.Sprint(got[1].Groups) != fmt.Sprint(want) || got[1].GroupsOmitted != 0 {
		t.Fatalf("second write's groups %+v (%d omitted), want %+v", got[1].Groups, got[1].GroupsOmitted, want)
	}

	// The refresh of a new view carries the groups of the refresh.
	set(GroupPosition{Group: "audit", Committed: 10, Lag: 0})
	w.Set("s-0", rep(13, up, felixv1.FollowerReport{Name: "c-2", StorageID: "cc"}))
	writeDue(t, w)
	if n := len(rec.all()); n != 2 {
		t.Fatalf("positions and groups only: %d writes before the refresh, want 2", n)
	}
	clk.Step(time.Minute)
	writeDue(t, w)
	got = rec.all()
	if len(got) != 3 || len(got[2].Groups) != 1 || got[2].Groups[0].Name != "audit" || got[2].Groups[0].Lag != 0 {
		t.Fatalf("refresh: %+v, want a third write with audit caught up", got)
	}
}

// TestRP6_GroupsHookErrorKeepsTheSetGroups: when the hook cannot answer,
// the report is written (its placement content matters more) with the
// groups of the view Set, none here.
func TestRP6_GroupsHookErrorKeepsTheSetGroups(t *testing.T) {
	clk := clocktesting.NewFakeClock(time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC))
	c := testClient(t, clk)
	rec := recordingClient(t, c)
	w := c.NewReportWriter(ReportOptions{Groups: func(string) ([]GroupPosition, error) { return nil, errors.New("busy") }})
	w.Set("s-0", rep(1))
	writeDue(t, w)
	if got := rec.all(); len(got) != 1 || got[0].Groups != nil || got[0].Leader != "c-0" {
		t.Fatalf("writes %+v, want one report without groups", got)
	}
}

// TestRP6_GroupsCappedLargestLagFirst: a report lists at most
// MaxReportGroups groups, the largest lag first (ties by name), and
// counts the rest, names the API would refuse included.
func TestRP6_GroupsCappedLargestLagFirst(t *testing.T) {
	var ps []GroupPosition
	for i := range 20 {
		ps = append(ps, GroupPosition{Group: fmt.Sprintf("g%02d", i), Committed: uint64(i), Lag: uint64(i % 10)})
	}
	ps = append(ps, GroupPosition{Group: strings.Repeat("x", felixv1.MaxReportGroupNameLength+1), Lag: 1000},
		GroupPosition{Group: "", Lag: 1000}, GroupPosition{Group: "huge", Committed: 1, Lag: ^uint64(0)})
	out := withGroups(rep(1), ps)
	if len(out.Groups) != felixv1.MaxReportGroups || out.GroupsOmitted != int32(len(ps)-felixv1.MaxReportGroups) {
		t.Fatalf("%d groups, %d omitted; want %d and %d", len(out.Groups), out.GroupsOmitted, felixv1.MaxReportGroups, len(ps)-felixv1.MaxReportGroups)
	}
	if g := out.Groups[0]; g.Name != "huge" || g.Lag <= 0 {
		t.Fatalf("first %+v, want huge with its lag clamped positive", g)
	}
	if g := out.Groups[1]; g.Name != "g09" || g.Lag != 9 {
		t.Fatalf("second %+v, want g09 (lag 9 beats g19 by name)", g)
	}
	for i := 1; i < len(out.Groups); i++ {
		a, b := out.Groups[i-1], out.Groups[i]
		if a.Lag < b.Lag || (a.Lag == b.Lag && a.Name > b.Name) {
			t.Fatalf("not largest lag first at %d: %+v before %+v", i, a, b)
		}
	}
	if out.Leader != "c-0" || out.Position != 1 {
		t.Fatalf("the rest of the report changed: %+v", out)
	}
	if none := withGroups(rep(1), nil); none.Groups != nil || none.GroupsOmitted != 0 {
		t.Fatalf("no groups: %+v", none)
	}
}
