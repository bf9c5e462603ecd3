package controllers_test

import (
	"context"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	storagev1 "k8s.io/api/storage/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"

	felixv1 "felix.dev/felix/api/v1alpha1"
	"felix.dev/felix/controllers"
)

// holdFinalizer stands in for the claim protection of a real cluster (no
// kube-controller-manager runs here): a claim carrying it stays
// Terminating until the test lets it go.
const holdFinalizer = "felix.dev/test-hold"

// waitForBrokerObjects waits for a broker's pod and claim and returns them.
func waitForBrokerObjects(t *testing.T, ns, broker string) (*corev1.Pod, *corev1.PersistentVolumeClaim) {
	t.Helper()
	ctx := context.Background()
	var pod corev1.Pod
	var pvc corev1.PersistentVolumeClaim
	eventually(t, 20*time.Second, "pod and claim of "+broker, func() (bool, string) {
		if err := suite.c.Get(ctx, types.NamespacedName{Namespace: ns, Name: broker}, &pod); err != nil {
			return false, "pod: " + err.Error()
		}
		if err := suite.c.Get(ctx, types.NamespacedName{Namespace: ns, Name: controllers.PVCName(broker)}, &pvc); err != nil {
			return false, "claim: " + err.Error()
		}
		return pvc.DeletionTimestamp == nil && pod.DeletionTimestamp == nil, "terminating"
	})
	return &pod, &pvc
}

// deleteHeldClaim deletes a broker's claim while holdFinalizer keeps it
// Terminating.
func deleteHeldClaim(t *testing.T, pvc *corev1.PersistentVolumeClaim) {
	t.Helper()
	ctx := context.Background()
	orig := pvc.DeepCopy()
	pvc.Finalizers = append(pvc.Finalizers, holdFinalizer)
	if err := suite.c.Patch(ctx, pvc, client.MergeFrom(orig)); err != nil {
		t.Fatalf("hold claim: %v", err)
	}
	if err := suite.c.Delete(ctx, pvc); err != nil {
		t.Fatalf("delete claim: %v", err)
	}
}

// releaseClaim removes every finalizer of a terminating claim (the
// protection's included, which nothing here would remove), so it goes.
func releaseClaim(t *testing.T, ns, name string) {
	t.Helper()
	ctx := context.Background()
	var pvc corev1.PersistentVolumeClaim
	if err := suite.c.Get(ctx, types.NamespacedName{Namespace: ns, Name: name}, &pvc); err != nil {
		t.Fatalf("claim %s: %v", name, err)
	}
	if pvc.DeletionTimestamp == nil {
		t.Fatalf("claim %s is not terminating", name)
	}
	orig := pvc.DeepCopy()
	pvc.Finalizers = nil
	if err := suite.c.Patch(ctx, &pvc, client.MergeFrom(orig)); err != nil {
		t.Fatalf("release claim: %v", err)
	}
}

// progressing returns the cluster's Progressing condition.
func progressing(ns, name string) *metav1.Condition {
	var c felixv1.FelixCluster
	if err := suite.c.Get(context.Background(), types.NamespacedName{Namespace: ns, Name: name}, &c); err != nil {
		return nil
	}
	return condition(c.Status.Conditions, felixv1.ConditionProgressing)
}

// waitForNewBroker waits until the broker has a claim and a pod other
// than the ones it had (the UIDs given).
func waitForNewBroker(t *testing.T, ns, broker string, oldPod, oldClaim types.UID) {
	t.Helper()
	ctx := context.Background()
	eventually(t, 20*time.Second, "a new claim and pod for "+broker, func() (bool, string) {
		var pod corev1.Pod
		var pvc corev1.PersistentVolumeClaim
		if err := suite.c.Get(ctx, types.NamespacedName{Namespace: ns, Name: controllers.PVCName(broker)}, &pvc); err != nil {
			return false, "claim: " + err.Error()
		}
		if pvc.UID == oldClaim || pvc.DeletionTimestamp != nil {
			return false, "still the old claim"
		}
		if err := suite.c.Get(ctx, types.NamespacedName{Namespace: ns, Name: broker}, &pod); err != nil {
			return false, "pod: " + err.Error()
		}
		if pod.UID == oldPod {
			return false, "still the old pod"
		}
		return true, ""
	})
}

// TestCluster_DiskReplacementStuckPod: a broker's claim is deleted while
// its pod has not started (here no kubelet runs, so every pod stays
// Pending; on a cluster, a pod created on a terminating claim). The
// operator deletes the pod, creates none while the claim is Terminating,
// says why, and once the claim is gone creates a new claim and pod.
func TestCluster_DiskReplacementStuckPod(t *testing.T) {
	ns := namespace(t)
	create(t, fastCluster(ns, "dr", 2))
	broker := controllers.BrokerName("dr", 1)
	pod, pvc := waitForBrokerObjects(t, ns, broker)
	oldPod, oldClaim := pod.UID, pvc.UID

	deleteHeldClaim(t, pvc)
	eventually(t, 20*time.Second, "Progressing "+controllers.WaitingForVolumeReason, func() (bool, string) {
		c := progressing(ns, "dr")
		if c == nil {
			return false, "no condition"
		}
		return c.Reason == controllers.WaitingForVolumeReason && strings.Contains(c.Message, broker) &&
			!strings.Contains(c.Message, "goes once pod"), c.Reason + ": " + c.Message
	})
	// The condition is written by the pass that decided not to build a
	// pod on the claim; every later pass decides the same while it is
	// Terminating.
	var p corev1.Pod
	err := suite.c.Get(context.Background(), types.NamespacedName{Namespace: ns, Name: broker}, &p)
	if !apierrors.IsNotFound(err) {
		t.Fatalf("a pod exists on the terminating claim (uid %s, old %s): %v", p.UID, oldPod, err)
	}
	eventually(t, 10*time.Second, "events", func() (bool, string) {
		if ok, msg := hasEvent(ns, "dr", controllers.StuckPodDeletedReason); !ok {
			return false, msg
		}
		return hasEvent(ns, "dr", controllers.WaitingForVolumeReason)
	})
	// The other broker is untouched.
	other, _ := waitForBrokerObjects(t, ns, controllers.BrokerName("dr", 0))
	if other.DeletionTimestamp != nil {
		t.Fatalf("broker dr-0's pod is being deleted")
	}

	releaseClaim(t, ns, controllers.PVCName(broker))
	waitForNewBroker(t, ns, broker, oldPod, oldClaim)
	eventually(t, 20*time.Second, "Progressing no longer waits for the claim", func() (bool, string) {
		c := progressing(ns, "dr")
		return c != nil && c.Reason != controllers.WaitingForVolumeReason, "still waiting"
	})
}

// TestCluster_DiskReplacementAsUsersDoIt: `kubectl delete pvc` on a
// running broker (the claim stays while its pod runs, and the operator
// does not stop a running broker), then `kubectl delete pod`: the
// operator does not recreate the pod on the terminating claim; once the
// claim is gone the broker gets a new claim and pod.
func TestCluster_DiskReplacementAsUsersDoIt(t *testing.T) {
	ns := namespace(t)
	ctx := context.Background()
	create(t, fastCluster(ns, "du", 1))
	broker := controllers.BrokerName("du", 0)
	pod, pvc := waitForBrokerObjects(t, ns, broker)
	oldPod, oldClaim := pod.UID, pvc.UID
	// As a kubelet would report a started broker.
	pod.Status.Phase = corev1.PodRunning
	pod.Status.ContainerStatuses = []corev1.ContainerStatus{{Name: "broker", Image: "felix:test", ImageID: "felix:test",
		State: corev1.ContainerState{Running: &corev1.ContainerStateRunning{StartedAt: metav1.Now()}}}}
	if err := suite.c.Status().Update(ctx, pod); err != nil {
		t.Fatalf("pod status: %v", err)
	}

	deleteHeldClaim(t, pvc)
	eventually(t, 20*time.Second, "Progressing says the claim waits for the pod", func() (bool, string) {
		c := progressing(ns, "du")
		if c == nil {
			return false, "no condition"
		}
		return c.Reason == controllers.WaitingForVolumeReason && strings.Contains(c.Message, "goes once pod "+broker), c.Reason + ": " + c.Message
	})
	var p corev1.Pod
	if err := suite.c.Get(ctx, types.NamespacedName{Namespace: ns, Name: broker}, &p); err != nil || p.UID != oldPod || p.DeletionTimestamp != nil {
		t.Fatalf("the running broker's pod must stay: %v (uid %s, old %s)", err, p.UID, oldPod)
	}

	if err := suite.c.Delete(ctx, &p); err != nil {
		t.Fatalf("delete pod: %v", err)
	}
	eventually(t, 20*time.Second, "Progressing says the broker waits for the claim", func() (bool, string) {
		c := progressing(ns, "du")
		if c == nil {
			return false, "no condition"
		}
		return c.Reason == controllers.WaitingForVolumeReason && !strings.Contains(c.Message, "goes once pod"), c.Reason + ": " + c.Message
	})
	if err := suite.c.Get(ctx, types.NamespacedName{Namespace: ns, Name: broker}, &p); !apierrors.IsNotFound(err) {
		t.Fatalf("the operator built a pod on the terminating claim: %v (uid %s)", err, p.UID)
	}

	releaseClaim(t, ns, controllers.PVCName(broker))
	waitForNewBroker(t, ns, broker, oldPod, oldClaim)
}

// storageClass creates a StorageClass (cluster-scoped) and removes it when
// the test ends.
func storageClass(t *testing.T, expandable bool) string {
	t.Helper()
	sc := &storagev1.StorageClass{
		ObjectMeta:           metav1.ObjectMeta{Name: "felix-test-" + randHex(4)},
		Provisioner:          "felix.dev/test",
		AllowVolumeExpansion: ptr.To(expandable),
	}
	create(t, sc)
	t.Cleanup(func() { _ = suite.c.Delete(context.Background(), sc) })
	return sc.Name
}

// bindClaims reports every claim of the cluster Bound with the given
// capacity, as a provisioner and the resizer would.
func bindClaims(t *testing.T, ns, cluster string, brokers int32, capacity string) {
	t.Helper()
	ctx := context.Background()
	for i := int32(0); i < brokers; i++ {
		name := controllers.PVCName(controllers.BrokerName(cluster, i))
		eventually(t, 20*time.Second, "claim "+name+" bound at "+capacity, func() (bool, string) {
			var pvc corev1.PersistentVolumeClaim
			if err := suite.c.Get(ctx, types.NamespacedName{Namespace: ns, Name: name}, &pvc); err != nil {
				return false, err.Error()
			}
			pvc.Status.Phase = corev1.ClaimBound
			pvc.Status.AccessModes = pvc.Spec.AccessModes
			pvc.Status.Capacity = corev1.ResourceList{corev1.ResourceStorage: resource.MustParse(capacity)}
			if err := suite.c.Status().Update(ctx, &pvc); err != nil {
				return false, err.Error()
			}
			return true, ""
		})
	}
}

func setSize(ctx context.Context, ns, name, size string) error {
	var c felixv1.FelixCluster
	if err := suite.c.Get(ctx, types.NamespacedName{Namespace: ns, Name: name}, &c); err != nil {
		return err
	}
	q := resource.MustParse(size)
	c.Spec.Storage.Size = &q
	return suite.c.Update(ctx, &c)
}

// TestCluster_StorageExpansion: growing storage.size raises every
// broker's claim request when the StorageClass allows expansion and
// reports the resize in status until the claims report the capacity; a
// class that does not allow it leaves the claims and says why; the API
// refuses a smaller size.
func TestCluster_StorageExpansion(t *testing.T) {
	ns := namespace(t)
	ctx := context.Background()
	grow, fixed := storageClass(t, true), storageClass(t, false)
	for _, c := range []struct{ name, class string }{{"grow", grow}, {"fixed", fixed}} {
		fc := fastCluster(ns, c.name, 2)
		fc.Spec.Storage = felixv1.StorageSpec{Size: ptr.To(resource.MustParse("1Gi")), StorageClassName: ptr.To(c.class)}
		create(t, fc)
		bindClaims(t, ns, c.name, 2, "1Gi")
		eventually(t, 20*time.Second, c.name+" StorageResized", func() (bool, string) {
			cl := getCluster(t, ns, c.name)
			sr := condition(cl.Status.Conditions, felixv1.ConditionStorageResized)
			if sr == nil || cl.Status.Storage == nil || cl.Status.Storage.Capacity == nil {
				return false, "no condition or capacity yet"
			}
			return sr.Status == metav1.ConditionTrue && cl.Status.Storage.Capacity.String() == "1Gi", sr.Reason + " " + cl.Status.Storage.Capacity.String()
		})
	}

	// Shrinking is refused by the API.
	err := setSize(ctx, ns, "grow", "512Mi")
	if err == nil || !apierrors.IsInvalid(err) || !strings.Contains(err.Error(), "cannot shrink") {
		t.Fatalf("shrinking storage.size: want the API to refuse it, got %v", err)
	}

	for _, name := range []string{"grow", "fixed"} {
		if err := setSize(ctx, ns, name, "2Gi"); err != nil {
			t.Fatalf("grow %s: %v", name, err)
		}
	}
	requests := func(cluster string) []string {
		var out []string
		for i := int32(0); i < 2; i++ {
			var pvc corev1.PersistentVolumeClaim
			if err := suite.c.Get(ctx, types.NamespacedName{Namespace: ns, Name: controllers.PVCName(controllers.BrokerName(cluster, i))}, &pvc); err != nil {
				out = append(out, err.Error())
				continue
			}
			q := pvc.Spec.Resources.Requests[corev1.ResourceStorage]
			out = append(out, q.String())
		}
		return out
	}
	eventually(t, 20*time.Second, "grow's claims ask for 2Gi and status shows the resize", func() (bool, string) {
		r := requests("grow")
		cl := getCluster(t, ns, "grow")
		sr := condition(cl.Status.Conditions, felixv1.ConditionStorageResized)
		if sr == nil || cl.Status.Storage == nil {
			return false, "no status"
		}
		return r[0] == "2Gi" && r[1] == "2Gi" && sr.Status == metav1.ConditionFalse && sr.Reason == controllers.StorageExpandingReason &&
				strings.Join(cl.Status.Storage.Resizing, ",") == "grow-0,grow-1",
			strings.Join(r, ",") + " " + sr.Reason + " " + strings.Join(cl.Status.Storage.Resizing, ",")
	})
	eventually(t, 10*time.Second, "VolumeExpansion event", func() (bool, string) { return hasEvent(ns, "grow", "VolumeExpansion") })

	eventually(t, 20*time.Second, "fixed refuses the expansion", func() (bool, string) {
		cl := getCluster(t, ns, "fixed")
		sr := condition(cl.Status.Conditions, felixv1.ConditionStorageResized)
		if sr == nil {
			return false, "no condition"
		}
		return sr.Status == metav1.ConditionFalse && sr.Reason == controllers.StorageNotExpandableReason && strings.Contains(sr.Message, fixed), sr.Reason + ": " + sr.Message
	})
	eventually(t, 10*time.Second, "ExpansionNotSupported event", func() (bool, string) {
		return hasEvent(ns, "fixed", controllers.StorageNotExpandableReason)
	})
	if r := requests("fixed"); r[0] != "1Gi" || r[1] != "1Gi" {
		t.Fatalf("fixed's claims must keep 1Gi: %v", r)
	}

	// The volumes grow (the resizer's part): the condition clears.
	bindClaims(t, ns, "grow", 2, "2Gi")
	eventually(t, 20*time.Second, "grow resized", func() (bool, string) {
		cl := getCluster(t, ns, "grow")
		sr := condition(cl.Status.Conditions, felixv1.ConditionStorageResized)
		if sr == nil || cl.Status.Storage == nil || cl.Status.Storage.Capacity == nil {
			return false, "no status"
		}
		return sr.Status == metav1.ConditionTrue && cl.Status.Storage.Capacity.String() == "2Gi" && len(cl.Status.Storage.Resizing) == 0,
			sr.Reason + " " + cl.Status.Storage.Capacity.String()
	})
}
