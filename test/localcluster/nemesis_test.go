package localcluster_test

import (
	"context"
	"flag"
	"fmt"
	"math/rand/v2"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	felixv1 "felix.dev/felix/api/v1alpha1"
	"felix.dev/felix/broker/record"
	"felix.dev/felix/internal/history"
	"felix.dev/felix/internal/localcluster"
	"felix.dev/felix/internal/podrunner"
	"felix.dev/felix/internal/powerfs"
)

// Test flags of the nemesis; FELIX_NEMESIS_DURATION, FELIX_NEMESIS_SEED
// and FELIX_NEMESIS_FSYNC set the same when flags cannot be passed (go
// test ./...).
var (
	nemesisDuration = flag.Duration("nemesis.duration", 3*time.Minute, "how long the local-cluster nemesis injects faults")
	nemesisSeed     = flag.Uint64("nemesis.seed", 0, "seed of the nemesis's fault choices (0: from the clock)")
	nemesisFsync    = flag.String("nemesis.fsync", "periodic", "fsync mode of the nemesis's cluster: on-commit, periodic or none")
	nemesisFaults   = flag.String("nemesis.faults", "", "comma-separated faults the nemesis injects, of kill-9, freeze, wipe, partition, power-cut (empty: every one the mode has)")
)

// nemesisFaultKeys name the faults in -nemesis.faults, by kind.
var nemesisFaultKeys = []string{"kill-9", "freeze", "wipe", "partition", "power-cut"}

// nemesisFaultFilter is the set of faults -nemesis.faults or
// FELIX_NEMESIS_FAULTS allows, nil for all.
func nemesisFaultFilter(t *testing.T) map[string]bool {
	v := *nemesisFaults
	if e := os.Getenv("FELIX_NEMESIS_FAULTS"); e != "" {
		v = e
	}
	if v == "" {
		return nil
	}
	set := map[string]bool{}
	for _, f := range strings.Split(v, ",") {
		f = strings.TrimSpace(f)
		if !slices.Contains(nemesisFaultKeys, f) {
			t.Fatalf("nemesis fault %q: want some of %v", f, nemesisFaultKeys)
		}
		set[f] = true
	}
	return set
}

// nemesisSettings resolves the flags and the environment.
func nemesisSettings(t *testing.T) (time.Duration, uint64) {
	d, seed := *nemesisDuration, *nemesisSeed
	if v := os.Getenv("FELIX_NEMESIS_DURATION"); v != "" {
		var err error
		if d, err = time.ParseDuration(v); err != nil {
			t.Fatalf("FELIX_NEMESIS_DURATION: %v", err)
		}
	}
	if v := os.Getenv("FELIX_NEMESIS_SEED"); v != "" {
		var err error
		if seed, err = strconv.ParseUint(v, 10, 64); err != nil {
			t.Fatalf("FELIX_NEMESIS_SEED: %v", err)
		}
	}
	if seed == 0 {
		seed = uint64(time.Now().UnixNano())
	}
	return d, seed
}

// nemesisFsyncMode is the fsync mode of the nemesis's cluster
// (-nemesis.fsync or FELIX_NEMESIS_FSYNC; default periodic).
func nemesisFsyncMode(t *testing.T) felixv1.FsyncMode {
	v := *nemesisFsync
	if e := os.Getenv("FELIX_NEMESIS_FSYNC"); e != "" {
		v = e
	}
	switch v {
	case "on-commit", "OnCommit":
		return felixv1.FsyncOnCommit
	case "periodic", "Periodic":
		return felixv1.FsyncPeriodic
	case "none", "None":
		return felixv1.FsyncNone
	}
	t.Fatalf("nemesis fsync mode %q: want on-commit, periodic or none", v)
	return ""
}

// nemesisNamespace is the namespace of the nemesis's cluster; in process
// mode its claims are on powerfs when FUSE is available.
const nemesisNamespace = "nemesis"

// nemesisStreams are the nemesis's streams: the sequential writer's and the
// history workload's. Between faults each one's shard must be whole again
// (every replica caught up under its current storage id), so that no shard
// ever has more than one faulty replica.
var nemesisStreams = []string{"nemesis", "nemesis-h"}

// powerLossAvailable reports whether a powerfs can be mounted here (FUSE:
// /dev/fuse, fusermount3, root); FELIX_SKIP_POWERCUT=1 says no.
func powerLossAvailable(t *testing.T) bool {
	t.Helper()
	if os.Getenv("FELIX_SKIP_POWERCUT") == "1" {
		return false
	}
	base := t.TempDir()
	backing, mnt := filepath.Join(base, "b"), filepath.Join(base, "m")
	for _, d := range []string{backing, mnt} {
		if err := os.Mkdir(d, 0o755); err != nil {
			t.Fatal(err)
		}
	}
	f, err := powerfs.Mount(mnt, powerfs.Options{Backing: backing})
	if err != nil {
		t.Logf("no power cuts in the nemesis: %v", err)
		return false
	}
	if err := f.Unmount(); err != nil {
		t.Fatalf("unmount the FUSE probe: %v", err)
	}
	return true
}

// mountsLeft fails the test if a powerfs is still mounted under dir.
func mountsLeft(t *testing.T, dir string) {
	t.Helper()
	b, err := os.ReadFile("/proc/self/mountinfo")
	if err != nil {
		t.Fatal(err)
	}
	for _, line := range strings.Split(string(b), "\n") {
		f := strings.Fields(line)
		if len(f) > 4 && strings.HasPrefix(f[4], dir) && strings.Contains(line, "powerfs") {
			t.Errorf("powerfs still mounted at %s after the local cluster stopped", f[4])
		}
	}
}

// scenarioNemesis runs a Quorum append workload on a 3-broker cluster of
// the local cluster while a nemesis injects, one at a time through the
// podrunner, kill -9 (the runner restarts the broker), SIGSTOP/SIGCONT for
// 0.5-3 s, and volume wipe with kill -9 (a restart on an empty disk) of a
// random broker, waiting between faults until the shards of both streams
// report every replica caught up (so at most one replica of a shard is
// faulty at once). At the end
// every acknowledged record is read back exactly once, in offset order,
// from the leader. It prints the faults injected and the records verified.
//
// Every client operation (the writer's, and those of a second workload on
// a second stream: appends with and without an expected tail, reads from
// random offsets, conditional trims) is recorded and the history checked
// for linearizability against the shard log model (internal/history).
// With partitions (container mode, on the runner's bridge network) a
// fourth fault cuts a random broker off the network for 1-8 s.
//
// With power (process mode, the nemesis namespace's claims on powerfs) a
// fifth fault cuts a random broker's power: SIGKILL and, at once, its
// claim loses every write not made durable (the last unsynced write of
// each file torn), is mounted again, and the broker restarts on a new boot
// id. The seeds' promises are checked [ID-3]: under on-commit the broker
// keeps its storage id; under periodic and none it comes back under a new
// one, and no report or assignment counts it under the old one after
// that. In every mode no acknowledged record may be lost (the quorum
// holds every acknowledged record on a replica that kept its power); the
// run prints what was lost per mode.
func scenarioNemesis(t *testing.T, ctx context.Context, lc *localcluster.Cluster, duration time.Duration, partitions, power bool) {
	_, seed := nemesisSettings(t)
	fsync := nemesisFsyncMode(t)
	// The faults by kind; partition only in container mode, power cut
	// only with power-loss claims.
	faultNames := []string{"kill -9", "freeze", "wipe", "partition", "power cut"}
	allowed := nemesisFaultFilter(t)
	var kinds []int
	for k := range faultNames {
		if (k == 3 && !partitions) || (k == 4 && !power) || (allowed != nil && !allowed[nemesisFaultKeys[k]]) {
			continue
		}
		kinds = append(kinds, k)
	}
	if len(kinds) == 0 {
		t.Skipf("none of the faults %v is available in this mode", allowed)
	}
	t.Logf("nemesis for %s, fsync %s, seed %d (-nemesis.seed=%d or FELIX_NEMESIS_SEED=%d replays the fault choices; timing still varies); faults %v",
		duration, fsync, seed, seed, seed, kinds)
	rng := rand.New(rand.NewPCG(seed, 0))
	t.Cleanup(func() { keepNemesisLogs(t, lc) })
	tn := newTenant(t, ctx, lc, nemesisNamespace, 3, fsync)
	defer tn.close()
	tn.stream("nemesis")
	tn.stream("nemesis-h")

	// Every client operation is recorded, with its invocation and
	// completion, for the linearizability check at the end.
	start := time.Now()
	rec := history.NewRecorder(func() int64 { return int64(time.Since(start)) })

	// The workload: one sequential writer to the current leader, never
	// retrying blindly (an append whose outcome is unknown is not counted),
	// at a steady, modest rate: the run is about faults, and a wiped
	// replica must be copied again between them.
	w := startWriterRecorded(tn, "nemesis", "n", 2*time.Millisecond, rec)
	defer w.finish()
	// On a second stream: appends with and without an expected tail,
	// reads from random offsets and conditional trims, concurrently.
	hw := startHistoryWorkload(tn, "nemesis-h", rec, seed)
	defer hw.finish()

	faults := map[string]int{}
	var cuts powerCuts
	end := time.Now().Add(duration)
	healed := time.Now()
	for time.Now().Before(end) {
		// Between faults: on both streams, a report taken after the last
		// fault healed shows every replica caught up under its current
		// storage id. Waiting for one stream only let the next fault land
		// while the other's shard still had a replica to copy again: two
		// faulty replicas of three, and after two power cuts in a row
		// under periodic no leader could count a quorum (docs/testing.md).
		for _, st := range nemesisStreams {
			tn.caughtUpSince(st, healed, 3*time.Minute)
		}
		cuts.checkNotCounted(tn)
		victim := fmt.Sprintf("%s-%d", tn.cluster, rng.IntN(3))
		before := tn.broker(victim)
		inc := before.Incarnation
		kind := kinds[rng.IntN(len(kinds))]
		pause := time.Duration(500+rng.IntN(2500)) * time.Millisecond
		var err error
		switch kind {
		case 0:
			err = lc.Runner.Kill(tn.ns, victim)
			faults["kill-9"]++
		case 1:
			if err = lc.Runner.Freeze(tn.ns, victim); err == nil {
				time.Sleep(pause) // the fault itself: the process stays stopped this long
				err = lc.Runner.Thaw(tn.ns, victim)
			}
			faults["freeze"]++
		case 2:
			if err = lc.Runner.WipeVolume(tn.ns, "data-"+victim); err == nil {
				err = lc.Runner.Kill(tn.ns, victim)
			}
			faults["wipe"]++
		case 3:
			if err = lc.Runner.Partition(tn.ns, victim); err == nil {
				time.Sleep(time.Duration(1000+rng.IntN(7000)) * time.Millisecond) // the fault itself
				err = lc.Runner.Heal(tn.ns, victim)
			}
			faults["partition"]++
		case 4:
			var loss powerfs.Loss
			loss, err = lc.Runner.PowerCut(tn.ns, victim)
			cuts.add(loss)
			faults["power-cut"]++
		}
		if err != nil {
			t.Fatalf("fault on %s: %v", victim, err)
		}
		if kind == 0 || kind == 2 || kind == 4 {
			after := tn.reregistered(victim, inc)
			if kind == 4 {
				cuts.registered(tn, fsync, victim, before.StorageID, after.StorageID)
			}
		}
		healed = time.Now()
		t.Logf("fault %d: %s %s", faults["kill-9"]+faults["freeze"]+faults["wipe"]+faults["partition"]+faults["power-cut"], faultNames[kind], victim)
	}
	acked, order, unknown := w.finish()
	hw.finish()

	s := tn.caughtUp("nemesis", 3*time.Minute)
	cuts.checkNotCounted(tn)
	got := tn.recordedReadAll(rec, clientFinalReadBack, tn.broker(s.Status.Assignment.Leader).Address, "nemesis")
	verified := checkAcked(t, acked, got, "the leader at the end")
	lost := countLost(acked, got)
	checkOnceInOrder(t, got, order)
	sh := tn.caughtUp("nemesis-h", 3*time.Minute)
	tn.recordedReadAll(rec, clientFinalRead, tn.broker(sh.Status.Assignment.Leader).Address, "nemesis-h")
	verdict, ops := checkHistory(t, rec, 2*time.Minute+duration/4)
	total := faults["kill-9"] + faults["freeze"] + faults["wipe"] + faults["partition"] + faults["power-cut"]
	t.Logf("nemesis: %d faults injected (kill -9 %d, freeze %d, wipe %d, partition %d, power cut %d) over %s; %d acknowledged records verified (%d appends with unknown outcome); %d records read from %s at epoch %d",
		total, faults["kill-9"], faults["freeze"], faults["wipe"], faults["partition"], faults["power-cut"], duration, verified, unknown, len(got), s.Status.Assignment.Leader, s.Status.Assignment.Epoch)
	if power {
		damaged, dropped := tn.brokerLogCounts(damagedOnOpen), tn.brokerLogCounts(tornTailDropped)
		t.Logf("POWERCUT-NEMESIS fsync=%s duration=%s seed=%d power_cuts=%d storage_id_rotated=%d storage_id_kept=%d acknowledged=%d lost=%d history_ops=%d history=%s powerfs_dropped{files=%d pages=%d torn_pages_kept=%d entries=%d} broker_logs{damaged_on_open=%d torn_tail_dropped=%d}",
			fsync, duration, seed, faults["power-cut"], cuts.rotated, cuts.kept, len(acked), lost, ops, verdict,
			cuts.loss.Files, cuts.loss.Pages, cuts.loss.TornPages, cuts.loss.Entries, damaged, dropped)
	}
	if len(acked) == 0 {
		t.Fatal("the workload acknowledged nothing")
	}
}

// Lines of the broker's log (broker/logstore) counted after a nemesis with
// power cuts: damage to stored data found at open, and a torn tail
// dropped.
const (
	damagedOnOpen   = "stored data of a log is damaged"
	tornTailDropped = "dropping batches whose values did not reach the disk"
)

// brokerLogCounts counts the lines holding text in the pod logs of the
// tenant's brokers.
func (tn *tenant) brokerLogCounts(text string) int {
	n := 0
	for i := 0; i < tn.brokers; i++ {
		b, err := os.ReadFile(tn.lc.Runner.LogPath(tn.ns, fmt.Sprintf("%s-%d", tn.cluster, i)))
		if err != nil {
			continue
		}
		n += strings.Count(string(b), text)
	}
	return n
}

// keepNemesisLogs copies the nemesis's pod logs out of the local
// cluster's state directory (removed when the test ends) when the test
// failed, to $FELIX_NEMESIS_ARTIFACTS or a new temporary directory.
func keepNemesisLogs(t *testing.T, lc *localcluster.Cluster) {
	if !t.Failed() {
		return
	}
	dir := os.Getenv("FELIX_NEMESIS_ARTIFACTS")
	if dir == "" {
		var err error
		if dir, err = os.MkdirTemp("", "felix-nemesis-"); err != nil {
			t.Logf("keep the pod logs: %v", err)
			return
		}
	}
	dst := filepath.Join(dir, "logs")
	if _, err := podrunner.CopyDir(filepath.Join(lc.StateDir, "logs", nemesisNamespace), dst); err != nil {
		t.Logf("keep the pod logs: %v", err)
		return
	}
	t.Logf("nemesis pod logs kept in %s", dst)
}

// countLost is how many acknowledged records got lacks or holds
// differently.
func countLost(acked map[uint64]string, got map[uint64]record.Record) int {
	n := 0
	for off, want := range acked {
		if g, ok := got[off]; !ok || string(g.Payload) != want {
			n++
		}
	}
	return n
}

// powerCuts tallies the nemesis's power cuts and checks the storage-id
// promises [ID-3].
type powerCuts struct {
	loss          powerfs.Loss
	rotated, kept int
	// old are the storage ids brokers left behind in a power cut, with
	// each stream's shard epoch when the new id was registered: no
	// assignment of a later epoch may count them under those ids, and no
	// report may name them.
	old []leftBehind
}

// leftBehind is a storage id a broker left behind in a power cut.
type leftBehind struct {
	name, id string
	epochs   map[string]int64 // by stream
}

func (c *powerCuts) add(l powerfs.Loss) {
	c.loss.Files += l.Files
	c.loss.Pages += l.Pages
	c.loss.TornPages += l.TornPages
	c.loss.Entries += l.Entries
}

// registered checks the storage id a broker registered with after a power
// cut: the same under on-commit (it lost nothing it had synced, and it
// synced everything it acknowledged), a new one under periodic and none
// (the boot changed, so what it had not synced is gone).
func (c *powerCuts) registered(tn *tenant, fsync felixv1.FsyncMode, name, before, after string) {
	t := tn.t
	t.Helper()
	switch {
	case fsync == felixv1.FsyncOnCommit && after != before:
		t.Errorf("on-commit: %s came back from a power cut under a new storage id %s (was %s); on-commit keeps it", name, after, before)
	case fsync != felixv1.FsyncOnCommit && after == before:
		t.Errorf("%s: %s came back from a power cut under its old storage id %s; it must rotate [ID-3]", fsync, name, before)
	}
	if after == before {
		c.kept++
		return
	}
	c.rotated++
	epochs := map[string]int64{}
	for _, st := range nemesisStreams {
		if s := tn.shard(st); s != nil && s.Status.Assignment != nil {
			epochs[st] = s.Status.Assignment.Epoch
		}
	}
	c.old = append(c.old, leftBehind{name: name, id: before, epochs: epochs})
	t.Logf("power cut: %s storage id %s -> %s", name, before, after)
}

// checkNotCounted fails the test if an assignment of a nemesis shard made
// after a broker registered its new storage id counts it under the id it
// left behind in a power cut, or the shard's report names it under that
// id. (An assignment from before keeps the replicas counted when it was
// made.) Called once the shards have caught up again after the cut, when
// reports from after the re-registration stand.
func (c *powerCuts) checkNotCounted(tn *tenant) {
	tn.t.Helper()
	for _, st := range nemesisStreams {
		c.checkShardNotCounted(tn, st)
	}
}

// checkShardNotCounted is checkNotCounted for one stream's shard.
func (c *powerCuts) checkShardNotCounted(tn *tenant, stream string) {
	tn.t.Helper()
	if len(c.old) == 0 {
		return
	}
	s := tn.shard(stream)
	if s == nil {
		return
	}
	for _, o := range c.old {
		if a := s.Status.Assignment; a != nil && a.Epoch > o.epochs[stream] {
			for _, ct := range a.Counted {
				if ct.Name == o.name && ct.StorageID == o.id {
					tn.t.Errorf("the assignment counts %s under %s, the storage id it left behind in a power cut: %s", o.name, o.id, shardState(s))
				}
			}
		}
		if r := s.Status.Report; r != nil {
			for _, f := range r.Followers {
				if f.Name == o.name && f.StorageID == o.id {
					tn.t.Errorf("the report names %s under %s, the storage id it left behind in a power cut: %s", o.name, o.id, shardState(s))
				}
			}
		}
	}
}
