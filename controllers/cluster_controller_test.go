package controllers_test

import (
	"context"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	coordinationv1 "k8s.io/api/coordination/v1"
	corev1 "k8s.io/api/core/v1"
	policyv1 "k8s.io/api/policy/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/client"

	felixv1 "felix.dev/felix/api/v1alpha1"
	"felix.dev/felix/controllers"
)

// TestCluster_CreatesBrokerResources checks every object a FelixCluster
// gets and the specs that matter (no kubelet runs: pods stay Pending).
func TestCluster_CreatesBrokerResources(t *testing.T) {
	ns := namespace(t)
	ctx := context.Background()
	fc := fastCluster(ns, "alpha", 3)
	fc.Spec.Durability = felixv1.DurabilitySpec{Fsync: felixv1.FsyncPeriodic, FsyncInterval: &metav1.Duration{Duration: 50 * time.Millisecond}}
	create(t, fc)

	eventually(t, 20*time.Second, "three broker pods", func() (bool, string) {
		var pods corev1.PodList
		if err := suite.c.List(ctx, &pods, client.InNamespace(ns)); err != nil {
			return false, err.Error()
		}
		return len(pods.Items) == 3, "pods: " + itoa(len(pods.Items))
	})
	key := func(n string) types.NamespacedName { return types.NamespacedName{Namespace: ns, Name: n} }
	var pod corev1.Pod
	if err := suite.c.Get(ctx, key("alpha-1"), &pod); err != nil {
		t.Fatalf("pod alpha-1: %v", err)
	}
	ctr := pod.Spec.Containers[0]
	args := strings.Join(ctr.Args, " ")
	for _, want := range []string{"broker", "--data-dir /var/lib/felix", "--listen :7100", "--http :7101", "--fsync Periodic", "--fsync-interval 50ms", "--cluster alpha", "--heartbeat-interval 500ms", "--node-expiry 1.5s"} {
		if !strings.Contains(args, want) {
			t.Errorf("pod args %q lack %q", args, want)
		}
	}
	if len(ctr.Command) != 1 || ctr.Command[0] != "felix" || ctr.Image != "felix:test" {
		t.Errorf("command %v image %s", ctr.Command, ctr.Image)
	}
	env := map[string]string{}
	for _, e := range ctr.Env {
		if e.ValueFrom != nil && e.ValueFrom.FieldRef != nil {
			env[e.Name] = e.ValueFrom.FieldRef.FieldPath
		}
	}
	if env["POD_NAME"] != "metadata.name" || env["POD_IP"] != "status.podIP" || env["NAMESPACE"] != "metadata.namespace" {
		t.Errorf("downward API env: %v", env)
	}
	if ctr.ReadinessProbe == nil || ctr.ReadinessProbe.HTTPGet.Path != "/ready" || ctr.LivenessProbe == nil || ctr.LivenessProbe.HTTPGet.Path != "/live" {
		t.Errorf("probes: readiness %+v liveness %+v", ctr.ReadinessProbe, ctr.LivenessProbe)
	}
	sc := ctr.SecurityContext
	if sc == nil || sc.ReadOnlyRootFilesystem == nil || !*sc.ReadOnlyRootFilesystem || sc.RunAsNonRoot == nil || !*sc.RunAsNonRoot ||
		pod.Spec.SecurityContext == nil || pod.Spec.SecurityContext.RunAsUser == nil || *pod.Spec.SecurityContext.RunAsUser == 0 {
		t.Errorf("pod must run non-root with a read-only root filesystem: %+v / %+v", sc, pod.Spec.SecurityContext)
	}
	if pod.Spec.ServiceAccountName != "alpha-broker" || pod.Spec.Subdomain != "alpha-brokers" {
		t.Errorf("service account %q subdomain %q", pod.Spec.ServiceAccountName, pod.Spec.Subdomain)
	}
	if len(pod.OwnerReferences) != 1 || pod.OwnerReferences[0].Kind != "FelixCluster" {
		t.Errorf("pod owner: %+v", pod.OwnerReferences)
	}
	var pvc corev1.PersistentVolumeClaim
	if err := suite.c.Get(ctx, key("data-alpha-1"), &pvc); err != nil {
		t.Errorf("pvc: %v", err)
	}
	for i := int32(0); i < 3; i++ {
		name := controllers.BrokerName("alpha", i)
		eventually(t, 10*time.Second, "FelixBroker and Lease "+name, func() (bool, string) {
			var b felixv1.FelixBroker
			var l coordinationv1.Lease
			if err := suite.c.Get(ctx, key(name), &b); err != nil {
				return false, err.Error()
			}
			if err := suite.c.Get(ctx, key(name), &l); err != nil {
				return false, err.Error()
			}
			return b.Spec.Ordinal == i && b.Spec.Cluster == "alpha", "spec"
		})
	}
	var role rbacv1.Role
	if err := suite.c.Get(ctx, key("alpha-broker"), &role); err != nil {
		t.Fatalf("role: %v", err)
	}
	for _, r := range role.Rules {
		if slices.Contains(r.Verbs, "delete") || slices.Contains(r.Verbs, "create") || slices.Contains(r.Verbs, "*") {
			t.Errorf("broker role grants more than it needs: %+v", r)
		}
		if slices.Contains(r.Resources, "leases") && !slices.Equal(r.ResourceNames, []string{"alpha-0", "alpha-1", "alpha-2"}) {
			t.Errorf("lease rule must name the brokers' own leases: %+v", r)
		}
	}
	var rb rbacv1.RoleBinding
	var sa corev1.ServiceAccount
	var headless, clientSvc corev1.Service
	var cm corev1.ConfigMap
	var pdb policyv1.PodDisruptionBudget
	for _, o := range []struct {
		name string
		obj  client.Object
	}{{"alpha-broker", &rb}, {"alpha-broker", &sa}, {"alpha-brokers", &headless}, {"alpha", &clientSvc}, {"alpha-config", &cm}, {"alpha-brokers", &pdb}} {
		if err := suite.c.Get(ctx, key(o.name), o.obj); err != nil {
			t.Errorf("%T %s: %v", o.obj, o.name, err)
		}
	}
	if headless.Spec.ClusterIP != corev1.ClusterIPNone || clientSvc.Spec.ClusterIP == corev1.ClusterIPNone {
		t.Errorf("headless %q client %q", headless.Spec.ClusterIP, clientSvc.Spec.ClusterIP)
	}
	if cm.Data["FELIX_FSYNC"] != "Periodic" || pdb.Spec.MinAvailable == nil || pdb.Spec.MinAvailable.IntValue() != 2 || pdb.Spec.MaxUnavailable != nil {
		t.Errorf("configmap %v pdb %+v", cm.Data, pdb.Spec)
	}
	eventually(t, 10*time.Second, "cluster status", func() (bool, string) {
		var c felixv1.FelixCluster
		if err := suite.c.Get(ctx, key("alpha"), &c); err != nil {
			return false, err.Error()
		}
		ready, prog := condition(c.Status.Conditions, felixv1.ConditionReady), condition(c.Status.Conditions, felixv1.ConditionProgressing)
		if ready == nil || prog == nil {
			return false, "no conditions"
		}
		return ready.Status == metav1.ConditionFalse && prog.Status == metav1.ConditionTrue && prog.Reason == "WaitingForRegistration" && c.Status.ReadyBrokers == 0,
			prog.Reason + "/" + string(ready.Status)
	})
}

// TestCluster_ReadyOnceBrokersRegisterAndHeartbeat: registered, heartbeating
// brokers make the cluster Ready.
func TestCluster_ReadyOnceBrokersRegisterAndHeartbeat(t *testing.T) {
	ns := namespace(t)
	create(t, fastCluster(ns, "beta", 2))
	waitForBrokers(t, ns, "beta", 2)
	startBroker(t, ns, "beta", 0)
	startBroker(t, ns, "beta", 1)
	eventually(t, 15*time.Second, "cluster Ready", func() (bool, string) {
		var c felixv1.FelixCluster
		if err := suite.c.Get(context.Background(), types.NamespacedName{Namespace: ns, Name: "beta"}, &c); err != nil {
			return false, err.Error()
		}
		return conditionTrue(c.Status.Conditions, felixv1.ConditionReady) && c.Status.ReadyBrokers == 2, itoa(int(c.Status.ReadyBrokers))
	})
	eventually(t, 10*time.Second, "ClusterReady event", func() (bool, string) { return hasEvent(ns, "beta", "ClusterReady") })
}

// TestCluster_ScaleDownOnlyBrokersWithoutReplicas: a broker holding a
// replica blocks scale-down with a clear condition; once it holds none it
// is removed and its FelixBroker is Left.
func TestCluster_ScaleDownOnlyBrokersWithoutReplicas(t *testing.T) {
	ns := namespace(t)
	ctx := context.Background()
	fc := fastCluster(ns, "gamma", 2)
	create(t, fc)
	waitForBrokers(t, ns, "gamma", 2)
	// Scale up to 3.
	patchBrokers(t, ns, "gamma", 3)
	waitForBrokers(t, ns, "gamma", 3)
	eventually(t, 10*time.Second, "pod gamma-2", func() (bool, string) {
		var p corev1.Pod
		err := suite.c.Get(ctx, types.NamespacedName{Namespace: ns, Name: "gamma-2"}, &p)
		return err == nil, "missing"
	})
	sh := &felixv1.FelixShard{
		ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "s-0", Labels: map[string]string{controllers.LabelCluster: "gamma"}},
		Spec:       felixv1.FelixShardSpec{Stream: "s", Index: 0, Replicas: []string{"gamma-2"}},
	}
	create(t, sh)
	patchBrokers(t, ns, "gamma", 2)
	eventually(t, 10*time.Second, "ScaleDownBlocked", func() (bool, string) {
		var c felixv1.FelixCluster
		_ = suite.c.Get(ctx, types.NamespacedName{Namespace: ns, Name: "gamma"}, &c)
		d := condition(c.Status.Conditions, felixv1.ConditionDegraded)
		if d == nil {
			return false, "no Degraded"
		}
		return d.Status == metav1.ConditionTrue && d.Reason == "ScaleDownBlocked" && strings.Contains(d.Message, "gamma-2 holds replicas of 1 shards (s-0)"), d.Reason + ": " + d.Message
	})
	var p corev1.Pod
	if err := suite.c.Get(ctx, types.NamespacedName{Namespace: ns, Name: "gamma-2"}, &p); err != nil {
		t.Fatalf("blocked broker's pod must stay: %v", err)
	}
	if err := suite.c.Delete(ctx, sh); err != nil {
		t.Fatal(err)
	}
	eventually(t, 15*time.Second, "gamma-2 removed and Left", func() (bool, string) {
		err := suite.c.Get(ctx, types.NamespacedName{Namespace: ns, Name: "gamma-2"}, &corev1.Pod{})
		if !apierrors.IsNotFound(err) {
			return false, "pod still there"
		}
		b := getBroker(t, ns, "gamma-2")
		if b == nil {
			return false, "FelixBroker gone"
		}
		return b.Status.State == felixv1.BrokerLeft, string(b.Status.State)
	})
	eventually(t, 10*time.Second, "BrokerLeft event", func() (bool, string) { return hasEvent(ns, "gamma-2", "BrokerLeft") })
}

func patchBrokers(t *testing.T, ns, name string, n int32, touch ...string) {
	t.Helper()
	var c felixv1.FelixCluster
	if err := suite.c.Get(context.Background(), types.NamespacedName{Namespace: ns, Name: name}, &c); err != nil {
		t.Fatal(err)
	}
	orig := c.DeepCopy()
	c.Spec.Brokers = n
	if len(touch) > 0 {
		if c.Annotations == nil {
			c.Annotations = map[string]string{}
		}
		c.Annotations["test/touch"] = randHex(4)
	}
	if err := suite.c.Patch(context.Background(), &c, client.MergeFrom(orig)); err != nil {
		t.Fatal(err)
	}
}

func conditionTrue(conds []metav1.Condition, typ string) bool {
	c := condition(conds, typ)
	return c != nil && c.Status == metav1.ConditionTrue
}

func itoa(n int) string { return strconv.Itoa(n) }

// markPodReady sets a pod's Ready condition as a kubelet would.
func markPodReady(t *testing.T, ns, name string) {
	t.Helper()
	ctx := context.Background()
	var p corev1.Pod
	if err := suite.c.Get(ctx, types.NamespacedName{Namespace: ns, Name: name}, &p); err != nil {
		t.Fatal(err)
	}
	p.Status.Conditions = []corev1.PodCondition{{Type: corev1.PodReady, Status: corev1.ConditionTrue, LastTransitionTime: metav1.Now()}}
	if err := suite.c.Status().Update(ctx, &p); err != nil {
		t.Fatal(err)
	}
}

func podImage(ns, name string) string {
	var p corev1.Pod
	if err := suite.c.Get(context.Background(), types.NamespacedName{Namespace: ns, Name: name}, &p); err != nil || p.DeletionTimestamp != nil {
		return ""
	}
	return p.Spec.Containers[0].Image
}

// TestCluster_RollingUpdateOneBrokerAtATime: a spec change replaces one
// broker pod at a time, the next only once every pod is ready again.
func TestCluster_RollingUpdateOneBrokerAtATime(t *testing.T) {
	ns := namespace(t)
	ctx := context.Background()
	create(t, fastCluster(ns, "roll", 2))
	waitForBrokers(t, ns, "roll", 2)
	startBroker(t, ns, "roll", 0)
	startBroker(t, ns, "roll", 1)
	eventually(t, 10*time.Second, "pods", func() (bool, string) {
		return podImage(ns, "roll-0") != "" && podImage(ns, "roll-1") != "", "missing"
	})
	markPodReady(t, ns, "roll-0")
	markPodReady(t, ns, "roll-1")

	var c felixv1.FelixCluster
	if err := suite.c.Get(ctx, types.NamespacedName{Namespace: ns, Name: "roll"}, &c); err != nil {
		t.Fatal(err)
	}
	orig := c.DeepCopy()
	c.Spec.Image = "felix:v2"
	if err := suite.c.Patch(ctx, &c, client.MergeFrom(orig)); err != nil {
		t.Fatal(err)
	}
	eventually(t, 10*time.Second, "one pod replaced", func() (bool, string) {
		a, b := podImage(ns, "roll-0"), podImage(ns, "roll-1")
		return (a == "felix:v2") != (b == "felix:v2"), a + "," + b
	})
	// The replaced pod is not ready: the other must keep the old spec.
	time.Sleep(500 * time.Millisecond)
	a, b := podImage(ns, "roll-0"), podImage(ns, "roll-1")
	if a == "felix:v2" && b == "felix:v2" {
		t.Fatal("both brokers replaced while one was not ready")
	}
	fresh := "roll-0"
	if b == "felix:v2" {
		fresh = "roll-1"
	}
	markPodReady(t, ns, fresh)
	eventually(t, 10*time.Second, "both pods on the new spec", func() (bool, string) {
		a, b := podImage(ns, "roll-0"), podImage(ns, "roll-1")
		return a == "felix:v2" && b == "felix:v2", a + "," + b
	})
	eventually(t, 10*time.Second, "BrokerReplaced event", func() (bool, string) { return hasEvent(ns, "roll", "BrokerReplaced") })
}
