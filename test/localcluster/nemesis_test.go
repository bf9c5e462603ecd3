package localcluster_test

import (
	"context"
	"flag"
	"fmt"
	"math/rand/v2"
	"os"
	"strconv"
	"testing"
	"time"

	felixv1 "felix.dev/felix/api/v1alpha1"
	"felix.dev/felix/internal/history"
	"felix.dev/felix/internal/localcluster"
)

// Test flags of the nemesis; FELIX_NEMESIS_DURATION and FELIX_NEMESIS_SEED
// set the same when flags cannot be passed (go test ./...).
var (
	nemesisDuration = flag.Duration("nemesis.duration", 3*time.Minute, "how long the local-cluster nemesis injects faults")
	nemesisSeed     = flag.Uint64("nemesis.seed", 0, "seed of the nemesis's fault choices (0: from the clock)")
)

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

// scenarioNemesis runs a Quorum append workload on a 3-broker cluster of
// the local cluster while a nemesis injects, one at a time through the
// podrunner, kill -9 (the runner restarts the broker), SIGSTOP/SIGCONT for
// 0.5-3 s, and volume wipe with kill -9 (a restart on an empty disk) of a
// random broker, waiting between faults until the shard reports every
// replica caught up (so at most one replica is faulty at once). At the end
// every acknowledged record is read back exactly once, in offset order,
// from the leader. It prints the faults injected and the records verified.
//
// Every client operation (the writer's, and those of a second workload on
// a second stream: appends with and without an expected tail, reads from
// random offsets, conditional trims) is recorded and the history checked
// for linearizability against the shard log model (internal/history).
// With partitions (container mode, on the runner's bridge network) a
// fourth fault cuts a random broker off the network for 1-8 s.
func scenarioNemesis(t *testing.T, ctx context.Context, lc *localcluster.Cluster, duration time.Duration, partitions bool) {
	_, seed := nemesisSettings(t)
	// The faults by kind; the last, partition, only in container mode.
	faultNames := []string{"kill -9", "freeze", "wipe", "partition"}
	t.Logf("nemesis for %s, seed %d (-nemesis.seed=%d or FELIX_NEMESIS_SEED=%d replays the fault choices; timing still varies)", duration, seed, seed, seed)
	rng := rand.New(rand.NewPCG(seed, 0))
	tn := newTenant(t, ctx, lc, "nemesis", 3, felixv1.FsyncPeriodic)
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
	end := time.Now().Add(duration)
	healed := time.Now()
	for time.Now().Before(end) {
		// Between faults: a report taken after the last fault healed shows
		// every replica caught up.
		tn.caughtUpSince("nemesis", healed, 3*time.Minute)
		victim := fmt.Sprintf("%s-%d", tn.cluster, rng.IntN(3))
		inc := tn.broker(victim).Incarnation
		kind := rng.IntN(len(faultNames) - 1)
		if partitions {
			kind = rng.IntN(len(faultNames))
		}
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
		}
		if err != nil {
			t.Fatalf("fault on %s: %v", victim, err)
		}
		if kind == 0 || kind == 2 {
			tn.reregistered(victim, inc)
		}
		healed = time.Now()
		t.Logf("fault %d: %s %s", faults["kill-9"]+faults["freeze"]+faults["wipe"]+faults["partition"], faultNames[kind], victim)
	}
	acked, order, unknown := w.finish()
	hw.finish()

	s := tn.caughtUp("nemesis", 3*time.Minute)
	got := tn.recordedReadAll(rec, clientFinalReadBack, tn.broker(s.Status.Assignment.Leader).Address, "nemesis")
	verified := checkAcked(t, acked, got, "the leader at the end")
	checkOnceInOrder(t, got, order)
	sh := tn.caughtUp("nemesis-h", 3*time.Minute)
	tn.recordedReadAll(rec, clientFinalRead, tn.broker(sh.Status.Assignment.Leader).Address, "nemesis-h")
	checkHistory(t, rec, 2*time.Minute+duration/4)
	total := faults["kill-9"] + faults["freeze"] + faults["wipe"] + faults["partition"]
	t.Logf("nemesis: %d faults injected (kill -9 %d, freeze %d, wipe %d, partition %d) over %s; %d acknowledged records verified (%d appends with unknown outcome); %d records read from %s at epoch %d",
		total, faults["kill-9"], faults["freeze"], faults["wipe"], faults["partition"], duration, verified, unknown, len(got), s.Status.Assignment.Leader, s.Status.Assignment.Epoch)
	if len(acked) == 0 {
		t.Fatal("the workload acknowledged nothing")
	}
}
