package e2e

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	felixv1 "felix.dev/felix/api/v1alpha1"
	"felix.dev/felix/broker/record"
	"felix.dev/felix/internal/diskfault"
)

// flipEverywhere flips one byte inside every occurrence of marker in the
// files under dir and returns how many it flipped.
func flipEverywhere(t *testing.T, dir string, marker []byte) int {
	t.Helper()
	f, err := diskfault.FlipMarker(dir, marker)
	if err != nil {
		t.Fatal(err)
	}
	return len(f)
}

// Issue 25, on real broker processes under on-commit: a follower stopped
// cleanly, with one byte of its newest stored batch flipped, must not
// "repair" the damage by dropping acknowledged records and keep counting
// as holding them. It comes back under a new storage id (the leader and
// placement stop counting its old positions), says why at error level,
// and is copied again from the leader until it is caught up.
func TestCorruptFollowerGivesUpItsClaimAndIsCopiedAgain(t *testing.T) {
	c := newCluster(t, 3, felixv1.FsyncOnCommit)
	for i := 0; i < 3; i++ {
		c.startBroker(i)
	}
	c.createStream(t, "orders", 3)
	c.appendBatchesAcked(t, "orders", "before", 50, 20) // 1,000 records
	leader := c.leaderOf("orders")
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	cl, err := c.dial(ctx, c.addressOf(leader))
	if err != nil {
		t.Fatal(err)
	}
	last, err := cl.Append(ctx, record.ShardID{Stream: "orders"}, []record.Record{{Payload: []byte("newest-batch-" + strings.Repeat("n", 2000))}}, nil)
	_ = cl.Close()
	if err != nil {
		t.Fatal(err)
	}

	var follower string
	var ordinal int
	for i := 0; i < 3; i++ {
		if n := fmt.Sprintf("%s-%d", c.name, i); n != leader {
			follower, ordinal = n, i
			break
		}
	}
	caughtUp := func(id string) func() (bool, string) {
		return func() (bool, string) {
			sh := c.shard("orders", 0)
			if sh == nil || sh.Status.Report == nil {
				return false, shardState(sh)
			}
			for _, f := range sh.Status.Report.Followers {
				if f.Name == follower && f.StorageID == id && f.CaughtUp && f.Confirmed >= int64(last.Tail) {
					return true, ""
				}
			}
			return false, shardState(sh)
		}
	}
	c.mu.Lock()
	old := c.brokers[follower]
	c.mu.Unlock()
	c.eventually(follower+" holding the newest batch", 60*time.Second, caughtUp(old.id))

	// A clean stop, then one byte of the newest batch flipped on disk.
	_ = old.cmd.Process.Signal(syscall.SIGTERM)
	select {
	case <-old.exited:
	case <-time.After(60 * time.Second):
		t.Fatalf("%s did not stop", follower)
	}
	if rs, err := os.ReadFile(filepath.Join(old.dataDir, "run-state")); err != nil || !strings.Contains(string(rs), "phase=clean-stop") {
		t.Fatalf("%s run-state %q (%v), want a clean stop", follower, rs, err)
	}
	if n := flipEverywhere(t, old.dataDir, []byte("newest-batch-nnnn")); n == 0 {
		t.Fatalf("newest batch not found in %s", old.dataDir)
	}

	fresh := c.startBroker(ordinal)
	if fresh.id == old.id {
		t.Fatalf("%s kept its storage id %s after damage to acknowledged data; log:\n%s", follower, old.id, c.brokerLog(follower))
	}
	logs, err := os.ReadFile(filepath.Join(c.dir, follower+".log"))
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(string(logs), "this broker gives up its copy") {
		t.Errorf("%s: no error-level line about the damage; log tail:\n%s", follower, c.brokerLog(follower))
	}
	if strings.Contains(string(logs), "did not reach the disk before a crash") {
		t.Errorf("%s dropped batches as a crash loss after a clean stop; log tail:\n%s", follower, c.brokerLog(follower))
	}
	t.Logf("%s: storage id %s -> %s", follower, old.id, fresh.id)
	c.eventually(follower+" copied again under its new storage id", 60*time.Second, caughtUp(fresh.id))
}
