package controllers

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/tools/events"
	"k8s.io/utils/clock"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/controller/controllerutil"
	"sigs.k8s.io/controller-runtime/pkg/handler"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"

	felixv1 "felix.dev/felix/api/v1alpha1"
)

// FelixStreamReconciler creates a stream's FelixShards (<stream>-<index>)
// with replicas spread across brokers and zones, and summarises them in
// the stream's status.
type FelixStreamReconciler struct {
	Client client.Client
	// APIReader reads pods and nodes uncached when shards are placed, so
	// zones are current (the cache may lag a pod's binding); Client when
	// nil.
	APIReader client.Reader
	Clock     clock.PassiveClock
	Events    events.EventRecorder
}

// streamRetry is how often a stream that cannot be placed looks again
// (broker and cluster watches also trigger it).
const streamRetry = time.Minute

// Reconcile creates missing shards; existing shards keep their replica
// sets (moving a replica moves data, which placement does not do). A
// raised spec.shards is met the same way: shards <old>..<new-1> are
// created under the rules of a new stream's shards (placement, restore
// and deleted-stream epoch floors) and the existing ones are left as they
// are.
func (r *FelixStreamReconciler) Reconcile(ctx context.Context, req ctrl.Request) (ctrl.Result, error) {
	var s felixv1.FelixStream
	if err := r.Client.Get(ctx, req.NamespacedName, &s); err != nil {
		return ctrl.Result{}, client.IgnoreNotFound(err)
	}
	if s.DeletionTimestamp != nil {
		return r.finalizeStream(ctx, &s)
	}
	switch added, err := r.ensureStreamFinalizer(ctx, &s); {
	case apierrors.IsConflict(err):
		return ctrl.Result{RequeueAfter: 50 * time.Millisecond}, nil
	case err != nil:
		return ctrl.Result{}, err
	case added:
		return ctrl.Result{}, nil
	}
	replicas := int(s.Spec.Replicas)
	if replicas == 0 {
		replicas = 3
	}
	var blocked, waiting *metav1.Condition
	var requeue time.Duration
	var placed shardsPlaced

	var cluster felixv1.FelixCluster
	err := r.Client.Get(ctx, types.NamespacedName{Namespace: s.Namespace, Name: s.Spec.Cluster}, &cluster)
	switch {
	case apierrors.IsNotFound(err):
		c := cond(felixv1.ConditionDegraded, true, "ClusterNotFound", fmt.Sprintf("FelixCluster %q does not exist", s.Spec.Cluster))
		blocked, requeue = &c, streamRetry
	case err != nil:
		return ctrl.Result{}, err
	case fencedWithRetention(&s):
		// The API refuses this with CEL; an object stored before the rule
		// existed is refused here [TR-7].
		c := cond(felixv1.ConditionDegraded, true, "FencedWithRetention",
			"a fenced stream must keep retention off: retention can delete the write that fences a stale writer [TR-7]; no shard is placed")
		blocked = &c
	case cluster.Spec.Restore != nil && cluster.Status.Restore == nil:
		// A restored cluster's shards start above the epochs its backup
		// recorded; until the cluster has taken them (or while it refuses
		// the backup) no shard is created.
		c := cond(felixv1.ConditionProgressing, true, "WaitingForRestore",
			fmt.Sprintf("cluster %s is restored from FelixBackup %s and has not recorded the backup's shard epochs yet (see the cluster's conditions); shards are created once it has, so they start above the epochs in the restored logs",
				cluster.Name, cluster.Spec.Restore.Backup))
		waiting = &c
	default:
		deleted, err := deletedStreamEpochs(&cluster)
		if err != nil {
			return ctrl.Result{}, err
		}
		first := func(index int32) int64 {
			var e int64
			if d := deleted[s.Name]; d > 0 {
				e = d + 1
			}
			if cluster.Status.Restore != nil {
				e = max(e, cluster.Status.Restore.FirstEpoch(s.Name, index))
			}
			return e
		}
		p, err := r.ensureShards(ctx, &s, func() ([]brokerSlot, error) { return r.brokerSlots(ctx, &cluster) }, first, replicas)
		placed = p
		var short *errNotEnoughBrokers
		switch {
		case errors.As(err, &short):
			c := cond(felixv1.ConditionDegraded, true, "InsufficientBrokers",
				fmt.Sprintf("stream needs %d replicas on distinct brokers; cluster %s has %d brokers", replicas, cluster.Name, short.Brokers))
			blocked, requeue = &c, streamRetry
		case err != nil:
			return ctrl.Result{}, err
		}
	}

	var shards felixv1.FelixShardList
	if err := r.Client.List(ctx, &shards, client.InNamespace(s.Namespace), client.MatchingLabels{LabelStream: s.Name}); err != nil {
		return ctrl.Result{}, err
	}
	if err := r.patchStatus(ctx, &s, shards.Items, placed, blocked, waiting); err != nil {
		if apierrors.IsConflict(err) {
			return ctrl.Result{RequeueAfter: 50 * time.Millisecond}, nil
		}
		return ctrl.Result{}, err
	}
	return ctrl.Result{RequeueAfter: requeue}, nil
}

// fencedWithRetention reports a fenced stream with a retention limit.
func fencedWithRetention(s *felixv1.FelixStream) bool {
	r := s.Spec.Retention
	return s.Spec.Fenced && r != nil && (r.MaxAge != nil || r.MaxBytes != nil)
}

// brokerSlots lists the cluster's brokers that may take replicas (in the
// cluster's range, not Left) with the zone of their pod's node.
func (r *FelixStreamReconciler) brokerSlots(ctx context.Context, c *felixv1.FelixCluster) ([]brokerSlot, error) {
	var list felixv1.FelixBrokerList
	if err := r.Client.List(ctx, &list, client.InNamespace(c.Namespace), client.MatchingLabels{LabelCluster: c.Name}); err != nil {
		return nil, err
	}
	var out []brokerSlot
	for _, b := range list.Items {
		if b.Spec.Ordinal >= c.Spec.Brokers || b.Status.State == felixv1.BrokerLeft {
			continue
		}
		slot := brokerSlot{Name: b.Name}
		reader := r.APIReader
		if reader == nil {
			reader = r.Client
		}
		var pod corev1.Pod
		if err := reader.Get(ctx, types.NamespacedName{Namespace: b.Namespace, Name: b.Name}, &pod); err == nil && pod.Spec.NodeName != "" {
			var node corev1.Node
			if err := reader.Get(ctx, types.NamespacedName{Name: pod.Spec.NodeName}, &node); err == nil {
				slot.Zone = node.Labels[ZoneLabel]
			}
		}
		out = append(out, slot)
	}
	return out, nil
}

// shardsPlaced is what one ensureShards pass did.
type shardsPlaced struct {
	// Created are the indexes of the shards created, ascending.
	Created []int32
	// Added is true when the stream had shards already: the created ones
	// were added by a raise of spec.shards (or complete a pass that failed
	// half way).
	Added bool
}

// ensureShards creates the stream's missing shards and reports which it
// created. firstEpoch gives each shard's FirstEpoch (0: none): on a
// restored cluster one above the epoch its backup recorded for it and the
// floor, for a stream recreated under a deleted one's name one above the
// deleted stream's highest epoch. An existing shard is never changed, so
// a raised spec.shards only adds the shards above the old count, placed
// as a new stream's would be; an event says which (ShardsCreated for a
// new stream, ShardsAdded when shards existed already).
func (r *FelixStreamReconciler) ensureShards(ctx context.Context, s *felixv1.FelixStream, listSlots func() ([]brokerSlot, error), firstEpoch func(int32) int64, replicas int) (shardsPlaced, error) {
	var slots []brokerSlot
	listed := false
	shards := s.Spec.Shards
	if shards == 0 {
		shards = 1
	}
	var out shardsPlaced
	defer func() { r.placementEvent(ctx, s, out, shards, replicas) }()
	for i := int32(0); i < shards; i++ {
		name := ShardName(s.Name, i)
		var existing felixv1.FelixShard
		err := r.Client.Get(ctx, types.NamespacedName{Namespace: s.Namespace, Name: name}, &existing)
		if err == nil {
			out.Added = true
			continue
		}
		if !apierrors.IsNotFound(err) {
			return out, err
		}
		if !listed {
			var err error
			if slots, err = listSlots(); err != nil {
				return out, err
			}
			listed = true
		}
		set, err := spreadReplicas(slots, streamOffset(s.Name, len(slots))+i, replicas)
		if err != nil {
			return out, err
		}
		sh := &felixv1.FelixShard{
			ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: s.Namespace, Labels: map[string]string{
				LabelName: "felix", LabelInstance: s.Spec.Cluster, LabelManagedBy: "felix-operator",
				LabelCluster: s.Spec.Cluster, LabelStream: s.Name,
			}},
			Spec: felixv1.FelixShardSpec{Stream: s.Name, Index: i, Replicas: set},
		}
		if firstEpoch != nil {
			sh.Spec.FirstEpoch = firstEpoch(i)
		}
		if err := controllerutil.SetControllerReference(s, sh, r.Client.Scheme()); err != nil {
			return out, err
		}
		switch err := r.Client.Create(ctx, sh); {
		case apierrors.IsAlreadyExists(err):
			// The cache had not seen a shard made by an earlier pass.
			out.Added = true
			continue
		case err != nil:
			return out, fmt.Errorf("create FelixShard %s: %w", name, err)
		}
		out.Created = append(out.Created, i)
	}
	return out, nil
}

// placementEvent logs and records the shards one pass created: ShardsAdded
// naming them when the stream had shards already, ShardsCreated otherwise.
func (r *FelixStreamReconciler) placementEvent(ctx context.Context, s *felixv1.FelixStream, p shardsPlaced, shards int32, replicas int) {
	if len(p.Created) == 0 {
		return
	}
	log := ctrl.LoggerFrom(ctx)
	if p.Added {
		log.Info("added shards", "stream", s.Name, "shards", indexRanges(p.Created), "total", shards, "replicas", replicas)
		if r.Events != nil {
			r.Events.Eventf(s, nil, corev1.EventTypeNormal, "ShardsAdded", "Place", "added shards %s (%d shards now) with %d replicas each; existing shards are unchanged", indexRanges(p.Created), shards, replicas)
		}
		return
	}
	log.Info("created shards", "stream", s.Name, "count", len(p.Created), "replicas", replicas)
	if r.Events != nil {
		r.Events.Eventf(s, nil, corev1.EventTypeNormal, "ShardsCreated", "Place", "created %d shards with %d replicas each", len(p.Created), replicas)
	}
}

// indexRanges writes ascending indexes as ranges: "4-7", "2, 5-6".
func indexRanges(idx []int32) string {
	var b strings.Builder
	for i := 0; i < len(idx); {
		j := i
		for j+1 < len(idx) && idx[j+1] == idx[j]+1 {
			j++
		}
		if b.Len() > 0 {
			b.WriteString(", ")
		}
		if j == i {
			fmt.Fprintf(&b, "%d", idx[i])
		} else {
			fmt.Fprintf(&b, "%d-%d", idx[i], idx[j])
		}
		i = j + 1
	}
	return b.String()
}

// patchStatus computes readyShards and the conditions once and patches
// them when they changed.
//
// blocked is a Degraded condition that keeps shards from being placed;
// held a Progressing one that holds them back for now.
func (r *FelixStreamReconciler) patchStatus(ctx context.Context, s *felixv1.FelixStream, shards []felixv1.FelixShard, placed shardsPlaced, blocked, held *metav1.Condition) error {
	want := s.Spec.Shards
	if want == 0 {
		want = 1
	}
	var ready, waiting, assigned int32
	for _, sh := range shards {
		if conditionTrue(sh.Status.Conditions, felixv1.ConditionReady) {
			ready++
		}
		if conditionTrue(sh.Status.Conditions, felixv1.ConditionWaiting) {
			waiting++
		}
		if sh.Status.Assignment != nil {
			assigned++
		}
	}
	var conds []metav1.Condition
	summary := fmt.Sprintf("%d/%d shards ready", ready, want)
	conds = append(conds, cond(felixv1.ConditionReady, ready == want && blocked == nil && held == nil, readyReason(ready == want), summary))
	switch {
	case blocked != nil:
		conds = append(conds, cond(felixv1.ConditionProgressing, false, blocked.Reason, blocked.Message), *blocked)
	case held != nil:
		conds = append(conds, *held, cond(felixv1.ConditionDegraded, false, "AsExpected", "nothing blocks the stream"))
	case len(placed.Created) > 0 || int32(len(shards)) < want || assigned < want:
		msg := fmt.Sprintf("%d/%d shards exist, %d assigned", len(shards), want, assigned)
		if placed.Added && len(placed.Created) > 0 {
			msg = fmt.Sprintf("added shards %s; ", indexRanges(placed.Created)) + msg
		}
		conds = append(conds, cond(felixv1.ConditionProgressing, true, "PlacingShards", msg),
			cond(felixv1.ConditionDegraded, false, "AsExpected", "nothing blocks the stream"))
	case waiting > 0:
		conds = append(conds, cond(felixv1.ConditionProgressing, false, "Placed", "every shard exists"),
			cond(felixv1.ConditionDegraded, true, "ShardsWaiting", fmt.Sprintf("%d shards wait for an eligible replica to lead [CP-3]", waiting)))
	default:
		conds = append(conds, cond(felixv1.ConditionProgressing, false, "Placed", "every shard exists"),
			cond(felixv1.ConditionDegraded, false, "AsExpected", "nothing blocks the stream"))
	}
	now := metav1.NewTime(r.Clock.Now())
	st := s.Status.DeepCopy()
	st.ObservedGeneration, st.ReadyShards = s.Generation, ready
	st.Conditions = setConditions(st.Conditions, s.Generation, now, conds...)
	if semanticEqual(*st, s.Status) {
		return nil
	}
	wasBlocked := conditionTrue(s.Status.Conditions, felixv1.ConditionDegraded)
	orig := s.DeepCopy()
	s.Status = *st
	if err := r.Client.Status().Patch(ctx, s, client.MergeFromWithOptions(orig, client.MergeFromWithOptimisticLock{}), client.FieldOwner(OperatorFieldManager)); err != nil {
		return err
	}
	if blocked != nil && !wasBlocked && r.Events != nil {
		r.Events.Eventf(s, nil, corev1.EventTypeWarning, blocked.Reason, "Place", "%s", blocked.Message)
	}
	return nil
}

func readyReason(ok bool) string {
	if ok {
		return "AllShardsReady"
	}
	return "ShardsNotReady"
}

// SetupWithManager registers the reconciler: streams, their shards, and
// the brokers and clusters they are placed on.
func (r *FelixStreamReconciler) SetupWithManager(mgr ctrl.Manager) error {
	return ctrl.NewControllerManagedBy(mgr).
		Named("felixstream").
		For(&felixv1.FelixStream{}).
		Owns(&felixv1.FelixShard{}).
		Watches(&felixv1.FelixCluster{}, handler.EnqueueRequestsFromMapFunc(r.streamsOfCluster)).
		Watches(&felixv1.FelixBroker{}, handler.EnqueueRequestsFromMapFunc(func(ctx context.Context, o client.Object) []reconcile.Request {
			b, ok := o.(*felixv1.FelixBroker)
			if !ok {
				return nil
			}
			return r.streamsOf(ctx, b.Namespace, b.Spec.Cluster)
		})).
		Complete(r)
}

func (r *FelixStreamReconciler) streamsOfCluster(ctx context.Context, o client.Object) []reconcile.Request {
	return r.streamsOf(ctx, o.GetNamespace(), o.GetName())
}

// streamsOf lists the streams placed on a cluster.
func (r *FelixStreamReconciler) streamsOf(ctx context.Context, namespace, cluster string) []reconcile.Request {
	var list felixv1.FelixStreamList
	if err := r.Client.List(ctx, &list, client.InNamespace(namespace)); err != nil {
		return nil
	}
	var out []reconcile.Request
	for _, s := range list.Items {
		if s.Spec.Cluster == cluster {
			out = append(out, reconcile.Request{NamespacedName: types.NamespacedName{Namespace: s.Namespace, Name: s.Name}})
		}
	}
	return out
}
