package controllers

import (
	"context"
	"fmt"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/controller/controllerutil"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"

	felixv1 "felix.dev/felix/api/v1alpha1"
)

// Restore bookkeeping [ID-5]. A PVC created from a backup's VolumeSnapshot
// carries AnnotationRestorePoint = pending until the operator has seen
// `felix restore-point` complete on it; from then on it carries done and
// the broker's pods are built without the init step.
const (
	// AnnotationRestorePoint on a broker PVC is pending or done.
	AnnotationRestorePoint = "felix.dev/restore-point"
	// AnnotationRestoredFrom on a broker PVC names the VolumeSnapshot it
	// was created from.
	AnnotationRestoredFrom = "felix.dev/restored-from"
	// RestorePointPending: restore-point has not been seen to complete.
	RestorePointPending = "pending"
	// RestorePointDone: restore-point completed before the broker's first
	// start; it never runs on this volume again.
	RestorePointDone = "done"
	// FinalizerRestorePoint on a broker pod that runs the restore-point
	// init step keeps the pod object until the operator has read its
	// final init status and recorded it on the PVC.
	FinalizerRestorePoint = "felix.dev/restore-point"
	// RestorePointContainer is the name of the init container.
	RestorePointContainer = "restore-point"
	// brokerContainer is the name of the broker container.
	brokerContainer = "broker"
)

// restoreSource returns the VolumeSnapshot a new PVC of ordinal starts
// from: "" for a cluster that is not restored, a broker beyond the
// backup's size, or a broker that registered before (its volume was lost
// or it was scaled away and back: it starts empty, as any wiped broker);
// wait is true while the backup is missing or not Completed (the PVC and
// pod are not created yet).
func (r *FelixClusterReconciler) restoreSource(ctx context.Context, c *felixv1.FelixCluster, ordinal int32, registered bool) (snapshot string, wait bool, err error) {
	if c.Spec.Restore == nil || registered {
		return "", false, nil
	}
	if c.Status.Restore == nil {
		// The backup's epochs are not recorded on the cluster yet (or the
		// restore is refused): no volume comes from the backup before
		// the epochs its shards must start above are kept.
		return "", true, nil
	}
	var b felixv1.FelixBackup
	switch err := r.Client.Get(ctx, types.NamespacedName{Namespace: c.Namespace, Name: c.Spec.Restore.Backup}, &b); {
	case apierrors.IsNotFound(err):
		return "", true, nil
	case err != nil:
		return "", false, err
	}
	if b.Status.Phase != felixv1.BackupCompleted {
		return "", true, nil
	}
	for _, s := range b.Status.Snapshots {
		if s.Ordinal == ordinal {
			return s.VolumeSnapshot, false, nil
		}
	}
	return "", false, nil
}

// RestoreRefusedReason is the Degraded reason of a restored cluster whose
// backup recorded no shard epochs and whose spec.restore sets no
// epochFloor: its shards could not be started above the epochs of the
// restored logs, so nothing is restored.
const RestoreRefusedReason = "BackupWithoutEpochs"

// recordRestoreEpochs copies, once, the shard epochs the cluster's
// backup recorded (and spec.restore.epochFloor) into status.restore,
// before any volume is created from the backup. Shards of the cluster are
// created only after it is set (see FelixStreamReconciler), each starting
// above its recorded epoch, so a new leader never fences below the
// records of the restored logs; keeping the record on the cluster lets
// streams be created after the backup is deleted. It returns a non-empty
// refusal when the backup is Completed but recorded no epochs (taken by an
// operator that did not record them) and no floor is set. A missing or
// unfinished backup records nothing yet (restoreSource waits for it).
func (r *FelixClusterReconciler) recordRestoreEpochs(ctx context.Context, c *felixv1.FelixCluster) (refused string, err error) {
	if c.Spec.Restore == nil || c.Status.Restore != nil {
		return "", nil
	}
	var b felixv1.FelixBackup
	switch err := r.Client.Get(ctx, types.NamespacedName{Namespace: c.Namespace, Name: c.Spec.Restore.Backup}, &b); {
	case apierrors.IsNotFound(err):
		return "", nil
	case err != nil:
		return "", err
	}
	if b.Status.Phase != felixv1.BackupCompleted {
		return "", nil
	}
	floor := c.Spec.Restore.EpochFloor
	if b.Status.Epochs == nil && floor == 0 {
		return fmt.Sprintf("FelixBackup %s recorded no shard epochs (taken by an older operator): restored shards could not start above the epochs in their logs, "+
			"so nothing is restored; take a new backup, or create the cluster again with spec.restore.epochFloor at least the highest epoch the source cluster's shards reached", b.Name), nil
	}
	orig := c.DeepCopy()
	c.Status.Restore = &felixv1.RestoreStatus{Backup: b.Name, EpochFloor: floor, Epochs: b.Status.Epochs.DeepCopy()}
	if err := r.Client.Status().Patch(ctx, c, client.MergeFromWithOptions(orig, client.MergeFromWithOptimisticLock{}), client.FieldOwner(OperatorFieldManager)); err != nil {
		return "", fmt.Errorf("record restore epochs of FelixBackup %s: %w", b.Name, err)
	}
	n := 0
	if b.Status.Epochs != nil {
		n = len(b.Status.Epochs.Shards)
	}
	r.event(c, corev1.EventTypeNormal, "RestoreEpochsRecorded", "Restore", "took the epochs of %d shards from FelixBackup %s (epoch floor %d); restored shards start above them", n, b.Name, floor)
	return "", nil
}

// restorePVC makes p start as a copy of snapshot, with restore-point
// pending.
func restorePVC(p *corev1.PersistentVolumeClaim, snapshot string) {
	p.Spec.DataSource = &corev1.TypedLocalObjectReference{
		APIGroup: ptr.To("snapshot.storage.k8s.io"), Kind: "VolumeSnapshot", Name: snapshot,
	}
	if p.Annotations == nil {
		p.Annotations = map[string]string{}
	}
	p.Annotations[AnnotationRestorePoint] = RestorePointPending
	p.Annotations[AnnotationRestoredFrom] = snapshot
}

// restorePointPending reads the broker's PVC from the API server (not the
// cache: a done written a moment ago must be seen before a new pod is
// built) and reports whether restore-point is still pending on it.
func (r *FelixClusterReconciler) restorePointPending(ctx context.Context, ns, broker string) (bool, error) {
	var pvc corev1.PersistentVolumeClaim
	if err := r.reader().Get(ctx, types.NamespacedName{Namespace: ns, Name: PVCName(broker)}, &pvc); err != nil {
		return false, client.IgnoreNotFound(err)
	}
	return pvc.Annotations[AnnotationRestorePoint] == RestorePointPending, nil
}

func (r *FelixClusterReconciler) reader() client.Reader {
	if r.APIReader != nil {
		return r.APIReader
	}
	return r.Client
}

// withRestorePoint adds the restore-point init step and its finalizer to a
// broker pod. The spec hash is left as brokerPod computed it, so the init
// step never makes a pod look outdated.
func withRestorePoint(pod *corev1.Pod) {
	broker := pod.Spec.Containers[0]
	pod.Spec.InitContainers = append(pod.Spec.InitContainers, corev1.Container{
		Name:            RestorePointContainer,
		Image:           broker.Image,
		Command:         []string{"felix"},
		Args:            []string{"restore-point", "--data-dir", DataDir},
		SecurityContext: broker.SecurityContext.DeepCopy(),
		VolumeMounts:    []corev1.VolumeMount{{Name: "data", MountPath: DataDir}, {Name: "tmp", MountPath: "/tmp"}},
	})
	controllerutil.AddFinalizer(pod, FinalizerRestorePoint)
}

// restorePointRan reports whether the pod shows that restore-point
// completed: the init container terminated with exit code 0, or the broker
// container ever ran (the kubelet starts it only after every init step
// succeeded).
func restorePointRan(pod *corev1.Pod) bool {
	for _, s := range pod.Status.InitContainerStatuses {
		if s.Name == RestorePointContainer && s.State.Terminated != nil && s.State.Terminated.ExitCode == 0 {
			return true
		}
	}
	for _, s := range pod.Status.ContainerStatuses {
		if s.Name == brokerContainer && (s.State.Running != nil || s.State.Terminated != nil || s.RestartCount > 0 || s.LastTerminationState.Terminated != nil) {
			return true
		}
	}
	return false
}

// settleRestorePoint handles a broker pod that carries the restore-point
// finalizer. Once the pod shows restore-point completed, the PVC is marked
// done (before anything else, with an optimistic lock), then the pod is
// deleted, its finalizer goes at the next look, and it is replaced by one
// without the init step, so not even a
// kubelet re-running init containers (a new pod sandbox after a node
// reboot) can run restore-point after the broker started. A pod deleted
// before it showed completion loses its finalizer with the PVC still
// pending: its replacement runs restore-point, which is safe because the
// broker never started on the volume.
func (r *FelixClusterReconciler) settleRestorePoint(ctx context.Context, c *felixv1.FelixCluster, pod *corev1.Pod) error {
	if !controllerutil.ContainsFinalizer(pod, FinalizerRestorePoint) {
		return nil
	}
	var pvc corev1.PersistentVolumeClaim
	err := r.reader().Get(ctx, types.NamespacedName{Namespace: pod.Namespace, Name: PVCName(pod.Name)}, &pvc)
	if err != nil && !apierrors.IsNotFound(err) {
		return err
	}
	done := err == nil && pvc.Annotations[AnnotationRestorePoint] == RestorePointDone
	if err == nil && !done && restorePointRan(pod) {
		orig := pvc.DeepCopy()
		if pvc.Annotations == nil {
			pvc.Annotations = map[string]string{}
		}
		pvc.Annotations[AnnotationRestorePoint] = RestorePointDone
		if err := r.Client.Patch(ctx, &pvc, client.MergeFromWithOptions(orig, client.MergeFromWithOptimisticLock{}), client.FieldOwner(OperatorFieldManager)); err != nil {
			return fmt.Errorf("mark PVC %s restore-point done: %w", pvc.Name, err)
		}
		done = true
		r.event(c, corev1.EventTypeNormal, "RestorePointDone", "Restore", "restore-point completed on %s before broker %s first started", pvc.Name, pod.Name)
	}
	if pod.DeletionTimestamp == nil {
		if !done {
			return nil // still running the init step, or not yet reported
		}
		// Delete first, finalizer second (the pod's update brings the next
		// reconcile): whatever stops the operator in between, the pod
		// carrying the init step is on its way out and keeps its
		// finalizer until the claim is seen done.
		if err := r.Client.Delete(ctx, pod, client.Preconditions{UID: &pod.UID}); err != nil && !apierrors.IsNotFound(err) {
			return fmt.Errorf("replace pod %s without the restore-point step: %w", pod.Name, err)
		}
		return nil
	}
	orig := pod.DeepCopy()
	controllerutil.RemoveFinalizer(pod, FinalizerRestorePoint)
	if err := r.Client.Patch(ctx, pod, client.MergeFromWithOptions(orig, client.MergeFromWithOptimisticLock{}), client.FieldOwner(OperatorFieldManager)); err != nil && !apierrors.IsNotFound(err) {
		return fmt.Errorf("remove restore-point finalizer of pod %s: %w", pod.Name, err)
	}
	return nil
}

// clustersRestoringFrom maps a FelixBackup to the clusters of its
// namespace that restore from it, so they go on when it completes.
func (r *FelixClusterReconciler) clustersRestoringFrom(ctx context.Context, o client.Object) []reconcile.Request {
	var list felixv1.FelixClusterList
	if err := r.Client.List(ctx, &list, client.InNamespace(o.GetNamespace())); err != nil {
		return nil
	}
	var out []reconcile.Request
	for _, c := range list.Items {
		if c.Spec.Restore != nil && c.Spec.Restore.Backup == o.GetName() {
			out = append(out, reconcile.Request{NamespacedName: types.NamespacedName{Namespace: c.Namespace, Name: c.Name}})
		}
	}
	return out
}

// releaseRestorePoint removes the restore-point finalizer from the
// cluster's pods that no reconcile of a broker in range will settle: all
// of them once the cluster is gone or being deleted, and those of brokers
// beyond the desired size (scale-down). Their volumes go with them.
func (r *FelixClusterReconciler) releaseRestorePoint(ctx context.Context, ns, cluster string, inRange func(broker string) bool) error {
	var pods corev1.PodList
	if err := r.Client.List(ctx, &pods, client.InNamespace(ns), client.MatchingLabels{LabelCluster: cluster}); err != nil {
		return err
	}
	for i := range pods.Items {
		p := &pods.Items[i]
		if p.DeletionTimestamp == nil || !controllerutil.ContainsFinalizer(p, FinalizerRestorePoint) || inRange(p.Name) {
			continue
		}
		orig := p.DeepCopy()
		controllerutil.RemoveFinalizer(p, FinalizerRestorePoint)
		if err := r.Client.Patch(ctx, p, client.MergeFrom(orig), client.FieldOwner(OperatorFieldManager)); err != nil && !apierrors.IsNotFound(err) {
			return fmt.Errorf("remove restore-point finalizer of pod %s: %w", p.Name, err)
		}
	}
	return nil
}
