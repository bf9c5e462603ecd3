// Command felix-sim runs the replication simulator (broker/sim) from the
// command line: a range of seeds with figures, or one seed with its trace.
// It is a developer tool; `go test ./broker/sim` is the gate.
//
//	felix-sim -seeds 5000 -steps 600          # a range, every rule on
//	felix-sim -seeds 2000 -off cp1            # a twin: [CP-1] off
//	felix-sim -seed 585 -legacy -trace        # one seed, its full trace
//
// A failing seed is shrunk and printed with the go test command that
// replays it. The exit status is 1 when a seed failed.
package main

import (
	"flag"
	"fmt"
	"os"
	"strings"

	"felix.dev/felix/broker/sim"
)

func main() {
	seeds := flag.Int("seeds", 2000, "number of seeds to run")
	first := flag.Uint64("first", 1, "first seed")
	steps := flag.Int("steps", 300, "events per seed")
	seed := flag.Uint64("seed", 0, "run only this seed, with its trace")
	keep := flag.String("keep", "", "with -seed: run only these events (e.g. 0-4,9)")
	off := flag.String("off", "", "switch rules off: rp3,rp4,rp5,rp6-logs,fence,cp1,cp1fresh,id3,id3-<log>")
	propose := flag.String("propose", "", "send every proposal to these logs: data,group,dead-letter,counter (default: a mix)")
	legacy := flag.Bool("legacy", false, "about half the brokers are older builds without storage ids")
	trace := flag.Bool("trace", false, "with -seed: print the trace even when the seed passes")
	flag.Parse()

	base := sim.Config{Steps: *steps, LegacyPeers: *legacy}
	if err := base.ParseOff(*off); err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(2)
	}
	logs, err := sim.ParseLogs(*propose)
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(2)
	}
	base.ProposeTo = logs
	if *seed != 0 {
		cfg := base
		cfg.Seed, cfg.Trace = *seed, true
		k, err := sim.ParseKeep(*keep)
		if err != nil {
			fmt.Fprintln(os.Stderr, err)
			os.Exit(2)
		}
		cfg.Keep = k
		r := sim.Run(cfg)
		if r.Failure != nil || *trace {
			fmt.Println(strings.Join(r.Trace, "\n"))
		}
		if r.Failure != nil {
			fmt.Println(r.Failure)
			os.Exit(1)
		}
		fmt.Printf("seed %d (%s) passed: %s\n", cfg.Seed, r.Shape, r.Stats)
		return
	}
	var total sim.Stats
	var failed []*sim.Failure
	for i := 0; i < *seeds; i++ {
		cfg := base
		cfg.Seed = *first + uint64(i)
		r := sim.Run(cfg)
		total.Add(r.Stats)
		if r.Failure != nil {
			failed = append(failed, r.Failure)
		}
	}
	fmt.Printf("%d seeds from %d, %d steps, rules off %q: %s\n", *seeds, *first, *steps, base.Off(), total)
	if len(failed) == 0 {
		return
	}
	for _, f := range failed {
		fmt.Printf("FAIL %v\n", f)
	}
	f := failed[0]
	cfg := base
	cfg.Seed = f.Seed
	k := sim.Shrink(cfg, f, 400)
	fmt.Printf("replay: go test ./broker/sim -run 'TestSim$' -sim.seed %d -sim.steps %d -sim.keep %s", f.Seed, *steps, sim.FormatKeep(k))
	if *legacy {
		fmt.Print(" -sim.legacy")
	}
	if o := base.Off(); o != "" {
		fmt.Print(" -sim.off " + o)
	}
	if *propose != "" {
		fmt.Print(" -sim.propose " + *propose)
	}
	fmt.Println()
	os.Exit(1)
}
