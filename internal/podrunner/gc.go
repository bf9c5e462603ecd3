package podrunner

import (
	"context"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"
)

// gcPeriod is how often the runner checks the owners of a pod or claim
// that has some: owner deletion sends the dependent no event.
const gcPeriod = 5 * time.Second

// orphaned plays the garbage collector of the controller-manager for the
// runner's pods and claims: it reports whether obj has owner references
// and every owner is gone (absent, or present with another UID), in which
// case the object must be deleted (background propagation).
func (r *Runner) orphaned(ctx context.Context, obj client.Object) (bool, error) {
	refs := obj.GetOwnerReferences()
	if len(refs) == 0 {
		return false, nil
	}
	for _, ref := range refs {
		gv, err := schema.ParseGroupVersion(ref.APIVersion)
		if err != nil {
			return false, nil // not ours to judge
		}
		owner := &metav1.PartialObjectMetadata{}
		owner.SetGroupVersionKind(gv.WithKind(ref.Kind))
		key := types.NamespacedName{Namespace: obj.GetNamespace(), Name: ref.Name}
		if mapping, err := r.mgr.GetRESTMapper().RESTMapping(gv.WithKind(ref.Kind).GroupKind(), gv.Version); err == nil &&
			mapping.Scope.Name() == meta.RESTScopeNameRoot {
			key.Namespace = ""
		}
		err = r.reader.Get(ctx, key, owner)
		switch {
		case err == nil && owner.UID == ref.UID:
			return false, nil // an owner lives
		case err == nil, apierrors.IsNotFound(err):
			continue
		case meta.IsNoMatchError(err):
			return false, nil // an unknown kind: keep, as the garbage collector does
		default:
			return false, err
		}
	}
	return true, nil
}

// withGC makes a reconcile of an owned object come back after gcPeriod,
// so a deleted owner is noticed.
func withGC(obj client.Object, res reconcile.Result, err error) (reconcile.Result, error) {
	if err == nil && res.RequeueAfter == 0 && len(obj.GetOwnerReferences()) > 0 && obj.GetDeletionTimestamp() == nil {
		res.RequeueAfter = gcPeriod
	}
	return res, err
}

// collect deletes an orphaned object, as the garbage collector would.
func (r *Runner) collect(ctx context.Context, kind string, obj client.Object) error {
	uid := obj.GetUID()
	r.log.Info("deleting object whose owners are gone", "kind", kind, "object", client.ObjectKeyFromObject(obj).String())
	err := r.client.Delete(ctx, obj, client.PropagationPolicy(metav1.DeletePropagationBackground), client.Preconditions{UID: &uid})
	if err != nil && !apierrors.IsNotFound(err) && !apierrors.IsConflict(err) {
		return err
	}
	return nil
}
