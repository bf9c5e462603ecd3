package localcluster_test

import (
	"context"
	"fmt"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	felixv1 "felix.dev/felix/api/v1alpha1"
	"felix.dev/felix/internal/localcluster"
)

func objectMeta(ns, name string) metav1.ObjectMeta {
	return metav1.ObjectMeta{Namespace: ns, Name: name}
}

// scenarioBackupRestore takes a FelixBackup of a running 3-broker cluster
// (VolumeSnapshots copied by the snapshot stand-in) and starts a second
// cluster from it: every restored broker runs the restore-point init step
// once, so it comes up with a new storage id [ID-5]. The source cluster and
// its stream are then deleted, the stream is created again for the
// restored cluster, and every record acknowledged before the backup is
// read back from the restored cluster's leader.
func scenarioBackupRestore(t *testing.T, ctx context.Context, lc *localcluster.Cluster) {
	src := newTenantCluster(t, ctx, lc, "backup", "src", 3, felixv1.FsyncOnCommit)
	src.stream("orders")
	acked := src.appendAcked("orders", 200, 20, 256, "o")
	oldIDs := map[string]bool{}
	for i := 0; i < 3; i++ {
		oldIDs[src.broker(fmt.Sprintf("src-%d", i)).StorageID] = true
	}

	if err := src.c.Create(ctx, &felixv1.FelixBackup{ObjectMeta: objectMeta(src.ns, "nightly"),
		Spec: felixv1.FelixBackupSpec{Cluster: "src"}}); err != nil {
		t.Fatal(err)
	}
	eventually(t, "the backup completed", 2*time.Minute, func() (bool, string) {
		var b felixv1.FelixBackup
		if err := src.get("nightly", &b); err != nil {
			return false, err.Error()
		}
		return b.Status.Phase == felixv1.BackupPhase("Completed"), string(b.Status.Phase)
	})

	// The stream name is the log's name on disk, so the restored cluster
	// serves it under the same name: the source's stream goes first. No
	// garbage collector runs for FelixShards (see docs/local-cluster.md),
	// so the test deletes the shard its stream owned.
	for _, obj := range []client.Object{
		&felixv1.FelixStream{ObjectMeta: objectMeta(src.ns, "orders")},
		&felixv1.FelixShard{ObjectMeta: objectMeta(src.ns, "orders-0")},
	} {
		if err := src.c.Delete(ctx, obj); client.IgnoreNotFound(err) != nil {
			t.Fatal(err)
		}
	}
	src.close()
	eventually(t, "the source stream and shard gone", time.Minute, func() (bool, string) {
		var s felixv1.FelixShard
		err1 := src.get("orders-0", &s)
		var st felixv1.FelixStream
		err2 := src.get("orders", &st)
		return apierrors.IsNotFound(err1) && apierrors.IsNotFound(err2), fmt.Sprintf("%v / %v", err1, err2)
	})

	restored := clusterSpec(3, felixv1.FsyncOnCommit)
	restored.Restore = &felixv1.RestoreSpec{Backup: "nightly"}
	if err := src.c.Create(ctx, &felixv1.FelixCluster{ObjectMeta: objectMeta(src.ns, "dst"), Spec: restored}); err != nil {
		t.Fatal(err)
	}
	dst := src.forCluster("dst")
	eventually(t, "every restored broker registered with a new storage id", 3*time.Minute, func() (bool, string) {
		msg := ""
		for i := 0; i < 3; i++ {
			st := dst.broker(fmt.Sprintf("dst-%d", i))
			if st.StorageID == "" {
				return false, fmt.Sprintf("dst-%d not registered", i)
			}
			if oldIDs[st.StorageID] {
				return false, fmt.Sprintf("dst-%d kept the source id %s", i, st.StorageID)
			}
			msg += st.StorageID + " "
		}
		return true, msg
	})
	// The restore step ran and is recorded on every claim; later pods have
	// no init step.
	for i := 0; i < 3; i++ {
		var pvc corev1.PersistentVolumeClaim
		if err := dst.get(fmt.Sprintf("data-dst-%d", i), &pvc); err != nil {
			t.Fatal(err)
		}
		if pvc.Spec.DataSource == nil || pvc.Spec.DataSource.Kind != "VolumeSnapshot" {
			t.Errorf("claim %s not restored from a snapshot: %+v", pvc.Name, pvc.Spec.DataSource)
		}
	}
	eventually(t, "restore-point recorded done on every claim", 2*time.Minute, func() (bool, string) {
		for i := 0; i < 3; i++ {
			var pvc corev1.PersistentVolumeClaim
			_ = dst.get(fmt.Sprintf("data-dst-%d", i), &pvc)
			if pvc.Annotations["felix.dev/restore-point"] != "done" {
				return false, pvc.Name + ": " + pvc.Annotations["felix.dev/restore-point"]
			}
		}
		return true, ""
	})

	// Every acknowledged record is read back from the restored cluster.
	if err := dst.c.Create(ctx, &felixv1.FelixStream{ObjectMeta: objectMeta(dst.ns, "orders"),
		Spec: felixv1.FelixStreamSpec{Cluster: "dst", Shards: 1, Replicas: 3, Ack: felixv1.AckQuorum}}); err != nil {
		t.Fatal(err)
	}
	s := dst.caughtUp("orders", 3*time.Minute)
	got := dst.readAll(dst.broker(s.Status.Assignment.Leader).Address, "orders")
	n := checkAcked(t, acked, got, "the restored leader "+s.Status.Assignment.Leader)
	t.Logf("restored cluster: leader %s at epoch %d; %d acknowledged records read back (%d records read)",
		s.Status.Assignment.Leader, s.Status.Assignment.Epoch, n, len(got))
	dst.close()
}
