package controllers

import (
	"context"
	"fmt"
	"time"

	coordinationv1 "k8s.io/api/coordination/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/tools/events"
	"k8s.io/utils/clock"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/handler"
	"sigs.k8s.io/controller-runtime/pkg/log"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"

	felixv1 "felix.dev/felix/api/v1alpha1"
)

// FelixBrokerReconciler keeps the registry of brokers: it answers
// registration requests [ID-4] and marks brokers Up, Down or Left from
// their heartbeat Leases.
type FelixBrokerReconciler struct {
	Client     client.Client
	Clock      clock.PassiveClock
	Heartbeats *Heartbeats
	Events     events.EventRecorder
}

// Reconcile applies one registration request, if any, and the broker's
// liveness in a single status patch (skipped when nothing changed), and
// requeues for the moment the broker would expire.
func (r *FelixBrokerReconciler) Reconcile(ctx context.Context, req ctrl.Request) (ctrl.Result, error) {
	logger := log.FromContext(ctx)
	var b felixv1.FelixBroker
	if err := r.Client.Get(ctx, req.NamespacedName, &b); err != nil {
		if apierrors.IsNotFound(err) {
			r.Heartbeats.Forget(req.NamespacedName)
			return ctrl.Result{}, nil
		}
		return ctrl.Result{}, err
	}
	var cluster *felixv1.FelixCluster
	var fc felixv1.FelixCluster
	switch err := r.Client.Get(ctx, types.NamespacedName{Namespace: b.Namespace, Name: b.Spec.Cluster}, &fc); {
	case err == nil:
		cluster = &fc
	case !apierrors.IsNotFound(err):
		return ctrl.Result{}, err
	}
	_, nodeExpiry := timing(cluster)
	now := r.Clock.Now()
	mnow := metav1.NewTime(now)

	st := b.Status.DeepCopy()
	g := decideRegistration(b.Status)
	switch g.Action {
	case grantAccept:
		st.Incarnation, st.StorageID, st.RegisteredAt, st.RegistrationRequest = g.Incarnation, g.StorageID, &mnow, nil
		if g.Address != "" {
			st.Address = g.Address
		}
		// Unlike Address, the peer address is always replaced: a start
		// without a peer port must not leave the previous one dialable.
		st.PeerAddress = g.PeerAddress
	case grantRefuse:
		st.RegistrationRequest = nil
	}

	var hb Heartbeat
	renewed := false
	var lease coordinationv1.Lease
	switch err := r.Client.Get(ctx, req.NamespacedName, &lease); {
	case err == nil:
		hb, renewed = r.Heartbeats.Observe(&lease)
	case apierrors.IsNotFound(err):
		hb, renewed = r.Heartbeats.Get(req.NamespacedName)
	default:
		return ctrl.Result{}, err
	}
	removed, err := r.removed(ctx, cluster, &b)
	if err != nil {
		return ctrl.Result{}, err
	}
	lv := decideLiveness(now, hb, renewed, removed, nodeExpiry)
	st.State = lv.State
	if renewed {
		at := metav1.NewTime(hb.ObservedAt)
		// Persist the last heartbeat on a state change and otherwise at
		// most once per node expiry: the live value is in memory.
		if st.LastHeartbeat == nil || b.Status.State != lv.State || hb.ObservedAt.Sub(st.LastHeartbeat.Time) >= nodeExpiry {
			st.LastHeartbeat = &at
		}
	}
	registered := st.Incarnation > 0
	ready := lv.State == felixv1.BrokerUp && registered
	msg := fmt.Sprintf("broker is %s (%s), incarnation %d", lv.State, lv.Reason, st.Incarnation)
	reason := lv.Reason
	if lv.State == felixv1.BrokerUp && !registered {
		reason, msg = "NotRegistered", "broker renews its heartbeat but has not registered a storage id"
	}
	st.Conditions = setConditions(st.Conditions, b.Generation, mnow, cond(felixv1.ConditionReady, ready, reason, msg))

	if !semanticEqual(*st, b.Status) {
		orig := b.DeepCopy()
		b.Status = *st
		if err := r.Client.Status().Patch(ctx, &b, client.MergeFromWithOptions(orig, client.MergeFromWithOptimisticLock{}), client.FieldOwner(OperatorFieldManager)); err != nil {
			if apierrors.IsConflict(err) {
				return ctrl.Result{RequeueAfter: 50 * time.Millisecond}, nil
			}
			return ctrl.Result{}, err
		}
		r.emit(&b, orig.Status.State, lv, g)
		logger.V(1).Info("broker status", "state", lv.State, "incarnation", st.Incarnation, "grant", g.Action)
	}
	return ctrl.Result{RequeueAfter: lv.RecheckAfter}, nil
}

// removed reports whether the broker left the cluster: its ordinal is
// beyond the cluster's size (or the cluster is gone) and its pod is gone.
func (r *FelixBrokerReconciler) removed(ctx context.Context, cluster *felixv1.FelixCluster, b *felixv1.FelixBroker) (bool, error) {
	if cluster != nil && b.Spec.Ordinal < cluster.Spec.Brokers && cluster.DeletionTimestamp == nil {
		return false, nil
	}
	var pod corev1.Pod
	err := r.Client.Get(ctx, types.NamespacedName{Namespace: b.Namespace, Name: b.Name}, &pod)
	switch {
	case apierrors.IsNotFound(err):
		return true, nil
	case err != nil:
		return false, err
	}
	return false, nil
}

// emit records the events of a status change that was written.
func (r *FelixBrokerReconciler) emit(b *felixv1.FelixBroker, prev felixv1.BrokerState, lv liveness, g grant) {
	if r.Events == nil {
		return
	}
	switch g.Action {
	case grantAccept:
		if g.Rotated {
			r.Events.Eventf(b, nil, corev1.EventTypeWarning, "StorageIDRotated", "Register", g.Message)
		} else {
			r.Events.Eventf(b, nil, corev1.EventTypeNormal, "Registered", "Register", g.Message)
		}
	case grantRefuse:
		r.Events.Eventf(b, nil, corev1.EventTypeWarning, "RegistrationRefused", "Register", g.Message)
	}
	if prev == lv.State {
		return
	}
	switch lv.State {
	case felixv1.BrokerUp:
		r.Events.Eventf(b, nil, corev1.EventTypeNormal, "BrokerUp", "Heartbeat", "broker renewed its heartbeat lease")
	case felixv1.BrokerDown:
		if prev != "" {
			r.Events.Eventf(b, nil, corev1.EventTypeWarning, "BrokerDown", "Heartbeat", "no heartbeat within the node expiry timeout (%s)", lv.Reason)
		}
	case felixv1.BrokerLeft:
		r.Events.Eventf(b, nil, corev1.EventTypeNormal, "BrokerLeft", "Remove", "broker was removed from the cluster")
	}
}

// SetupWithManager registers the reconciler: FelixBrokers, their Leases,
// their pods and their cluster's size.
func (r *FelixBrokerReconciler) SetupWithManager(mgr ctrl.Manager) error {
	return ctrl.NewControllerManagedBy(mgr).
		Named("felixbroker").
		For(&felixv1.FelixBroker{}).
		Owns(&coordinationv1.Lease{}).
		Watches(&corev1.Pod{}, handler.EnqueueRequestsFromMapFunc(sameNameIfBroker)).
		Watches(&felixv1.FelixCluster{}, handler.EnqueueRequestsFromMapFunc(r.brokersOfCluster)).
		Complete(r)
}

// sameNameIfBroker maps a broker pod to its FelixBroker.
func sameNameIfBroker(_ context.Context, o client.Object) []reconcile.Request {
	if _, ok := o.GetLabels()[LabelBroker]; !ok {
		return nil
	}
	return []reconcile.Request{{NamespacedName: types.NamespacedName{Namespace: o.GetNamespace(), Name: o.GetName()}}}
}

// brokersOfCluster maps a FelixCluster to its FelixBrokers.
func (r *FelixBrokerReconciler) brokersOfCluster(ctx context.Context, o client.Object) []reconcile.Request {
	var list felixv1.FelixBrokerList
	if err := r.Client.List(ctx, &list, client.InNamespace(o.GetNamespace()), client.MatchingLabels{LabelCluster: o.GetName()}); err != nil {
		return nil
	}
	out := make([]reconcile.Request, 0, len(list.Items))
	for _, b := range list.Items {
		out = append(out, reconcile.Request{NamespacedName: types.NamespacedName{Namespace: b.Namespace, Name: b.Name}})
	}
	return out
}
