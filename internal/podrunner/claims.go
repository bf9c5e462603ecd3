package podrunner

import (
	"context"
	"errors"
	"fmt"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/controller/controllerutil"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"
)

// pvcProtectionFinalizer is added to every claim by the API server's
// StorageObjectInUseProtection admission; the controller-manager's
// pvc-protection controller (absent here) normally removes it.
const pvcProtectionFinalizer = "kubernetes.io/pvc-protection"

// reconcileClaim plays the PV binder and provisioner (every claim is bound
// to a directory at once, as with a hostpath provisioner in Immediate
// mode) and the pvc-protection controller (a deleted claim's directory is
// removed and its finalizer dropped once no pod uses it).
func (r *Runner) reconcileClaim(ctx context.Context, req reconcile.Request) (reconcile.Result, error) {
	var pvc corev1.PersistentVolumeClaim
	if err := r.client.Get(ctx, req.NamespacedName, &pvc); err != nil {
		return reconcile.Result{}, client.IgnoreNotFound(err)
	}
	if pvc.DeletionTimestamp == nil {
		gone, err := r.orphaned(ctx, &pvc)
		if err != nil {
			// The check is retried at the next resync; it never holds
			// up the object's own reconcile.
			r.log.V(1).Info("owner check failed", "object", req.String(), "err", err.Error())
		}
		if gone {
			return reconcile.Result{}, r.collect(ctx, "PersistentVolumeClaim", &pvc)
		}
	}
	res, err := r.syncClaim(ctx, req, &pvc)
	return withGC(&pvc, res, err)
}

// syncClaim binds, provisions or releases one claim.
func (r *Runner) syncClaim(ctx context.Context, req reconcile.Request, pvc *corev1.PersistentVolumeClaim) (reconcile.Result, error) {
	if pvc.DeletionTimestamp != nil {
		inUse, err := r.claimInUse(ctx, pvc)
		if err != nil {
			return reconcile.Result{}, err
		}
		if inUse {
			return reconcile.Result{RequeueAfter: time.Second}, nil
		}
		if err := r.removeClaimDir(pvc.Namespace, pvc.Name, pvc.UID); err != nil {
			return reconcile.Result{}, err
		}
		if controllerutil.RemoveFinalizer(pvc, pvcProtectionFinalizer) {
			if err := r.client.Update(ctx, pvc); err != nil && !apierrors.IsNotFound(err) {
				return reconcile.Result{}, err
			}
		}
		return reconcile.Result{}, nil
	}
	if _, err := r.provisionClaim(ctx, pvc); err != nil {
		if errors.Is(err, errVolume) {
			r.log.V(1).Info("claim not provisionable yet", "claim", req.String(), "err", err.Error())
			return reconcile.Result{RequeueAfter: time.Second}, nil
		}
		return reconcile.Result{}, err
	}
	if pvc.Status.Phase == corev1.ClaimBound {
		return reconcile.Result{}, nil
	}
	pvc.Status.Phase = corev1.ClaimBound
	pvc.Status.AccessModes = pvc.Spec.AccessModes
	if q, ok := pvc.Spec.Resources.Requests[corev1.ResourceStorage]; ok {
		pvc.Status.Capacity = corev1.ResourceList{corev1.ResourceStorage: q}
	}
	if err := r.client.Status().Update(ctx, pvc); err != nil {
		if apierrors.IsConflict(err) {
			return reconcile.Result{RequeueAfter: 100 * time.Millisecond}, nil
		}
		return reconcile.Result{}, fmt.Errorf("podrunner: bind claim %s: %w", req, err)
	}
	r.log.Info("claim bound", "claim", req.String())
	return reconcile.Result{}, nil
}

// claimInUse reports whether a pod that has not terminated mounts the
// claim.
func (r *Runner) claimInUse(ctx context.Context, pvc *corev1.PersistentVolumeClaim) (bool, error) {
	var pods corev1.PodList
	if err := r.client.List(ctx, &pods, client.InNamespace(pvc.Namespace)); err != nil {
		return false, err
	}
	for i := range pods.Items {
		p := &pods.Items[i]
		if p.Status.Phase == corev1.PodSucceeded || p.Status.Phase == corev1.PodFailed {
			continue
		}
		for _, v := range p.Spec.Volumes {
			if v.PersistentVolumeClaim != nil && v.PersistentVolumeClaim.ClaimName == pvc.Name {
				return true, nil
			}
		}
	}
	return false, nil
}
