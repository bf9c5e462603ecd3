package controllers_test

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"

	felixv1 "felix.dev/felix/api/v1alpha1"
)

// placed starts a cluster of n brokers (all registered and heartbeating)
// and a stream of shards x replicas, and waits until every shard is
// assigned at epoch 1.
func placed(t *testing.T, ns, cluster string, n int32, shards, replicas int32) map[string]*fakeBroker {
	t.Helper()
	return placedIn(t, fastCluster(ns, cluster, n), shards, replicas)
}

// placedIn is placed with the cluster given.
func placedIn(t *testing.T, c *felixv1.FelixCluster, shards, replicas int32) map[string]*fakeBroker {
	t.Helper()
	ns, cluster, n := c.Namespace, c.Name, c.Spec.Brokers
	create(t, c)
	waitForBrokers(t, ns, cluster, n)
	brokers := map[string]*fakeBroker{}
	for i := int32(0); i < n; i++ {
		fb := startBroker(t, ns, cluster, i)
		brokers[fb.name] = fb
	}
	eventually(t, 10*time.Second, "brokers Up", func() (bool, string) {
		for name := range brokers {
			if b := getBroker(t, ns, name); b.Status.State != felixv1.BrokerUp {
				return false, name + " " + string(b.Status.State)
			}
		}
		return true, ""
	})
	create(t, &felixv1.FelixStream{
		ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "s"},
		Spec:       felixv1.FelixStreamSpec{Cluster: cluster, Shards: shards, Replicas: replicas},
	})
	for i := int32(0); i < shards; i++ {
		name := "s-" + itoa(int(i))
		eventually(t, 15*time.Second, name+" assigned", func() (bool, string) {
			sh := getShard(t, ns, name)
			if sh == nil || sh.Status.Assignment == nil {
				return false, "unassigned"
			}
			return sh.Status.Assignment.Epoch == 1, "epoch"
		})
	}
	return brokers
}

// report is a leader's report of shard sh with the given follower lines.
func report(leader *fakeBroker, epoch int64, followers ...felixv1.FollowerReport) felixv1.ShardReport {
	return felixv1.ShardReport{
		Leader: leader.name, LeaderIncarnation: leader.cp.Incarnation(), LeaderStorageID: leader.storageID,
		Epoch: epoch, Position: 100, Committed: 100, TakenAt: metav1.Now(), Followers: followers,
	}
}

func line(b *fakeBroker, id string, confirmed int64, caughtUp bool) felixv1.FollowerReport {
	return felixv1.FollowerReport{Name: b.name, StorageID: id, Confirmed: confirmed, CaughtUp: caughtUp}
}

// TestStream_ShardsSpreadWithFirstAssignmentAtEpoch1: shards get distinct
// brokers, leaders rotate across brokers, every shard starts at epoch 1,
// and caughtUp/Ready/readyShards follow the leaders' reports.
func TestStream_ShardsSpreadWithFirstAssignmentAtEpoch1(t *testing.T) {
	ns := namespace(t)
	brokers := placed(t, ns, "sp", 3, 3, 3)
	leaders := map[string]bool{}
	for i := 0; i < 3; i++ {
		sh := getShard(t, ns, "s-"+itoa(i))
		seen := map[string]bool{}
		for _, r := range sh.Spec.Replicas {
			seen[r] = true
		}
		if len(seen) != 3 {
			t.Fatalf("%s replicas %v not distinct", sh.Name, sh.Spec.Replicas)
		}
		a := sh.Status.Assignment
		if a.Leader != sh.Spec.Replicas[0] || a.LeaderIncarnation != 1 || a.AssignedAt == nil {
			t.Errorf("%s assignment %+v; want the first replica %s at incarnation 1", sh.Name, a, sh.Spec.Replicas[0])
		}
		leaders[a.Leader] = true
		if len(a.Counted) != 3 {
			t.Errorf("%s counted %+v; want every replica of a new shard", sh.Name, a.Counted)
		}
		for _, c := range a.Counted {
			if c.StorageID != brokers[c.Name].storageID {
				t.Errorf("%s counted %s under %s; registered %s", sh.Name, c.Name, c.StorageID, brokers[c.Name].storageID)
			}
		}
		if sh.Labels["felix.dev/stream"] != "s" || len(sh.OwnerReferences) != 1 {
			t.Errorf("%s labels %v owners %v", sh.Name, sh.Labels, sh.OwnerReferences)
		}
		eventually(t, 10*time.Second, "Assigned event", func() (bool, string) { return hasEvent(ns, sh.Name, "Assigned") })
		// The leader reports both followers caught up under their ids.
		leader := brokers[a.Leader]
		var lines []felixv1.FollowerReport
		for _, r := range sh.Spec.Replicas[1:] {
			lines = append(lines, line(brokers[r], brokers[r].storageID, 100, true))
		}
		leader.reports.Set(sh.Name, report(leader, 1, lines...))
	}
	if len(leaders) != 3 {
		t.Errorf("leaders %v; want the three shards led by three brokers", leaders)
	}
	for i := 0; i < 3; i++ {
		name := "s-" + itoa(i)
		eventually(t, 10*time.Second, name+" caught up 3/3 and Ready", func() (bool, string) {
			sh := getShard(t, ns, name)
			return sh.Status.CaughtUp == "3/3" && conditionTrue(sh.Status.Conditions, felixv1.ConditionReady), sh.Status.CaughtUp
		})
	}
	eventually(t, 10*time.Second, "stream readyShards 3", func() (bool, string) {
		var s felixv1.FelixStream
		_ = suite.c.Get(context.Background(), types.NamespacedName{Namespace: ns, Name: "s"}, &s)
		return s.Status.ReadyShards == 3 && conditionTrue(s.Status.Conditions, felixv1.ConditionReady), itoa(int(s.Status.ReadyShards))
	})
}

// TestStream_InsufficientBrokers: more replicas than brokers is a clear
// condition, and no shard is made.
func TestStream_InsufficientBrokers(t *testing.T) {
	ns := namespace(t)
	create(t, fastCluster(ns, "small", 2))
	waitForBrokers(t, ns, "small", 2)
	create(t, &felixv1.FelixStream{
		ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "big"},
		Spec:       felixv1.FelixStreamSpec{Cluster: "small", Shards: 2, Replicas: 3},
	})
	eventually(t, 10*time.Second, "InsufficientBrokers", func() (bool, string) {
		var s felixv1.FelixStream
		_ = suite.c.Get(context.Background(), types.NamespacedName{Namespace: ns, Name: "big"}, &s)
		d := condition(s.Status.Conditions, felixv1.ConditionDegraded)
		if d == nil {
			return false, "no condition"
		}
		return d.Status == metav1.ConditionTrue && d.Reason == "InsufficientBrokers" && strings.Contains(d.Message, "3 replicas"), d.Message
	})
	if getShard(t, ns, "big-0") != nil {
		t.Fatal("a shard was created although its replicas cannot be placed")
	}
}

// TestCP1_PromotesOnlyIDMatchingFollower: the leader dies; the follower
// reported caught up under a storage id it no longer has is never
// promoted, although it reported the higher position; the id-matching
// one is, at the next epoch, with a Promoted event.
func TestCP1_PromotesOnlyIDMatchingFollower(t *testing.T) {
	ns := namespace(t)
	brokers := placed(t, ns, "cp1", 3, 1, 3)
	sh := getShard(t, ns, "s-0")
	leader := brokers[sh.Status.Assignment.Leader]
	f1, f2 := brokers[sh.Spec.Replicas[1]], brokers[sh.Spec.Replicas[2]]
	// f2 loses its disk and registers again under a new id; the leader's
	// report still names the id it was counted under.
	oldID := f2.storageID
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	f2.storageID = newStorageID()
	if inc, err := f2.cp.Register(ctx, f2.storageID, 1, ""); err != nil || inc != 2 {
		t.Fatalf("f2 re-register: %d, %v", inc, err)
	}
	leader.reports.Set("s-0", report(leader, 1, line(f1, f1.storageID, 100, true), line(f2, oldID, 120, true)))
	eventually(t, 10*time.Second, "caughtUp 2/3", func() (bool, string) {
		s := getShard(t, ns, "s-0")
		return s.Status.CaughtUp == "2/3", s.Status.CaughtUp
	})
	leader.stop()
	eventually(t, 15*time.Second, "promotion", func() (bool, string) {
		s := getShard(t, ns, "s-0")
		a := s.Status.Assignment
		return a.Epoch == 2, a.Leader
	})
	s := getShard(t, ns, "s-0")
	if s.Status.Assignment.Leader != f1.name || s.Status.Assignment.LeaderIncarnation != 1 {
		t.Fatalf("promoted %+v; want %s (the id-matching follower)", s.Status.Assignment, f1.name)
	}
	for _, c := range s.Status.Assignment.Counted {
		if c.Name == f2.name {
			t.Errorf("the follower whose id changed is counted for the fence: %+v", s.Status.Assignment.Counted)
		}
	}
	eventually(t, 10*time.Second, "Promoted event", func() (bool, string) { return hasEvent(ns, "s-0", "Promoted") })
	if c := condition(s.Status.Conditions, felixv1.ConditionWaiting); c == nil || c.Status != metav1.ConditionFalse {
		t.Errorf("Waiting after promotion: %+v", c)
	}
}

// TestCP3_WaitsWhenNoFollowerIsEligible: no follower is caught up under
// its registered id; the shard keeps its assignment and waits, with
// Waiting=True, the reason, and an event.
func TestCP3_WaitsWhenNoFollowerIsEligible(t *testing.T) {
	ns := namespace(t)
	brokers := placed(t, ns, "cp3", 3, 1, 3)
	sh := getShard(t, ns, "s-0")
	leader := brokers[sh.Status.Assignment.Leader]
	f1, f2 := brokers[sh.Spec.Replicas[1]], brokers[sh.Spec.Replicas[2]]
	leader.reports.Set("s-0", report(leader, 1, line(f1, f1.storageID, 40, false), line(f2, newStorageID(), 100, true)))
	eventually(t, 10*time.Second, "report stored", func() (bool, string) {
		s := getShard(t, ns, "s-0")
		return s.Status.Report != nil && s.Status.CaughtUp == "1/3", s.Status.CaughtUp
	})
	leader.stop()
	eventually(t, 15*time.Second, "Waiting", func() (bool, string) {
		s := getShard(t, ns, "s-0")
		c := condition(s.Status.Conditions, felixv1.ConditionWaiting)
		if c == nil {
			return false, "no condition"
		}
		return c.Status == metav1.ConditionTrue && c.Reason == "NoEligibleFollower", c.Reason + ": " + c.Message
	})
	s := getShard(t, ns, "s-0")
	if s.Status.Assignment.Epoch != 1 || s.Status.Assignment.Leader != leader.name {
		t.Fatalf("assignment changed while waiting: %+v", s.Status.Assignment)
	}
	c := condition(s.Status.Conditions, felixv1.ConditionWaiting)
	if !strings.Contains(c.Message, f2.name+": IDChanged") || !strings.Contains(c.Message, f1.name+": NotCaughtUp") {
		t.Errorf("Waiting message should name each replica's verdict: %s", c.Message)
	}
	eventually(t, 10*time.Second, "Waiting event", func() (bool, string) { return hasEvent(ns, "s-0", "Waiting") })
}

// TestCP3_TooFewCountedWaitsAfterTwoPowerCuts is the nemesis-h stall of
// issue 25 on the API: the leader reported f1 under the id it had before a
// power cut and f2 caught up; f1 came back under a new id (its boot
// changed) before the leader named it, and then the leader lost power too
// and came back under a new id. Only f2 still holds an id a new leader
// could count, one of three: promoting it would leave the shard recovering
// for ever with no report and no reason. The assignment stays and the
// shard says why.
func TestCP3_TooFewCountedWaitsAfterTwoPowerCuts(t *testing.T) {
	ns := namespace(t)
	brokers := placed(t, ns, "cp3q", 3, 1, 3)
	sh := getShard(t, ns, "s-0")
	leader := brokers[sh.Status.Assignment.Leader]
	var f1, f2 *fakeBroker
	for _, r := range sh.Spec.Replicas {
		if r == leader.name {
			continue
		}
		if f1 == nil {
			f1 = brokers[r]
		} else {
			f2 = brokers[r]
		}
	}
	leader.reports.Set("s-0", report(leader, 1, line(f1, f1.storageID, 90, false), line(f2, f2.storageID, 100, true)))
	eventually(t, 10*time.Second, "caughtUp 2/3", func() (bool, string) {
		s := getShard(t, ns, "s-0")
		return s.Status.CaughtUp == "2/3", s.Status.CaughtUp
	})
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	// f1's power cut: a new boot, a new storage id.
	if _, err := f1.cp.Register(ctx, newStorageID(), 1, ""); err != nil {
		t.Fatalf("f1 re-register: %v", err)
	}
	// Then the leader's, before its report named f1's new id.
	if _, err := leader.cp.Register(ctx, newStorageID(), 1, ""); err != nil {
		t.Fatalf("leader re-register: %v", err)
	}
	eventually(t, 15*time.Second, "Waiting TooFewCounted", func() (bool, string) {
		s := getShard(t, ns, "s-0")
		c := condition(s.Status.Conditions, felixv1.ConditionWaiting)
		if c == nil {
			return false, "no condition; " + assignmentString(s.Status.Assignment)
		}
		return c.Status == metav1.ConditionTrue && c.Reason == "TooFewCounted", c.Reason + ": " + c.Message + "; " + assignmentString(s.Status.Assignment)
	})
	s := getShard(t, ns, "s-0")
	if a := s.Status.Assignment; a.Epoch != 1 || a.Leader != leader.name {
		t.Fatalf("promoted while fewer than a quorum can be counted: %s", assignmentString(a))
	}
	c := condition(s.Status.Conditions, felixv1.ConditionWaiting)
	if !strings.Contains(c.Message, f2.name+": Eligible") || !strings.Contains(c.Message, f1.name+": IDChanged") ||
		!strings.Contains(c.Message, leader.name+": IDChanged") {
		t.Errorf("Waiting message should name each replica's verdict: %s", c.Message)
	}
	eventually(t, 10*time.Second, "Waiting event", func() (bool, string) { return hasEvent(ns, "s-0", "Waiting") })
}

// assignmentString renders an assignment for a test message.
func assignmentString(a *felixv1.Assignment) string {
	if a == nil {
		return "no assignment"
	}
	return fmt.Sprintf("%s@%d/inc%d counted=%v", a.Leader, a.Epoch, a.LeaderIncarnation, a.Counted)
}

// TestCP2_LiveLeadersUnchangedReportStaysUsable: a live leader's
// unchanged report is not rewritten, yet stays usable past the report
// expiry (2 x node expiry + heartbeat = 3.5s here), because the leader's
// "current" heartbeats vouch for it; when the leader dies its report is
// held to its last heartbeat and the id-matching follower is promoted.
func TestCP2_LiveLeadersUnchangedReportStaysUsable(t *testing.T) {
	ns := namespace(t)
	brokers := placed(t, ns, "cp2", 3, 1, 3)
	sh := getShard(t, ns, "s-0")
	leader := brokers[sh.Status.Assignment.Leader]
	f1, f2 := brokers[sh.Spec.Replicas[1]], brokers[sh.Spec.Replicas[2]]
	leader.reports.Set("s-0", report(leader, 1, line(f1, f1.storageID, 100, true), line(f2, f2.storageID, 90, false)))
	eventually(t, 10*time.Second, "caughtUp 2/3", func() (bool, string) {
		s := getShard(t, ns, "s-0")
		return s.Status.CaughtUp == "2/3", s.Status.CaughtUp
	})
	writes := leader.reports.Writes()
	time.Sleep(4 * time.Second) // longer than the report expiry of 3.5s
	if w := leader.reports.Writes(); w != writes {
		t.Fatalf("unchanged report rewritten %d times within 4s", w-writes)
	}
	leader.stop()
	eventually(t, 15*time.Second, "promotion of "+f1.name, func() (bool, string) {
		s := getShard(t, ns, "s-0")
		c := condition(s.Status.Conditions, felixv1.ConditionWaiting)
		msg := ""
		if c != nil {
			msg = c.Message
		}
		return s.Status.Assignment.Epoch == 2 && s.Status.Assignment.Leader == f1.name, msg
	})
}

// TestCP2_RestartedLeaderLeadsAgainOnlyAtNewEpoch: the leader restarts
// (same storage id, new incarnation). It may not lead the epoch it led
// before; placement promotes at the next epoch, and the broker's shard
// watch shows the new assignment (brokers act only on the assignment).
func TestCP2_RestartedLeaderLeadsAgainOnlyAtNewEpoch(t *testing.T) {
	ns := namespace(t)
	brokers := placed(t, ns, "rs", 3, 1, 3)
	sh := getShard(t, ns, "s-0")
	leader := brokers[sh.Status.Assignment.Leader]
	f1, f2 := brokers[sh.Spec.Replicas[1]], brokers[sh.Spec.Replicas[2]]
	leader.reports.Set("s-0", report(leader, 1, line(f1, f1.storageID, 10, false), line(f2, f2.storageID, 10, false)))
	eventually(t, 10*time.Second, "report stored", func() (bool, string) {
		s := getShard(t, ns, "s-0")
		return s.Status.Report != nil, "no report"
	})
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	w, err := leader.cp.NewShardWatcher()
	if err != nil {
		t.Fatal(err)
	}
	go func() { _ = w.Run(ctx) }()
	if !w.WaitForSync(ctx) {
		t.Fatal("watch did not sync")
	}
	// Restart: register again with the same id.
	if inc, err := leader.cp.Register(ctx, leader.storageID, 1, ""); err != nil || inc != 2 {
		t.Fatalf("re-register: %d, %v", inc, err)
	}
	eventually(t, 15*time.Second, "epoch 2", func() (bool, string) {
		s := getShard(t, ns, "s-0")
		a := s.Status.Assignment
		c := condition(s.Status.Conditions, felixv1.ConditionWaiting)
		msg := ""
		if c != nil {
			msg = c.Reason + ": " + c.Message
		}
		return a.Epoch == 2, msg
	})
	a := getShard(t, ns, "s-0").Status.Assignment
	if a.Leader != leader.name || a.LeaderIncarnation != 2 {
		t.Fatalf("assignment %+v; want %s again at incarnation 2 (no follower was caught up)", a, leader.name)
	}
	eventually(t, 10*time.Second, "the broker sees epoch 2", func() (bool, string) {
		as, err := w.Assignments(ctx)
		if err != nil || len(as) != 1 {
			return false, errString(err)
		}
		return as[0].Epoch == 2 && as[0].Leader == leader.name && as[0].LeaderIncarnation == 2 && len(as[0].Counted) > 0, "stale"
	})
}
