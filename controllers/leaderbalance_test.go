package controllers_test

import (
	"context"
	"strings"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	felixv1 "felix.dev/felix/api/v1alpha1"
	"felix.dev/felix/controllers"
)

// failedOver places one 3-replica shard, kills its first leader (the
// preferred replica p), lets its caught-up follower f1 take over at epoch
// 2, and starts p again with a new storage id (it lost its disk). It
// returns p's new incarnation, f1 and f2.
func failedOver(t *testing.T, c *felixv1.FelixCluster) (p, f1, f2 *fakeBroker) {
	t.Helper()
	ns := c.Namespace
	brokers := placedIn(t, c, 1, 3)
	sh := getShard(t, ns, "s-0")
	p, f1, f2 = brokers[sh.Spec.Replicas[0]], brokers[sh.Spec.Replicas[1]], brokers[sh.Spec.Replicas[2]]
	if sh.Status.Assignment.Leader != p.name {
		t.Fatalf("first leader %s; want the preferred replica %s", sh.Status.Assignment.Leader, p.name)
	}
	// f1 confirmed the most: the failover picks it.
	p.reports.Set("s-0", report(p, 1, line(f1, f1.storageID, 110, true), line(f2, f2.storageID, 100, true)))
	eventually(t, 10*time.Second, "caughtUp 3/3", func() (bool, string) {
		s := getShard(t, ns, "s-0")
		return s.Status.CaughtUp == "3/3", s.Status.CaughtUp
	})
	p.stop()
	eventually(t, 15*time.Second, "failover", func() (bool, string) {
		a := getShard(t, ns, "s-0").Status.Assignment
		return a.Epoch == 2, a.Leader
	})
	if a := getShard(t, ns, "s-0").Status.Assignment; a.Leader != f1.name {
		t.Fatalf("failover to %s; want %s", a.Leader, f1.name)
	}
	var ord int32
	for i := int32(0); i < c.Spec.Brokers; i++ {
		if controllers.BrokerName(c.Name, i) == p.name {
			ord = i
		}
	}
	p = startBroker(t, ns, c.Name, ord) // a new storage id, registered at a new incarnation
	eventually(t, 10*time.Second, p.name+" Up", func() (bool, string) {
		b := getBroker(t, ns, p.name)
		return b.Status.State == felixv1.BrokerUp && b.Status.StorageID == p.storageID, string(b.Status.State)
	})
	return p, f1, f2
}

// TestLeaderBalance_PreferredReplicaLeadsAgain: after a failover, the
// preferred replica (first of the replica set) comes back under a new
// storage id. Leadership stays with f1 while f1's report does not count
// it caught up under that id [CP-1]; once it does, and the settle time
// (zero here; placement's tests cover it) has passed, the operator moves leadership back in a planned promotion
// at a new epoch, counting the old leader, and says so in an event.
func TestLeaderBalance_PreferredReplicaLeadsAgain(t *testing.T) {
	ns := namespace(t)
	c := fastCluster(ns, "lb", 3)
	// No settle time: the reconcile that stores a report decides from it.
	c.Spec.LeaderBalance = felixv1.LeaderBalanceSpec{Mode: felixv1.LeaderBalancePreferred, SettleTime: &metav1.Duration{}}
	p, f1, f2 := failedOver(t, c)

	// f1 still names p's old id: p is not counted, leadership stays (the
	// reconcile that counted 2/3 from this report kept the assignment).
	oldID := getShard(t, ns, "s-0").Status.Report.LeaderStorageID
	f1.reports.Set("s-0", report(f1, 2, line(p, oldID, 100, true), line(f2, f2.storageID, 100, true)))
	eventually(t, 10*time.Second, "f1's report stored", func() (bool, string) {
		s := getShard(t, ns, "s-0")
		return s.Status.Report != nil && s.Status.Report.Epoch == 2 && s.Status.CaughtUp == "2/3", s.Status.CaughtUp
	})
	if a := getShard(t, ns, "s-0").Status.Assignment; a.Epoch != 2 || a.Leader != f1.name {
		t.Fatalf("leadership moved to a replica not caught up under its registered id: %+v", a)
	}

	// p caught up under its new id: it leads again at epoch 3.
	f1.reports.Set("s-0", report(f1, 2, line(p, p.storageID, 100, true), line(f2, f2.storageID, 100, true)))
	eventually(t, 15*time.Second, "switchover to "+p.name, func() (bool, string) {
		a := getShard(t, ns, "s-0").Status.Assignment
		return a.Epoch == 3 && a.Leader == p.name, a.Leader
	})
	a := getShard(t, ns, "s-0").Status.Assignment
	counted := map[string]string{}
	for _, c := range a.Counted {
		counted[c.Name] = c.StorageID
	}
	if counted[p.name] != p.storageID || counted[f1.name] != f1.storageID || counted[f2.name] != f2.storageID {
		t.Fatalf("counted %v; want every replica under its current id", counted)
	}
	eventually(t, 10*time.Second, "Switchover event", func() (bool, string) { return hasEvent(ns, "s-0", "Switchover") })
}

// TestLeaderBalance_Off: with leaderBalance.mode Off the shard stays with
// the leader its failover chose, caught-up preferred replica or not.
func TestLeaderBalance_Off(t *testing.T) {
	ns := namespace(t)
	c := fastCluster(ns, "lboff", 3)
	c.Spec.LeaderBalance = felixv1.LeaderBalanceSpec{Mode: felixv1.LeaderBalanceOff, SettleTime: &metav1.Duration{}}
	p, f1, f2 := failedOver(t, c)
	f1.reports.Set("s-0", report(f1, 2, line(p, p.storageID, 100, true), line(f2, f2.storageID, 100, true)))
	eventually(t, 10*time.Second, "f1's report stored", func() (bool, string) {
		s := getShard(t, ns, "s-0")
		return s.Status.Report != nil && s.Status.Report.Epoch == 2 && s.Status.CaughtUp == "3/3", s.Status.CaughtUp
	})
	if a := getShard(t, ns, "s-0").Status.Assignment; a.Epoch != 2 || a.Leader != f1.name {
		t.Fatalf("leadership moved with balancing off: %+v", a)
	}
	if ok, _ := hasEvent(ns, "s-0", "Switchover"); ok {
		t.Fatal("Switchover event with balancing off")
	}
}

// TestLeaderBalance_Default: a cluster that says nothing balances, with
// the documented settle time.
func TestLeaderBalance_Default(t *testing.T) {
	ns := namespace(t)
	create(t, fastCluster(ns, "lbdef", 1))
	c := getCluster(t, ns, "lbdef")
	on, settle := c.Spec.PreferredLeaderBalance()
	if !on || settle != felixv1.DefaultLeaderSettleTime || c.Spec.LeaderBalance.Mode != felixv1.LeaderBalancePreferred {
		t.Fatalf("defaulted leaderBalance %+v: on=%v settle=%v", c.Spec.LeaderBalance, on, settle)
	}
	if !strings.Contains(c.Spec.LeaderBalance.SettleTime.Duration.String(), "30s") {
		t.Fatalf("settleTime %v, want 30s", c.Spec.LeaderBalance.SettleTime)
	}
}

// annotateShard sets (or, with value "", removes) an annotation of a
// FelixShard, retrying conflicts.
func annotateShard(t *testing.T, ns, name, key, value string) {
	t.Helper()
	eventually(t, 10*time.Second, "shard annotated", func() (bool, string) {
		var sh felixv1.FelixShard
		if err := suite.c.Get(context.Background(), client.ObjectKey{Namespace: ns, Name: name}, &sh); err != nil {
			return false, err.Error()
		}
		if value == "" {
			delete(sh.Annotations, key)
		} else {
			if sh.Annotations == nil {
				sh.Annotations = map[string]string{}
			}
			sh.Annotations[key] = value
		}
		err := suite.c.Update(context.Background(), &sh)
		return err == nil, errString(err)
	})
}

// TestSwitchover_AnnotationMovesLeadership: with balancing off, the
// felix.dev/preferred-leader annotation moves leadership to the replica it
// names in a planned promotion at a new epoch, only once the leader's
// report counts that replica caught up under its registered id [CP-1];
// a name that is no replica is ignored with a Warning event.
func TestSwitchover_AnnotationMovesLeadership(t *testing.T) {
	ns := namespace(t)
	c := fastCluster(ns, "sw", 3)
	c.Spec.LeaderBalance = felixv1.LeaderBalanceSpec{Mode: felixv1.LeaderBalanceOff}
	brokers := placedIn(t, c, 1, 3)
	sh := getShard(t, ns, "s-0")
	p, f1, f2 := brokers[sh.Spec.Replicas[0]], brokers[sh.Spec.Replicas[1]], brokers[sh.Spec.Replicas[2]]

	annotateShard(t, ns, "s-0", felixv1.AnnotationPreferredLeader, "nobody")
	eventually(t, 10*time.Second, "SwitchoverIgnored event", func() (bool, string) { return hasEvent(ns, "s-0", "SwitchoverIgnored") })

	// f2 is not caught up in p's report: leadership stays.
	annotateShard(t, ns, "s-0", felixv1.AnnotationPreferredLeader, f2.name)
	p.reports.Set("s-0", report(p, 1, line(f1, f1.storageID, 100, true), line(f2, f2.storageID, 90, false)))
	eventually(t, 10*time.Second, "p's report stored", func() (bool, string) {
		s := getShard(t, ns, "s-0")
		return s.Status.CaughtUp == "2/3", s.Status.CaughtUp
	})
	if a := getShard(t, ns, "s-0").Status.Assignment; a.Epoch != 1 || a.Leader != p.name {
		t.Fatalf("leadership moved to a replica that is not caught up: %+v", a)
	}

	p.reports.Set("s-0", report(p, 1, line(f1, f1.storageID, 100, true), line(f2, f2.storageID, 100, true)))
	eventually(t, 15*time.Second, "switchover to "+f2.name, func() (bool, string) {
		a := getShard(t, ns, "s-0").Status.Assignment
		return a.Epoch == 2 && a.Leader == f2.name, a.Leader
	})
	eventually(t, 10*time.Second, "Switchover event", func() (bool, string) { return hasEvent(ns, "s-0", "Switchover") })
}
