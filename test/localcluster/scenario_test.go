// Package localcluster_test runs the seed's scenario on the whole product as
// `make dev` runs it: the operator process creates broker pods, the
// podrunner runs them as `felix broker` processes on 127.0.0.x with a
// directory per volume, and faults are injected through the runner.
package localcluster_test

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	felixv1 "felix.dev/felix/api/v1alpha1"
	fclient "felix.dev/felix/broker/client"
	"felix.dev/felix/broker/record"
	"felix.dev/felix/broker/wire"
	"felix.dev/felix/internal/localcluster"
	"felix.dev/felix/internal/testenv"
)

func eventually(t *testing.T, what string, timeout time.Duration, cond func() (bool, string)) {
	t.Helper()
	deadline := time.Now().Add(timeout)
	last := ""
	for time.Now().Before(deadline) {
		ok, msg := cond()
		if ok {
			return
		}
		last = msg
		time.Sleep(200 * time.Millisecond)
	}
	t.Fatalf("timed out after %s waiting for %s; last: %s", timeout, what, last)
}

// TestID1_LocalClusterWipedFollowerNotPromoted is scenario 4a on the local
// cluster: an idle 5-replica Quorum shard; one follower's volume is wiped
// and its process killed (the runner restarts it, empty, with a new storage
// id); the leader is frozen past its expiry. The wiped follower is never
// counted under its old id, a follower is promoted, and every acknowledged
// record is readable from it.
func TestID1_LocalClusterWipedFollowerNotPromoted(t *testing.T) {
	scenarioWipedFollower(t, "")
}

// TestID1_LocalClusterWipedFollowerNotPromoted_Containers is the same
// scenario with every broker pod a Docker container of the image the
// Dockerfile builds (from scratch, so nothing is pulled): kill is docker
// kill, freeze is docker pause, the volume a bind-mounted directory.
// FELIX_SKIP_DOCKER=1 skips it on a machine without Docker.
func TestID1_LocalClusterWipedFollowerNotPromoted_Containers(t *testing.T) {
	if os.Getenv("FELIX_SKIP_DOCKER") == "1" {
		t.Skip("FELIX_SKIP_DOCKER=1")
	}
	build := exec.Command("hack/docker-build.sh", "felix:e2e")
	build.Dir = testenv.RepoRoot()
	build.Env = append(os.Environ(), "BASE=scratch")
	if out, err := build.CombinedOutput(); err != nil {
		t.Fatalf("image build: %v\n%s", err, out)
	}
	scenarioWipedFollower(t, "felix:e2e")
}

func scenarioWipedFollower(t *testing.T, image string) {
	if testing.Short() {
		t.Skip("local cluster scenario skipped with -short")
	}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	lc := startLocal(t, ctx, image)
	c := lc.Env.Client
	ns := "scenario"
	if err := c.Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns}}); err != nil {
		t.Fatal(err)
	}
	if err := c.Create(ctx, &felixv1.FelixCluster{
		ObjectMeta: metav1.ObjectMeta{Name: "demo", Namespace: ns},
		Spec: felixv1.FelixClusterSpec{Brokers: 5, Image: "felix:dev",
			Durability:        felixv1.DurabilitySpec{Fsync: felixv1.FsyncPeriodic},
			HeartbeatInterval: &metav1.Duration{Duration: 500 * time.Millisecond},
			NodeExpiry:        &metav1.Duration{Duration: 2 * time.Second}},
	}); err != nil {
		t.Fatal(err)
	}
	if err := c.Create(ctx, &felixv1.FelixStream{
		ObjectMeta: metav1.ObjectMeta{Name: "ledger", Namespace: ns},
		Spec:       felixv1.FelixStreamSpec{Cluster: "demo", Shards: 1, Replicas: 5, Ack: felixv1.AckQuorum},
	}); err != nil {
		t.Fatal(err)
	}
	shard := func() *felixv1.FelixShard {
		var s felixv1.FelixShard
		if err := c.Get(ctx, client.ObjectKey{Namespace: ns, Name: "ledger-0"}, &s); err != nil {
			return nil
		}
		return &s
	}
	broker := func(name string) felixv1.FelixBrokerStatus {
		var b felixv1.FelixBroker
		_ = c.Get(ctx, client.ObjectKey{Namespace: ns, Name: name}, &b)
		return b.Status
	}
	eventually(t, "the shard led with every replica caught up", 3*time.Minute, func() (bool, string) {
		s := shard()
		if s == nil || s.Status.Assignment == nil {
			return false, "no assignment"
		}
		return s.Status.CaughtUp == "5/5", "caught up " + s.Status.CaughtUp
	})
	leader := shard().Status.Assignment.Leader
	cl, err := fclient.Dial(ctx, broker(leader).Address, fclient.Options{})
	if err != nil {
		t.Fatal(err)
	}
	acked := map[uint64]string{}
	for i := 0; i < 50; i++ {
		p := fmt.Sprintf("r-%d", i)
		ok, err := cl.Append(ctx, record.ShardID{Stream: "ledger"}, []record.Record{{Payload: []byte(p)}}, nil)
		if err != nil {
			t.Fatalf("append %d: %v", i, err)
		}
		acked[ok.First] = p
	}
	_ = cl.Close()

	var wiped string
	for _, r := range shard().Spec.Replicas {
		if r != leader {
			wiped = r
			break
		}
	}
	oldID := broker(wiped).StorageID
	if err := lc.Runner.WipeVolume(ns, "data-"+wiped); err != nil {
		t.Fatal(err)
	}
	if err := lc.Runner.Kill(ns, wiped); err != nil {
		t.Fatal(err)
	}
	eventually(t, "the wiped follower registered with a new storage id", 2*time.Minute, func() (bool, string) {
		st := broker(wiped)
		return st.StorageID != "" && st.StorageID != oldID, "registered " + st.StorageID
	})
	newID := broker(wiped).StorageID
	if err := lc.Runner.Freeze(ns, leader); err != nil {
		t.Fatal(err)
	}
	defer func() { _ = lc.Runner.Thaw(ns, leader) }()
	var a *felixv1.Assignment
	eventually(t, "a promotion after the leader froze", 2*time.Minute, func() (bool, string) {
		s := shard()
		a = s.Status.Assignment
		return a.Leader != leader, fmt.Sprintf("assignment %s@%d", a.Leader, a.Epoch)
	})
	for _, ct := range a.Counted {
		if ct.Name == wiped && ct.StorageID == oldID {
			t.Fatalf("placement counted the wiped follower %s under its old id %s", wiped, oldID)
		}
	}
	if a.Leader == wiped {
		ok := false
		for _, ct := range a.Counted {
			ok = ok || (ct.Name == wiped && ct.StorageID == newID)
		}
		if !ok {
			t.Fatalf("wiped follower promoted without being counted under its new id")
		}
	}
	// Read everything back from the new leader.
	rc, err := fclient.Dial(ctx, broker(a.Leader).Address, fclient.Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer rc.Close()
	got := map[uint64]string{}
	req := wire.ReadRequest{Shard: record.ShardID{Stream: "ledger"}, From: wire.FromEarliest, MaxRecords: 1000}
	eventually(t, "the new leader serving reads", time.Minute, func() (bool, string) {
		r, err := rc.Read(ctx, req)
		if err != nil {
			return false, err.Error()
		}
		for _, rec := range r.Records {
			got[rec.Offset] = string(rec.Payload)
		}
		return len(got) >= len(acked), fmt.Sprintf("%d records", len(got))
	})
	for off, want := range acked {
		if got[off] != want {
			t.Errorf("acknowledged record %d: want %q, got %q", off, want, got[off])
		}
	}
	t.Logf("leader %s frozen; %s promoted at epoch %d; wiped %s (old id %s, new id %s)", leader, a.Leader, a.Epoch, wiped, oldID, newID)
}

// startLocal builds the felix binary and starts a local cluster that stops
// when the test ends; image selects container mode.
func startLocal(t *testing.T, ctx context.Context, image string) *localcluster.Cluster {
	t.Helper()
	bin := filepath.Join(t.TempDir(), "felix")
	build := exec.Command("go", "build", "-o", bin, "./cmd/felix")
	build.Dir = testenv.RepoRoot()
	if out, err := build.CombinedOutput(); err != nil {
		t.Fatalf("go build: %v\n%s", err, out)
	}
	lc, err := localcluster.Start(ctx, localcluster.Options{StateDir: t.TempDir(), Felix: bin, DockerImage: image})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(lc.Stop)
	return lc
}
