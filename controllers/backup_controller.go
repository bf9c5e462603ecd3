package controllers

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"time"

	snapv1 "github.com/kubernetes-csi/external-snapshotter/client/v8/apis/volumesnapshot/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/tools/events"
	"k8s.io/utils/clock"
	"k8s.io/utils/ptr"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/controller/controllerutil"

	felixv1 "felix.dev/felix/api/v1alpha1"
)

// LabelBackup names the FelixBackup a VolumeSnapshot belongs to.
const LabelBackup = "felix.dev/backup"

// backupPoll is how often a Running backup looks at its VolumeSnapshots.
// The operator polls them through the API reader instead of watching, so
// it runs (and FelixBackup stays usable) in clusters without the snapshot
// CRDs installed until a backup is actually taken.
const backupPoll = time.Second

// snapshotErrorGrace is how long a backup keeps waiting for VolumeSnapshots
// that report an error. The snapshot controller keeps retrying after an
// error (it may be transient, and is cleared on success), so a backup
// fails only when an error is still reported this long after it started.
const snapshotErrorGrace = 5 * time.Minute

// FelixBackupReconciler takes a FelixBackup: one VolumeSnapshot per broker
// PVC of the cluster, owned by the backup, and marks it Completed once
// every snapshot is readyToUse.
type FelixBackupReconciler struct {
	Client client.Client
	// APIReader reads VolumeSnapshots uncached; Client when nil.
	APIReader client.Reader
	Clock     clock.PassiveClock
	Events    events.EventRecorder
	// Metrics counts finished backups; nil counts nothing.
	Metrics *Metrics
}

// SnapshotName is the VolumeSnapshot a backup takes of one broker's volume.
func SnapshotName(backup, broker string) string { return backup + "-" + broker }

// Reconcile advances a backup: Pending → Running (snapshots requested) →
// Completed (all ready) or Failed (the cluster does not exist, or a
// snapshot still reports an error snapshotErrorGrace after the backup
// started). A finished backup is left alone.
func (r *FelixBackupReconciler) Reconcile(ctx context.Context, req ctrl.Request) (ctrl.Result, error) {
	var b felixv1.FelixBackup
	if err := r.Client.Get(ctx, req.NamespacedName, &b); err != nil {
		return ctrl.Result{}, client.IgnoreNotFound(err)
	}
	if b.DeletionTimestamp != nil || b.Status.Phase == felixv1.BackupCompleted || b.Status.Phase == felixv1.BackupFailed {
		return ctrl.Result{}, nil
	}
	st := b.Status.DeepCopy()
	now := metav1.NewTime(r.Clock.Now())
	if len(st.Snapshots) == 0 {
		var c felixv1.FelixCluster
		err := r.Client.Get(ctx, types.NamespacedName{Namespace: b.Namespace, Name: b.Spec.Cluster}, &c)
		switch {
		case apierrors.IsNotFound(err):
			r.fail(st, b.Generation, now, "ClusterNotFound", fmt.Sprintf("FelixCluster %s not found", b.Spec.Cluster))
			return ctrl.Result{}, r.patchStatus(ctx, &b, st, now)
		case err != nil:
			return ctrl.Result{}, err
		}
		for i := int32(0); i < c.Spec.Brokers; i++ {
			broker := BrokerName(c.Name, i)
			st.Snapshots = append(st.Snapshots, felixv1.BrokerSnapshot{
				Broker: broker, Ordinal: i, PVC: PVCName(broker), VolumeSnapshot: SnapshotName(b.Name, broker),
			})
		}
		st.StartedAt = &now
	}
	st.Phase = felixv1.BackupRunning
	ready := 0
	snapErr := ""
	for i := range st.Snapshots {
		s := &st.Snapshots[i]
		vs, err := r.ensureSnapshot(ctx, &b, s)
		if err != nil {
			return ctrl.Result{}, err
		}
		s.ReadyToUse = vs.Status != nil && ptr.Deref(vs.Status.ReadyToUse, false)
		if !s.ReadyToUse && vs.Status != nil && vs.Status.Error != nil && vs.Status.Error.Message != nil {
			snapErr = fmt.Sprintf("VolumeSnapshot %s: %s", s.VolumeSnapshot, *vs.Status.Error.Message)
			if st.StartedAt != nil && now.Sub(st.StartedAt.Time) > snapshotErrorGrace {
				r.fail(st, b.Generation, now, "SnapshotFailed", fmt.Sprintf("%s (still reported %s after the backup started)", snapErr, snapshotErrorGrace))
				return ctrl.Result{}, r.patchStatus(ctx, &b, st, now)
			}
		}
		if s.ReadyToUse {
			ready++
		}
	}
	if ready == len(st.Snapshots) {
		// Read after every snapshot was seen ready, so after each was
		// cut: the epochs bound every epoch inside them.
		epochs, err := r.shardEpochs(ctx, b.Namespace, b.Spec.Cluster, now)
		if err != nil {
			return ctrl.Result{}, err
		}
		st.Epochs = epochs
		st.Phase = felixv1.BackupCompleted
		st.CompletedAt = &now
		st.Conditions = setConditions(st.Conditions, b.Generation, now,
			cond(felixv1.ConditionReady, true, "SnapshotsReady", fmt.Sprintf("%d VolumeSnapshots ready to use", ready)))
		if err := r.patchStatus(ctx, &b, st, now); err != nil {
			return ctrl.Result{}, err
		}
		r.event(&b, corev1.EventTypeNormal, "BackupCompleted", "Backup", "%d VolumeSnapshots of cluster %s ready; epochs of %d shards recorded", ready, b.Spec.Cluster, len(st.Epochs.Shards))
		return ctrl.Result{}, nil
	}
	pending := cond(felixv1.ConditionReady, false, "SnapshotsPending", fmt.Sprintf("%d/%d VolumeSnapshots ready", ready, len(st.Snapshots)))
	if snapErr != "" {
		// Retried by the snapshot controller; the backup fails only if
		// errors persist past snapshotErrorGrace.
		pending = cond(felixv1.ConditionReady, false, "SnapshotError", fmt.Sprintf("%d/%d VolumeSnapshots ready; %s", ready, len(st.Snapshots), snapErr))
	}
	st.Conditions = setConditions(st.Conditions, b.Generation, now, pending)
	if err := r.patchStatus(ctx, &b, st, now); err != nil {
		return ctrl.Result{}, err
	}
	return ctrl.Result{RequeueAfter: backupPoll}, nil
}

// shardEpochs reads, from the API server (not the cache, which may lag
// behind the snapshots), the assignment epoch of every FelixShard of the
// cluster. Called only after every snapshot of the backup was seen
// readyToUse: a replica fences or writes at epoch E only after the
// operator assigned E, and assignments only grow, so the epoch read now
// is at least every epoch a snapshot can hold for the shard. A shard
// without the cluster label (created by an older operator) belongs to the
// cluster its stream names.
func (r *FelixBackupReconciler) shardEpochs(ctx context.Context, ns, cluster string, now metav1.Time) (*felixv1.RecordedEpochs, error) {
	reader := r.APIReader
	if reader == nil {
		reader = r.Client
	}
	var shards felixv1.FelixShardList
	if err := reader.List(ctx, &shards, client.InNamespace(ns)); err != nil {
		return nil, fmt.Errorf("list FelixShards to record epochs: %w", err)
	}
	var streams felixv1.FelixStreamList
	if err := reader.List(ctx, &streams, client.InNamespace(ns)); err != nil {
		return nil, fmt.Errorf("list FelixStreams to record epochs: %w", err)
	}
	streamCluster := map[string]string{}
	for _, s := range streams.Items {
		streamCluster[s.Name] = s.Spec.Cluster
	}
	out := &felixv1.RecordedEpochs{RecordedAt: now, Shards: []felixv1.ShardEpoch{}}
	for _, sh := range shards.Items {
		owner := sh.Labels[LabelCluster]
		if owner == "" {
			owner = streamCluster[sh.Spec.Stream]
		}
		if owner != cluster {
			continue
		}
		e := felixv1.ShardEpoch{Stream: sh.Spec.Stream, Index: sh.Spec.Index}
		if a := sh.Status.Assignment; a != nil {
			e.Epoch = a.Epoch
		}
		out.Shards = append(out.Shards, e)
	}
	slices.SortFunc(out.Shards, func(a, b felixv1.ShardEpoch) int {
		if c := strings.Compare(a.Stream, b.Stream); c != 0 {
			return c
		}
		return int(a.Index) - int(b.Index)
	})
	return out, nil
}

// ensureSnapshot returns the VolumeSnapshot of s, creating it (owned by
// the backup) when it does not exist.
func (r *FelixBackupReconciler) ensureSnapshot(ctx context.Context, b *felixv1.FelixBackup, s *felixv1.BrokerSnapshot) (*snapv1.VolumeSnapshot, error) {
	reader := r.APIReader
	if reader == nil {
		reader = r.Client
	}
	var vs snapv1.VolumeSnapshot
	err := reader.Get(ctx, types.NamespacedName{Namespace: b.Namespace, Name: s.VolumeSnapshot}, &vs)
	if err == nil {
		return &vs, nil
	}
	if !apierrors.IsNotFound(err) {
		return nil, fmt.Errorf("get VolumeSnapshot %s: %w", s.VolumeSnapshot, err)
	}
	labels := brokerLabels(b.Spec.Cluster, s.Broker)
	labels[LabelBackup] = b.Name
	vs = snapv1.VolumeSnapshot{
		ObjectMeta: metav1.ObjectMeta{Namespace: b.Namespace, Name: s.VolumeSnapshot, Labels: labels},
		Spec: snapv1.VolumeSnapshotSpec{
			Source: snapv1.VolumeSnapshotSource{PersistentVolumeClaimName: ptr.To(s.PVC)},
		},
	}
	if err := controllerutil.SetControllerReference(b, &vs, r.Client.Scheme()); err != nil {
		return nil, err
	}
	if err := r.Client.Create(ctx, &vs); err != nil && !apierrors.IsAlreadyExists(err) {
		return nil, fmt.Errorf("create VolumeSnapshot %s: %w", s.VolumeSnapshot, err)
	}
	return &vs, nil
}

// fail marks st Failed with the reason on its Ready condition.
func (r *FelixBackupReconciler) fail(st *felixv1.FelixBackupStatus, generation int64, now metav1.Time, reason, msg string) {
	st.Phase = felixv1.BackupFailed
	st.CompletedAt = &now
	st.Conditions = setConditions(st.Conditions, generation, now, cond(felixv1.ConditionReady, false, reason, msg))
}

// patchStatus writes st when it differs from the backup's status.
func (r *FelixBackupReconciler) patchStatus(ctx context.Context, b *felixv1.FelixBackup, st *felixv1.FelixBackupStatus, _ metav1.Time) error {
	if semanticEqual(*st, b.Status) {
		return nil
	}
	orig := b.DeepCopy()
	b.Status = *st
	if err := r.Client.Status().Patch(ctx, b, client.MergeFromWithOptions(orig, client.MergeFromWithOptimisticLock{}), client.FieldOwner(OperatorFieldManager)); err != nil {
		return fmt.Errorf("patch FelixBackup %s status: %w", b.Name, err)
	}
	if st.Phase != orig.Status.Phase && (st.Phase == felixv1.BackupCompleted || st.Phase == felixv1.BackupFailed) {
		// Once per backup: a finished backup is never reconciled again,
		// and the patch above fails on a concurrent change.
		r.Metrics.backupFinished(b.Namespace, st.Phase)
	}
	if st.Phase == felixv1.BackupFailed {
		r.event(b, corev1.EventTypeWarning, "BackupFailed", "Backup", "%s", st.Conditions[len(st.Conditions)-1].Message)
	}
	return nil
}

func (r *FelixBackupReconciler) event(b *felixv1.FelixBackup, typ, reason, action, note string, args ...any) {
	if r.Events != nil {
		r.Events.Eventf(b, nil, typ, reason, action, note, args...)
	}
}

// SetupWithManager registers the reconciler.
func (r *FelixBackupReconciler) SetupWithManager(mgr ctrl.Manager) error {
	return ctrl.NewControllerManagedBy(mgr).
		Named("felixbackup").
		For(&felixv1.FelixBackup{}).
		Complete(r)
}
