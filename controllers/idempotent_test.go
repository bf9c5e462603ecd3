package controllers_test

import (
	"context"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	networkingv1 "k8s.io/api/networking/v1"
	policyv1 "k8s.io/api/policy/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	felixv1 "felix.dev/felix/api/v1alpha1"
	"felix.dev/felix/controllers"
)

// TestCluster_ReconcileWritesNothingWhenNothingChanged: reconciles of an
// unchanged cluster leave every object it owns untouched (no update loop).
func TestCluster_ReconcileWritesNothingWhenNothingChanged(t *testing.T) {
	ns := namespace(t)
	ctx := context.Background()
	installBrokerAuthRBAC(t, ctx)
	create(t, fastCluster(ns, "idem", 2))
	waitForBrokers(t, ns, "idem", 2)
	objs := []struct {
		name string
		obj  client.Object
	}{
		{"idem-broker", &corev1.ServiceAccount{}}, {"idem-broker", &rbacv1.Role{}}, {"idem-broker", &rbacv1.RoleBinding{}},
		{"idem-brokers", &corev1.Service{}}, {"idem", &corev1.Service{}}, {"idem-config", &corev1.ConfigMap{}},
		{"idem-brokers", &policyv1.PodDisruptionBudget{}}, {"idem-0", &corev1.Pod{}}, {"data-idem-1", &corev1.PersistentVolumeClaim{}},
		{"idem-ca", &corev1.Secret{}}, {"idem-0-tls", &corev1.Secret{}},
		{"idem-brokers", &networkingv1.NetworkPolicy{}},
		{controllers.DefaultBrokerAuthDelegatorRole, &rbacv1.ClusterRoleBinding{}},
	}
	rvs := func() map[string]string {
		out := map[string]string{}
		for _, o := range objs {
			key := client.ObjectKey{Namespace: ns, Name: o.name}
			if _, cluster := o.obj.(*rbacv1.ClusterRoleBinding); cluster {
				key.Namespace = ""
			}
			if err := suite.c.Get(ctx, key, o.obj); err != nil {
				t.Fatalf("%T %s: %v", o.obj, o.name, err)
			}
			out[o.name+"/"+o.obj.GetObjectKind().GroupVersionKind().Kind+typeName(o.obj)] = o.obj.GetResourceVersion()
		}
		return out
	}
	eventually(t, 20*time.Second, "subject idem-broker", func() (bool, string) { return hasBrokerSubject(ctx, ns, "idem") })
	// Let the first reconciles settle.
	var c felixv1.FelixCluster
	eventually(t, 10*time.Second, "status written", func() (bool, string) {
		_ = suite.c.Get(ctx, client.ObjectKey{Namespace: ns, Name: "idem"}, &c)
		return c.Status.ObservedGeneration == c.Generation && len(c.Status.Conditions) == 5, "no status"
	})
	before := rvs()
	clusterRV := c.ResourceVersion
	for i := 0; i < 3; i++ {
		patchBrokers(t, ns, "idem", 2, "touch") // an annotation change triggers a reconcile
	}
	eventually(t, 10*time.Second, "reconciled after the touches", func() (bool, string) {
		var now felixv1.FelixCluster
		_ = suite.c.Get(ctx, client.ObjectKey{Namespace: ns, Name: "idem"}, &now)
		return now.ResourceVersion != clusterRV, "not yet"
	})
	time.Sleep(time.Second) // give an update loop time to show itself
	after := rvs()
	for k, v := range before {
		if after[k] != v {
			t.Errorf("%s rewritten by a reconcile that changed nothing (rv %s -> %s)", k, v, after[k])
		}
	}
}

func typeName(o client.Object) string {
	switch o.(type) {
	case *corev1.ServiceAccount:
		return "ServiceAccount"
	case *rbacv1.Role:
		return "Role"
	case *rbacv1.RoleBinding:
		return "RoleBinding"
	case *corev1.Service:
		return "Service"
	case *corev1.ConfigMap:
		return "ConfigMap"
	case *policyv1.PodDisruptionBudget:
		return "PDB"
	case *corev1.Pod:
		return "Pod"
	case *corev1.Secret:
		return "Secret"
	case *networkingv1.NetworkPolicy:
		return "NetworkPolicy"
	case *rbacv1.ClusterRoleBinding:
		return "ClusterRoleBinding"
	default:
		return "PVC"
	}
}
