package sim

import (
	"slices"
	"strings"
	"testing"

	"felix.dev/felix/broker/record"
)

// TestRun_Deterministic: the same Config gives the same trace and figures.
func TestRun_Deterministic(t *testing.T) {
	for _, seed := range []uint64{1, 2, 3, 21, 98} {
		cfg := Config{Seed: seed, Steps: 200, Trace: true}
		a, b := Run(cfg), Run(cfg)
		if !slices.Equal(a.Trace, b.Trace) || a.Stats.String() != b.Stats.String() {
			t.Fatalf("seed %d: two runs differ", seed)
		}
		if len(a.Trace) < 50 {
			t.Fatalf("seed %d: trace too short (%d lines)", seed, len(a.Trace))
		}
	}
}

// TestKeep_RoundTrip: FormatKeep and ParseKeep agree, and bad input is
// refused.
func TestKeep_RoundTrip(t *testing.T) {
	for _, keep := range [][]int{{0}, {0, 1, 2, 5}, {3, 7, 8, 9, 20}} {
		got, err := ParseKeep(FormatKeep(keep))
		if err != nil || !slices.Equal(got, keep) {
			t.Fatalf("%v -> %q -> %v, %v", keep, FormatKeep(keep), got, err)
		}
	}
	for _, bad := range []string{"x", "3-1", "1-", ","} {
		if _, err := ParseKeep(bad); err == nil {
			t.Fatalf("ParseKeep(%q) accepted", bad)
		}
	}
}

// TestShrink_KeepsFailure: a twin's failing seed shrinks to a shorter
// schedule that still fails with the same invariant.
func TestShrink_KeepsFailure(t *testing.T) {
	cfg := Config{Steps: 300}
	cfg.ParseOff(OffCP1)
	for seed := uint64(1); seed <= 200; seed++ {
		cfg.Seed = seed
		r := Run(cfg)
		if r.Failure == nil {
			continue
		}
		keep := Shrink(cfg, r.Failure, 200)
		if len(keep) == 0 || len(keep) > r.Failure.Step+1 {
			t.Fatalf("seed %d: shrunk to %d events from %d", seed, len(keep), r.Failure.Step+1)
		}
		c := cfg
		c.Keep = keep
		again := Run(c)
		if again.Failure == nil || again.Failure.Invariant != r.Failure.Invariant {
			t.Fatalf("seed %d: shrunk schedule %s does not fail with %s", seed, FormatKeep(keep), r.Failure.Invariant)
		}
		return
	}
	t.Fatal("no failing seed to shrink in 200 seeds with [CP-1] off")
}

// TestParseOff_RoundTrip: every switch name round-trips.
func TestParseOff_RoundTrip(t *testing.T) {
	var c Config
	all := strings.Join([]string{OffRP3, OffRP4, OffRP5, OffFence, OffCP1, OffID3, OffCP1Fresh,
		OffID3Log + "data", OffID3Log + "group", OffID3Log + "dead-letter", OffID3Log + "counter"}, ",")
	if err := c.ParseOff(all); err != nil || c.Off() != all {
		t.Fatalf("ParseOff(%q): %v, Off()=%q", all, err, c.Off())
	}
	for _, bad := range []string{"rp9", "id3-", "id3-nolog"} {
		if err := c.ParseOff(bad); err == nil {
			t.Fatalf("unknown switch %q accepted", bad)
		}
	}
}

// TestParseLogs_RoundTrip: log lists round-trip; unknown names are refused.
func TestParseLogs_RoundTrip(t *testing.T) {
	for _, list := range []string{"", "data", "group", "dead-letter,counter", "data,group,dead-letter,counter"} {
		logs, err := ParseLogs(list)
		if err != nil || FormatLogs(logs) != list {
			t.Fatalf("ParseLogs(%q) = %v, %v; formats as %q", list, logs, err, FormatLogs(logs))
		}
	}
	if _, err := ParseLogs("offsets"); err == nil {
		t.Fatal("unknown log accepted")
	}
}

// TestProposeTo_AimsTheWorkload: with Config.ProposeTo only the named
// log receives acknowledged records, and the default workload writes
// every log.
func TestProposeTo_AimsTheWorkload(t *testing.T) {
	mixed := Run(Config{Seed: 7, Steps: 300})
	for i, l := range record.LogKinds {
		if mixed.Stats.AckedRecords[i] == 0 {
			t.Fatalf("default workload: no %s record acknowledged", l)
		}
		r := Run(Config{Seed: 7, Steps: 300, ProposeTo: []record.LogKind{l}})
		for j, o := range record.LogKinds {
			if got := r.Stats.AckedRecords[j]; (o == l) != (got > 0) {
				t.Fatalf("ProposeTo %s: %d %s records acknowledged", l, got, o)
			}
		}
	}
}
