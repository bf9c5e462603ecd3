package controllers_test

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	snapv1 "github.com/kubernetes-csi/external-snapshotter/client/v8/apis/volumesnapshot/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"

	felixv1 "felix.dev/felix/api/v1alpha1"
	"felix.dev/felix/controllers"
)

func getBackup(t *testing.T, ns, name string) *felixv1.FelixBackup {
	t.Helper()
	var b felixv1.FelixBackup
	if err := suite.c.Get(context.Background(), types.NamespacedName{Namespace: ns, Name: name}, &b); err != nil {
		return nil
	}
	return &b
}

// markSnapshotsReady plays the CSI snapshot controller (none runs under
// envtest): it sets readyToUse on every VolumeSnapshot of the backup.
func markSnapshotsReady(t *testing.T, ns, backup string) {
	t.Helper()
	var list snapv1.VolumeSnapshotList
	if err := suite.c.List(context.Background(), &list, client.InNamespace(ns), client.MatchingLabels{controllers.LabelBackup: backup}); err != nil {
		t.Fatalf("list snapshots: %v", err)
	}
	for i := range list.Items {
		vs := &list.Items[i]
		orig := vs.DeepCopy()
		vs.Status = &snapv1.VolumeSnapshotStatus{ReadyToUse: ptr.To(true), BoundVolumeSnapshotContentName: ptr.To("content-" + vs.Name)}
		if err := suite.c.Status().Patch(context.Background(), vs, client.MergeFrom(orig)); err != nil {
			t.Fatalf("mark %s ready: %v", vs.Name, err)
		}
	}
}

// takeBackup creates a FelixBackup of cluster, checks its VolumeSnapshots
// and that it completes only once they are ready.
func takeBackup(t *testing.T, ns, cluster, name string, brokers int32) *felixv1.FelixBackup {
	t.Helper()
	ctx := context.Background()
	create(t, &felixv1.FelixBackup{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name}, Spec: felixv1.FelixBackupSpec{Cluster: cluster}})
	eventually(t, 20*time.Second, "backup Running with its snapshots", func() (bool, string) {
		b := getBackup(t, ns, name)
		if b == nil || b.Status.Phase != felixv1.BackupRunning || len(b.Status.Snapshots) != int(brokers) {
			return false, fmt.Sprintf("%+v", b)
		}
		var list snapv1.VolumeSnapshotList
		if err := suite.c.List(ctx, &list, client.InNamespace(ns), client.MatchingLabels{controllers.LabelBackup: name}); err != nil {
			return false, err.Error()
		}
		return len(list.Items) == int(brokers), fmt.Sprintf("%d snapshots", len(list.Items))
	})
	b := getBackup(t, ns, name)
	for _, s := range b.Status.Snapshots {
		var vs snapv1.VolumeSnapshot
		if err := suite.c.Get(ctx, types.NamespacedName{Namespace: ns, Name: s.VolumeSnapshot}, &vs); err != nil {
			t.Fatalf("snapshot %s: %v", s.VolumeSnapshot, err)
		}
		if src := ptr.Deref(vs.Spec.Source.PersistentVolumeClaimName, ""); src != controllers.PVCName(controllers.BrokerName(cluster, s.Ordinal)) || src != s.PVC {
			t.Errorf("snapshot %s source %q, status pvc %q", vs.Name, src, s.PVC)
		}
		if vs.Spec.VolumeSnapshotClassName != nil {
			t.Errorf("snapshot %s class %q, want unset (the cluster default)", vs.Name, *vs.Spec.VolumeSnapshotClassName)
		}
		if len(vs.OwnerReferences) != 1 || vs.OwnerReferences[0].Kind != "FelixBackup" || vs.OwnerReferences[0].Name != name {
			t.Errorf("snapshot %s owners %+v", vs.Name, vs.OwnerReferences)
		}
	}
	if b.Status.StartedAt == nil || b.Status.CompletedAt != nil || conditionTrue(b.Status.Conditions, felixv1.ConditionReady) {
		t.Fatalf("running backup status: %+v", b.Status)
	}
	markSnapshotsReady(t, ns, name)
	eventually(t, 20*time.Second, "backup Completed", func() (bool, string) {
		b = getBackup(t, ns, name)
		return b != nil && b.Status.Phase == felixv1.BackupCompleted, fmt.Sprintf("%+v", b.Status)
	})
	for _, s := range b.Status.Snapshots {
		if !s.ReadyToUse {
			t.Errorf("completed backup lists %s not ready", s.VolumeSnapshot)
		}
	}
	if b.Status.CompletedAt == nil || !conditionTrue(b.Status.Conditions, felixv1.ConditionReady) {
		t.Errorf("completed backup status: %+v", b.Status)
	}
	return b
}

// TestBackup_SnapshotsEveryBrokerAndCompletesWhenReady: a FelixBackup takes
// one VolumeSnapshot per broker PVC and completes once all are ready.
func TestBackup_SnapshotsEveryBrokerAndCompletesWhenReady(t *testing.T) {
	ns := namespace(t)
	create(t, fastCluster(ns, "src", 3))
	waitForBrokers(t, ns, "src", 3)
	takeBackup(t, ns, "src", "nightly", 3)
	b := getBackup(t, ns, "nightly")
	b.Spec.Cluster = "other"
	if err := suite.c.Update(context.Background(), b); !apierrors.IsInvalid(err) {
		t.Errorf("changing a backup's spec: %v, want Invalid", err)
	}
}

// TestBackup_FailsForMissingCluster: a backup of a cluster that does not
// exist fails and creates nothing.
func TestBackup_FailsForMissingCluster(t *testing.T) {
	ns := namespace(t)
	create(t, &felixv1.FelixBackup{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "b"}, Spec: felixv1.FelixBackupSpec{Cluster: "nope"}})
	eventually(t, 20*time.Second, "backup Failed", func() (bool, string) {
		b := getBackup(t, ns, "b")
		return b != nil && b.Status.Phase == felixv1.BackupFailed && len(b.Status.Snapshots) == 0, fmt.Sprintf("%+v", b)
	})
}

func getPVC(t *testing.T, ns, name string) *corev1.PersistentVolumeClaim {
	t.Helper()
	var p corev1.PersistentVolumeClaim
	if err := suite.c.Get(context.Background(), types.NamespacedName{Namespace: ns, Name: name}, &p); err != nil {
		return nil
	}
	return &p
}

func getPod(t *testing.T, ns, name string) *corev1.Pod {
	t.Helper()
	var p corev1.Pod
	if err := suite.c.Get(context.Background(), types.NamespacedName{Namespace: ns, Name: name}, &p); err != nil {
		return nil
	}
	return &p
}

func hasRestorePoint(p *corev1.Pod) bool {
	for _, c := range p.Spec.InitContainers {
		if c.Name == controllers.RestorePointContainer {
			return strings.Join(c.Command, " ")+" "+strings.Join(c.Args, " ") == "felix restore-point --data-dir /var/lib/felix"
		}
	}
	return false
}

// setPodStatus plays the kubelet: initDone reports the restore-point init
// container terminated with exit 0, brokerRunning the broker running.
func setPodStatus(t *testing.T, p *corev1.Pod, initDone, brokerRunning bool) {
	t.Helper()
	orig := p.DeepCopy()
	now := metav1.Now()
	if initDone {
		p.Status.InitContainerStatuses = []corev1.ContainerStatus{{Name: controllers.RestorePointContainer,
			State: corev1.ContainerState{Terminated: &corev1.ContainerStateTerminated{ExitCode: 0, FinishedAt: now}}}}
	}
	if brokerRunning {
		p.Status.ContainerStatuses = []corev1.ContainerStatus{{Name: "broker",
			State: corev1.ContainerState{Running: &corev1.ContainerStateRunning{StartedAt: now}}}}
	}
	if err := suite.c.Status().Patch(context.Background(), p, client.MergeFrom(orig)); err != nil {
		t.Fatalf("pod %s status: %v", p.Name, err)
	}
}

// waitNewPod waits for the broker's pod to be one other than old (by UID)
// and not terminating, and returns it.
func waitNewPod(t *testing.T, ns, name string, old types.UID) *corev1.Pod {
	t.Helper()
	var p *corev1.Pod
	eventually(t, 20*time.Second, "a new pod "+name, func() (bool, string) {
		p = getPod(t, ns, name)
		return p != nil && p.UID != old && p.DeletionTimestamp == nil, fmt.Sprintf("%+v", p)
	})
	return p
}

// TestID5_RestorePointRunsOnceBeforeFirstStart: a cluster restored from a
// backup creates its PVCs from the backup's VolumeSnapshots, and each
// broker's pods run `felix restore-point` until the operator has seen it
// complete on that volume, never after: not when the pod is deleted after
// the step completed but before the operator noticed (the finalizer holds
// the pod until its status is read), not on later restarts. A pod deleted
// before the step completed is replaced by one that runs it.
func TestID5_RestorePointRunsOnceBeforeFirstStart(t *testing.T) {
	ns := namespace(t)
	ctx := context.Background()
	create(t, fastCluster(ns, "src", 2))
	waitForBrokers(t, ns, "src", 2)

	// A restored cluster waits for its backup: no volume, no pod.
	dst := fastCluster(ns, "dst", 3)
	dst.Spec.Restore = &felixv1.RestoreSpec{Backup: "bk"}
	create(t, dst)
	waitForBrokers(t, ns, "dst", 3)
	eventually(t, 20*time.Second, "dst Progressing: WaitingForBackup", func() (bool, string) {
		var c felixv1.FelixCluster
		if err := suite.c.Get(ctx, types.NamespacedName{Namespace: ns, Name: "dst"}, &c); err != nil {
			return false, err.Error()
		}
		p := condition(c.Status.Conditions, felixv1.ConditionProgressing)
		return p != nil && p.Reason == "WaitingForBackup", fmt.Sprintf("%+v", p)
	})
	if p := getPVC(t, ns, "data-dst-0"); p != nil {
		t.Fatalf("PVC created before the backup exists: %+v", p.Spec.DataSource)
	}
	takeBackup(t, ns, "src", "bk", 2)

	eventually(t, 20*time.Second, "restored PVCs and pods", func() (bool, string) {
		for i := 0; i < 3; i++ {
			if getPod(t, ns, fmt.Sprintf("dst-%d", i)) == nil {
				return false, fmt.Sprintf("pod dst-%d missing", i)
			}
		}
		return true, ""
	})
	for i, want := range []string{"bk-src-0", "bk-src-1", ""} {
		pvc := getPVC(t, ns, fmt.Sprintf("data-dst-%d", i))
		pod := getPod(t, ns, fmt.Sprintf("dst-%d", i))
		if want == "" { // beyond the backup: an empty volume, no restore step
			if pvc.Spec.DataSource != nil || pvc.Annotations[controllers.AnnotationRestorePoint] != "" || len(pod.Spec.InitContainers) != 0 {
				t.Errorf("dst-2: dataSource %+v annotations %v init %v", pvc.Spec.DataSource, pvc.Annotations, pod.Spec.InitContainers)
			}
			continue
		}
		ds := pvc.Spec.DataSource
		if ds == nil || ptr.Deref(ds.APIGroup, "") != "snapshot.storage.k8s.io" || ds.Kind != "VolumeSnapshot" || ds.Name != want {
			t.Errorf("%s dataSource %+v, want VolumeSnapshot %s", pvc.Name, ds, want)
		}
		if got := pvc.Annotations[controllers.AnnotationRestorePoint]; got != controllers.RestorePointPending {
			t.Errorf("%s restore-point %q, want pending", pvc.Name, got)
		}
		if !hasRestorePoint(pod) || !slicesContains(pod.Finalizers, controllers.FinalizerRestorePoint) {
			t.Errorf("%s: init %+v finalizers %v, want the restore-point step and finalizer", pod.Name, pod.Spec.InitContainers, pod.Finalizers)
		}
	}
	if t.Failed() {
		t.FailNow()
	}

	// dst-0: the step completes and the broker starts; the operator marks
	// the claim done and replaces the pod by one without the step.
	p0 := getPod(t, ns, "dst-0")
	setPodStatus(t, p0, true, true)
	eventually(t, 20*time.Second, "data-dst-0 done", func() (bool, string) {
		p := getPVC(t, ns, "data-dst-0")
		return p.Annotations[controllers.AnnotationRestorePoint] == controllers.RestorePointDone, fmt.Sprint(p.Annotations)
	})
	p0 = waitNewPod(t, ns, "dst-0", p0.UID)
	if hasRestorePoint(p0) || len(p0.Finalizers) != 0 {
		t.Fatalf("dst-0 after done: init %+v finalizers %v", p0.Spec.InitContainers, p0.Finalizers)
	}
	// A later restart (pod deleted) never brings the step back.
	if err := suite.c.Delete(ctx, p0); err != nil {
		t.Fatalf("delete dst-0: %v", err)
	}
	if p := waitNewPod(t, ns, "dst-0", p0.UID); hasRestorePoint(p) {
		t.Fatalf("restarted dst-0 runs restore-point again")
	}

	// dst-1: deleted before the step ran: the replacement runs it.
	p1 := getPod(t, ns, "dst-1")
	if err := suite.c.Delete(ctx, p1); err != nil {
		t.Fatalf("delete dst-1: %v", err)
	}
	p1 = waitNewPod(t, ns, "dst-1", p1.UID)
	if !hasRestorePoint(p1) {
		t.Fatalf("dst-1 replaced before restore-point ran lacks the step")
	}
	if got := getPVC(t, ns, "data-dst-1").Annotations[controllers.AnnotationRestorePoint]; got != controllers.RestorePointPending {
		t.Fatalf("data-dst-1 %q, want pending", got)
	}
	// The race: the step completes and the pod is deleted at once, before
	// the operator saw it. The finalizer keeps the pod until the operator
	// read its final status, so the claim is done before a new pod exists.
	setPodStatus(t, p1, true, false)
	if err := suite.c.Delete(ctx, p1); err != nil {
		t.Fatalf("delete dst-1: %v", err)
	}
	p1 = waitNewPod(t, ns, "dst-1", p1.UID)
	if hasRestorePoint(p1) {
		t.Fatalf("dst-1 runs restore-point again after it completed")
	}
	if got := getPVC(t, ns, "data-dst-1").Annotations[controllers.AnnotationRestorePoint]; got != controllers.RestorePointDone {
		t.Fatalf("data-dst-1 %q, want done", got)
	}

	// A broker that registered before and loses its claim gets an empty
	// volume, not the backup again.
	startBroker(t, ns, "dst", 0)
	old := getPVC(t, ns, "data-dst-0")
	if err := suite.c.Delete(ctx, old); err != nil {
		t.Fatalf("delete data-dst-0: %v", err)
	}
	if p := getPVC(t, ns, "data-dst-0"); p != nil && len(p.Finalizers) > 0 {
		orig := p.DeepCopy()
		p.Finalizers = nil // no controller manager runs to release pvc-protection
		if err := suite.c.Patch(ctx, p, client.MergeFrom(orig)); err != nil {
			t.Fatalf("release data-dst-0: %v", err)
		}
	}
	eventually(t, 20*time.Second, "a new empty data-dst-0", func() (bool, string) {
		p := getPVC(t, ns, "data-dst-0")
		return p != nil && p.UID != old.UID && p.DeletionTimestamp == nil, fmt.Sprintf("%+v", p)
	})
	if p := getPVC(t, ns, "data-dst-0"); p.Spec.DataSource != nil || p.Annotations[controllers.AnnotationRestorePoint] != "" {
		t.Errorf("re-created claim of a registered broker: dataSource %+v annotations %v", p.Spec.DataSource, p.Annotations)
	}

	// spec.restore is fixed at creation.
	for _, restore := range []*felixv1.RestoreSpec{{Backup: "other"}, nil} {
		var c felixv1.FelixCluster
		if err := suite.c.Get(ctx, types.NamespacedName{Namespace: ns, Name: "dst"}, &c); err != nil {
			t.Fatal(err)
		}
		c.Spec.Restore = restore
		// An update validated against the live object: the CEL rule
		// answers Invalid (a status write in between would be Conflict).
		err := suite.c.Update(ctx, &c)
		for apierrors.IsConflict(err) {
			if err = suite.c.Get(ctx, types.NamespacedName{Namespace: ns, Name: "dst"}, &c); err == nil {
				c.Spec.Restore = restore
				err = suite.c.Update(ctx, &c)
			}
		}
		if !apierrors.IsInvalid(err) {
			t.Errorf("setting spec.restore to %+v: %v, want Invalid", restore, err)
		}
	}
}

func slicesContains(s []string, v string) bool {
	for _, x := range s {
		if x == v {
			return true
		}
	}
	return false
}

// TestID5_SettleRestorePointOrder drives the settlement of one restored
// broker's pod step by step (no cluster owns it, so the running operator
// leaves it alone): the order of the kubelet's report, the pod's deletion
// and the operator's look is fixed by the test, and in every order the
// claim is marked done exactly when the pod shows the step completed.
func TestID5_SettleRestorePointOrder(t *testing.T) {
	ctx := context.Background()
	for _, tc := range []struct {
		name          string
		initDone      bool // the kubelet reported the init step exited 0
		brokerRunning bool // the kubelet reported the broker running
		deleted       bool // the pod was deleted before the operator looked
		wantDone      bool
		wantPodGone   bool // replaced (done) or released (deleted)
	}{
		{name: "init-running", wantDone: false, wantPodGone: false},
		{name: "init-done-pod-live", initDone: true, wantDone: true, wantPodGone: true},
		{name: "broker-running-init-status-lost", brokerRunning: true, wantDone: true, wantPodGone: true},
		{name: "init-done-then-deleted-before-look", initDone: true, deleted: true, wantDone: true, wantPodGone: true},
		{name: "deleted-before-init-ran", deleted: true, wantDone: false, wantPodGone: true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			ns := namespace(t)
			pvc := &corev1.PersistentVolumeClaim{
				ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: controllers.PVCName("x-0"),
					Annotations: map[string]string{controllers.AnnotationRestorePoint: controllers.RestorePointPending}},
				Spec: corev1.PersistentVolumeClaimSpec{
					AccessModes: []corev1.PersistentVolumeAccessMode{corev1.ReadWriteOnce},
					Resources:   corev1.VolumeResourceRequirements{Requests: corev1.ResourceList{corev1.ResourceStorage: resourceMustParse("1Gi")}},
				},
			}
			create(t, pvc)
			pod := &corev1.Pod{
				ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "x-0", Finalizers: []string{controllers.FinalizerRestorePoint}},
				Spec: corev1.PodSpec{
					InitContainers: []corev1.Container{{Name: controllers.RestorePointContainer, Image: "felix:test"}},
					Containers:     []corev1.Container{{Name: "broker", Image: "felix:test"}},
				},
			}
			create(t, pod)
			if tc.initDone || tc.brokerRunning {
				setPodStatus(t, pod, tc.initDone, tc.brokerRunning)
			}
			if tc.deleted {
				if err := suite.c.Delete(ctx, pod); err != nil {
					t.Fatal(err)
				}
			}
			if getPod(t, ns, "x-0") == nil {
				t.Fatalf("the finalizer did not hold the pod")
			}
			// Three looks, as the reconciles the pod's updates bring.
			for i := 0; i < 3; i++ {
				p := getPod(t, ns, "x-0")
				if p == nil {
					break
				}
				if err := controllers.SettleRestorePoint(ctx, suite.c, p); err != nil {
					t.Fatalf("settle: %v", err)
				}
			}
			got := getPVC(t, ns, pvc.Name).Annotations[controllers.AnnotationRestorePoint]
			if want := map[bool]string{true: controllers.RestorePointDone, false: controllers.RestorePointPending}[tc.wantDone]; got != want {
				t.Errorf("claim restore-point %q, want %q", got, want)
			}
			after := getPod(t, ns, "x-0")
			if gone := after == nil || after.DeletionTimestamp != nil; gone != tc.wantPodGone {
				t.Errorf("pod gone %v, want %v (%+v)", gone, tc.wantPodGone, after)
			}
			if after != nil && tc.wantPodGone && slicesContains(after.Finalizers, controllers.FinalizerRestorePoint) {
				t.Errorf("finalizer kept on a settled pod: %v", after.Finalizers)
			}
			if after != nil && !tc.wantPodGone && !slicesContains(after.Finalizers, controllers.FinalizerRestorePoint) {
				t.Errorf("finalizer dropped while the step may still run")
			}
		})
	}
}

func resourceMustParse(s string) resource.Quantity { return resource.MustParse(s) }

// TestBackup_SnapshotErrorIsWaitedOut: a VolumeSnapshot that reports an
// error is retried by its snapshot controller (the error may be transient
// and is cleared on success), so the backup keeps running and says why in
// its Ready condition, and completes once the snapshots are ready.
func TestBackup_SnapshotErrorIsWaitedOut(t *testing.T) {
	ns := namespace(t)
	create(t, fastCluster(ns, "src", 2))
	waitForBrokers(t, ns, "src", 2)
	create(t, &felixv1.FelixBackup{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "b"}, Spec: felixv1.FelixBackupSpec{Cluster: "src"}})
	eventually(t, 20*time.Second, "backup Running with its snapshots", func() (bool, string) {
		b := getBackup(t, ns, "b")
		return b != nil && b.Status.Phase == felixv1.BackupRunning && len(b.Status.Snapshots) == 2, fmt.Sprintf("%+v", b)
	})
	vs := &snapv1.VolumeSnapshot{}
	name := getBackup(t, ns, "b").Status.Snapshots[0].VolumeSnapshot
	if err := suite.c.Get(context.Background(), types.NamespacedName{Namespace: ns, Name: name}, vs); err != nil {
		t.Fatal(err)
	}
	orig := vs.DeepCopy()
	vs.Status = &snapv1.VolumeSnapshotStatus{ReadyToUse: ptr.To(false),
		Error: &snapv1.VolumeSnapshotError{Message: ptr.To("waiting for claim to be bound")}}
	if err := suite.c.Status().Patch(context.Background(), vs, client.MergeFrom(orig)); err != nil {
		t.Fatal(err)
	}
	eventually(t, 20*time.Second, "the snapshot error in the Ready condition", func() (bool, string) {
		b := getBackup(t, ns, "b")
		for _, c := range b.Status.Conditions {
			if c.Type == felixv1.ConditionReady && c.Reason == "SnapshotError" && strings.Contains(c.Message, "waiting for claim") {
				return true, ""
			}
		}
		return false, fmt.Sprintf("%+v", b.Status)
	})
	if b := getBackup(t, ns, "b"); b.Status.Phase != felixv1.BackupRunning {
		t.Fatalf("a snapshot error failed the backup at once: %+v", b.Status)
	}
	markSnapshotsReady(t, ns, "b")
	eventually(t, 20*time.Second, "backup Completed", func() (bool, string) {
		b := getBackup(t, ns, "b")
		return b != nil && b.Status.Phase == felixv1.BackupCompleted, fmt.Sprintf("%+v", b.Status)
	})
}
