package controllers

import (
	"fmt"
	"slices"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"

	felixv1 "felix.dev/felix/api/v1alpha1"
)

// TestRetentionVictims: which finished backups retention deletes, for
// keep, maxAge and both, and what it never deletes.
func TestRetentionVictims(t *testing.T) {
	t0 := time.Date(2026, 3, 1, 0, 0, 0, 0, time.UTC)
	// Oldest first, one a day: d0 .. d5.
	mk := func(phases ...felixv1.BackupPhase) []felixv1.FelixBackup {
		var out []felixv1.FelixBackup
		for i, p := range phases {
			out = append(out, felixv1.FelixBackup{
				ObjectMeta: metav1.ObjectMeta{Name: fmt.Sprintf("d%d", i),
					Annotations: map[string]string{AnnotationScheduledAt: t0.Add(time.Duration(i) * 24 * time.Hour).Format(time.RFC3339)}},
				Status: felixv1.FelixBackupStatus{Phase: p},
			})
		}
		return out
	}
	const (
		c = felixv1.BackupCompleted
		f = felixv1.BackupFailed
		r = felixv1.BackupRunning
	)
	now := t0.Add(6 * 24 * time.Hour)
	day := func(n int) *metav1.Duration { return &metav1.Duration{Duration: time.Duration(n) * 24 * time.Hour} }
	for _, tc := range []struct {
		name      string
		backups   []felixv1.FelixBackup
		ret       felixv1.BackupRetention
		restoring []string
		want      []string
	}{
		{"keep 2 of 4 completed", mk(c, c, c, c), felixv1.BackupRetention{Keep: ptr.To[int32](2)}, nil, []string{"d0", "d1"}},
		{"keep counts completed and failed apart", mk(f, c, f, c, f, c), felixv1.BackupRetention{Keep: ptr.To[int32](1)}, nil, []string{"d0", "d1", "d2", "d3"}},
		{"running and pending never go", mk(r, c, "", c), felixv1.BackupRetention{Keep: ptr.To[int32](1)}, nil, []string{"d1"}},
		{"restore-named kept", mk(c, c, c), felixv1.BackupRetention{Keep: ptr.To[int32](1)}, []string{"d0"}, []string{"d1"}},
		{"maxAge", mk(c, c, c, c, f, c), felixv1.BackupRetention{MaxAge: day(3)}, nil, []string{"d0", "d1", "d2"}},
		{"maxAge never takes the newest completed", mk(c, c, f), felixv1.BackupRetention{MaxAge: day(1)}, nil, []string{"d0", "d2"}},
		{"either bound suffices", mk(c, c, c, c, c, c), felixv1.BackupRetention{Keep: ptr.To[int32](4), MaxAge: day(4)}, nil, []string{"d0", "d1"}},
		{"within both", mk(c, c), felixv1.BackupRetention{Keep: ptr.To[int32](4), MaxAge: day(30)}, nil, nil},
	} {
		restoring := map[string]bool{}
		for _, n := range tc.restoring {
			restoring[n] = true
		}
		var got []string
		for n := range retentionVictims(tc.backups, &tc.ret, restoring, now) {
			got = append(got, n)
		}
		slices.Sort(got)
		if !slices.Equal(got, tc.want) {
			t.Errorf("%s: victims %v, want %v", tc.name, got, tc.want)
		}
	}
}

// TestScheduledBy: a schedule counts (and so may prune) only the backups it
// took; a hand-made backup carrying its label, or one another object
// controls, is never its.
func TestScheduledBy(t *testing.T) {
	sb := &felixv1.FelixScheduledBackup{ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: "nightly", UID: "sb-uid"}}
	stamp := map[string]string{AnnotationScheduledAt: "2026-12-03T00:00:00Z"}
	label := map[string]string{LabelScheduledBackup: "nightly"}
	owner := func(kind, uid string) []metav1.OwnerReference {
		return []metav1.OwnerReference{{APIVersion: "felix.dev/v1alpha1", Kind: kind, Name: "x", UID: "x", Controller: ptr.To(true)}}
	}
	self := []metav1.OwnerReference{{APIVersion: "felix.dev/v1alpha1", Kind: "FelixScheduledBackup", Name: "nightly", UID: "sb-uid", Controller: ptr.To(true)}}
	for _, tc := range []struct {
		name string
		meta metav1.ObjectMeta
		want bool
	}{
		{"taken, no owner", metav1.ObjectMeta{Name: "nightly-20261203000000", Labels: label, Annotations: stamp}, true},
		{"taken, owned by the schedule", metav1.ObjectMeta{Name: "nightly-20261203000000", Labels: label, Annotations: stamp, OwnerReferences: self}, true},
		{"label only (by hand)", metav1.ObjectMeta{Name: "nightly-20261203000000", Labels: label}, false},
		{"another name", metav1.ObjectMeta{Name: "keep-me", Labels: label, Annotations: stamp}, false},
		{"another controller", metav1.ObjectMeta{Name: "nightly-20261203000000", Labels: label, Annotations: stamp, OwnerReferences: owner("Other", "o")}, false},
		{"another schedule's label", metav1.ObjectMeta{Name: "nightly-20261203000000", Labels: map[string]string{LabelScheduledBackup: "hourly"}, Annotations: stamp}, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			b := &felixv1.FelixBackup{ObjectMeta: tc.meta}
			if got := scheduledBy(b, sb); got != tc.want {
				t.Errorf("scheduledBy = %v, want %v", got, tc.want)
			}
		})
	}
}
