package sim

import (
	"flag"
	"fmt"
	"runtime"
	"strings"
	"sync"
	"testing"

	"felix.dev/felix/broker/record"
)

var (
	flagSeeds  = flag.Int("sim.seeds", 2000, "number of seeds TestSim and the twins run")
	flagFirst  = flag.Uint64("sim.first", 1, "first seed of the range")
	flagSteps  = flag.Int("sim.steps", 300, "events per seed")
	flagSeed   = flag.Uint64("sim.seed", 0, "replay this one seed with a full trace (0: run the range)")
	flagKeep   = flag.String("sim.keep", "", "with -sim.seed: run only these events (a shrunk schedule, e.g. 0-4,9)")
	flagTrace  = flag.Bool("sim.trace", false, "with -sim.seed: print the trace even when the seed passes")
	flagOff    = flag.String("sim.off", "", "with -sim.seed: switch rules off (rp3,rp4,rp5,rp6-logs,fence,cp1,cp1fresh,id3, id3-<log>), as a twin does")
	flagLegacy = flag.Bool("sim.legacy", false, "with -sim.seed: about half the brokers are older builds without storage ids")
	flagPrefer = flag.Bool("sim.preferred", false, "with -sim.seed: placement moves leadership to a preferred replica (TestSim_PreferredLeader)")
	flagDrain  = flag.Bool("sim.drain", false, "with -sim.seed: one broker drains its leaderships (TestSim_LeaderDrain)")
	flagLogs   = flag.String("sim.propose", "", "with -sim.seed: send every proposal to these logs (data,group,dead-letter,counter), as the per-log twins do")
)

// outcome is one seed's result in a sweep.
type outcome struct {
	seed uint64
	res  Result
}

// sweep runs seeds [first, first+n) on every core (the simulator itself is
// single-threaded and deterministic; seeds are independent). With stopAt
// set it stops handing out seeds once one fails as stopAt says. Results
// come back ordered by seed.
func sweep(base Config, first uint64, n int, stopAt func(*Failure) bool) []outcome {
	out := make([]outcome, n)
	var mu sync.Mutex
	next, stop := 0, false
	var wg sync.WaitGroup
	for w := 0; w < runtime.GOMAXPROCS(0); w++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for {
				mu.Lock()
				if next >= n || stop {
					mu.Unlock()
					return
				}
				i := next
				next++
				mu.Unlock()
				seed := first + uint64(i)
				cfg := base
				cfg.Seed = seed
				r := Run(cfg)
				halt := r.Failure != nil && stopAt != nil && stopAt(r.Failure)
				mu.Lock()
				out[i] = outcome{seed: seed, res: r}
				stop = stop || halt
				mu.Unlock()
			}
		}()
	}
	wg.Wait()
	return out
}

// replayReport shrinks a failure and renders its trace and replay command.
func replayReport(cfg Config, f *Failure) string {
	keep := Shrink(cfg, f, 400)
	c := cfg
	c.Keep, c.Trace = keep, true
	r := Run(c)
	var b strings.Builder
	fmt.Fprintf(&b, "%v\n", f)
	if r.Failure == nil {
		fmt.Fprintf(&b, "(shrunk schedule did not fail again; replay the full seed)\n")
		keep = nil
		c.Keep = nil
		r = Run(c)
	}
	fmt.Fprintf(&b, "replay: go test ./broker/sim -run 'TestSim$' -sim.seed %d -sim.steps %d", cfg.Seed, cfg.Steps)
	if cfg.LegacyPeers {
		b.WriteString(" -sim.legacy")
	}
	if cfg.PreferredLeader {
		b.WriteString(" -sim.preferred")
	}
	if cfg.DrainLeader {
		b.WriteString(" -sim.drain")
	}
	if off := cfg.Off(); off != "" {
		b.WriteString(" -sim.off " + off)
	}
	if len(cfg.ProposeTo) > 0 {
		b.WriteString(" -sim.propose " + FormatLogs(cfg.ProposeTo))
	}
	if keep != nil {
		fmt.Fprintf(&b, " -sim.keep %s", FormatKeep(keep))
	}
	fmt.Fprintf(&b, "\nshrunk to %d events; trace:\n%s\n", len(keep), strings.Join(r.Trace, "\n"))
	return b.String()
}

// TestSim is the simulator run: -sim.seeds seeds of -sim.steps events with
// every rule on must hold every invariant. -sim.seed N replays one seed.
func TestSim(t *testing.T) {
	if *flagSeed != 0 {
		keep, err := ParseKeep(*flagKeep)
		if err != nil {
			t.Fatal(err)
		}
		cfg := Config{Seed: *flagSeed, Steps: *flagSteps, Keep: keep, Trace: true, LegacyPeers: *flagLegacy,
			PreferredLeader: *flagPrefer, DrainLeader: *flagDrain}
		if err := cfg.ParseOff(*flagOff); err != nil {
			t.Fatal(err)
		}
		if cfg.ProposeTo, err = ParseLogs(*flagLogs); err != nil {
			t.Fatal(err)
		}
		r := Run(cfg)
		if r.Failure != nil {
			t.Fatalf("%v\ntrace:\n%s", r.Failure, strings.Join(r.Trace, "\n"))
		}
		if *flagTrace {
			t.Logf("trace:\n%s", strings.Join(r.Trace, "\n"))
		}
		t.Logf("seed %d (%s) passed: %s", cfg.Seed, r.Shape, r.Stats)
		return
	}
	base := Config{Steps: *flagSteps}
	total, failed, msg := sweepSummary(t, base, *flagSeeds)
	if failed > 0 {
		t.Fatal(msg)
	}
	// The workload writes every log of the shard, so the invariants
	// follow acknowledged records on each (issue 28, item 5).
	for i, l := range record.LogKinds {
		if total.AckedRecords[i] == 0 {
			t.Errorf("no %s record acknowledged under Quorum or All in %d seeds: the sweep did not exercise the %s log", l, *flagSeeds, l)
		}
	}
}

// sweepSummary runs n seeds of base from -sim.first, logs their total
// stats, and returns them with the number of failing seeds and, when some
// failed, a message naming them with the first one's replay.
func sweepSummary(t *testing.T, base Config, n int) (Stats, int, string) {
	t.Helper()
	outs := sweep(base, *flagFirst, n, nil)
	total := newStats()
	var failed []outcome
	for _, o := range outs {
		total.Add(o.res.Stats)
		if o.res.Failure != nil {
			failed = append(failed, o)
		}
	}
	t.Logf("%d seeds from %d, %d steps: %s", len(outs), *flagFirst, base.Steps, total)
	if len(failed) == 0 {
		return total, 0, ""
	}
	var seeds []string
	for _, o := range failed {
		seeds = append(seeds, fmt.Sprintf("%d:%s", o.seed, o.res.Failure.Invariant))
	}
	cfg := base
	cfg.Seed = failed[0].seed
	return total, len(failed), fmt.Sprintf("%d of %d seeds failed: %s\nfirst failing seed:\n%s", len(failed), len(outs),
		strings.Join(seeds, " "), replayReport(cfg, failed[0].res.Failure))
}

// TestSim_PreferredLeader runs a quarter of the seeds with placement moving
// leadership to a preferred replica whenever it safely can (the
// operator's default): planned promotions while the old leader is alive
// and serving must keep every invariant, exactly as failovers do.
func TestSim_PreferredLeader(t *testing.T) {
	n := max(*flagSeeds/4, 1)
	total, failed, msg := sweepSummary(t, Config{Steps: *flagSteps, PreferredLeader: true}, n)
	if failed > 0 {
		t.Fatal(msg)
	}
	if total.Switchovers == 0 {
		t.Fatalf("no planned promotion in %d seeds: the sweep did not exercise switchovers", n)
	}
}

// TestSim_LeaderDrain runs a quarter of the seeds with one broker
// draining: every time it leads while healthy, placement moves leadership
// away in a planned promotion; every invariant must hold.
func TestSim_LeaderDrain(t *testing.T) {
	n := max(*flagSeeds/4, 1)
	total, failed, msg := sweepSummary(t, Config{Steps: *flagSteps, DrainLeader: true}, n)
	if failed > 0 {
		t.Fatal(msg)
	}
	if total.Switchovers == 0 {
		t.Fatalf("no planned promotion in %d seeds: the sweep did not exercise drains", n)
	}
}

var flagLegacyStrict = flag.Bool("sim.legacy-strict", false, "TestLegacyPeers_NoLoss fails (instead of skipping) on the known core finding")

// TestLegacyPeers_NoLoss runs the first half of the seeds (to keep the
// default run short) with about half the brokers older builds that present
// no storage id (a mixed-version cluster), every rule on. It currently finds losses that trace to one known finding in the
// replication core (docs/testing.md, "Known findings"): a follower that
// presents no id and comes back with less than its cursor says (wiped)
// answers an exchange with a mismatch, and the leader keeps its confirmed
// position, so a fresh report calls it caught up and placement may promote
// it. Until the core changes, the test reports the failures and their
// replay and skips; -sim.legacy-strict makes it fail.
func TestLegacyPeers_NoLoss(t *testing.T) {
	_, failed, msg := sweepSummary(t, Config{Steps: *flagSteps, LegacyPeers: true}, max(*flagSeeds/2, 1))
	if failed == 0 {
		return
	}
	msg = "with id-less brokers: " + msg
	if *flagLegacyStrict {
		t.Fatal(msg)
	}
	t.Skipf("KNOWN CORE FINDING (see docs/testing.md, Known findings; -sim.legacy-strict to fail):\n%s", msg)
}
