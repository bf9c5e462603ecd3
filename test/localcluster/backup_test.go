package localcluster_test

import (
	"context"
	"fmt"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	felixv1 "felix.dev/felix/api/v1alpha1"
	fclient "felix.dev/felix/broker/client"
	"felix.dev/felix/broker/record"
)

// TestID5_BackupAndRestoreOnLocalCluster takes a FelixBackup of a running
// 3-broker cluster (VolumeSnapshots copied by the snapshot stand-in) and
// starts a second cluster from it: every restored broker runs the
// restore-point init step once, so it comes up with a new storage id [ID-5].
func TestID5_BackupAndRestoreOnLocalCluster(t *testing.T) {
	if testing.Short() {
		t.Skip("local cluster scenario skipped with -short")
	}
	ctx, cancel := context.WithTimeout(context.Background(), 6*time.Minute)
	defer cancel()
	lc := startLocal(t, ctx, "")
	c := lc.Env.Client
	ns := "backup"
	if err := c.Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns}}); err != nil {
		t.Fatal(err)
	}
	spec := felixv1.FelixClusterSpec{Brokers: 3, Image: "felix:dev",
		Durability:        felixv1.DurabilitySpec{Fsync: felixv1.FsyncOnCommit},
		HeartbeatInterval: &metav1.Duration{Duration: 500 * time.Millisecond},
		NodeExpiry:        &metav1.Duration{Duration: 2 * time.Second}}
	if err := c.Create(ctx, &felixv1.FelixCluster{ObjectMeta: metav1.ObjectMeta{Name: "src", Namespace: ns}, Spec: spec}); err != nil {
		t.Fatal(err)
	}
	if err := c.Create(ctx, &felixv1.FelixStream{ObjectMeta: metav1.ObjectMeta{Name: "orders", Namespace: ns},
		Spec: felixv1.FelixStreamSpec{Cluster: "src", Shards: 1, Replicas: 3, Ack: felixv1.AckQuorum}}); err != nil {
		t.Fatal(err)
	}
	get := func(name string, obj client.Object) error {
		return c.Get(ctx, client.ObjectKey{Namespace: ns, Name: name}, obj)
	}
	eventually(t, "the source shard led and caught up", 3*time.Minute, func() (bool, string) {
		var s felixv1.FelixShard
		if err := get("orders-0", &s); err != nil || s.Status.Assignment == nil {
			return false, "no assignment"
		}
		return s.Status.CaughtUp == "3/3", s.Status.CaughtUp
	})
	var s felixv1.FelixShard
	_ = get("orders-0", &s)
	var lb felixv1.FelixBroker
	_ = get(s.Status.Assignment.Leader, &lb)
	cl, err := fclient.Dial(ctx, lb.Status.Address, fclient.Options{})
	if err != nil {
		t.Fatal(err)
	}
	for i := 0; i < 20; i++ {
		if _, err := cl.Append(ctx, record.ShardID{Stream: "orders"}, []record.Record{{Payload: []byte(fmt.Sprintf("o-%d", i))}}, nil); err != nil {
			t.Fatal(err)
		}
	}
	_ = cl.Close()
	oldIDs := map[string]bool{}
	for i := 0; i < 3; i++ {
		var b felixv1.FelixBroker
		_ = get(fmt.Sprintf("src-%d", i), &b)
		oldIDs[b.Status.StorageID] = true
	}

	if err := c.Create(ctx, &felixv1.FelixBackup{ObjectMeta: metav1.ObjectMeta{Name: "nightly", Namespace: ns},
		Spec: felixv1.FelixBackupSpec{Cluster: "src"}}); err != nil {
		t.Fatal(err)
	}
	eventually(t, "the backup completed", 2*time.Minute, func() (bool, string) {
		var b felixv1.FelixBackup
		if err := get("nightly", &b); err != nil {
			return false, err.Error()
		}
		return b.Status.Phase == felixv1.BackupPhase("Completed"), string(b.Status.Phase)
	})

	restored := spec
	restored.Restore = &felixv1.RestoreSpec{Backup: "nightly"}
	if err := c.Create(ctx, &felixv1.FelixCluster{ObjectMeta: metav1.ObjectMeta{Name: "dst", Namespace: ns}, Spec: restored}); err != nil {
		t.Fatal(err)
	}
	eventually(t, "every restored broker registered with a new storage id", 3*time.Minute, func() (bool, string) {
		msg := ""
		for i := 0; i < 3; i++ {
			var b felixv1.FelixBroker
			if err := get(fmt.Sprintf("dst-%d", i), &b); err != nil || b.Status.StorageID == "" {
				return false, fmt.Sprintf("dst-%d not registered", i)
			}
			if oldIDs[b.Status.StorageID] {
				return false, fmt.Sprintf("dst-%d kept the source id %s", i, b.Status.StorageID)
			}
			msg += b.Status.StorageID + " "
		}
		return true, msg
	})
	// The restore step ran and is recorded on every claim; later pods have
	// no init step.
	for i := 0; i < 3; i++ {
		var pvc corev1.PersistentVolumeClaim
		if err := get(fmt.Sprintf("data-dst-%d", i), &pvc); err != nil {
			t.Fatal(err)
		}
		if pvc.Spec.DataSource == nil || pvc.Spec.DataSource.Kind != "VolumeSnapshot" {
			t.Errorf("claim %s not restored from a snapshot: %+v", pvc.Name, pvc.Spec.DataSource)
		}
	}
	eventually(t, "restore-point recorded done on every claim", 2*time.Minute, func() (bool, string) {
		for i := 0; i < 3; i++ {
			var pvc corev1.PersistentVolumeClaim
			_ = get(fmt.Sprintf("data-dst-%d", i), &pvc)
			if pvc.Annotations["felix.dev/restore-point"] != "done" {
				return false, pvc.Name + ": " + pvc.Annotations["felix.dev/restore-point"]
			}
		}
		return true, ""
	})
}
