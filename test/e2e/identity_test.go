package e2e

import (
	"context"
	"fmt"
	"os"
	"syscall"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	felixv1 "felix.dev/felix/api/v1alpha1"
)

func (c *cluster) createStream(t *testing.T, name string, replicas int32) {
	t.Helper()
	st := &felixv1.FelixStream{ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: c.namespace},
		Spec: felixv1.FelixStreamSpec{Cluster: c.name, Shards: 1, Replicas: replicas, Ack: felixv1.AckQuorum}}
	if err := c.c.Create(context.Background(), st); err != nil {
		t.Fatal(err)
	}
	c.eventually("an assignment for "+name, 60*time.Second, func() (bool, string) {
		sh := c.shard(name, 0)
		return sh != nil && sh.Status.Assignment != nil, "no assignment yet"
	})
}

func (c *cluster) registered(t *testing.T, name string) felixv1.FelixBrokerStatus {
	t.Helper()
	var b felixv1.FelixBroker
	if err := c.c.Get(context.Background(), client.ObjectKey{Namespace: c.namespace, Name: name}, &b); err != nil {
		t.Fatal(err)
	}
	return b.Status
}

// stop sends SIGTERM and waits for the broker to exit (a clean stop).
func (c *cluster) stop(name string) {
	c.mu.Lock()
	b := c.brokers[name]
	c.mu.Unlock()
	_ = b.cmd.Process.Signal(syscall.SIGTERM)
	<-b.exited
}

// TestID1_WipedFollowerIsNotPromotedOnItsOldReport is the seed's story end
// to end: an idle 5-replica Quorum shard; one follower's data directory is
// wiped and it restarts empty with a new storage id; the leader is killed.
// Placement never counts the wiped follower under its old id [CP-1], and
// every acknowledged record is readable from the new leader.
func TestID1_WipedFollowerIsNotPromotedOnItsOldReport(t *testing.T) {
	c := newCluster(t, 5, felixv1.FsyncPeriodic)
	for i := 0; i < 5; i++ {
		c.startBroker(i)
	}
	c.createStream(t, "ledger", 5)
	acked := c.appendAcked(t, "ledger", 100, "r")
	sh := c.shard("ledger", 0)
	leader := sh.Status.Assignment.Leader
	var wiped string
	for _, r := range sh.Spec.Replicas {
		if r != leader {
			wiped = r
			break
		}
	}
	oldID := c.registered(t, wiped).StorageID
	// The shard is idle now. Wipe one follower's volume and restart it.
	c.kill9(wiped)
	if err := os.RemoveAll(c.brokers[wiped].dataDir); err != nil {
		t.Fatal(err)
	}
	restarted := c.startBroker(ordinalOf(t, wiped))
	if restarted.id == oldID {
		t.Fatalf("wiped follower kept its storage id %s", oldID)
	}
	c.eventually("the new storage id registered", 30*time.Second, func() (bool, string) {
		st := c.registered(t, wiped)
		return st.StorageID == restarted.id, fmt.Sprintf("registered %s", st.StorageID)
	})
	c.kill9(leader)

	var now *felixv1.FelixShard
	c.eventually("a promotion", 90*time.Second, func() (bool, string) {
		now = c.shard("ledger", 0)
		a := now.Status.Assignment
		return a.Leader != leader, fmt.Sprintf("assignment %s@%d", a.Leader, a.Epoch)
	})
	a := now.Status.Assignment
	for _, ct := range a.Counted {
		if ct.Name == wiped && ct.StorageID == oldID {
			t.Fatalf("placement counted the wiped follower %s under its old storage id %s", wiped, oldID)
		}
	}
	if a.Leader == wiped {
		// Only legitimate if it was fully copied again and counted under
		// its new id.
		found := false
		for _, ct := range a.Counted {
			found = found || (ct.Name == wiped && ct.StorageID == restarted.id)
		}
		if !found {
			t.Fatalf("wiped follower %s promoted without being counted under its new id", wiped)
		}
	}
	t.Logf("leader %s killed; %s promoted at epoch %d; wiped follower %s (old id %s, new id %s)",
		leader, a.Leader, a.Epoch, wiped, oldID, restarted.id)
	got := readAll(t, c.addressOf(a.Leader), "ledger")
	for off, want := range acked {
		if got[off] != want {
			t.Errorf("acknowledged record at %d: want %q, new leader has %q", off, want, got[off])
		}
	}
}

// TestID3_CleanRestartKeepsStorageID: a follower stopped cleanly (SIGTERM)
// restarts with the same storage id and a new incarnation, and the shard
// keeps serving acknowledged appends.
func TestID3_CleanRestartKeepsStorageID(t *testing.T) {
	c := newCluster(t, 3, felixv1.FsyncPeriodic)
	for i := 0; i < 3; i++ {
		c.startBroker(i)
	}
	c.createStream(t, "events", 3)
	acked := c.appendAcked(t, "events", 50, "a")
	sh := c.shard("events", 0)
	leader := sh.Status.Assignment.Leader
	var follower string
	for _, r := range sh.Spec.Replicas {
		if r != leader {
			follower = r
			break
		}
	}
	before := c.registered(t, follower)
	c.stop(follower)
	again := c.startBroker(ordinalOf(t, follower))
	if again.id != before.StorageID {
		t.Fatalf("clean restart rotated the storage id: %s -> %s", before.StorageID, again.id)
	}
	after := c.registered(t, follower)
	if after.Incarnation != before.Incarnation+1 {
		t.Errorf("incarnation %d -> %d, want +1", before.Incarnation, after.Incarnation)
	}
	for k, v := range c.appendAcked(t, "events", 50, "b") {
		acked[k] = v
	}
	got := readAll(t, c.addressOf(c.shard("events", 0).Status.Assignment.Leader), "events")
	for off, want := range acked {
		if got[off] != want {
			t.Errorf("record %d: want %q got %q", off, want, got[off])
		}
	}
}

func ordinalOf(t *testing.T, name string) int {
	t.Helper()
	var n int
	if _, err := fmt.Sscanf(name[len(name)-1:], "%d", &n); err != nil {
		t.Fatalf("broker name %q: %v", name, err)
	}
	return n
}
