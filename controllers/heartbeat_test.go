package controllers_test

import (
	"context"
	"testing"
	"time"

	coordinationv1 "k8s.io/api/coordination/v1"
	"k8s.io/apimachinery/pkg/types"

	felixv1 "felix.dev/felix/api/v1alpha1"
	"felix.dev/felix/broker/controlplane"
)

// TestHeartbeat_UpDownLeft: a broker renewing its Lease is Up; one that
// stops renewing is Down once the node expiry passes (with a condition and
// an event); a broker removed from the cluster is Left.
func TestHeartbeat_UpDownLeft(t *testing.T) {
	ns := namespace(t)
	create(t, fastCluster(ns, "hb", 2))
	waitForBrokers(t, ns, "hb", 2)
	b1 := startBroker(t, ns, "hb", 1)

	eventually(t, 10*time.Second, "hb-1 Up", func() (bool, string) {
		b := getBroker(t, ns, "hb-1")
		return b.Status.State == felixv1.BrokerUp && conditionTrue(b.Status.Conditions, felixv1.ConditionReady) && b.Status.LastHeartbeat != nil, string(b.Status.State)
	})
	var l coordinationv1.Lease
	if err := suite.c.Get(context.Background(), types.NamespacedName{Namespace: ns, Name: "hb-1"}, &l); err != nil {
		t.Fatal(err)
	}
	if l.Spec.HolderIdentity == nil || *l.Spec.HolderIdentity != "hb-1" || l.Annotations[controlplane.LeaseAnnotationIncarnation] != "1" {
		t.Fatalf("lease: holder %v annotations %v", l.Spec.HolderIdentity, l.Annotations)
	}
	if b0 := getBroker(t, ns, "hb-0"); b0.Status.State == felixv1.BrokerUp {
		t.Fatalf("hb-0 never renewed but is %s", b0.Status.State)
	}

	stopped := time.Now()
	b1.stop()
	eventually(t, 10*time.Second, "hb-1 Down", func() (bool, string) {
		b := getBroker(t, ns, "hb-1")
		return b.Status.State == felixv1.BrokerDown, string(b.Status.State)
	})
	// Down is decided by the requeue at the expiry, not by a poll: it
	// lands no earlier than the node expiry (1.5s) after the last renewal,
	// which was at most one heartbeat (0.5s) before the stop.
	if took := time.Since(stopped); took < 900*time.Millisecond || took > 8*time.Second {
		t.Errorf("Down after %s; want about the node expiry (1.5s)", took)
	}
	b := getBroker(t, ns, "hb-1")
	if c := condition(b.Status.Conditions, felixv1.ConditionReady); c == nil || c.Status != "False" || c.Reason != "HeartbeatExpired" {
		t.Errorf("Ready condition after expiry: %+v", c)
	}
	eventually(t, 10*time.Second, "BrokerDown event", func() (bool, string) { return hasEvent(ns, "hb-1", "BrokerDown") })

	patchBrokers(t, ns, "hb", 1)
	eventually(t, 10*time.Second, "hb-1 Left", func() (bool, string) {
		b := getBroker(t, ns, "hb-1")
		return b.Status.State == felixv1.BrokerLeft, string(b.Status.State)
	})
}
