package e2e

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	felixv1 "felix.dev/felix/api/v1alpha1"
	"felix.dev/felix/broker/client"
	"felix.dev/felix/broker/record"
)

// TestID3_KillUnderPeriodicSameBootKeepsIDMachineCrashRotates: kill -9 of a
// broker under Periodic on the same boot keeps its storage id (the page
// cache survives and syncfs succeeds); the same kill followed by a start
// under another boot id (standing for a machine crash) rotates it, and the
// operator records the new id [ID-3].
func TestID3_KillUnderPeriodicSameBootKeepsIDMachineCrashRotates(t *testing.T) {
	c := newCluster(t, 3, felixv1.FsyncPeriodic)
	bootA := filepath.Join(t.TempDir(), "boot-a")
	bootB := filepath.Join(t.TempDir(), "boot-b")
	if err := os.WriteFile(bootA, []byte("3f8f7a52-5c1e-4a0a-9a3c-0c5b3d1e2f01\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(bootB, []byte("9b2d4e61-7a3f-4c2b-8d1e-1f6a5b4c3d02\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	for i := 0; i < 3; i++ {
		c.startBroker(i, "--boot-id-file", bootA)
	}
	c.createStream(t, "metrics", 3)
	c.appendAcked(t, "metrics", 20, "m")
	name := c.name + "-2"
	first := c.registered(t, name).StorageID

	c.kill9(name)
	same := c.startBroker(2, "--boot-id-file", bootA)
	if same.id != first {
		t.Fatalf("kill -9 on the same boot under Periodic rotated the id: %s -> %s", first, same.id)
	}

	c.kill9(name)
	crashed := c.startBroker(2, "--boot-id-file", bootB)
	if crashed.id == first {
		t.Fatalf("a start under another boot after an unclean stop under Periodic kept the id %s", first)
	}
	c.eventually("the rotated id registered", 30*time.Second, func() (bool, string) {
		st := c.registered(t, name)
		return st.StorageID == crashed.id, "registered " + st.StorageID
	})
}

// TestRP5_FrozenLeaderAcknowledgesNothingAfterPromotion: the leader is
// frozen (SIGSTOP) past its expiry; the operator promotes a follower at a
// new epoch; the old leader resumes. Nothing it acknowledges afterwards is
// missing from the new leader's log: followers that accepted the new epoch
// refuse its shipping, so it cannot gather a quorum at its old epoch.
func TestRP5_FrozenLeaderAcknowledgesNothingAfterPromotion(t *testing.T) {
	c := newCluster(t, 3, felixv1.FsyncPeriodic)
	for i := 0; i < 3; i++ {
		c.startBroker(i)
	}
	c.createStream(t, "jobs", 3)
	acked := c.appendAcked(t, "jobs", 50, "before")
	old := c.shard("jobs", 0).Status.Assignment
	oldAddr := c.addressOf(old.Leader)
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	stale, err := client.Dial(ctx, oldAddr, client.Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer stale.Close()

	c.mu.Lock()
	proc := c.brokers[old.Leader].cmd.Process
	c.mu.Unlock()
	if err := proc.Signal(syscall.SIGSTOP); err != nil {
		t.Fatal(err)
	}
	c.eventually("the leader process stopped", 10*time.Second, func() (bool, string) {
		st, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", proc.Pid))
		if err != nil {
			return false, err.Error()
		}
		// The state follows the parenthesised command name.
		fields := strings.Fields(string(st[strings.LastIndexByte(string(st), ')')+1:]))
		return len(fields) > 0 && fields[0] == "T", string(st)
	})
	// Appends sent to the frozen leader wait in its socket.
	type result struct {
		payload string
		first   uint64
		err     error
	}
	results := make(chan result, 20)
	for i := 0; i < 20; i++ {
		go func(i int) {
			p := "stale-" + string(rune('a'+i))
			actx, acancel := context.WithTimeout(ctx, 30*time.Second)
			defer acancel()
			ok, err := stale.Append(actx, record.ShardID{Stream: "jobs"}, []record.Record{{Payload: []byte(p)}}, nil)
			results <- result{p, ok.First, err}
		}(i)
	}
	var now *felixv1.Assignment
	c.eventually("a promotion while the leader is frozen", 90*time.Second, func() (bool, string) {
		now = c.shard("jobs", 0).Status.Assignment
		return now.Leader != old.Leader && now.Epoch > old.Epoch, "still " + now.Leader
	})
	for k, v := range c.appendAcked(t, "jobs", 20, "after") {
		acked[k] = v
	}
	if err := proc.Signal(syscall.SIGCONT); err != nil {
		t.Fatal(err)
	}
	staleAcked := 0
	for i := 0; i < 20; i++ {
		r := <-results
		if r.err == nil {
			t.Logf("stale append %s acknowledged at %d", r.payload, r.first)
			staleAcked++
			acked[r.first] = r.payload
		} else if !errors.Is(r.err, context.DeadlineExceeded) {
			t.Logf("stale append refused: %v", r.err)
		}
	}
	got := readAll(t, c.addressOf(now.Leader), "jobs")
	for off, want := range acked {
		if got[off] != want {
			t.Errorf("acknowledged record at %d: want %q, leader at epoch %d has %q", off, want, now.Epoch, got[off])
		}
	}
	t.Logf("old leader %s frozen, %s promoted at epoch %d; %d of 20 appends sent to the frozen leader were acknowledged (each checked present)",
		old.Leader, now.Leader, now.Epoch, staleAcked)
}
