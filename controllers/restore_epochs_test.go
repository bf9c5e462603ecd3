package controllers_test

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/client"

	felixv1 "felix.dev/felix/api/v1alpha1"
	"felix.dev/felix/controllers"
)

// Epoch continuity across a whole-cluster restore (issue #9). The logs of
// a restored cluster hold records of the epochs the source cluster
// reached; its shards must start above them, or a new leader would fence
// below records it holds (which the replication core refuses, so the
// shard would never serve).

// setShardEpoch plays earlier promotions of a source cluster's shard: it
// writes status.assignment at epoch with leader (the operator keeps an
// assignment whose leader is not up and has no report to replace it).
func setShardEpoch(t *testing.T, ns, shard, leader string, epoch int64) {
	t.Helper()
	sh := getShard(t, ns, shard)
	if sh == nil {
		t.Fatalf("shard %s missing", shard)
	}
	orig := sh.DeepCopy()
	sh.Status.Assignment = &felixv1.Assignment{Leader: leader, Epoch: epoch, LeaderIncarnation: 1}
	if err := suite.c.Status().Patch(context.Background(), sh, client.MergeFrom(orig), client.FieldOwner("test-history")); err != nil {
		t.Fatalf("set %s epoch %d: %v", shard, epoch, err)
	}
	eventually(t, 10*time.Second, fmt.Sprintf("%s at epoch %d", shard, epoch), func() (bool, string) {
		s := getShard(t, ns, shard)
		return s.Status.Assignment != nil && s.Status.Assignment.Epoch == epoch, fmt.Sprintf("%+v", s.Status.Assignment)
	})
}

// waitShards waits until the stream's shards exist.
func waitShards(t *testing.T, ns, stream string, n int) {
	t.Helper()
	eventually(t, 20*time.Second, fmt.Sprintf("%d shards of %s", n, stream), func() (bool, string) {
		for i := 0; i < n; i++ {
			if getShard(t, ns, fmt.Sprintf("%s-%d", stream, i)) == nil {
				return false, fmt.Sprintf("%s-%d missing", stream, i)
			}
		}
		return true, ""
	})
}

func createStream(t *testing.T, ns, name, cluster string, shards int32) {
	t.Helper()
	create(t, &felixv1.FelixStream{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name},
		Spec: felixv1.FelixStreamSpec{Cluster: cluster, Shards: shards, Replicas: 3}})
}

// sourceWithHistory starts cluster src (3 brokers, none running) with
// stream s of two shards: s-0 at epoch 5 (it had failovers), s-1 never
// assigned; and cluster other with stream o at epoch 9, which a backup of
// src must not record.
func sourceWithHistory(t *testing.T, ns string) {
	t.Helper()
	create(t, fastCluster(ns, "src", 3))
	create(t, fastCluster(ns, "other", 3))
	waitForBrokers(t, ns, "src", 3)
	waitForBrokers(t, ns, "other", 3)
	createStream(t, ns, "s", "src", 2)
	createStream(t, ns, "o", "other", 1)
	waitShards(t, ns, "s", 2)
	waitShards(t, ns, "o", 1)
	setShardEpoch(t, ns, "s-0", "src-0", 5)
	setShardEpoch(t, ns, "o-0", "other-0", 9)
}

// TestRestoreEpochs_BackupRecordsEpochsAfterSnapshotsReady: a backup
// records each shard's epoch in the write that completes it, read after
// every snapshot was ready, so a promotion made while the snapshots were
// being cut is covered; shards of other clusters are not recorded.
func TestRestoreEpochs_BackupRecordsEpochsAfterSnapshotsReady(t *testing.T) {
	ns := namespace(t)
	sourceWithHistory(t, ns)
	create(t, &felixv1.FelixBackup{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "bk"}, Spec: felixv1.FelixBackupSpec{Cluster: "src"}})
	eventually(t, 20*time.Second, "backup Running", func() (bool, string) {
		b := getBackup(t, ns, "bk")
		return b != nil && b.Status.Phase == felixv1.BackupRunning && len(b.Status.Snapshots) == 3, fmt.Sprintf("%+v", b)
	})
	if b := getBackup(t, ns, "bk"); b.Status.Epochs != nil {
		t.Fatalf("epochs recorded before the snapshots were ready: %+v", b.Status.Epochs)
	}
	// A failover while the snapshots are cut: s-0 moves to epoch 7, and
	// a snapshot may hold its records.
	setShardEpoch(t, ns, "s-0", "src-1", 7)
	markSnapshotsReady(t, ns, "bk")
	eventually(t, 20*time.Second, "backup Completed", func() (bool, string) {
		b := getBackup(t, ns, "bk")
		return b.Status.Phase == felixv1.BackupCompleted, string(b.Status.Phase)
	})
	b := getBackup(t, ns, "bk")
	if b.Status.Epochs == nil || b.Status.Epochs.RecordedAt.IsZero() {
		t.Fatalf("completed backup without epochs: %+v", b.Status)
	}
	want := []felixv1.ShardEpoch{{Stream: "s", Index: 0, Epoch: 7}, {Stream: "s", Index: 1, Epoch: 0}}
	if got := b.Status.Epochs.Shards; fmt.Sprint(got) != fmt.Sprint(want) {
		t.Errorf("recorded epochs %+v, want %+v", got, want)
	}
	if b.Status.Epochs.RecordedAt.Before(b.Status.StartedAt) {
		t.Errorf("epochs recorded at %v, before the backup started at %v", b.Status.Epochs.RecordedAt, b.Status.StartedAt)
	}
}

// TestRestoreEpochs_RestoredShardsStartAboveRecordedEpochs: a cluster
// restored from a backup keeps the backup's epochs in its status before
// any volume is made from it, and creates each shard with firstEpoch one
// above its recorded epoch, so its first leader fences above the restored
// records (s-0: recorded 7, starts at 8); a shard that did not exist at
// the backup, or was never assigned, starts at 1. The record survives the
// backup's deletion, and firstEpoch cannot be changed.
func TestRestoreEpochs_RestoredShardsStartAboveRecordedEpochs(t *testing.T) {
	ns := namespace(t)
	ctx := context.Background()
	sourceWithHistory(t, ns)
	setShardEpoch(t, ns, "s-0", "src-1", 7)
	takeBackup(t, ns, "src", "bk", 3)

	// The source is gone: its stream and shards (no garbage collector
	// runs under envtest, so the shards go by hand; the stream's
	// finalizer may have deleted some already).
	for _, o := range []client.Object{
		&felixv1.FelixStream{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "s"}},
		&felixv1.FelixShard{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "s-0"}},
		&felixv1.FelixShard{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "s-1"}},
	} {
		if err := suite.c.Delete(ctx, o); client.IgnoreNotFound(err) != nil {
			t.Fatalf("delete %s: %v", o.GetName(), err)
		}
	}
	eventually(t, 10*time.Second, "source shards gone", func() (bool, string) {
		return getShard(t, ns, "s-0") == nil && getShard(t, ns, "s-1") == nil, ""
	})

	dst := fastCluster(ns, "dst", 3)
	dst.Spec.Restore = &felixv1.RestoreSpec{Backup: "bk"}
	create(t, dst)
	eventually(t, 20*time.Second, "dst recorded the backup's epochs", func() (bool, string) {
		var c felixv1.FelixCluster
		if err := suite.c.Get(ctx, types.NamespacedName{Namespace: ns, Name: "dst"}, &c); err != nil {
			return false, err.Error()
		}
		return c.Status.Restore != nil, fmt.Sprintf("%+v", c.Status)
	})
	eventually(t, 10*time.Second, "RestoreEpochsRecorded event", func() (bool, string) { return hasEvent(ns, "dst", "RestoreEpochsRecorded") })
	eventually(t, 20*time.Second, "restored PVCs", func() (bool, string) {
		p := getPVC(t, ns, "data-dst-0")
		return p != nil && p.Spec.DataSource != nil, fmt.Sprintf("%+v", p)
	})
	// The backup is not needed any more once its epochs are kept.
	if err := suite.c.Delete(ctx, &felixv1.FelixBackup{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "bk"}}); err != nil {
		t.Fatalf("delete backup: %v", err)
	}
	eventually(t, 10*time.Second, "backup gone", func() (bool, string) { return getBackup(t, ns, "bk") == nil, "" })

	for i := int32(0); i < 3; i++ {
		startBroker(t, ns, "dst", i)
	}
	createStream(t, ns, "s", "dst", 3) // shard s-2 did not exist at the backup
	createStream(t, ns, "n", "dst", 1) // a stream the backup did not know
	for name, want := range map[string]int64{"s-0": 8, "s-1": 1, "s-2": 1, "n-0": 1} {
		eventually(t, 20*time.Second, name+" assigned", func() (bool, string) {
			sh := getShard(t, ns, name)
			if sh == nil || sh.Status.Assignment == nil {
				return false, "unassigned"
			}
			return true, ""
		})
		sh := getShard(t, ns, name)
		if sh.Spec.FirstEpoch != want || sh.Status.Assignment.Epoch != want {
			t.Errorf("%s firstEpoch %d, first assignment at epoch %d; want both %d", name, sh.Spec.FirstEpoch, sh.Status.Assignment.Epoch, want)
		}
	}
	eventually(t, 10*time.Second, "Assigned event of s-0", func() (bool, string) { return hasEvent(ns, "s-0", "Assigned") })

	// firstEpoch is fixed at creation.
	for _, v := range []int64{1, 0} {
		sh := getShard(t, ns, "s-0")
		sh.Spec.FirstEpoch = v
		if err := suite.c.Update(ctx, sh); !apierrors.IsInvalid(err) {
			t.Errorf("changing firstEpoch to %d: %v, want Invalid", v, err)
		}
	}
}

// TestRestoreEpochs_BackupWithoutEpochsIsRefused: a backup that recorded
// no epochs (taken by an older operator) bounds nothing, so a cluster
// restoring from it creates no volume from it and no shard, says why
// (Degraded, reason BackupWithoutEpochs, event RestoreRefused), and its
// streams wait. spec.restore.epochFloor is the way out: a cluster that
// sets it restores, and its shards start above the floor.
func TestRestoreEpochs_BackupWithoutEpochsIsRefused(t *testing.T) {
	ns := namespace(t)
	ctx := context.Background()
	create(t, fastCluster(ns, "src", 3))
	waitForBrokers(t, ns, "src", 3)
	create(t, &felixv1.FelixBackup{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "old"}, Spec: felixv1.FelixBackupSpec{Cluster: "src"}})
	// What an older operator left: Completed, snapshots ready, no epochs.
	// (The operator leaves a Completed backup alone; its own writes use
	// an optimistic lock, so a reconcile racing this one loses.)
	b := getBackup(t, ns, "old")
	orig := b.DeepCopy()
	now := metav1.Now()
	b.Status = felixv1.FelixBackupStatus{Phase: felixv1.BackupCompleted, StartedAt: &now, CompletedAt: &now}
	for i := int32(0); i < 3; i++ {
		broker := controllers.BrokerName("src", i)
		b.Status.Snapshots = append(b.Status.Snapshots, felixv1.BrokerSnapshot{Broker: broker, Ordinal: i,
			PVC: controllers.PVCName(broker), VolumeSnapshot: controllers.SnapshotName("old", broker), ReadyToUse: true})
	}
	if err := suite.c.Status().Patch(ctx, b, client.MergeFrom(orig)); err != nil {
		t.Fatalf("old backup status: %v", err)
	}
	if b := getBackup(t, ns, "old"); b.Status.Phase != felixv1.BackupCompleted || b.Status.Epochs != nil {
		t.Fatalf("old backup: %+v", b.Status)
	}

	dst := fastCluster(ns, "dst", 3)
	dst.Spec.Restore = &felixv1.RestoreSpec{Backup: "old"}
	create(t, dst)
	createStream(t, ns, "s", "dst", 1)
	eventually(t, 20*time.Second, "dst refuses the restore", func() (bool, string) {
		var c felixv1.FelixCluster
		if err := suite.c.Get(ctx, types.NamespacedName{Namespace: ns, Name: "dst"}, &c); err != nil {
			return false, err.Error()
		}
		d, p := condition(c.Status.Conditions, felixv1.ConditionDegraded), condition(c.Status.Conditions, felixv1.ConditionProgressing)
		if d == nil || p == nil {
			return false, "no conditions"
		}
		return d.Status == metav1.ConditionTrue && d.Reason == controllers.RestoreRefusedReason &&
			p.Status == metav1.ConditionFalse && strings.Contains(d.Message, "epochFloor"), d.Reason + ": " + d.Message
	})
	eventually(t, 10*time.Second, "RestoreRefused event", func() (bool, string) { return hasEvent(ns, "dst", "RestoreRefused") })
	eventually(t, 10*time.Second, "stream waits for the restore", func() (bool, string) {
		var s felixv1.FelixStream
		_ = suite.c.Get(ctx, types.NamespacedName{Namespace: ns, Name: "s"}, &s)
		p := condition(s.Status.Conditions, felixv1.ConditionProgressing)
		return p != nil && p.Reason == "WaitingForRestore", fmt.Sprintf("%+v", p)
	})
	var c felixv1.FelixCluster
	if err := suite.c.Get(ctx, types.NamespacedName{Namespace: ns, Name: "dst"}, &c); err != nil || c.Status.Restore != nil {
		t.Errorf("refused restore recorded %+v (%v)", c.Status.Restore, err)
	}
	for i := 0; i < 3; i++ {
		if p := getPVC(t, ns, fmt.Sprintf("data-dst-%d", i)); p != nil {
			t.Errorf("refused restore created PVC %s (dataSource %+v)", p.Name, p.Spec.DataSource)
		}
	}
	if getShard(t, ns, "s-0") != nil {
		t.Errorf("refused restore created a shard")
	}

	// With a floor, the same backup restores; shards start above it.
	floored := fastCluster(ns, "floored", 3)
	floored.Spec.Restore = &felixv1.RestoreSpec{Backup: "old", EpochFloor: 100}
	create(t, floored)
	eventually(t, 20*time.Second, "floored restores", func() (bool, string) {
		var c felixv1.FelixCluster
		_ = suite.c.Get(ctx, types.NamespacedName{Namespace: ns, Name: "floored"}, &c)
		p := getPVC(t, ns, "data-floored-0")
		return c.Status.Restore != nil && c.Status.Restore.EpochFloor == 100 && c.Status.Restore.Epochs == nil && p != nil && p.Spec.DataSource != nil,
			fmt.Sprintf("%+v", c.Status.Restore)
	})
	createStream(t, ns, "t", "floored", 1)
	waitShards(t, ns, "t", 1)
	if sh := getShard(t, ns, "t-0"); sh.Spec.FirstEpoch != 101 {
		t.Errorf("t-0 firstEpoch %d, want 101 (floor + 1)", sh.Spec.FirstEpoch)
	}
}
