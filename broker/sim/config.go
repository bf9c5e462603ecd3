package sim

import (
	"fmt"
	"strings"

	"felix.dev/felix/broker/placement"
	"felix.dev/felix/broker/record"
	"felix.dev/felix/broker/replication"
)

// Timing of the simulated shard, in ticks. One tick is one second of the
// control plane's clock.
const (
	// passTicks is the replication core's PassInterval: comfortably
	// longer than a round trip (a message is delivered at the latest at the
	// tick after it was sent).
	passTicks = 3
	// heartbeatTicks is the broker heartbeat interval.
	heartbeatTicks = 1
	// nodeExpiryTicks is how long the control plane waits for a heartbeat
	// before marking a broker Down.
	nodeExpiryTicks = 4
	// preferredSettleTicks is the settle time of Config.PreferredLeader:
	// short, so that switchovers happen often within a schedule.
	preferredSettleTicks = 3
	// periodicSyncTicks is the Periodic fsync interval.
	periodicSyncTicks = 3
	// noneWritebackPct is the chance per tick that the kernel writes a
	// None-mode broker's page cache back.
	noneWritebackPct = 5
	// assignLagPct is the chance per tick that a broker has not yet seen
	// a new assignment (watch lag).
	assignLagPct = 30
	// finalTicks is the length of the healing phase that ends every run.
	finalTicks = 40
	// trimPct is the chance per tick that the shard trims: each log's
	// floor rises to a little below the serving leader's committed
	// position, and
	// each running replica, with chance compactPct, deletes its records
	// below the floor (and below its own committed position).
	trimPct    = 15
	compactPct = 50
	// trimKeep bounds how many of the newest committed records a trim
	// keeps above the floor (2 + [0, trimKeep)).
	trimKeep = 8
)

// Config is one simulation run.
type Config struct {
	// Seed decides the shard's shape and its schedule.
	Seed uint64
	// Steps is the schedule's length in events.
	Steps int
	// Keep, when non-nil, runs only the events whose index it holds (a
	// shrunk schedule); nil runs every event.
	Keep []int
	// Rules switches replication rules off (twins only).
	Rules replication.Rules
	// Placement switches placement rules off (twins only).
	Placement placement.Twin
	// Trace records a line per event and per notable effect.
	Trace bool
	// NoRestoreRotation (twin, simulator glue): a start skips the
	// incarnation check of [ID-3] (as if no control plane were asked) and
	// restores keep storage-id, so a volume restored from an old snapshot
	// keeps its id.
	NoRestoreRotation bool
	// LogOutsideDir (twin, simulator glue; [ID-3] for one log): the logs
	// it marks live outside the data directory the storage id guards (a
	// volume of their own), and a wipe replaces only that volume: those
	// logs are lost while the storage id, run state and registration
	// files survive, so [ID-3] sees no loss and the id does not rotate.
	// [ID-3] covers a shard's every log only because they share one
	// directory; the per-log twins show the invariants guard each log.
	LogOutsideDir [numLogs]bool
	// noPromotionCheck (tests only) skips the promoted-ineligible check,
	// so that a loss must be caught by the invariants on the serving
	// leader and the committed records (acked-lost, committed-disagree,
	// committed-truncated): TestTwin_ID3_EveryLog shows those guard every
	// log, not only the promotion check.
	noPromotionCheck bool
	// LegacyPeers makes about half the brokers older builds without
	// storage ids (a mixed-version cluster).
	LegacyPeers bool
	// ProposeTo, when non-empty, sends every proposal to one of these
	// logs (the schedule's draws are unchanged, only the log is mapped);
	// empty: seven proposals in ten go to the data log, the others to the
	// group, dead-letter and counter logs evenly. The per-log twins use it
	// to aim the workload at the log under test.
	ProposeTo []record.LogKind
	// PreferredLeader gives placement a preferred replica (chosen by the
	// seed), as the operator does by default: while the leader is
	// healthy, leadership moves to it in a planned promotion once it has
	// settled and is caught up under its registered id.
	PreferredLeader bool
	// DrainLeader marks one broker (chosen by the seed) draining, as a
	// rolling update does with the broker it restarts next: while it leads
	// and is healthy, placement moves leadership away from it in a planned
	// promotion to a replica caught up under its registered id.
	DrainLeader bool
}

// Invariant names a checked property. A Failure carries one.
type Invariant string

const (
	// InvAckedLost: the serving leader of the newest epoch (fence
	// committed) does not hold a record acknowledged under Quorum or All.
	InvAckedLost Invariant = "acked-lost"
	// InvCommittedDisagree: two replicas (or one replica over time) hold
	// different records at a committed offset.
	InvCommittedDisagree Invariant = "committed-disagree"
	// InvCommittedTruncated: a replica truncated its log below the
	// position it had published as committed.
	InvCommittedTruncated Invariant = "committed-truncated"
	// InvCommitBack: a replica's committed position moved back within one
	// process life.
	InvCommitBack Invariant = "commit-moved-back"
	// InvTwoLeaders: two replicas lead the same epoch, or two replicas
	// acknowledged writes at the same epoch.
	InvTwoLeaders Invariant = "two-leaders"
	// InvPromotedIneligible: placement promoted a replica that does not
	// hold every acknowledged record its report said it held, instead of
	// waiting [CP-3].
	InvPromotedIneligible Invariant = "promoted-ineligible"
	// InvAckMismatch: an acknowledgement names offsets that do not hold
	// the proposal's records.
	InvAckMismatch Invariant = "ack-mismatch"
	// InvCore: the core asked for something impossible (a write that does
	// not continue the log), or the simulator broke its own fault budget.
	InvCore Invariant = "core"
)

// LossInvariants are the invariants whose failure means acknowledged or
// committed data was lost or contradicted; the twins must produce one.
var LossInvariants = []Invariant{InvAckedLost, InvCommittedDisagree, InvCommittedTruncated, InvPromotedIneligible}

// IsLoss reports whether inv is one of LossInvariants.
func IsLoss(inv Invariant) bool {
	for _, l := range LossInvariants {
		if l == inv {
			return true
		}
	}
	return false
}

// Failure is an invariant violation.
type Failure struct {
	Seed      uint64
	Shape     Shape
	Invariant Invariant
	// Log names the log the violation was seen on (record.LogKind's
	// String: "data", "group", "dead-letter", "counter"); empty for an
	// invariant not about one log (two leaders, the fault budget).
	Log string
	// Step is the index (in the full schedule) of the event after which
	// the violation was seen; -1 for the healing phase.
	Step   int
	Detail string
	// Keep lists the events of the (possibly shrunk) schedule that ran.
	Keep []int
	// Trace is the run's trace when Config.Trace was set.
	Trace []string
}

// Error renders the failure in one line.
func (f *Failure) Error() string {
	return fmt.Sprintf("seed %d (%s): %s after step %d: %s", f.Seed, f.Shape, f.Invariant, f.Step, f.Detail)
}

// Stats are the figures of one or more runs.
type Stats struct {
	// Runs is the number of seeds run; Events the scheduled events run.
	Runs   int
	Events int
	// Proposals counts client batches; Acked the successful
	// acknowledgements by replication.AckMode.
	Proposals int
	Acked     [3]int
	// AckedRecords counts the records acknowledged under Quorum or All,
	// by log (record.LogKinds order): the records the invariants follow.
	AckedRecords [numLogs]int
	// Faults counts injected faults by kind (only those the budget let
	// through).
	Faults map[string]int
	// Promotions counts placement promotions; Waits the wait streaks by
	// placement.Reason.
	Promotions int
	Waits      map[string]int
	// Switchovers counts the planned promotions (to the preferred
	// replica, or away from a draining leader); formerly only moves to the
	// preferred replica (Config.PreferredLeader).
	Switchovers int
	// Rotations counts starts that took a new storage id (first starts
	// included).
	Rotations int
	// Delivered and Lost count messages.
	Delivered int
	Lost      int
	// Trims counts raises of a log's trim floor; Compactions the replica
	// compactions below it (Replica.Compacted); Resets the WriteResets
	// (catch-up from a leader's or a source's log start).
	Trims       int
	Compactions int
	Resets      int
	// Overlapped counts Readies taken while an earlier Ready of the same
	// replica was still being persisted (asynchronous persistence).
	Overlapped int
	// EndedServed counts runs that ended with a serving leader.
	EndedServed int
	// Ticks counts simulated ticks; ServingTicks those that ended with a
	// serving leader (fence committed at the current epoch).
	Ticks        int
	ServingTicks int
}

func newStats() Stats {
	return Stats{Faults: map[string]int{}, Waits: map[string]int{}}
}

// Add accumulates o into s.
func (s *Stats) Add(o Stats) {
	if s.Faults == nil {
		s.Faults = map[string]int{}
	}
	if s.Waits == nil {
		s.Waits = map[string]int{}
	}
	s.Runs += o.Runs
	s.Events += o.Events
	s.Proposals += o.Proposals
	for i := range s.Acked {
		s.Acked[i] += o.Acked[i]
	}
	for i := range s.AckedRecords {
		s.AckedRecords[i] += o.AckedRecords[i]
	}
	for k, v := range o.Faults {
		s.Faults[k] += v
	}
	for k, v := range o.Waits {
		s.Waits[k] += v
	}
	s.Promotions += o.Promotions
	s.Switchovers += o.Switchovers
	s.Rotations += o.Rotations
	s.Delivered += o.Delivered
	s.Lost += o.Lost
	s.Trims += o.Trims
	s.Compactions += o.Compactions
	s.Resets += o.Resets
	s.Overlapped += o.Overlapped
	s.EndedServed += o.EndedServed
	s.Ticks += o.Ticks
	s.ServingTicks += o.ServingTicks
}

// String renders the figures with sorted keys.
func (s Stats) String() string {
	var b strings.Builder
	fmt.Fprintf(&b, "runs=%d events=%d ticks=%d serving-ticks=%d proposals=%d acked(leader/quorum/all)=%d/%d/%d promotions=%d switchovers=%d rotations=%d delivered=%d lost=%d trims=%d compactions=%d resets=%d overlapped=%d ended-serving=%d",
		s.Runs, s.Events, s.Ticks, s.ServingTicks, s.Proposals, s.Acked[0], s.Acked[1], s.Acked[2], s.Promotions, s.Switchovers, s.Rotations, s.Delivered, s.Lost,
		s.Trims, s.Compactions, s.Resets, s.Overlapped, s.EndedServed)
	b.WriteString(" acked-records{")
	for i, l := range record.LogKinds {
		if i > 0 {
			b.WriteString(" ")
		}
		fmt.Fprintf(&b, "%s=%d", l, s.AckedRecords[i])
	}
	b.WriteString("}")
	b.WriteString(" faults{" + renderCounts(s.Faults) + "}")
	b.WriteString(" waits{" + renderCounts(s.Waits) + "}")
	return b.String()
}

func renderCounts(m map[string]int) string {
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	sortStrings(keys)
	parts := make([]string, 0, len(keys))
	for _, k := range keys {
		parts = append(parts, fmt.Sprintf("%s=%d", k, m[k]))
	}
	return strings.Join(parts, " ")
}

// Switch names accepted by ParseOff, one per twin.
const (
	OffRP3   = "rp3"   // replication.Rules.DisableIDReset
	OffRP4   = "rp4"   // replication.Rules.DisableIdleProbe
	OffRP5   = "rp5"   // replication.Rules.DisablePassCounting
	OffFence = "fence" // replication.Rules.DisableFenceIDCheck
	OffCP1   = "cp1"   // placement.Twin.DisableIDCheck
	OffID3   = "id3"   // Config.NoRestoreRotation
	// OffCP1Fresh is placement.Twin.FreshnessFromRenewal.
	OffCP1Fresh = "cp1fresh"
	// OffRP6Logs is replication.Rules.CaughtUpDataLogOnly: caught up from
	// the data log's cursor alone.
	OffRP6Logs = "rp6-logs"
	// OffID3Log prefixes a log's name (OffID3Log+"group", "id3-data",
	// "id3-dead-letter", "id3-counter"): Config.LogOutsideDir for that log.
	OffID3Log = "id3-"
)

// ParseOff sets the rule switches named in a comma-separated list (see the
// Off constants) on c.
func (c *Config) ParseOff(list string) error {
	if list == "" {
		return nil
	}
	for _, name := range strings.Split(list, ",") {
		switch name {
		case OffRP3:
			c.Rules.DisableIDReset = true
		case OffRP4:
			c.Rules.DisableIdleProbe = true
		case OffRP5:
			c.Rules.DisablePassCounting = true
		case OffFence:
			c.Rules.DisableFenceIDCheck = true
		case OffCP1:
			c.Placement.DisableIDCheck = true
		case OffID3:
			c.NoRestoreRotation = true
		case OffCP1Fresh:
			c.Placement.FreshnessFromRenewal = true
		case OffRP6Logs:
			c.Rules.CaughtUpDataLogOnly = true
		default:
			if l, ok := id3Log(name); ok {
				c.LogOutsideDir[l] = true
				continue
			}
			return fmt.Errorf("sim: unknown rule switch %q", name)
		}
	}
	return nil
}

// Off renders c's rule switches for ParseOff ("" when every rule is on).
func (c Config) Off() string {
	var out []string
	if c.Rules.DisableIDReset {
		out = append(out, OffRP3)
	}
	if c.Rules.DisableIdleProbe {
		out = append(out, OffRP4)
	}
	if c.Rules.DisablePassCounting {
		out = append(out, OffRP5)
	}
	if c.Rules.DisableFenceIDCheck {
		out = append(out, OffFence)
	}
	if c.Placement.DisableIDCheck {
		out = append(out, OffCP1)
	}
	if c.NoRestoreRotation {
		out = append(out, OffID3)
	}
	if c.Placement.FreshnessFromRenewal {
		out = append(out, OffCP1Fresh)
	}
	if c.Rules.CaughtUpDataLogOnly {
		out = append(out, OffRP6Logs)
	}
	for _, l := range record.LogKinds {
		if c.LogOutsideDir[l] {
			out = append(out, OffID3Log+l.String())
		}
	}
	return strings.Join(out, ",")
}

// id3Log parses OffID3Log+name into the log it names.
func id3Log(name string) (record.LogKind, bool) {
	if !strings.HasPrefix(name, OffID3Log) {
		return 0, false
	}
	for _, l := range record.LogKinds {
		if name == OffID3Log+l.String() {
			return l, true
		}
	}
	return 0, false
}

// ParseLogs parses a comma-separated list of log names (record.LogKind's
// String: data, group, dead-letter, counter), as Config.ProposeTo.
func ParseLogs(list string) ([]record.LogKind, error) {
	if list == "" {
		return nil, nil
	}
	var out []record.LogKind
	for _, name := range strings.Split(list, ",") {
		found := false
		for _, l := range record.LogKinds {
			if l.String() == name {
				out, found = append(out, l), true
			}
		}
		if !found {
			return nil, fmt.Errorf("sim: unknown log %q", name)
		}
	}
	return out, nil
}

// FormatLogs renders logs for ParseLogs.
func FormatLogs(logs []record.LogKind) string {
	out := make([]string, len(logs))
	for i, l := range logs {
		out[i] = l.String()
	}
	return strings.Join(out, ",")
}
