package controllers_test

import (
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	felixv1 "felix.dev/felix/api/v1alpha1"
)

// afterRegistration waits until the wall clock is past the end of the
// second fb registered in plus extra, and returns that moment.
func afterRegistration(t *testing.T, ns string, fb *fakeBroker, extra time.Duration) time.Time {
	t.Helper()
	regAt := getBroker(t, ns, fb.name).Status.RegisteredAt.Time.Truncate(time.Second).Add(time.Second)
	var now time.Time
	eventually(t, 10*time.Second, "past "+fb.name+"'s registration", func() (bool, string) {
		now = time.Now()
		return now.After(regAt.Add(extra)), "not yet"
	})
	return now
}

// TestCP1_ViewTakenBeforeRegistrationNotFresh (operator): f2 is an older
// build without storage ids, wiped and registered again. The leader's
// report is written a second after the registration, but its view (ViewAt,
// on the leader's clock) was taken before it: the write time bounds the
// view's time only from above, so f2 is not counted and the shard waits,
// naming f2 IDMissingStale.
func TestCP1_ViewTakenBeforeRegistrationNotFresh(t *testing.T) {
	ns := namespace(t)
	brokers := placed(t, ns, "vab", 3, 1, 3)
	sh := getShard(t, ns, "s-0")
	leader := brokers[sh.Status.Assignment.Leader]
	f1, f2 := brokers[sh.Spec.Replicas[1]], brokers[sh.Spec.Replicas[2]]
	before := metav1.NewMicroTime(time.Now())
	registerAsOldBuild(t, ns, f2)
	afterRegistration(t, ns, f2, 200*time.Millisecond)
	rep := report(leader, 1, line(f1, f1.storageID, 40, false), line(f2, "", 100, true))
	rep.ViewAt = &before
	leader.reports.Set("s-0", rep)
	eventually(t, 10*time.Second, "report stored", func() (bool, string) {
		s := getShard(t, ns, "s-0")
		return s.Status.Report != nil && s.Status.Report.ViewAt != nil && len(s.Status.Report.Followers) == 2, "not yet"
	})
	leader.stop()
	waitingNaming(t, ns, f2.name+": IDMissingStale")
}

// TestCP1_ViewTakenAfterRegistrationCounts (operator): the same, with the
// leader's view taken more than the clock-skew bound (the operator's
// default, 1s) after f2's registration: f2 counts under no id, and is
// promoted when the leader dies.
func TestCP1_ViewTakenAfterRegistrationCounts(t *testing.T) {
	ns := namespace(t)
	brokers := placed(t, ns, "vaa", 3, 1, 3)
	sh := getShard(t, ns, "s-0")
	leader := brokers[sh.Status.Assignment.Leader]
	f1, f2 := brokers[sh.Spec.Replicas[1]], brokers[sh.Spec.Replicas[2]]
	registerAsOldBuild(t, ns, f2)
	at := metav1.NewMicroTime(afterRegistration(t, ns, f2, 1200*time.Millisecond))
	rep := report(leader, 1, line(f1, f1.storageID, 40, false), line(f2, "", 100, true))
	rep.ViewAt = &at
	leader.reports.Set("s-0", rep)
	eventually(t, 10*time.Second, "report stored", func() (bool, string) {
		s := getShard(t, ns, "s-0")
		return s.Status.Report != nil && s.Status.Report.ViewAt != nil && len(s.Status.Report.Followers) == 2, "not yet"
	})
	leader.stop()
	eventually(t, 15*time.Second, "promotion", func() (bool, string) {
		a := getShard(t, ns, "s-0").Status.Assignment
		return a.Epoch == 2, a.Leader
	})
	a := getShard(t, ns, "s-0").Status.Assignment
	if a.Leader != f2.name {
		t.Fatalf("promoted %+v; want %s", a, f2.name)
	}
	if !hasCounted(a.Counted, f2.name, "") {
		t.Fatalf("counted %+v; want %s under no id", a.Counted, f2.name)
	}
}

func hasCounted(cs []felixv1.CountedReplica, name, id string) bool {
	for _, c := range cs {
		if c.Name == name && c.StorageID == id {
			return true
		}
	}
	return false
}
