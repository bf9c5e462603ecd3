package controllers_test

import (
	"context"
	"strings"
	"testing"
	"time"

	coordinationv1 "k8s.io/api/coordination/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/client"

	felixv1 "felix.dev/felix/api/v1alpha1"
)

// registerAsOldBuild leaves fb's registration as a broker of an older
// build leaves it: a new incarnation, registered now, with no storage id.
// It returns the registration's time as stored.
func registerAsOldBuild(t *testing.T, ns string, fb *fakeBroker) time.Time {
	t.Helper()
	var at time.Time
	eventually(t, 10*time.Second, fb.name+" registered without an id", func() (bool, string) {
		b := getBroker(t, ns, fb.name)
		orig := b.DeepCopy()
		now := metav1.Now()
		b.Status.Incarnation++
		b.Status.StorageID = ""
		b.Status.RegisteredAt = &now
		err := suite.c.Status().Patch(context.Background(), b, client.MergeFromWithOptions(orig, client.MergeFromWithOptimisticLock{}))
		if err != nil {
			return false, err.Error()
		}
		at = getBroker(t, ns, fb.name).Status.RegisteredAt.Time
		return true, ""
	})
	return at
}

// leaseRenewedAfter waits until fb's heartbeat Lease shows a renewal
// later than at (the operator sees it moments after).
func leaseRenewedAfter(t *testing.T, ns string, fb *fakeBroker, at time.Time) {
	t.Helper()
	eventually(t, 10*time.Second, fb.name+" renewed after "+at.String(), func() (bool, string) {
		var l coordinationv1.Lease
		if err := suite.c.Get(context.Background(), types.NamespacedName{Namespace: ns, Name: fb.name}, &l); err != nil {
			return false, err.Error()
		}
		if l.Spec.RenewTime == nil {
			return false, "never renewed"
		}
		return l.Spec.RenewTime.After(at), l.Spec.RenewTime.String()
	})
}

// TestCP1_WipedOldBuildFollowerNotFreshFromRenewals: f2 is an older build
// without storage ids. The leader's report, written while f2 ran at its
// previous incarnation, says f2 is caught up. f2 loses its disk and
// registers again; the leader's "reports current" renewals keep vouching
// for the unchanged report after that (a caught-up flip may be held back
// for up to a heartbeat), and then the leader dies. The report's view was
// taken before f2's current incarnation, so f2 must not be promoted or
// counted: the shard waits, naming f2 IDMissingStale. (Measuring freshness
// from the renewals, the operator promoted the wiped f2.)
func TestCP1_WipedOldBuildFollowerNotFreshFromRenewals(t *testing.T) {
	ns := namespace(t)
	brokers := placed(t, ns, "wob", 3, 1, 3)
	sh := getShard(t, ns, "s-0")
	leader := brokers[sh.Status.Assignment.Leader]
	f1, f2 := brokers[sh.Spec.Replicas[1]], brokers[sh.Spec.Replicas[2]]
	registerAsOldBuild(t, ns, f2)
	leader.reports.Set("s-0", report(leader, 1, line(f1, f1.storageID, 40, false), line(f2, "", 100, true)))
	eventually(t, 10*time.Second, "report stored", func() (bool, string) {
		s := getShard(t, ns, "s-0")
		return s.Status.Report != nil && len(s.Status.Report.Followers) == 2 && s.Status.Report.Followers[1].CaughtUp, "not yet"
	})
	// f2 is wiped and starts again: a new incarnation, still without ids.
	wipedAt := registerAsOldBuild(t, ns, f2)
	leaseRenewedAfter(t, ns, leader, wipedAt.Add(time.Second))
	leader.stop()
	waitingNaming(t, ns, f2.name+": IDMissingStale")
}

// TestCP1_ReportWithoutIDNeverCounts: f2 is registered with a storage id,
// but the leader's report (an older leader's) names none for it. The
// report's time is its write, which bounds the leader's view only from
// above, so even a report written well after f2's registration does not
// show the view was taken at f2's current incarnation: when the leader
// dies the shard waits, naming f2 IDNotReported, and f2 is not counted.
func TestCP1_ReportWithoutIDNeverCounts(t *testing.T) {
	ns := namespace(t)
	brokers := placed(t, ns, "nid", 3, 1, 3)
	sh := getShard(t, ns, "s-0")
	leader := brokers[sh.Status.Assignment.Leader]
	f1, f2 := brokers[sh.Spec.Replicas[1]], brokers[sh.Spec.Replicas[2]]
	// Report times are whole seconds: write the report in a later second
	// than f2's registration.
	regAt := getBroker(t, ns, f2.name).Status.RegisteredAt.Time
	eventually(t, 5*time.Second, "a second after "+f2.name+" registered", func() (bool, string) {
		return time.Now().After(regAt.Add(1100 * time.Millisecond)), "not yet"
	})
	leader.reports.Set("s-0", report(leader, 1, line(f1, f1.storageID, 40, false), line(f2, "", 100, true)))
	eventually(t, 10*time.Second, "report stored", func() (bool, string) {
		s := getShard(t, ns, "s-0")
		return s.Status.Report != nil && len(s.Status.Report.Followers) == 2, "not yet"
	})
	leader.stop()
	waitingNaming(t, ns, f2.name+": IDNotReported")
}

// TestCP1_FrozenViewRefreshNotFresh: f2 is an older build without
// storage ids. The leader's view, written while f2 ran at its previous
// incarnation, says f2 is caught up; then the leader's view stops moving
// (its shard loop stalls: nothing more is Set) while its report writer
// keeps running with a one-second refresh. f2 loses its disk and
// registers again; seconds pass, then the leader dies. A refresh that
// re-wrote the frozen view would have given it a write time after f2's
// registration, and f2 would have been promoted from a view of its old
// copy; the writer writes a view once, so the shard waits, naming f2
// IDMissingStale.
func TestCP1_FrozenViewRefreshNotFresh(t *testing.T) {
	ns := namespace(t)
	brokers := placed(t, ns, "frz", 3, 1, 3)
	sh := getShard(t, ns, "s-0")
	leader := brokers[sh.Status.Assignment.Leader]
	f1, f2 := brokers[sh.Spec.Replicas[1]], brokers[sh.Spec.Replicas[2]]
	leader.stop()
	leader.run(t, time.Second)
	registerAsOldBuild(t, ns, f2)
	leader.reports.Set("s-0", report(leader, 1, line(f1, f1.storageID, 40, false), line(f2, "", 100, true)))
	eventually(t, 10*time.Second, "report stored", func() (bool, string) {
		s := getShard(t, ns, "s-0")
		return s.Status.Report != nil && len(s.Status.Report.Followers) == 2 && s.Status.Report.Followers[1].CaughtUp, "not yet"
	})
	wipedAt := registerAsOldBuild(t, ns, f2)
	eventually(t, 10*time.Second, "three refresh intervals after "+f2.name+" registered again", func() (bool, string) {
		return time.Now().After(wipedAt.Add(3 * time.Second)), "not yet"
	})
	leader.stop()
	waitingNaming(t, ns, f2.name+": IDMissingStale")
}

// waitingNaming waits until s-0 is Waiting with verdict in its message,
// failing at once if it is promoted past epoch 1.
func waitingNaming(t *testing.T, ns, verdict string) {
	t.Helper()
	eventually(t, 15*time.Second, "Waiting with "+verdict, func() (bool, string) {
		s := getShard(t, ns, "s-0")
		if a := s.Status.Assignment; a.Epoch != 1 {
			t.Fatalf("promoted %s at epoch %d; want Waiting with %s; counted %+v", a.Leader, a.Epoch, verdict, a.Counted)
		}
		c := condition(s.Status.Conditions, felixv1.ConditionWaiting)
		if c == nil {
			return false, "no condition"
		}
		return c.Status == metav1.ConditionTrue && strings.Contains(c.Message, verdict), c.Reason + ": " + c.Message
	})
}
