package controllers_test

import (
	"context"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"

	felixv1 "felix.dev/felix/api/v1alpha1"
	"felix.dev/felix/controllers"
)

// TestStream_ReplicasSpreadAcrossZones: with brokers' pods bound to nodes
// in three zones (two brokers each, neighbours by name in the same zone),
// every shard's three replicas land in three zones.
func TestStream_ReplicasSpreadAcrossZones(t *testing.T) {
	ns := namespace(t)
	ctx := context.Background()
	create(t, fastCluster(ns, "z", 6))
	waitForBrokers(t, ns, "z", 6)
	zoneOf := map[string]string{}
	for i := int32(0); i < 6; i++ {
		zone := []string{"zone-a", "zone-b", "zone-c"}[i/2]
		node := ns + "-node-" + itoa(int(i))
		create(t, &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: node, Labels: map[string]string{controllers.ZoneLabel: zone}}})
		t.Cleanup(func() {
			_ = suite.c.Delete(context.Background(), &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: node}})
		})
		pod := controllers.BrokerName("z", i)
		zoneOf[pod] = zone
		var p corev1.Pod
		eventually(t, 10*time.Second, "pod "+pod, func() (bool, string) {
			return suite.c.Get(ctx, types.NamespacedName{Namespace: ns, Name: pod}, &p) == nil, "missing"
		})
		b := &corev1.Binding{ObjectMeta: metav1.ObjectMeta{Name: pod, Namespace: ns}, Target: corev1.ObjectReference{Kind: "Node", Name: node}}
		if err := suite.c.SubResource("binding").Create(ctx, &p, b); err != nil {
			t.Fatalf("bind %s: %v", pod, err)
		}
	}
	eventually(t, 10*time.Second, "pods bound", func() (bool, string) {
		for pod := range zoneOf {
			var p corev1.Pod
			if err := suite.c.Get(ctx, types.NamespacedName{Namespace: ns, Name: pod}, &p); err != nil || p.Spec.NodeName == "" {
				return false, pod
			}
		}
		return true, ""
	})
	create(t, &felixv1.FelixStream{
		ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "s"},
		Spec:       felixv1.FelixStreamSpec{Cluster: "z", Shards: 6, Replicas: 3},
	})
	for i := 0; i < 6; i++ {
		name := "s-" + itoa(i)
		var sh *felixv1.FelixShard
		eventually(t, 10*time.Second, name, func() (bool, string) { sh = getShard(t, ns, name); return sh != nil, "missing" })
		zones := map[string]bool{}
		for _, r := range sh.Spec.Replicas {
			zones[zoneOf[r]] = true
		}
		if len(zones) != 3 {
			t.Errorf("%s replicas %v span zones %v; want 3 zones", name, sh.Spec.Replicas, zones)
		}
	}
}
