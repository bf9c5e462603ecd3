package controllers

import (
	"context"
	"encoding/json"
	"fmt"
	"slices"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/tools/events"
	"k8s.io/utils/clock"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/builder"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/controller"
	"sigs.k8s.io/controller-runtime/pkg/event"
	"sigs.k8s.io/controller-runtime/pkg/handler"
	"sigs.k8s.io/controller-runtime/pkg/predicate"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"

	felixv1 "felix.dev/felix/api/v1alpha1"
	"felix.dev/felix/broker/placement"
)

// FelixShardReconciler applies placement [CP-1..3] to one shard: it writes
// status.assignment (a promotion bumps the epoch; brokers act only on the
// assignment), status.caughtUp from the leader's report, and the Ready and
// Waiting conditions, with server-side apply as "felix-operator". The
// leader broker owns status.report ("felix-broker").
type FelixShardReconciler struct {
	Client     client.Client
	Clock      clock.PassiveClock
	Heartbeats *Heartbeats
	Events     events.EventRecorder
	// MaxClockSkew is placement's Input.MaxClockSkew [CP-1] (Setup passes
	// Options.MaxClockSkew or its default).
	MaxClockSkew time.Duration
	// Metrics counts promotions; nil counts nothing.
	Metrics *Metrics
}

// shardStatus is the part of FelixShard status the operator owns.
type shardStatus struct {
	Assignment *felixv1.Assignment `json:"assignment,omitempty"`
	CaughtUp   string              `json:"caughtUp,omitempty"`
	Conditions []metav1.Condition  `json:"conditions,omitempty"`
}

// Reconcile decides the shard's assignment and applies the operator's
// status fields when they changed.
func (r *FelixShardReconciler) Reconcile(ctx context.Context, req ctrl.Request) (ctrl.Result, error) {
	var sh felixv1.FelixShard
	if err := r.Client.Get(ctx, req.NamespacedName, &sh); err != nil {
		return ctrl.Result{}, client.IgnoreNotFound(err)
	}
	if sh.DeletionTimestamp != nil {
		return ctrl.Result{}, nil
	}
	clusterName := sh.Labels[LabelCluster]
	if clusterName == "" {
		var s felixv1.FelixStream
		if err := r.Client.Get(ctx, types.NamespacedName{Namespace: sh.Namespace, Name: sh.Spec.Stream}, &s); err != nil {
			return ctrl.Result{}, client.IgnoreNotFound(err)
		}
		clusterName = s.Spec.Cluster
	}
	var cluster *felixv1.FelixCluster
	var fc felixv1.FelixCluster
	switch err := r.Client.Get(ctx, types.NamespacedName{Namespace: sh.Namespace, Name: clusterName}, &fc); {
	case err == nil:
		cluster = &fc
	case !apierrors.IsNotFound(err):
		return ctrl.Result{}, err
	}
	heartbeat, nodeExpiry := timing(cluster)

	var brokers felixv1.FelixBrokerList
	if err := r.Client.List(ctx, &brokers, client.InNamespace(sh.Namespace), client.MatchingLabels{LabelCluster: clusterName}); err != nil {
		return ctrl.Result{}, err
	}
	registry := map[string]placement.Broker{}
	registeredIDs := map[string]string{}
	draining := map[string]bool{}
	for i := range brokers.Items {
		b := &brokers.Items[i]
		if b.Annotations[felixv1.AnnotationDrainLeadership] != "" {
			draining[b.Name] = true
		}
		hb, ok := r.Heartbeats.Get(types.NamespacedName{Namespace: b.Namespace, Name: b.Name})
		registry[b.Name] = registryEntry(b, hb, ok)
		registeredIDs[b.Name] = b.Status.StorageID
	}
	// [CP-1] The report's view was taken when it was written; [CP-2] its
	// leader's renewals keep it alive, never fresher.
	takenAt, vouchedAt := reportWrittenAt(&sh), time.Time{}
	if rep := sh.Status.Report; rep != nil {
		hb, ok := r.Heartbeats.Get(types.NamespacedName{Namespace: sh.Namespace, Name: rep.Leader})
		vouchedAt = reportVouchedAt(&sh, hb, ok)
	}
	now := r.Clock.Now()
	preferred, settle := preferredLeader(cluster, &sh)
	if p := sh.Annotations[felixv1.AnnotationPreferredLeader]; p != "" && !slices.Contains(sh.Spec.Replicas, p) {
		r.Events.Eventf(&sh, nil, corev1.EventTypeWarning, "SwitchoverIgnored", "Place", "%s=%q names no replica of the shard (replicas: %s); ignored",
			felixv1.AnnotationPreferredLeader, p, strings.Join(sh.Spec.Replicas, ", "))
	}
	d := placement.Decide(placement.Input{
		Replicas:   sh.Spec.Replicas,
		Brokers:    registry,
		Assignment: placementAssignment(sh.Status.Assignment),
		Report:     placementReport(sh.Status.Report, takenAt, vouchedAt),
		Now:        now,
		NodeExpiry: nodeExpiry,
		Heartbeat:  heartbeat,
		// [CP-1] the leader's time of its view is on its own clock.
		MaxClockSkew:   r.MaxClockSkew,
		Preferred:      preferred,
		PreferredAfter: settle,
		Draining:       draining,
	})
	if d.Action == placement.Promote && sh.Spec.FirstEpoch > 0 && d.Epoch < uint64(sh.Spec.FirstEpoch) {
		// A restored shard: its logs may hold records up to FirstEpoch-1,
		// so its first fence goes above them, and later promotions count
		// up from there.
		d.Epoch = uint64(sh.Spec.FirstEpoch)
	}

	mnow := metav1.NewTime(now)
	want := shardStatus{Assignment: sh.Status.Assignment.DeepCopy()}
	if d.Action == placement.Promote {
		want.Assignment = &felixv1.Assignment{
			Leader: d.Leader, Epoch: int64(d.Epoch), LeaderIncarnation: int64(d.LeaderIncarnation), AssignedAt: &mnow,
			Counted: countedReplicas(d.Counted),
		}
	}
	view := sh.DeepCopy()
	view.Status.Assignment = want.Assignment
	want.CaughtUp = fmt.Sprintf("%d/%d", caughtUpCount(view, registeredIDs), len(sh.Spec.Replicas))
	want.Conditions = setConditions(sh.Status.Conditions, sh.Generation, mnow, shardConditions(view, registry, d)...)

	have := shardStatus{Assignment: sh.Status.Assignment, CaughtUp: sh.Status.CaughtUp, Conditions: sh.Status.Conditions}
	if !semanticEqual(want, have) {
		if err := r.apply(ctx, &sh, want); err != nil {
			if apierrors.IsConflict(err) {
				// The shard changed since this view was read (the cache
				// was behind): decide again from the newer object.
				return ctrl.Result{RequeueAfter: 50 * time.Millisecond}, nil
			}
			return ctrl.Result{}, err
		}
		r.emit(&sh, d, have)
	}
	if d.Action == placement.Wait {
		return ctrl.Result{RequeueAfter: nodeExpiry}, nil
	}
	if d.RecheckAfter > 0 {
		// The preferred replica is settling: look again when it has.
		return ctrl.Result{RequeueAfter: d.RecheckAfter}, nil
	}
	return ctrl.Result{}, nil
}

// preferredLeader returns the replica placement should move the shard's
// leadership to when it safely can, and its settle time: the replica the
// shard's felix.dev/preferred-leader annotation names (a switchover asked
// for by name, so no settle time), else the first of the replica set,
// unless the cluster turned balancing off (or is gone).
func preferredLeader(c *felixv1.FelixCluster, sh *felixv1.FelixShard) (string, time.Duration) {
	if p := sh.Annotations[felixv1.AnnotationPreferredLeader]; p != "" && slices.Contains(sh.Spec.Replicas, p) {
		return p, 0
	}
	if c == nil || len(sh.Spec.Replicas) == 0 {
		return "", 0
	}
	on, settle := c.Spec.PreferredLeaderBalance()
	if !on {
		return "", 0
	}
	return sh.Spec.Replicas[0], settle
}

// shardConditions computes Ready and Waiting.
func shardConditions(sh *felixv1.FelixShard, registry map[string]placement.Broker, d placement.Decision) []metav1.Condition {
	var out []metav1.Condition
	if d.Action == placement.Wait {
		out = append(out, cond(felixv1.ConditionWaiting, true, d.Reason.String(), waitMessage(d)))
	} else {
		out = append(out, cond(felixv1.ConditionWaiting, false, "LeaderAssigned", "the shard has an eligible leader"))
	}
	a, rep := sh.Status.Assignment, sh.Status.Report
	switch {
	case d.Action == placement.Wait || a == nil:
		out = append(out, cond(felixv1.ConditionReady, false, "NoLeader", "no leader may serve the shard now"))
	case registry[a.Leader].State != placement.Up:
		out = append(out, cond(felixv1.ConditionReady, false, "LeaderNotUp", fmt.Sprintf("leader %s is not up", a.Leader)))
	case rep == nil || rep.Leader != a.Leader || rep.Epoch != a.Epoch:
		out = append(out, cond(felixv1.ConditionReady, false, "AwaitingReport", fmt.Sprintf("leader %s has not reported at epoch %d", a.Leader, a.Epoch)))
	default:
		out = append(out, cond(felixv1.ConditionReady, true, "LeaderReporting", fmt.Sprintf("leader %s serves at epoch %d", a.Leader, a.Epoch)))
	}
	return out
}

// waitMessage says why no replica may lead, replica by replica.
func waitMessage(d placement.Decision) string {
	msg := "no eligible replica to lead (" + d.Reason.String() + "); the shard waits rather than guess [CP-3]"
	if d.Reason == placement.ReasonTooFewCounted {
		msg = "fewer than a quorum of replicas hold the storage ids a leader's recovery and fence could count (" +
			d.Reason.String() + "): no leader could fence; the shard waits rather than guess [CP-3]"
	}
	if len(d.Candidates) == 0 {
		return msg
	}
	parts := make([]string, 0, len(d.Candidates))
	for _, c := range d.Candidates {
		parts = append(parts, c.Broker+": "+c.Verdict.String())
	}
	return msg + ": " + strings.Join(parts, ", ")
}

// apply writes the operator's status fields with server-side apply, on
// the condition that the shard is still at the resourceVersion the
// decision was made from: an assignment decided from a stale view (the
// informer cache behind the reconciler's own last write) would otherwise
// overwrite a newer one, and an epoch could go back (found by the local
// cluster: a promotion to epoch 2 overwritten by the epoch-1 assignment
// read from the cache a moment before). A stale view gets a Conflict.
func (r *FelixShardReconciler) apply(ctx context.Context, sh *felixv1.FelixShard, st shardStatus) error {
	body := map[string]any{
		"apiVersion": felixv1.GroupVersion.String(),
		"kind":       "FelixShard",
		"metadata":   map[string]any{"name": sh.Name, "namespace": sh.Namespace, "resourceVersion": sh.ResourceVersion},
		"status":     st,
	}
	data, err := json.Marshal(body)
	if err != nil {
		return err
	}
	target := &felixv1.FelixShard{ObjectMeta: metav1.ObjectMeta{Name: sh.Name, Namespace: sh.Namespace}}
	return r.Client.Status().Patch(ctx, target, client.RawPatch(types.ApplyPatchType, data),
		client.FieldOwner(OperatorFieldManager), client.ForceOwnership)
}

// emit records promotions and waits after they were written.
func (r *FelixShardReconciler) emit(sh *felixv1.FelixShard, d placement.Decision, before shardStatus) {
	if d.Action == placement.Promote {
		r.Metrics.promoted(sh.Namespace, d.Reason.String())
	}
	if r.Events == nil {
		return
	}
	switch d.Action {
	case placement.Promote:
		if d.Reason == placement.ReasonNewShard {
			if sh.Spec.FirstEpoch > 1 {
				r.Events.Eventf(sh, nil, corev1.EventTypeNormal, "Assigned", "Place", "%s leads at epoch %d (new shard of a restored cluster: above every epoch its restored logs can hold)", d.Leader, d.Epoch)
				return
			}
			r.Events.Eventf(sh, nil, corev1.EventTypeNormal, "Assigned", "Place", "%s leads at epoch %d (new shard)", d.Leader, d.Epoch)
			return
		}
		prev := ""
		if before.Assignment != nil {
			prev = fmt.Sprintf(" after %s at epoch %d", before.Assignment.Leader, before.Assignment.Epoch)
		}
		if d.Reason == placement.ReasonLeaderDrain {
			r.Events.Eventf(sh, nil, corev1.EventTypeNormal, "Switchover", "Place", "%s leads at epoch %d%s: leadership moved off a draining broker (%s; planned: caught up under its storage id); counted: %s",
				d.Leader, d.Epoch, prev, felixv1.AnnotationDrainLeadership, countedList(d.Counted))
			return
		}
		if d.Reason == placement.ReasonPreferredLeader {
			asked := "the preferred replica"
			if sh.Annotations[felixv1.AnnotationPreferredLeader] == d.Leader {
				asked = "named by " + felixv1.AnnotationPreferredLeader
			}
			r.Events.Eventf(sh, nil, corev1.EventTypeNormal, "Switchover", "Place", "%s, %s, leads at epoch %d%s (planned: caught up under its storage id); counted: %s",
				d.Leader, asked, d.Epoch, prev, countedList(d.Counted))
			return
		}
		r.Events.Eventf(sh, nil, corev1.EventTypeWarning, "Promoted", "Place", "%s promoted at epoch %d%s (%s); counted: %s",
			d.Leader, d.Epoch, prev, d.Reason, countedList(d.Counted))
	case placement.Wait:
		old := findCondition(before.Conditions, felixv1.ConditionWaiting)
		if old == nil || old.Status != metav1.ConditionTrue || old.Reason != d.Reason.String() {
			r.Events.Eventf(sh, nil, corev1.EventTypeWarning, "Waiting", "Place", "%s", waitMessage(d))
		}
	}
}

func countedList(counted map[string]string) string {
	names := make([]string, 0, len(counted))
	for n := range counted {
		names = append(names, n)
	}
	slices.Sort(names)
	return strings.Join(names, ", ")
}

func findCondition(conds []metav1.Condition, typ string) *metav1.Condition {
	for i := range conds {
		if conds[i].Type == typ {
			return &conds[i]
		}
	}
	return nil
}

// SetupWithManager registers the reconciler: shards, and the brokers whose
// registry entry (state, incarnation, storage id) placement reads.
func (r *FelixShardReconciler) SetupWithManager(mgr ctrl.Manager) error {
	registryChanged := predicate.Funcs{
		UpdateFunc: func(e event.UpdateEvent) bool {
			o, ok1 := e.ObjectOld.(*felixv1.FelixBroker)
			n, ok2 := e.ObjectNew.(*felixv1.FelixBroker)
			if !ok1 || !ok2 {
				return true
			}
			return o.Status.State != n.Status.State || o.Status.Incarnation != n.Status.Incarnation || o.Status.StorageID != n.Status.StorageID ||
				o.Annotations[felixv1.AnnotationDrainLeadership] != n.Annotations[felixv1.AnnotationDrainLeadership]
		},
	}
	return ctrl.NewControllerManagedBy(mgr).
		Named("felixshard").
		For(&felixv1.FelixShard{}).
		// Shards are independent; several workers place a large stream
		// quickly (the heartbeat tracker is safe for concurrent use).
		WithOptions(controller.Options{MaxConcurrentReconciles: 4}).
		Watches(&felixv1.FelixBroker{}, handler.EnqueueRequestsFromMapFunc(r.shardsOfBroker), builder.WithPredicates(registryChanged)).
		Complete(r)
}

// shardsOfBroker maps a broker to the shards whose replica set holds it.
func (r *FelixShardReconciler) shardsOfBroker(ctx context.Context, o client.Object) []reconcile.Request {
	b, ok := o.(*felixv1.FelixBroker)
	if !ok {
		return nil
	}
	var list felixv1.FelixShardList
	if err := r.Client.List(ctx, &list, client.InNamespace(b.Namespace), client.MatchingLabels{LabelCluster: b.Spec.Cluster}); err != nil {
		return nil
	}
	var out []reconcile.Request
	for _, s := range list.Items {
		if slices.Contains(s.Spec.Replicas, b.Name) {
			out = append(out, reconcile.Request{NamespacedName: types.NamespacedName{Namespace: s.Namespace, Name: s.Name}})
		}
	}
	return out
}
