package controllers_test

import (
	"context"
	"fmt"
	"sort"
	"strings"
	"testing"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/util/retry"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"

	felixv1 "felix.dev/felix/api/v1alpha1"
	"felix.dev/felix/controllers"
)

// startSchedules sets the schedule clock to the wall clock, so a
// FelixScheduledBackup created next sees no scheduled time passed since
// its creation, and deletes the test's schedules when it ends (the clock
// is shared: a later test stepping it must not fire them).
func startSchedules(t *testing.T, ns string) {
	t.Helper()
	suite.scheduleClock.SetTime(time.Now())
	t.Cleanup(func() {
		_ = suite.c.DeleteAllOf(context.Background(), &felixv1.FelixScheduledBackup{}, client.InNamespace(ns))
	})
}

// stepSchedule sets the schedule clock to at and touches the schedule so
// it is reconciled at once (its requeue waits on the wall clock).
func stepSchedule(t *testing.T, ns, name string, at time.Time) {
	t.Helper()
	suite.scheduleClock.SetTime(at)
	sb := getSchedule(t, ns, name)
	if sb == nil {
		t.Fatalf("FelixScheduledBackup %s missing", name)
	}
	orig := sb.DeepCopy()
	if sb.Annotations == nil {
		sb.Annotations = map[string]string{}
	}
	sb.Annotations["test.felix.dev/nudge"] = randHex(4)
	if err := suite.c.Patch(context.Background(), sb, client.MergeFrom(orig)); err != nil {
		t.Fatalf("nudge %s: %v", name, err)
	}
}

func getSchedule(t *testing.T, ns, name string) *felixv1.FelixScheduledBackup {
	t.Helper()
	var sb felixv1.FelixScheduledBackup
	if err := suite.c.Get(context.Background(), types.NamespacedName{Namespace: ns, Name: name}, &sb); err != nil {
		return nil
	}
	return &sb
}

// editSchedule changes the schedule's spec with edit, read afresh on a
// conflict: the controller writes its status between the test's read and
// its update.
func editSchedule(t *testing.T, ns, name string, edit func(*felixv1.FelixScheduledBackup)) {
	t.Helper()
	err := retry.RetryOnConflict(retry.DefaultRetry, func() error {
		var sb felixv1.FelixScheduledBackup
		if err := suite.c.Get(context.Background(), types.NamespacedName{Namespace: ns, Name: name}, &sb); err != nil {
			return err
		}
		edit(&sb)
		return suite.c.Update(context.Background(), &sb)
	})
	if err != nil {
		t.Fatal(err)
	}
}

func newSchedule(ns, name, cluster, schedule string) *felixv1.FelixScheduledBackup {
	return &felixv1.FelixScheduledBackup{
		ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name},
		Spec:       felixv1.FelixScheduledBackupSpec{Cluster: cluster, Schedule: schedule},
	}
}

// scheduledBackups returns the names of the schedule's FelixBackups, sorted.
func scheduledBackups(t *testing.T, ns, schedule string) []string {
	t.Helper()
	var list felixv1.FelixBackupList
	if err := suite.c.List(context.Background(), &list, client.InNamespace(ns), client.MatchingLabels{controllers.LabelScheduledBackup: schedule}); err != nil {
		t.Fatalf("list backups: %v", err)
	}
	var out []string
	for _, b := range list.Items {
		if b.DeletionTimestamp == nil {
			out = append(out, b.Name)
		}
	}
	sort.Strings(out)
	return out
}

// waitScheduleReady waits for the schedule's Ready condition to have
// status and reason.
func waitScheduleReady(t *testing.T, ns, name string, status metav1.ConditionStatus, reason string) *felixv1.FelixScheduledBackup {
	t.Helper()
	var sb *felixv1.FelixScheduledBackup
	eventually(t, 20*time.Second, fmt.Sprintf("%s Ready=%s/%s", name, status, reason), func() (bool, string) {
		sb = getSchedule(t, ns, name)
		if sb == nil {
			return false, "missing"
		}
		c := condition(sb.Status.Conditions, felixv1.ConditionReady)
		return c != nil && c.Status == status && c.Reason == reason && sb.Status.ObservedGeneration == sb.Generation, fmt.Sprintf("%+v", sb.Status)
	})
	return sb
}

// waitBackups waits until the schedule's backups are exactly want.
func waitBackups(t *testing.T, ns, schedule string, want ...string) {
	t.Helper()
	sort.Strings(want)
	eventually(t, 20*time.Second, "backups "+strings.Join(want, ","), func() (bool, string) {
		got := scheduledBackups(t, ns, schedule)
		return strings.Join(got, ",") == strings.Join(want, ","), fmt.Sprintf("%v", got)
	})
}

// completeBackup waits for the backup to be Running, marks its snapshots
// ready and waits for it to complete.
func completeBackup(t *testing.T, ns, name string) {
	t.Helper()
	eventually(t, 20*time.Second, name+" Running", func() (bool, string) {
		b := getBackup(t, ns, name)
		return b != nil && b.Status.Phase == felixv1.BackupRunning, fmt.Sprintf("%+v", b)
	})
	markSnapshotsReady(t, ns, name)
	eventually(t, 20*time.Second, name+" Completed", func() (bool, string) {
		b := getBackup(t, ns, name)
		return b != nil && b.Status.Phase == felixv1.BackupCompleted, fmt.Sprintf("%+v", b)
	})
}

// TestScheduledBackup_FiresSkipsAndCatchesUpOnce: a schedule creates a
// labelled FelixBackup (without an owner: backups outlive their schedule) at its time, skips a time while that backup
// is still Running, and after many missed times takes one backup, for the
// latest.
func TestScheduledBackup_FiresSkipsAndCatchesUpOnce(t *testing.T) {
	ns := namespace(t)
	startSchedules(t, ns)
	create(t, fastCluster(ns, "src", 2))
	sb := newSchedule(ns, "hourly", "src", "0 * * * *")
	sb.Spec.BackupLabels = map[string]string{"team": "orders", controllers.LabelScheduledBackup: "not-this"}
	create(t, sb)
	sb = waitScheduleReady(t, ns, "hourly", metav1.ConditionTrue, controllers.ReasonScheduled)
	h1 := sb.CreationTimestamp.UTC().Truncate(time.Hour).Add(time.Hour)
	if sb.Status.NextScheduleTime == nil || !sb.Status.NextScheduleTime.Equal(&metav1.Time{Time: h1}) || sb.Status.LastScheduleTime != nil {
		t.Fatalf("before the first time: %+v, want next %s", sb.Status, h1)
	}
	if got := scheduledBackups(t, ns, "hourly"); len(got) != 0 {
		t.Fatalf("backups before the first time: %v", got)
	}

	stepSchedule(t, ns, "hourly", h1.Add(30*time.Second))
	first := controllers.ScheduledBackupName("hourly", h1)
	waitBackups(t, ns, "hourly", first)
	b := getBackup(t, ns, first)
	if b.Spec.Cluster != "src" || b.Labels["team"] != "orders" || b.Labels[controllers.LabelScheduledBackup] != "hourly" ||
		len(b.OwnerReferences) != 0 {
		t.Errorf("scheduled backup (backupOwnerReference None): labels %v owners %+v spec %+v", b.Labels, b.OwnerReferences, b.Spec)
	}
	eventually(t, 20*time.Second, "status after the first backup", func() (bool, string) {
		sb = getSchedule(t, ns, "hourly")
		st := sb.Status
		return st.LastBackup == first && st.LastScheduleTime != nil && st.LastScheduleTime.Time.Equal(h1) &&
			st.NextScheduleTime != nil && st.NextScheduleTime.Time.Equal(h1.Add(time.Hour)), fmt.Sprintf("%+v", st)
	})
	eventually(t, 20*time.Second, "BackupCreated event", func() (bool, string) { return hasEvent(ns, "hourly", "BackupCreated") })

	// The first backup is still Running at the next time: skipped.
	eventually(t, 20*time.Second, first+" Running", func() (bool, string) {
		b := getBackup(t, ns, first)
		return b != nil && b.Status.Phase == felixv1.BackupRunning, fmt.Sprintf("%+v", b)
	})
	h2 := h1.Add(time.Hour)
	stepSchedule(t, ns, "hourly", h2.Add(30*time.Second))
	eventually(t, 20*time.Second, "BackupSkipped event", func() (bool, string) { return hasEvent(ns, "hourly", "BackupSkipped") })
	eventually(t, 20*time.Second, "the skipped time handled", func() (bool, string) {
		sb = getSchedule(t, ns, "hourly")
		return sb.Status.LastScheduleTime != nil && sb.Status.LastScheduleTime.Time.Equal(h2) && sb.Status.LastBackup == first, fmt.Sprintf("%+v", sb.Status)
	})
	if got := scheduledBackups(t, ns, "hourly"); len(got) != 1 {
		t.Fatalf("backups after a skipped time: %v", got)
	}

	completeBackup(t, ns, first)
	eventually(t, 20*time.Second, "lastSuccessfulBackup", func() (bool, string) {
		sb = getSchedule(t, ns, "hourly")
		return sb.Status.LastSuccessfulBackup == first, fmt.Sprintf("%+v", sb.Status)
	})

	// Four times missed (the operator down, say): one backup, for the latest.
	h6 := h1.Add(5 * time.Hour)
	stepSchedule(t, ns, "hourly", h6.Add(10*time.Minute))
	waitBackups(t, ns, "hourly", first, controllers.ScheduledBackupName("hourly", h6))
	time.Sleep(time.Second)
	if got := scheduledBackups(t, ns, "hourly"); len(got) != 2 {
		t.Fatalf("catch-up took %v, want one backup", got)
	}
}

// TestScheduledBackup_RetentionPrunesOldestKeepsRestoreNamed: with keep 2,
// the oldest Completed backups go, except one a FelixCluster restores
// from.
func TestScheduledBackup_RetentionPrunesOldestKeepsRestoreNamed(t *testing.T) {
	ns := namespace(t)
	startSchedules(t, ns)
	create(t, fastCluster(ns, "src", 1))
	sb := newSchedule(ns, "keep2", "src", "0 * * * *")
	sb.Spec.Retention = &felixv1.BackupRetention{Keep: ptr.To[int32](2)}
	create(t, sb)
	sb = waitScheduleReady(t, ns, "keep2", metav1.ConditionTrue, controllers.ReasonScheduled)
	h := sb.CreationTimestamp.UTC().Truncate(time.Hour)
	var names []string
	for i := 1; i <= 4; i++ {
		at := h.Add(time.Duration(i) * time.Hour)
		name := controllers.ScheduledBackupName("keep2", at)
		stepSchedule(t, ns, "keep2", at.Add(time.Minute))
		eventually(t, 20*time.Second, name, func() (bool, string) { return getBackup(t, ns, name) != nil, "" })
		completeBackup(t, ns, name)
		names = append(names, name)
		if i == 1 {
			// A cluster restored from the first backup: retention keeps it.
			dst := fastCluster(ns, "dst", 1)
			dst.Spec.Restore = &felixv1.RestoreSpec{Backup: name}
			create(t, dst)
		}
	}
	// Keep 2 of 4: the second goes, the first stays for the restore.
	waitBackups(t, ns, "keep2", names[0], names[2], names[3])
	eventually(t, 20*time.Second, "BackupPruned event", func() (bool, string) { return hasEvent(ns, "keep2", "BackupPruned") })
	sb = getSchedule(t, ns, "keep2")
	if sb.Status.LastSuccessfulBackup != names[3] {
		t.Errorf("lastSuccessfulBackup %q, want %q", sb.Status.LastSuccessfulBackup, names[3])
	}
}

// TestScheduledBackup_ImmediateAndSuspend: immediate takes a backup at
// creation; a suspended schedule takes none and, resumed, takes one
// catch-up backup.
func TestScheduledBackup_ImmediateAndSuspend(t *testing.T) {
	ns := namespace(t)
	startSchedules(t, ns)
	create(t, fastCluster(ns, "src", 1))
	now := suite.scheduleClock.Now()
	sb := newSchedule(ns, "now", "src", "0 0 * * *")
	sb.Spec.Immediate = true
	sb.Spec.BackupOwnerReference = felixv1.BackupOwnerSelf
	create(t, sb)
	first := controllers.ScheduledBackupName("now", now.Truncate(time.Second))
	waitBackups(t, ns, "now", first)
	if b := getBackup(t, ns, first); len(b.OwnerReferences) != 1 || b.OwnerReferences[0].Kind != "FelixScheduledBackup" || !ptr.Deref(b.OwnerReferences[0].Controller, false) {
		t.Errorf("backupOwnerReference Self: owners %+v", b.OwnerReferences)
	}
	completeBackup(t, ns, first)

	editSchedule(t, ns, "now", func(sb *felixv1.FelixScheduledBackup) { sb.Spec.Suspend = true })
	sb = waitScheduleReady(t, ns, "now", metav1.ConditionFalse, controllers.ReasonSuspended)
	if sb.Status.NextScheduleTime != nil {
		t.Errorf("suspended with nextScheduleTime %s", sb.Status.NextScheduleTime)
	}
	day := now.UTC().Truncate(24 * time.Hour)
	stepSchedule(t, ns, "now", day.Add(3*24*time.Hour+time.Hour)) // three midnights missed
	time.Sleep(time.Second)
	if got := scheduledBackups(t, ns, "now"); len(got) != 1 {
		t.Fatalf("suspended schedule took %v", got)
	}

	editSchedule(t, ns, "now", func(sb *felixv1.FelixScheduledBackup) { sb.Spec.Suspend = false })
	waitScheduleReady(t, ns, "now", metav1.ConditionTrue, controllers.ReasonScheduled)
	waitBackups(t, ns, "now", first, controllers.ScheduledBackupName("now", day.Add(3*24*time.Hour)))
}

// TestScheduledBackup_InvalidScheduleAndMissingCluster: the Ready
// condition says why nothing is taken; the API refuses what it can check.
func TestScheduledBackup_InvalidScheduleAndMissingCluster(t *testing.T) {
	ns := namespace(t)
	startSchedules(t, ns)
	for _, bad := range []*felixv1.FelixScheduledBackup{
		newSchedule(ns, "four", "src", "0 3 * *"),
		newSchedule(ns, strings.Repeat("x", 49), "src", "0 3 * * *"),
		func() *felixv1.FelixScheduledBackup {
			sb := newSchedule(ns, "noretention", "src", "0 3 * * *")
			sb.Spec.Retention = &felixv1.BackupRetention{}
			return sb
		}(),
	} {
		if err := suite.c.Create(context.Background(), bad); !apierrors.IsInvalid(err) {
			t.Errorf("create %s (%q): %v, want Invalid", bad.Name, bad.Spec.Schedule, err)
		}
	}

	create(t, newSchedule(ns, "bad", "src", "61 * * * *"))
	sb := waitScheduleReady(t, ns, "bad", metav1.ConditionFalse, controllers.ReasonInvalidSchedule)
	if c := condition(sb.Status.Conditions, felixv1.ConditionReady); !strings.Contains(c.Message, "minute") || sb.Status.NextScheduleTime != nil {
		t.Errorf("invalid schedule status: %+v", sb.Status)
	}

	create(t, newSchedule(ns, "orphan", "src", "0 3 * * *"))
	waitScheduleReady(t, ns, "orphan", metav1.ConditionFalse, controllers.ReasonClusterNotFound)
	create(t, fastCluster(ns, "src", 1))
	waitScheduleReady(t, ns, "orphan", metav1.ConditionTrue, controllers.ReasonScheduled)

	editSchedule(t, ns, "bad", func(sb *felixv1.FelixScheduledBackup) { sb.Spec.Schedule = "1 * * * *" })
	waitScheduleReady(t, ns, "bad", metav1.ConditionTrue, controllers.ReasonScheduled)
}
