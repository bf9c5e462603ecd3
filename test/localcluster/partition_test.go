package localcluster_test

import (
	"context"
	"fmt"
	"net"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"testing"
	"time"

	felixv1 "felix.dev/felix/api/v1alpha1"
	"felix.dev/felix/controllers"
	"felix.dev/felix/internal/localcluster"
	"felix.dev/felix/internal/testenv"
)

// e2eImage is the image the container-mode tests build once and share.
const e2eImage = "felix:e2e"

// containerImage builds e2eImage (from scratch: nothing is pulled) and
// returns it; FELIX_SKIP_DOCKER=1 skips the test on a machine without
// Docker.
func containerImage(t *testing.T, ts *timings) string {
	t.Helper()
	if os.Getenv("FELIX_SKIP_DOCKER") == "1" {
		t.Skip("FELIX_SKIP_DOCKER=1")
	}
	start := time.Now()
	build := exec.Command("hack/docker-build.sh", e2eImage)
	build.Dir = testenv.RepoRoot()
	build.Env = append(os.Environ(), "BASE=scratch")
	if out, err := build.CombinedOutput(); err != nil {
		t.Fatalf("image build: %v\n%s", err, out)
	}
	ts.add("image build", time.Since(start))
	return e2eImage
}

// dockerNetworkGone registers a cleanup, run after the local cluster's
// Stop, that fails the test if the Docker network is left behind (the
// runner must remove the network it created) and removes it, with any
// container still attached, whatever happened.
func dockerNetworkGone(t *testing.T, name string) {
	t.Cleanup(func() {
		out, err := exec.Command("docker", "network", "ls", "--format", "{{.Name}}").Output()
		if err != nil {
			t.Errorf("docker network ls: %v", err)
			return
		}
		if !strings.Contains("\n"+string(out), "\n"+name+"\n") {
			return
		}
		t.Errorf("the Docker network %s was left behind", name)
		ids, _ := exec.Command("docker", "ps", "--all", "--quiet", "--filter", "network="+name).Output()
		if f := strings.Fields(string(ids)); len(f) > 0 {
			_ = exec.Command("docker", append([]string{"rm", "--force"}, f...)...).Run()
		}
		if out, err := exec.Command("docker", "network", "rm", name).CombinedOutput(); err != nil {
			t.Logf("docker network rm %s: %v: %s", name, err, out)
		}
	})
}

// TestLocalClusterContainers runs the container-mode scenarios: every
// broker pod is a Docker container of the image the Dockerfile builds (from
// scratch, so nothing is pulled) on its own bridge network (created for the
// test, removed at its end), each pod with its own address; kill is docker
// kill, freeze docker pause, partition disconnecting the container from the
// network, the volume a bind-mounted directory. It runs scenario 4a (a
// wiped follower is not promoted), then the partition scenarios: a
// partitioned leader is replaced and, healed, acknowledges nothing at its
// old epoch and rejoins as a follower; a partitioned follower leaves the
// shard committing with the remaining quorum and catches up once healed,
// also after a restart while partitioned. Last, the nemesis with
// partitions added to its faults, for a third of the process-mode
// nemesis's duration (at least 30 s), with the history check.
// FELIX_SKIP_DOCKER=1 skips it on a machine without Docker.
func TestLocalClusterContainers(t *testing.T) {
	if testing.Short() {
		t.Skip("local cluster scenarios skipped with -short")
	}
	var ts timings
	defer ts.log(t)
	image := containerImage(t, &ts)
	// The scenarios' deadline starts after the image build (minutes on a
	// cold build cache).
	nemesis := containerNemesisDuration(t)
	ctx, cancel := context.WithTimeout(context.Background(), 15*time.Minute+nemesis)
	defer cancel()
	network := fmt.Sprintf("felix-e2e-%d", os.Getpid())
	dockerNetworkGone(t, network)
	start := time.Now()
	lc := startLocalWith(t, ctx, localcluster.Options{DockerImage: image, DockerNetwork: network})
	ts.add("local cluster start", time.Since(start))
	n, ok := lc.Runner.Network()
	if !ok || !n.Created {
		t.Fatalf("the runner has no bridge network of its own: %+v", n)
	}
	t.Logf("bridge network %s: subnet %s, gateway %s", n.Name, n.Subnet, n.Gateway)
	// The partitions' 3-broker cluster boots while 4a runs.
	tn := newTenant(t, ctx, lc, "partitions", 3, felixv1.FsyncPeriodic)
	defer tn.close()
	ts.run(t, "ID1_WipedFollowerNotPromoted", func(t *testing.T) {
		tn := newTenant(t, ctx, lc, "scenario-4a", 5, felixv1.FsyncPeriodic)
		defer tn.close()
		scenarioWipedFollower(tn)
	})
	ts.run(t, "PartitionedLeaderReplacedAcknowledgesNothingAtOldEpoch", func(t *testing.T) { scenarioPartitionedLeader(tn.on(t)) })
	ts.run(t, "PartitionedFollowerQuorumCommitsAndCatchesUp", func(t *testing.T) { scenarioPartitionedFollower(tn.on(t)) })
	ts.run(t, "Nemesis", func(t *testing.T) { scenarioNemesis(t, ctx, lc, nemesis, true, false) })
}

// containerNemesisDuration is how long the container-mode nemesis (with
// partitions) runs: a third of the process-mode nemesis, at least 30 s.
func containerNemesisDuration(t *testing.T) time.Duration {
	d, _ := nemesisSettings(t)
	return max(30*time.Second, d/3)
}

// scenarioPartitionedLeader: under a sequential append workload on a
// 3-replica Quorum shard, the leader is cut off the network (docker
// network disconnect: it reaches neither its peers nor the API server,
// and the test's clients cannot reach it), with appends sent to it over a
// connection opened before the partition. Its expiry passes and a
// follower is promoted at a newer epoch; appends continue on the new
// leader. Healed, the old leader acknowledges nothing at its old epoch
// (every append it acknowledges is in the new leader's log at that
// offset, at a newer epoch) and rejoins as a caught-up follower; every
// acknowledged record reads back exactly once, at the offset it was
// acknowledged at, from the new leader.
func scenarioPartitionedLeader(tn *tenant) {
	t := tn.t
	tn.stream("orders")
	w := startWriter(tn, "orders", "w", 5*time.Millisecond)
	finished := false
	defer func() {
		if !finished {
			w.finish()
		}
	}()
	eventually(t, "appends acknowledged before the partition", time.Minute, func() (bool, string) {
		return w.count() >= 50, fmt.Sprintf("%d acknowledged", w.count())
	})
	old := *tn.shard("orders").Status.Assignment
	oldRestarts := tn.restarts(old.Leader)
	stale := tn.dialStale(old.Leader)
	defer stale.close()
	if err := tn.lc.Runner.Partition(tn.ns, old.Leader); err != nil {
		t.Fatal(err)
	}
	healed := false
	defer func() {
		if !healed {
			_ = tn.lc.Runner.Heal(tn.ns, old.Leader)
		}
	}()
	cutAt := time.Now()
	beforeCut := w.count()

	// Appends sent to the cut-off leader wait in the host's socket (TCP
	// retransmits them) and reach it only once it is healed.
	const staleN = 20
	stale.send(tn.ctx, "orders", staleN, 90*time.Second)

	var now felixv1.Assignment
	eventually(t, "a promotion while the leader is partitioned", 2*time.Minute, func() (bool, string) {
		a := tn.shard("orders").Status.Assignment
		now = *a
		return a.Leader != old.Leader && a.Epoch > old.Epoch, fmt.Sprintf("assignment %s@%d", a.Leader, a.Epoch)
	})
	promotedAfter := time.Since(cutAt)
	if c, err := net.DialTimeout("tcp", tn.broker(old.Leader).Address, 300*time.Millisecond); err == nil {
		_ = c.Close()
		t.Fatalf("the partitioned leader accepted a connection from the host")
	}
	atPromotion := w.count()
	eventually(t, "appends acknowledged by the new leader", time.Minute, func() (bool, string) {
		return w.count() >= atPromotion+50, fmt.Sprintf("%d acknowledged since the promotion", w.count()-atPromotion)
	})
	if err := tn.lc.Runner.Heal(tn.ns, old.Leader); err != nil {
		t.Fatal(err)
	}
	healed = true
	healedAt := time.Now()
	partitionedFor := healedAt.Sub(cutAt)

	// The old leader rejoins: the new leader reports it caught up under
	// its id, holding what the new leader acknowledged before the heal.
	w.mu.Lock()
	pos := past(w.acked)
	w.mu.Unlock()
	tn.followerHolds("orders", now.Leader, old.Leader, tn.broker(old.Leader).StorageID, pos, 2*time.Minute)
	rejoinedAfter := time.Since(healedAt)
	tn.caughtUp("orders", time.Minute)
	if s := tn.shard("orders"); s.Status.Assignment.Leader != now.Leader || s.Status.Assignment.Epoch != now.Epoch {
		t.Fatalf("leadership moved again after the heal: %s", shardState(s))
	}
	if r := tn.restarts(old.Leader); r != oldRestarts {
		t.Errorf("the old leader was restarted (%d -> %d); the same process should have rejoined", oldRestarts, r)
	}
	acked, order, unknown := w.finish()
	finished = true

	so := stale.wait()
	staleAcked, refused, firstRefusal := so.acked, so.refused, so.firstRefusal
	staleDoneAfter := so.lastAnswer.Sub(healedAt)
	got := tn.readAll(tn.broker(now.Leader).Address, "orders")
	verified := checkAcked(t, acked, got, "the new leader")
	checkOnceInOrder(t, got, order)
	// What the workload acknowledged after the promotion was observed is
	// the new leader's, at its epoch or later.
	for _, off := range order[atPromotion:] {
		if g, ok := got[off]; ok && g.Epoch < uint64(now.Epoch) {
			t.Errorf("record %d acknowledged after the promotion is at epoch %d, before the new leader's %d", off, g.Epoch, now.Epoch)
		}
	}
	// The stale appends were sent after the partition: none can have
	// been committed before the promotion, so any acknowledgement must be
	// of a record the new leader holds at that offset at a newer epoch.
	for off, p := range staleAcked {
		g, ok := got[off]
		switch {
		case !ok || string(g.Payload) != p:
			t.Errorf("the old leader acknowledged %q at %d; the new leader has %q there", p, off, g.Payload)
		case g.Epoch <= uint64(old.Epoch):
			t.Errorf("the old leader acknowledged %q at %d at epoch %d, its old epoch %d", p, off, g.Epoch, old.Epoch)
		}
	}
	t.Logf("leader %s partitioned at epoch %d for %s; %s promoted at epoch %d %s after the cut; the old leader rejoined as a caught-up follower %s after the heal",
		old.Leader, old.Epoch, partitionedFor.Round(time.Millisecond), now.Leader, now.Epoch, promotedAfter.Round(time.Millisecond), rejoinedAfter.Round(time.Millisecond))
	t.Logf("workload: %d appends acknowledged (%d before the cut, %d after the promotion), %d with unknown outcome; all %d read back once, in order, from %s; %d records in its log",
		len(acked), beforeCut, len(acked)-atPromotion, unknown, verified, now.Leader, len(got))
	t.Logf("of %d appends sent to the partitioned leader, %d were acknowledged (each in the new log at a newer epoch), %d refused or timed out (the last answered %s after the heal; first refusal: %v)",
		staleN, len(staleAcked), refused, staleDoneAfter.Round(time.Millisecond), firstRefusal)
	if len(acked) <= atPromotion {
		t.Fatal("no append acknowledged after the promotion")
	}
}

// followerBehind waits for a report of the stream's shard that shows name
// not caught up (the leader noticed it stopped answering). The caller
// makes sure the shard was reported caught up before the fault, so such a
// report is from after it. (Report times are whole seconds: comparing
// them with the fault's time would miss a report of the same second.)
func (tn *tenant) followerBehind(stream, name string, timeout time.Duration) {
	tn.t.Helper()
	eventually(tn.t, fmt.Sprintf("%s reported behind by the leader of %s", name, stream), timeout, func() (bool, string) {
		s := tn.shard(stream)
		if s == nil || s.Status.Report == nil {
			return false, shardState(s)
		}
		for _, f := range s.Status.Report.Followers {
			if f.Name == name {
				return !f.CaughtUp, shardState(s)
			}
		}
		return false, shardState(s)
	})
}

// followerHolds waits for a report of the stream's shard led by leader
// that shows name caught up under storage id id, having confirmed position
// pos (it holds every record below pos): with pos past what was appended
// while it was cut off, the report is from after it caught up.
func (tn *tenant) followerHolds(stream, leader, name, id string, pos uint64, timeout time.Duration) {
	tn.t.Helper()
	eventually(tn.t, fmt.Sprintf("%s caught up under id %s past position %d in a report of %s by %s", name, id, pos, stream, leader), timeout, func() (bool, string) {
		s := tn.shard(stream)
		if s == nil || s.Status.Report == nil || s.Status.Report.Leader != leader {
			return false, shardState(s)
		}
		for _, f := range s.Status.Report.Followers {
			if f.Name == name {
				return f.CaughtUp && f.StorageID == id && f.Confirmed >= int64(pos), shardState(s)
			}
		}
		return false, shardState(s)
	})
}

// past is the position after the highest acknowledged offset.
func past(acked map[uint64]string) uint64 {
	var p uint64
	for off := range acked {
		p = max(p, off+1)
	}
	return p
}

// scenarioPartitionedFollower: a follower of a 3-replica Quorum shard is
// cut off the network until the leader reports it behind; the leader and
// the other follower still form a quorum, so appends keep committing;
// healed, the follower (the same process) catches up. Cut off again and killed, its new container starts
// partitioned (it cannot register: its incarnation stays, and the host
// cannot reach it) while appends keep committing; healed, it registers
// and catches up.
func scenarioPartitionedFollower(tn *tenant) {
	t := tn.t
	tn.stream("payments")
	acked := tn.appendAcked("payments", 50, 10, 64, "p0")
	leader, f := tn.follower("payments")
	before := tn.broker(f)
	restarts := tn.restarts(f)
	healed := true
	defer func() {
		if !healed {
			_ = tn.lc.Runner.Heal(tn.ns, f)
		}
	}()
	add := func(m map[uint64]string) {
		for k, v := range m {
			acked[k] = v
		}
	}
	stillLeads := func(what string) {
		if a := tn.shard("payments").Status.Assignment; a.Leader != leader {
			t.Fatalf("%s: leadership moved from %s to %s", what, leader, a.Leader)
		}
	}

	// A brief partition of the running follower, from a report showing
	// every replica caught up.
	tn.caughtUp("payments", time.Minute)
	if err := tn.lc.Runner.Partition(tn.ns, f); err != nil {
		t.Fatal(err)
	}
	healed = false
	cutAt := time.Now()
	tn.followerBehind("payments", f, time.Minute)
	behindIn := time.Since(cutAt)
	add(tn.appendAcked("payments", 200, 10, 64, "p1"))
	committedIn := time.Since(cutAt) - behindIn
	stillLeads("appends with a follower partitioned")
	if err := tn.lc.Runner.Heal(tn.ns, f); err != nil {
		t.Fatal(err)
	}
	healed = true
	healedAt := time.Now()
	tn.followerHolds("payments", leader, f, before.StorageID, past(acked), 2*time.Minute)
	caughtUpIn := time.Since(healedAt)
	if st := tn.broker(f); st.Incarnation != before.Incarnation || tn.restarts(f) != restarts {
		t.Errorf("the partitioned follower was restarted (incarnation %d -> %d, restarts %d -> %d); the same process should have caught up",
			before.Incarnation, st.Incarnation, restarts, tn.restarts(f))
	}

	// Partitioned again, and killed: the new container starts partitioned.
	if err := tn.lc.Runner.Partition(tn.ns, f); err != nil {
		t.Fatal(err)
	}
	healed = false
	if err := tn.lc.Runner.Kill(tn.ns, f); err != nil {
		t.Fatal(err)
	}
	restarts2 := restarts
	eventually(t, "the partitioned follower restarted", time.Minute, func() (bool, string) {
		restarts2 = tn.restarts(f)
		return restarts2 > restarts, fmt.Sprintf("restart count %d", restarts2)
	})
	// An observation period, not a wait for a condition: a connected
	// broker registers and serves /live within about a second of its
	// start.
	ip, _ := tn.lc.Runner.PodIP(tn.ns, f)
	httpAddr := net.JoinHostPort(ip.String(), strconv.Itoa(controllers.BrokerHTTPPort))
	watchUntil := time.Now().Add(4 * time.Second)
	checks := 0
	for time.Now().Before(watchUntil) {
		if st := tn.broker(f); st.Incarnation != before.Incarnation {
			t.Fatalf("the follower restarted while partitioned registered (incarnation %d -> %d): its container is connected", before.Incarnation, st.Incarnation)
		}
		if c, err := net.DialTimeout("tcp", httpAddr, 300*time.Millisecond); err == nil {
			_ = c.Close()
			t.Fatalf("the follower restarted while partitioned accepted a connection on %s from the host", httpAddr)
		}
		checks++
		time.Sleep(200 * time.Millisecond)
	}
	add(tn.appendAcked("payments", 100, 10, 64, "p2"))
	stillLeads("appends with a restarted follower partitioned")
	if err := tn.lc.Runner.Heal(tn.ns, f); err != nil {
		t.Fatal(err)
	}
	healed = true
	healedAt2 := time.Now()
	st := tn.reregistered(f, before.Incarnation)
	tn.followerHolds("payments", leader, f, st.StorageID, past(acked), 2*time.Minute)
	rejoinedIn := time.Since(healedAt2)
	got := tn.readAll(tn.leaderAddr("payments"), "payments")
	verified := checkAcked(t, acked, got, "the leader")
	t.Logf("follower %s (leader %s) partitioned: reported behind %s after the cut; 200 appends then committed with the remaining quorum in %s; healed, caught up %s later with the same process",
		f, leader, behindIn.Round(time.Millisecond), committedIn.Round(time.Millisecond), caughtUpIn.Round(time.Millisecond))
	t.Logf("partitioned and killed: restarted (restart count %d -> %d) and stayed partitioned (%d checks over 4 s: not registered, its HTTP port unreachable from the host); healed, registered at incarnation %d (id %s -> %s) and caught up %s later; %d acknowledged records read back",
		restarts, restarts2, checks, st.Incarnation, before.StorageID, st.StorageID, rejoinedIn.Round(time.Millisecond), verified)
}
