package controllers

import (
	"context"
	"fmt"
	"sort"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"
	storagev1 "k8s.io/api/storage/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/client"

	felixv1 "felix.dev/felix/api/v1alpha1"
)

// Volume lifecycle of a broker: disk replacement (a claim deleted by the
// user) and expansion (spec.storage.size grown). docs/operator.md has the
// runbook.

// claimRetry is how often a broker whose claim is terminating looks again
// (the PVC watch also triggers it when the claim goes).
const claimRetry = 5 * time.Second

// Reasons of the cluster's conditions and events about volumes.
const (
	// WaitingForVolumeReason: a broker's claim is being deleted; its pod
	// is not created until the claim is gone.
	WaitingForVolumeReason = "WaitingForVolumeDeletion"
	// StuckPodDeletedReason: a broker pod that had not started and used a
	// claim being deleted was deleted, so the claim can go.
	StuckPodDeletedReason = "BrokerPodDeleted"
	// Reasons of the StorageResized condition.
	StorageAsRequestedReason    = "AsRequested"
	StorageExpandingReason      = "Expanding"
	StorageNotExpandableReason  = "ExpansionNotSupported"
	StorageExpansionFailReason  = "ExpansionFailed"
	StorageWaitingToBindReason  = "WaitingForBinding"
	storageExpansionEventReason = "VolumeExpansion"
)

// claimWait is why a broker waits for its claim to go.
type claimWait struct {
	// PodRunning: the broker's pod still runs on the claim, which goes
	// only once the pod is deleted (by the user: the operator does not
	// stop a running broker).
	PodRunning bool
}

// storageObservation is what a reconcile saw of the brokers' claims
// against spec.storage.size.
type storageObservation struct {
	Size resource.Quantity
	// Capacity is the smallest capacity reported by a bound claim; nil
	// when none reports one.
	Capacity *resource.Quantity
	// Expanding: claims asked for Size that report less.
	Expanding []string
	// Unbound: claims below Size not bound yet (a request can change only
	// on a bound claim).
	Unbound []string
	// NotExpandable maps a broker to why its claim cannot grow.
	NotExpandable map[string]string
	// Failed maps a broker to the resize failure its claim reports.
	Failed map[string]string
	// Started: claims whose request this reconcile raised.
	Started []string
}

// storageSize is spec.storage.size, 1Gi when unset.
func storageSize(c *felixv1.FelixCluster) resource.Quantity {
	if c.Spec.Storage.Size != nil && !c.Spec.Storage.Size.IsZero() {
		return c.Spec.Storage.Size.DeepCopy()
	}
	return resource.MustParse("1Gi")
}

// claimTerminating reads a broker's claim from the API server (not the
// cache, which may not have seen a deletion that just happened) and
// reports whether it is being deleted. A pod built on such a claim never
// starts, and the claim's protection keeps the claim while the pod exists:
// the deadlock this check avoids.
func (r *FelixClusterReconciler) claimTerminating(ctx context.Context, ns, broker string) (bool, error) {
	var pvc corev1.PersistentVolumeClaim
	if err := r.reader().Get(ctx, types.NamespacedName{Namespace: ns, Name: PVCName(broker)}, &pvc); err != nil {
		if apierrors.IsNotFound(err) {
			// Gone between the cached read and this one: the next pass
			// creates a new claim first.
			return true, nil
		}
		return false, fmt.Errorf("read PVC %s: %w", PVCName(broker), err)
	}
	return pvc.DeletionTimestamp != nil, nil
}

// podNotStarted reports whether a pod has not started its broker: it is
// Pending, or no container ever ran. Such a pod, on a claim being deleted,
// would wait for the claim for ever.
func podNotStarted(p *corev1.Pod) bool {
	if p.Status.Phase == corev1.PodPending || p.Status.Phase == "" {
		return true
	}
	for _, s := range p.Status.ContainerStatuses {
		if s.State.Running != nil || s.State.Terminated != nil || s.LastTerminationState.Terminated != nil {
			return false
		}
	}
	return len(p.Status.ContainerStatuses) == 0
}

// resizeClaim compares a broker's existing (not terminating) claim with
// spec.storage.size, raises its request when the size grew and its
// StorageClass allows expansion, and records what it saw in obs.
// classes caches StorageClass lookups within one reconcile.
func (r *FelixClusterReconciler) resizeClaim(ctx context.Context, c *felixv1.FelixCluster, broker string, pvc *corev1.PersistentVolumeClaim, obs *storageObservation, classes map[string]expandable) error {
	want := obs.Size
	if capacity, ok := pvc.Status.Capacity[corev1.ResourceStorage]; ok {
		if obs.Capacity == nil || capacity.Cmp(*obs.Capacity) < 0 {
			obs.Capacity = ptrQuantity(capacity)
		}
	}
	if msg := resizeFailure(pvc); msg != "" {
		obs.Failed[broker] = msg
		return nil
	}
	req := pvc.Spec.Resources.Requests[corev1.ResourceStorage]
	if req.Cmp(want) >= 0 {
		if capacity, ok := pvc.Status.Capacity[corev1.ResourceStorage]; ok && capacity.Cmp(want) < 0 {
			obs.Expanding = append(obs.Expanding, broker)
		}
		return nil
	}
	// The request can change only on a bound claim (the API refuses it
	// otherwise); an unbound claim is expanded once it binds.
	if pvc.Status.Phase != corev1.ClaimBound {
		obs.Unbound = append(obs.Unbound, broker)
		return nil
	}
	class := ""
	if pvc.Spec.StorageClassName != nil {
		class = *pvc.Spec.StorageClassName
	}
	ex, ok := classes[class]
	if !ok {
		var err error
		if ex, err = r.classExpandable(ctx, class); err != nil {
			return err
		}
		classes[class] = ex
	}
	if !ex.OK {
		obs.NotExpandable[broker] = ex.Why
		return nil
	}
	orig := pvc.DeepCopy()
	pvc.Spec.Resources.Requests[corev1.ResourceStorage] = want
	if err := r.Client.Patch(ctx, pvc, client.MergeFromWithOptions(orig, client.MergeFromWithOptimisticLock{}), client.FieldOwner(OperatorFieldManager)); err != nil {
		switch {
		case apierrors.IsConflict(err):
			return errCacheLag
		case apierrors.IsForbidden(err) || apierrors.IsInvalid(err):
			// The resize admission or validation refused it (a class
			// without expansion, a claim that cannot grow).
			obs.NotExpandable[broker] = "the API server refused the expansion: " + err.Error()
			return nil
		}
		return fmt.Errorf("expand PVC %s: %w", pvc.Name, err)
	}
	obs.Started = append(obs.Started, broker)
	obs.Expanding = append(obs.Expanding, broker)
	r.event(c, corev1.EventTypeNormal, storageExpansionEventReason, "Expand", "expanding volume claim %s of broker %s from %s to %s", pvc.Name, broker, req.String(), want.String())
	return nil
}

// expandable is whether a StorageClass allows expansion, and why not.
type expandable struct {
	OK  bool
	Why string
}

// classExpandable reads a StorageClass (uncached: the operator does not
// watch them) and reports whether its claims can grow. A claim with no
// class (statically bound) cannot.
func (r *FelixClusterReconciler) classExpandable(ctx context.Context, name string) (expandable, error) {
	if name == "" {
		return expandable{Why: "the claim has no StorageClass (statically provisioned); only dynamically provisioned claims can be expanded"}, nil
	}
	var sc storagev1.StorageClass
	switch err := r.reader().Get(ctx, types.NamespacedName{Name: name}, &sc); {
	case apierrors.IsForbidden(err):
		// A namespace-scoped operator cannot read StorageClasses: it asks
		// for the expansion, and the API server's resize admission
		// refuses it if the class does not allow it (resizeClaim reports
		// that refusal).
		return expandable{OK: true}, nil
	case apierrors.IsNotFound(err):
		return expandable{Why: fmt.Sprintf("StorageClass %s does not exist", name)}, nil
	case err != nil:
		return expandable{}, fmt.Errorf("read StorageClass %s: %w", name, err)
	}
	if sc.AllowVolumeExpansion == nil || !*sc.AllowVolumeExpansion {
		return expandable{Why: fmt.Sprintf("StorageClass %s does not allow volume expansion (allowVolumeExpansion is not true)", name)}, nil
	}
	return expandable{OK: true}, nil
}

// resizeFailure is the failure a claim's resize reports, "" when none.
func resizeFailure(pvc *corev1.PersistentVolumeClaim) string {
	switch st := pvc.Status.AllocatedResourceStatuses[corev1.ResourceStorage]; st {
	case corev1.PersistentVolumeClaimControllerResizeInfeasible, corev1.PersistentVolumeClaimNodeResizeInfeasible:
		msg := string(st)
		for _, c := range pvc.Status.Conditions {
			if c.Message != "" && (c.Type == corev1.PersistentVolumeClaimResizing || c.Type == corev1.PersistentVolumeClaimControllerResizeError || c.Type == corev1.PersistentVolumeClaimNodeResizeError) {
				msg += ": " + c.Message
			}
		}
		return msg
	}
	return ""
}

func ptrQuantity(q resource.Quantity) *resource.Quantity { return &q }

// storageCondition is the StorageResized condition of what obs saw.
func storageCondition(obs storageObservation) metav1.Condition {
	switch {
	case len(obs.Failed) > 0:
		return cond(felixv1.ConditionStorageResized, false, StorageExpansionFailReason, "volume expansion failed: "+joinMap(obs.Failed))
	case len(obs.NotExpandable) > 0:
		return cond(felixv1.ConditionStorageResized, false, StorageNotExpandableReason,
			fmt.Sprintf("storage.size %s is not applied: %s", obs.Size.String(), joinMap(obs.NotExpandable)))
	case len(obs.Expanding) > 0:
		return cond(felixv1.ConditionStorageResized, false, StorageExpandingReason,
			fmt.Sprintf("expanding volume claims to %s: %s", obs.Size.String(), strings.Join(sorted(obs.Expanding), ", ")))
	case len(obs.Unbound) > 0:
		return cond(felixv1.ConditionStorageResized, false, StorageWaitingToBindReason,
			fmt.Sprintf("volume claims are expanded to %s once they are bound: %s", obs.Size.String(), strings.Join(sorted(obs.Unbound), ", ")))
	default:
		return cond(felixv1.ConditionStorageResized, true, StorageAsRequestedReason, fmt.Sprintf("every broker's volume claim asks for %s", obs.Size.String()))
	}
}

// storageStatus is status.storage of what obs saw.
func storageStatus(obs storageObservation) *felixv1.StorageStatus {
	st := &felixv1.StorageStatus{Size: ptrQuantity(obs.Size), Resizing: sorted(obs.Expanding)}
	if obs.Capacity != nil {
		st.Capacity = ptrQuantity(*obs.Capacity)
	}
	return st
}

// claimWaitMessage says which brokers wait for their claim and why.
func claimWaitMessage(waits map[string]claimWait) string {
	names := make([]string, 0, len(waits))
	for n := range waits {
		names = append(names, n)
	}
	sort.Strings(names)
	parts := make([]string, 0, len(names))
	for _, n := range names {
		if waits[n].PodRunning {
			parts = append(parts, fmt.Sprintf("%s (claim %s is being deleted and goes once pod %s is deleted)", n, PVCName(n), n))
		} else {
			parts = append(parts, fmt.Sprintf("%s (claim %s is being deleted)", n, PVCName(n)))
		}
	}
	return "brokers wait for their old volume claim to be deleted before a new claim and pod are created (the broker starts empty, with a new storage id): " + strings.Join(parts, "; ")
}

func joinMap(m map[string]string) string {
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	parts := make([]string, 0, len(keys))
	for _, k := range keys {
		parts = append(parts, k+": "+m[k])
	}
	return strings.Join(parts, "; ")
}

func sorted(s []string) []string {
	if len(s) == 0 {
		return nil
	}
	out := append([]string(nil), s...)
	sort.Strings(out)
	return out
}

// volumeEvents records the volume decisions of a reconcile once per
// episode (the conditions carry them meanwhile): a broker waiting for its
// claim to go, and claims that cannot be expanded.
func (r *FelixClusterReconciler) volumeEvents(c *felixv1.FelixCluster, obs clusterObservation) {
	if len(obs.ClaimWaiting) > 0 {
		msg := claimWaitMessage(obs.ClaimWaiting)
		if prev := meta.FindStatusCondition(c.Status.Conditions, felixv1.ConditionProgressing); prev == nil || prev.Reason != WaitingForVolumeReason || prev.Message != msg {
			r.event(c, corev1.EventTypeNormal, WaitingForVolumeReason, "ReplaceVolume", "%s", msg)
		}
	}
	sc := storageCondition(obs.Storage)
	if sc.Reason == StorageNotExpandableReason || sc.Reason == StorageExpansionFailReason {
		if prev := meta.FindStatusCondition(c.Status.Conditions, felixv1.ConditionStorageResized); prev == nil || prev.Reason != sc.Reason || prev.Message != sc.Message {
			r.event(c, corev1.EventTypeWarning, sc.Reason, "Expand", "%s", sc.Message)
		}
	}
}
