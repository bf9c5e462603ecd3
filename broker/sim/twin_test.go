package sim

import (
	"flag"
	"testing"

	"felix.dev/felix/broker/placement"
	"felix.dev/felix/broker/record"
	"felix.dev/felix/broker/replication"
)

// twinMustFail runs the test command's seeds with one rule switched off
// and asserts that the simulator finds a loss (an acknowledged or committed
// record lost or contradicted, or a promotion of a replica that lacks
// one). A twin that stops failing fails the build: the rule would no
// longer be shown load-bearing.
func twinMustFail(t *testing.T, base Config) {
	t.Helper()
	twinMustFailOn(t, base, "")
}

// twinMustFailOn is twinMustFail where the loss must be seen on the log
// named log (a record.LogKind's String; "" for any log).
func twinMustFailOn(t *testing.T, base Config, log string) {
	t.Helper()
	twinMustFailWith(t, base, log, "")
}

// twinMustFailWith is twinMustFailOn where the loss must be the invariant
// inv ("" for any loss invariant).
func twinMustFailWith(t *testing.T, base Config, log string, inv Invariant) {
	t.Helper()
	base.Steps = *flagSteps
	// A loss counts for the twin only where the same seed passes with
	// every rule on: the switched-off rule made the difference.
	discriminates := func(f *Failure) bool {
		if !IsLoss(f.Invariant) || log != "" && f.Log != log || inv != "" && f.Invariant != inv {
			return false
		}
		on := base
		on.Seed, on.Rules, on.Placement, on.NoRestoreRotation, on.LogOutsideDir = f.Seed, replication.Rules{}, placement.Twin{}, false, [numLogs]bool{}
		return Run(on).Failure == nil
	}
	outs := sweep(base, *flagFirst, *flagSeeds, discriminates)
	for _, o := range outs {
		if f := o.res.Failure; f != nil && discriminates(f) {
			t.Logf("rules off (%s): loss found at seed %d, which passes with every rule on:\n%s", base.Off(), o.seed,
				replayReport(withSeed(base, o.seed), f))
			return
		}
	}
	t.Fatalf("twin (%s off) found no loss (%q) on log %q in %d seeds from %d that the rule prevents: the rule is no longer shown load-bearing",
		base.Off(), inv, log, *flagSeeds, *flagFirst)
}

// TestTwin_RP3_CursorResetOnNewID: without [RP-3] a follower presenting a
// new storage id keeps the cursor learned under its lost copy.
func TestTwin_RP3_CursorResetOnNewID(t *testing.T) {
	twinMustFail(t, Config{Rules: replication.Rules{DisableIDReset: true}, Placement: placement.Twin{}})
}

// TestTwin_ID3_EveryLog: [ID-3] rotates the storage id whenever the
// directory may hold less than its peers were told, which guards every log
// of the shard only because they all live in that directory. The twin
// keeps one log outside it (Config.LogOutsideDir): a wipe loses that log
// alone and the id survives. For each log the simulator must find a loss
// on that very log: the invariants (acknowledged records survive,
// committed records agree and are never truncated, promotions are
// eligible) guard the group, dead-letter and counter logs exactly as they
// guard the data log. The workload is aimed at the log under test
// (Config.ProposeTo). The promotion check usually sees the loss first; the
// no-promotion-check subtests switch it off, so the loss must be caught on
// the replicas' committed records (committed-disagree,
// committed-truncated) or on the serving leader (acked-lost).
func TestTwin_ID3_EveryLog(t *testing.T) {
	for _, l := range record.LogKinds {
		for _, noPromo := range []bool{false, true} {
			name := l.String()
			if noPromo {
				name += "/no-promotion-check"
			}
			t.Run(name, func(t *testing.T) {
				c := Config{ProposeTo: []record.LogKind{l}, noPromotionCheck: noPromo}
				c.LogOutsideDir[l] = true
				twinMustFailOn(t, c, l.String())
			})
		}
	}
}

// TestTwin_RP6_CaughtUpOnEveryLog: [RP-6] reports a follower caught up
// only once its confirmed position reaches the committed one on every log
// of the shard. Placement reads only the data log's position (as the
// FelixShard's status.report carries), so for the group, dead-letter and
// counter logs that check in the leader's core is all that keeps
// placement from promoting a follower that lacks their acknowledged
// records. The twin (replication.Rules.CaughtUpDataLogOnly) calls a
// follower caught up from its data-log cursor alone; with the workload
// aimed at one of the other logs, the promotion check (which holds every
// log to the core report's position for it) must find a promoted follower
// lacking an acknowledged record of that very log.
func TestTwin_RP6_CaughtUpOnEveryLog(t *testing.T) {
	for _, l := range record.LogKinds {
		if l == record.LogData {
			continue // not weakened by the twin
		}
		t.Run(l.String(), func(t *testing.T) {
			c := Config{Rules: replication.Rules{CaughtUpDataLogOnly: true}, ProposeTo: []record.LogKind{l}}
			twinMustFailWith(t, c, l.String(), InvPromotedIneligible)
		})
	}
}

// TestTwin_RP4_IdlePassesAskFollower: without [RP-4] an idle exchange ends
// "up to date" without asking the follower.
func TestTwin_RP4_IdlePassesAskFollower(t *testing.T) {
	twinMustFail(t, Config{Rules: replication.Rules{DisableIdleProbe: true}, LegacyPeers: true})
}

// TestTwin_RP5_QuorumCountsAnsweredFollowers: without [RP-5] the quorum
// mark counts every follower at its last confirmed position.
func TestTwin_RP5_QuorumCountsAnsweredFollowers(t *testing.T) {
	twinMustFail(t, Config{Rules: replication.Rules{DisablePassCounting: true}, LegacyPeers: true})
}

// TestTwin_CP1_PlacementIDCheck: without [CP-1] placement counts a
// follower whatever id it was reported under.
func TestTwin_CP1_PlacementIDCheck(t *testing.T) {
	twinMustFail(t, Config{Rules: replication.Rules{}, Placement: placement.Twin{DisableIDCheck: true}})
}

// TestTwin_Fence_ChangedIDNeverCounts: without the fence id rule the new
// leader's recovery and fence quorums count replicas whatever id they
// present, so one whose id changed since placement counted it stands in
// for the data it lost.
func TestTwin_Fence_ChangedIDNeverCounts(t *testing.T) {
	twinMustFail(t, Config{Rules: replication.Rules{DisableFenceIDCheck: true}, Placement: placement.Twin{}})
}

// TestTwin_CP1_FreshnessFromTheViewsTime: with [CP-1]'s freshness taken
// from the leader's last "reports current" renewal instead of from when
// its view was written, a follower without storage ids that lost its
// disk and registered again is counted caught up from a view taken
// before its current incarnation (the leader's renewals vouch for the
// unchanged report, and the caught-up flip is held back or not yet
// seen), and placement promotes its empty copy.
func TestTwin_CP1_FreshnessFromTheViewsTime(t *testing.T) {
	twinMustFail(t, Config{Placement: placement.Twin{FreshnessFromRenewal: true}, LegacyPeers: true})
}

func withSeed(c Config, seed uint64) Config {
	c.Seed = seed
	return c
}

var flagTwinCounts = flag.Bool("sim.twincounts", false, "TestTwinCounts: run every twin over all seeds and print how many fail, by invariant")

// TestTwinCounts measures the twins (behind -sim.twincounts): for each
// rule switched off, how many of the seeds fail and with which invariant.
// The figures go in docs/testing.md.
func TestTwinCounts(t *testing.T) {
	if !*flagTwinCounts {
		t.Skip("measurement only; run with -sim.twincounts")
	}
	for _, off := range []string{"", OffRP3, OffRP4, OffRP5, OffRP6Logs, OffCP1, OffCP1Fresh, OffFence, OffID3} {
		for _, legacy := range []bool{false, true} {
			base := Config{Steps: *flagSteps, LegacyPeers: legacy}
			if err := base.ParseOff(off); err != nil {
				t.Fatal(err)
			}
			outs := sweep(base, *flagFirst, *flagSeeds, nil)
			by := map[string]int{}
			first, disc := uint64(0), 0
			for _, o := range outs {
				f := o.res.Failure
				if f == nil {
					continue
				}
				by[string(f.Invariant)]++
				on := base
				on.Seed, on.Rules, on.Placement, on.NoRestoreRotation, on.LogOutsideDir = o.seed, replication.Rules{}, placement.Twin{}, false, [numLogs]bool{}
				if off != "" && IsLoss(f.Invariant) && Run(on).Failure == nil {
					disc++
					if first == 0 {
						first = o.seed
					}
				}
			}
			t.Logf("off=%-5s legacy=%-5t seeds=%d failing{%s} losses-the-rule-prevents=%d first=%d", off, legacy, *flagSeeds, renderCounts(by), disc, first)
		}
	}
}

// TestTwin_ID3_RestoreRotation: without the incarnation check of [ID-3]
// (and without restore-point deleting storage-id [ID-5]), a volume restored
// from an old snapshot keeps its id and stands in for data it no longer
// holds. The switch lives in the simulator's glue (Config.NoRestoreRotation).
func TestTwin_ID3_RestoreRotation(t *testing.T) {
	twinMustFail(t, Config{NoRestoreRotation: true})
}
