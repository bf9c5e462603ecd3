package controllers_test

import (
	"context"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/client"

	felixv1 "felix.dev/felix/api/v1alpha1"
)

// readyNewPods marks every pod of the cluster that runs image and is not
// Ready yet as Ready (the kubelet's part), and returns how many run it.
func readyNewPods(t *testing.T, ns, cluster, image string, n int32) int {
	t.Helper()
	on := 0
	for i := range n {
		name := cluster + "-" + itoa(int(i))
		var p corev1.Pod
		if err := suite.c.Get(context.Background(), types.NamespacedName{Namespace: ns, Name: name}, &p); err != nil || p.Spec.Containers[0].Image != image {
			continue
		}
		on++
		ready := false
		for _, c := range p.Status.Conditions {
			ready = ready || (c.Type == corev1.PodReady && c.Status == corev1.ConditionTrue)
		}
		if !ready {
			markPodReady(t, ns, name)
		}
	}
	return on
}

// TestCluster_RollingUpdateMovesLeadershipFirst: a rolling update restarts
// the brokers that lead nothing first; before the leader's pod goes, the
// broker is marked draining and its leadership moves to a caught-up
// replica in a planned promotion at a new epoch (no failover); the pod
// goes only once its shards are all caught up again under the new
// leader; the mark comes off when the broker runs the new spec.
func TestCluster_RollingUpdateMovesLeadershipFirst(t *testing.T) {
	ns := namespace(t)
	c := fastCluster(ns, "rl", 3)
	c.Spec.LeaderBalance = felixv1.LeaderBalanceSpec{Mode: felixv1.LeaderBalanceOff}
	brokers := placedIn(t, c, 1, 3)
	for i := range int32(3) {
		markPodReady(t, ns, "rl-"+itoa(int(i)))
	}
	sh := getShard(t, ns, "s-0")
	p, f1, f2 := brokers[sh.Spec.Replicas[0]], brokers[sh.Spec.Replicas[1]], brokers[sh.Spec.Replicas[2]]
	p.reports.Set("s-0", report(p, 1, line(f1, f1.storageID, 100, true), line(f2, f2.storageID, 100, true)))
	eventually(t, 10*time.Second, "caughtUp 3/3", func() (bool, string) {
		s := getShard(t, ns, "s-0")
		return s.Status.CaughtUp == "3/3", s.Status.CaughtUp
	})

	patchImage(t, ns, "rl", "felix:v2")

	// The two followers roll first, the leader's pod untouched meanwhile.
	eventually(t, 30*time.Second, "both followers on the new spec", func() (bool, string) {
		readyNewPods(t, ns, "rl", "felix:v2", 3)
		if podImage(ns, p.name) == "felix:v2" {
			t.Fatalf("the leader %s was replaced before the followers", p.name)
		}
		return podImage(ns, f1.name) == "felix:v2" && podImage(ns, f2.name) == "felix:v2",
			podImage(ns, f1.name) + "," + podImage(ns, f2.name)
	})

	// Then the leader is drained: a planned promotion at epoch 2 to a
	// caught-up follower, while the old leader is still up.
	eventually(t, 15*time.Second, "leadership moved off "+p.name, func() (bool, string) {
		a := getShard(t, ns, "s-0").Status.Assignment
		return a.Epoch == 2 && a.Leader != p.name, a.Leader
	})
	if b := getBroker(t, ns, p.name); b.Annotations[felixv1.AnnotationDrainLeadership] != felixv1.RollingUpdateDrain {
		t.Fatalf("%s not marked draining: %v", p.name, b.Annotations)
	}
	if podImage(ns, p.name) == "felix:v2" {
		t.Fatal("the leader's pod was replaced before its shards were caught up under the new leader")
	}
	eventually(t, 10*time.Second, "Switchover event", func() (bool, string) { return hasEvent(ns, "s-0", "Switchover") })
	var cond string
	eventually(t, 10*time.Second, "the roll waits for the new leader's report", func() (bool, string) {
		got := getCluster(t, ns, "rl")
		for _, c := range got.Status.Conditions {
			if c.Type == felixv1.ConditionProgressing {
				cond = c.Message
			}
		}
		return strings.Contains(cond, "caught up before "+p.name+" restarts"), cond
	})

	// The new leader reports everyone caught up: the old leader's pod goes.
	nl := brokers[getShard(t, ns, "s-0").Status.Assignment.Leader]
	var others []felixv1.FollowerReport
	for _, b := range []*fakeBroker{p, f1, f2} {
		if b != nl {
			others = append(others, line(b, b.storageID, 100, true))
		}
	}
	nl.reports.Set("s-0", report(nl, 2, others...))
	eventually(t, 20*time.Second, "the old leader on the new spec, its mark gone", func() (bool, string) {
		readyNewPods(t, ns, "rl", "felix:v2", 3)
		b := getBroker(t, ns, p.name)
		return podImage(ns, p.name) == "felix:v2" && b.Annotations[felixv1.AnnotationDrainLeadership] == "",
			podImage(ns, p.name) + " " + b.Annotations[felixv1.AnnotationDrainLeadership]
	})
	if a := getShard(t, ns, "s-0").Status.Assignment; a.Epoch != 2 {
		t.Fatalf("epoch %d after the roll, want 2: a restart became a failover", a.Epoch)
	}
	eventually(t, 10*time.Second, "MovingLeadership event", func() (bool, string) { return hasEvent(ns, "rl", "MovingLeadership") })
}

// suiteRollWaitTimeout is the envtest operator's RollWaitTimeout.
const suiteRollWaitTimeout = 15 * time.Second

// TestCluster_RollingUpdateSingleReplicaShardsDoNotStall: a shard with one
// replica has nowhere to move: its broker is restarted without waiting
// for a drain that cannot happen.
func TestCluster_RollingUpdateSingleReplicaShardsDoNotStall(t *testing.T) {
	ns := namespace(t)
	c := fastCluster(ns, "r1", 2)
	placedIn(t, c, 2, 1)
	for i := range int32(2) {
		markPodReady(t, ns, "r1-"+itoa(int(i)))
	}
	patchImage(t, ns, "r1", "felix:v2")
	eventually(t, 10*time.Second, "both brokers on the new spec, well before the roll's wait timeout", func() (bool, string) {
		readyNewPods(t, ns, "r1", "felix:v2", 2)
		return podImage(ns, "r1-0") == "felix:v2" && podImage(ns, "r1-1") == "felix:v2", podImage(ns, "r1-0") + "," + podImage(ns, "r1-1")
	})
}

// TestCluster_RollingUpdateWaitIsBounded: when no follower of a leader's
// shard is caught up, its leadership cannot move; the roll waits for its
// timeout, then restarts the broker anyway and says so.
func TestCluster_RollingUpdateWaitIsBounded(t *testing.T) {
	ns := namespace(t)
	c := fastCluster(ns, "rt", 3)
	c.Spec.LeaderBalance = felixv1.LeaderBalanceSpec{Mode: felixv1.LeaderBalanceOff}
	brokers := placedIn(t, c, 1, 3)
	for i := range int32(3) {
		markPodReady(t, ns, "rt-"+itoa(int(i)))
	}
	sh := getShard(t, ns, "s-0")
	p, f1, f2 := brokers[sh.Spec.Replicas[0]], brokers[sh.Spec.Replicas[1]], brokers[sh.Spec.Replicas[2]]
	// Followers behind: nobody the leadership could move to, and the
	// followers' own restarts wait for the shard to catch up too.
	p.reports.Set("s-0", report(p, 1, line(f1, f1.storageID, 50, false), line(f2, f2.storageID, 50, false)))
	eventually(t, 10*time.Second, "caughtUp 1/3", func() (bool, string) {
		s := getShard(t, ns, "s-0")
		return s.Status.CaughtUp == "1/3", s.Status.CaughtUp
	})
	patchImage(t, ns, "rt", "felix:v2")
	start := time.Now()
	eventually(t, suiteRollWaitTimeout+20*time.Second, "a pod replaced after the wait timeout", func() (bool, string) {
		return readyNewPods(t, ns, "rt", "felix:v2", 3) > 0, "none replaced"
	})
	if waited := time.Since(start); waited < suiteRollWaitTimeout-2*time.Second {
		t.Fatalf("a pod was replaced after %v, before the roll's wait timeout %v, with its shard behind", waited, suiteRollWaitTimeout)
	}
	eventually(t, 10*time.Second, "RollWaitTimedOut event", func() (bool, string) { return hasEvent(ns, "rt", "RollWaitTimedOut") })
}

// patchImage sets the cluster's spec.image with a merge patch: a rolling
// update.
func patchImage(t *testing.T, ns, name, image string) {
	t.Helper()
	ctx := context.Background()
	var cur felixv1.FelixCluster
	if err := suite.c.Get(ctx, types.NamespacedName{Namespace: ns, Name: name}, &cur); err != nil {
		t.Fatal(err)
	}
	orig := cur.DeepCopy()
	cur.Spec.Image = image
	if err := suite.c.Patch(ctx, &cur, client.MergeFrom(orig)); err != nil {
		t.Fatal(err)
	}
}
