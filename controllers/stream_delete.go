package controllers

import (
	"context"
	"encoding/json"
	"fmt"
	"sort"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	"k8s.io/apimachinery/pkg/types"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/controller/controllerutil"

	felixv1 "felix.dev/felix/api/v1alpha1"
)

// Stream deletion (docs/operator.md, "Deleting a stream"). A FelixStream
// carries FinalizerStreamLogs; when it is deleted, the leader of each of
// its shards (which sees the stream's deletionTimestamp through its watch)
// trims the shard's data log to its tail and reports the floor. The
// finalizer goes once every shard's report shows the trim as its last
// committed record, after the highest epoch of the stream's shards is
// recorded on the cluster (AnnotationDeletedStreamEpochs), so a stream
// recreated under the same name starts above the epochs its old logs hold
// and reads none of their records.
const (
	// FinalizerStreamLogs on a FelixStream keeps it until its shards'
	// logs are trimmed empty.
	FinalizerStreamLogs = "felix.dev/stream-logs"
	// AnnotationSkipLogRemoval = "true" on a FelixStream being deleted
	// lets the finalizer go without waiting for the brokers (brokers that
	// are gone for good, or an older broker image that does not trim):
	// the logs keep their records, and a recreated stream of the same
	// name reads them.
	AnnotationSkipLogRemoval = "felix.dev/skip-log-removal"
	// AnnotationDeletedStreamEpochs on a FelixCluster is a JSON object
	// mapping each deleted stream's name to the highest epoch its shards
	// reached; a stream created later under that name starts above it.
	AnnotationDeletedStreamEpochs = "felix.dev/deleted-stream-epochs"

	// RemovingLogsReason: the stream waits for its shards' logs to be
	// trimmed before it goes.
	RemovingLogsReason = "RemovingLogs"
)

// streamDeleteRetry is how often a stream being deleted looks again (its
// shards' report updates also trigger it).
const streamDeleteRetry = 5 * time.Second

// ensureStreamFinalizer adds FinalizerStreamLogs; it reports whether it
// patched (the reconcile then ends: the update brings the next one).
func (r *FelixStreamReconciler) ensureStreamFinalizer(ctx context.Context, s *felixv1.FelixStream) (bool, error) {
	if controllerutil.ContainsFinalizer(s, FinalizerStreamLogs) {
		return false, nil
	}
	orig := s.DeepCopy()
	controllerutil.AddFinalizer(s, FinalizerStreamLogs)
	if err := r.Client.Patch(ctx, s, client.MergeFromWithOptions(orig, client.MergeFromWithOptimisticLock{}), client.FieldOwner(OperatorFieldManager)); err != nil {
		return false, fmt.Errorf("add finalizer to stream %s: %w", s.Name, err)
	}
	return true, nil
}

// finalizeStream runs the deletion of a stream that carries the finalizer.
func (r *FelixStreamReconciler) finalizeStream(ctx context.Context, s *felixv1.FelixStream) (ctrl.Result, error) {
	if !controllerutil.ContainsFinalizer(s, FinalizerStreamLogs) {
		return ctrl.Result{}, nil
	}
	log := ctrl.LoggerFrom(ctx)
	var shards felixv1.FelixShardList
	if err := r.Client.List(ctx, &shards, client.InNamespace(s.Namespace), client.MatchingLabels{LabelStream: s.Name}); err != nil {
		return ctrl.Result{}, err
	}
	var cluster felixv1.FelixCluster
	err := r.Client.Get(ctx, types.NamespacedName{Namespace: s.Namespace, Name: s.Spec.Cluster}, &cluster)
	clusterGone := apierrors.IsNotFound(err) || (err == nil && cluster.DeletionTimestamp != nil)
	if err != nil && !apierrors.IsNotFound(err) {
		return ctrl.Result{}, err
	}
	skip := s.Annotations[AnnotationSkipLogRemoval] == "true"
	var pending []string
	var maxEpoch int64
	for i := range shards.Items {
		sh := &shards.Items[i]
		if a := sh.Status.Assignment; a != nil && a.Epoch > maxEpoch {
			maxEpoch = a.Epoch
		}
		if rep := sh.Status.Report; rep != nil && rep.Epoch > maxEpoch {
			maxEpoch = rep.Epoch
		}
		if !shardEmptied(sh) {
			pending = append(pending, sh.Name)
		}
	}
	sort.Strings(pending)
	if len(pending) > 0 && !skip && !clusterGone {
		msg := fmt.Sprintf("the stream is deleted once its shards' logs are trimmed empty by their leaders; waiting for %s (annotate the stream %s=true to delete it without, keeping the records)",
			strings.Join(pending[:min(len(pending), 5)], ", "), AnnotationSkipLogRemoval)
		if len(pending) > 5 {
			msg += fmt.Sprintf(" and %d more", len(pending)-5)
		}
		prev := meta.FindStatusCondition(s.Status.Conditions, felixv1.ConditionProgressing)
		held := cond(felixv1.ConditionProgressing, true, RemovingLogsReason, msg)
		if err := r.patchStatus(ctx, s, shards.Items, shardsPlaced{}, nil, &held); err != nil {
			if apierrors.IsConflict(err) {
				return ctrl.Result{RequeueAfter: 50 * time.Millisecond}, nil
			}
			return ctrl.Result{}, err
		}
		if (prev == nil || prev.Reason != RemovingLogsReason) && r.Events != nil {
			r.Events.Eventf(s, nil, corev1.EventTypeNormal, RemovingLogsReason, "Delete", "%s", msg)
		}
		return ctrl.Result{RequeueAfter: streamDeleteRetry}, nil
	}
	if !clusterGone && maxEpoch > 0 {
		if err := r.recordDeletedEpoch(ctx, &cluster, s.Name, maxEpoch); err != nil {
			if apierrors.IsConflict(err) {
				return ctrl.Result{RequeueAfter: 50 * time.Millisecond}, nil
			}
			return ctrl.Result{}, err
		}
	}
	// The shards go before the stream, so a stream recreated under the
	// name never finds its predecessor's shards (the garbage collector
	// would delete them only after the stream is gone). Their brokers
	// stop them; the trimmed logs stay in the stores.
	for i := range shards.Items {
		sh := &shards.Items[i]
		if err := r.Client.Delete(ctx, sh, client.Preconditions{UID: &sh.UID}); err != nil && !apierrors.IsNotFound(err) && !apierrors.IsConflict(err) {
			return ctrl.Result{}, fmt.Errorf("delete shard %s of deleted stream %s: %w", sh.Name, s.Name, err)
		}
	}
	orig := s.DeepCopy()
	controllerutil.RemoveFinalizer(s, FinalizerStreamLogs)
	if err := r.Client.Patch(ctx, s, client.MergeFromWithOptions(orig, client.MergeFromWithOptimisticLock{}), client.FieldOwner(OperatorFieldManager)); err != nil {
		if apierrors.IsConflict(err) {
			return ctrl.Result{RequeueAfter: 50 * time.Millisecond}, nil
		}
		return ctrl.Result{}, client.IgnoreNotFound(err)
	}
	switch {
	case clusterGone:
		log.Info("stream deleted with its cluster", "stream", s.Name, "cluster", s.Spec.Cluster)
	case len(pending) > 0:
		log.Info("stream deleted without trimming its logs (skip annotation)", "stream", s.Name, "untrimmed", pending)
		if r.Events != nil {
			r.Events.Eventf(s, nil, corev1.EventTypeWarning, "LogRemovalSkipped", "Delete",
				"deleted without trimming the logs of %d shards (%s=true): their records stay on the brokers and a stream recreated as %s reads them", len(pending), AnnotationSkipLogRemoval, s.Name)
		}
	default:
		log.Info("stream logs trimmed; finalizer removed", "stream", s.Name, "shards", len(shards.Items))
		if r.Events != nil {
			r.Events.Eventf(s, nil, corev1.EventTypeNormal, "LogsRemoved", "Delete", "the logs of its %d shards are trimmed empty on every broker", len(shards.Items))
		}
	}
	return ctrl.Result{}, nil
}

// shardEmptied reports whether a shard of a stream being deleted holds no
// readable record: never assigned (no replica wrote anything), never
// written, or its current leader reports the deletion trim as its last
// committed record.
func shardEmptied(sh *felixv1.FelixShard) bool {
	a, rep := sh.Status.Assignment, sh.Status.Report
	if a == nil || a.Epoch == 0 {
		return true
	}
	if rep == nil || rep.Epoch != a.Epoch || rep.Leader != a.Leader {
		return false
	}
	if rep.Position == 0 && rep.Committed == 0 {
		return true
	}
	return rep.Floor > 0 && rep.Committed == rep.Floor+1 && rep.Position == rep.Committed
}

// recordDeletedEpoch raises the cluster's record of the highest epoch of
// a deleted stream's shards to at least epoch.
func (r *FelixStreamReconciler) recordDeletedEpoch(ctx context.Context, c *felixv1.FelixCluster, stream string, epoch int64) error {
	epochs, err := deletedStreamEpochs(c)
	if err != nil {
		return err
	}
	if epochs[stream] >= epoch {
		return nil
	}
	epochs[stream] = epoch
	b, err := json.Marshal(epochs)
	if err != nil {
		return err
	}
	orig := c.DeepCopy()
	if c.Annotations == nil {
		c.Annotations = map[string]string{}
	}
	c.Annotations[AnnotationDeletedStreamEpochs] = string(b)
	if err := r.Client.Patch(ctx, c, client.MergeFromWithOptions(orig, client.MergeFromWithOptimisticLock{}), client.FieldOwner(OperatorFieldManager)); err != nil {
		return fmt.Errorf("record deleted stream %s's epoch on cluster %s: %w", stream, c.Name, err)
	}
	return nil
}

// errBadDeletedEpochs: the cluster's deleted-stream annotation does not
// parse (edited by hand); shards are not placed until it does.
var errBadDeletedEpochs = fmt.Errorf("annotation %s does not parse as a JSON object of stream names to epochs", AnnotationDeletedStreamEpochs)

// deletedStreamEpochs parses the cluster's record of deleted streams.
func deletedStreamEpochs(c *felixv1.FelixCluster) (map[string]int64, error) {
	out := map[string]int64{}
	v := c.Annotations[AnnotationDeletedStreamEpochs]
	if v == "" {
		return out, nil
	}
	if err := json.Unmarshal([]byte(v), &out); err != nil {
		return nil, fmt.Errorf("cluster %s: %w: %v", c.Name, errBadDeletedEpochs, err)
	}
	return out, nil
}
