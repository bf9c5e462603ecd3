// Package placement decides which replica of a shard leads [CP-1..3]. It is
// a pure function of plain Go values, shared by the operator and by tests
// and simulators: no Kubernetes types, no clocks (now is an input), no I/O.
//
// The rules (docs/rules.md), from the seed "The follower that
// forgot":
//
//   - [CP-1] Promote only a follower whose storage id in the leader's report
//     equals the id it is registered with now. A different id never counts
//     (it lost its directory since it was counted). A registered id the
//     report does not name never counts either: the report's time (its
//     write) bounds the leader's view only from above, so no report time
//     can show the view was taken at the follower's current incarnation.
//     A broker registered without an id (an older build) counts, under
//     "", only from a fresh report taken at its current incarnation
//     (Report.TakenAt no earlier than Broker.RegisteredAt, and the
//     leader's own time of the view, Report.ViewAt less Input.MaxClockSkew,
//     no earlier either: TakenAt is the write, an upper bound on the
//     view's time, ViewAt a lower bound); such a count
//     is never carried into a later round. A renewal that vouches for an
//     unchanged report (Report.VouchedAt) never makes it fresher at an
//     incarnation.
//   - [CP-2] A report expires ReportExpiry(nodeExpiry, heartbeat) = 2 x node
//     expiry + 1 heartbeat after it was taken or last vouched for. While the report's leader is
//     still the assigned leader, at the incarnation that made the report,
//     and is Down or Left, the report's age is measured to that leader's
//     last heartbeat instead of to now, for id-matching followers only.
//   - [CP-3] With no eligible follower the shard waits, with a typed reason
//     the operator turns into a condition and an event, rather than guess.
//     So does a shard whose new leader could count fewer than a quorum of
//     replicas still registered under the ids counted (it could never
//     fence), and one whose assigned leader has not fenced yet and no
//     longer can (ReasonTooFewCounted).
//
// Candidates are ranked as a sort: highest confirmed first, then an
// id-matching follower before a missing-id one, then by name.
package placement

import (
	"fmt"
	"time"
)

// BrokerState is a broker's liveness as the control plane records it.
type BrokerState uint8

const (
	// Up: the broker renewed its heartbeat within the node expiry timeout.
	Up BrokerState = iota + 1
	// Down: no renewal within the node expiry timeout.
	Down
	// Left: the broker was removed from the cluster.
	Left
)

// String returns the state's name as the FelixBroker API spells it.
func (s BrokerState) String() string {
	switch s {
	case Up:
		return "Up"
	case Down:
		return "Down"
	case Left:
		return "Left"
	default:
		return fmt.Sprintf("BrokerState(%d)", uint8(s))
	}
}

// Broker is one broker's registration record.
type Broker struct {
	// StorageID is the registered storage id ("" for an older broker that
	// has none).
	StorageID string
	// Incarnation is the node incarnation of the current registration.
	Incarnation uint64
	// RegisteredAt is when the current incarnation registered, on the
	// control plane's clock. A report taken before it predates the
	// broker's current incarnation.
	RegisteredAt  time.Time
	State         BrokerState
	LastHeartbeat time.Time
}

// Assignment is the shard's current assignment (status.assignment).
// Counted is the Decision.Counted it was made with (optional): the ids
// placement counted at that time.
type Assignment struct {
	Leader            string
	Epoch             uint64
	LeaderIncarnation uint64
	Counted           map[string]string
}

// FollowerReport is one follower's line of a leader's report [RP-6].
type FollowerReport struct {
	Broker string
	// StorageID is the id the follower was counted under ("" if none).
	StorageID string
	CaughtUp  bool
	// Confirmed is the follower's confirmed position on the data log.
	Confirmed uint64
}

// Report is the latest leader report (status.report).
type Report struct {
	Leader            string
	LeaderIncarnation uint64
	// LeaderStorageID is the reporting leader's own storage id.
	LeaderStorageID string
	Epoch           uint64
	// TakenAt is when the leader's view in the report was taken, on the
	// control plane's clock (the operator uses the time the leader's write
	// of it landed). Nothing but a new write of the report moves it: it is
	// what "a report taken at the broker's current incarnation" is
	// measured by [CP-1].
	TakenAt time.Time
	// VouchedAt is the last time, on the control plane's clock, the
	// report's leader vouched that the stored report still is its view
	// (a "reports current" heartbeat renewal); zero when it never did.
	// It keeps the report from expiring [CP-2] (the age is measured from
	// the later of TakenAt and VouchedAt) but never makes it fresh at an
	// incarnation: the vouched-for view may lag the leader's by up to a
	// heartbeat, and was taken at TakenAt.
	VouchedAt time.Time
	// ViewAt is when the leader took the view, on the leader's clock: the
	// start of the replication pass the view describes, so every follower
	// it calls caught up answered at or after it. It is the lower bound
	// [CP-1] needs for a follower registered without a storage id (TakenAt
	// bounds the view's time only from above); zero when the leader did
	// not say (an older broker), and then such a follower never counts.
	ViewAt    time.Time
	Position  uint64
	Followers []FollowerReport
}

// Input is everything placement decides from.
type Input struct {
	// Replicas is the shard's replica set, in its spec order.
	Replicas []string
	// Brokers is the registry; a replica missing from it is treated as
	// Left.
	Brokers map[string]Broker
	// Assignment is nil for a new shard.
	Assignment *Assignment
	// Report is nil when no leader has reported.
	Report     *Report
	Now        time.Time
	NodeExpiry time.Duration
	Heartbeat  time.Duration
	// Preferred is the replica that should lead when it safely can (the
	// shard's preferred leader, the first of its replica set, as the
	// operator spreads replica sets so that first replicas rotate across
	// brokers); "" turns leader balancing off. While the current leader is
	// healthy, Decide moves leadership to it through a planned promotion
	// (ReasonPreferredLeader) once it has been Up at its current
	// incarnation for PreferredAfter and the current leader's fresh report
	// counts it caught up under its registered id [CP-1].
	Preferred string
	// Draining names brokers whose leaderships should move away before a
	// planned restart (a rolling update, maintenance). While the current
	// leader is draining and healthy, Decide moves leadership to another
	// replica in a planned promotion (ReasonLeaderDrain) under the same
	// conditions as the preferred one, the preferred replica first when it
	// qualifies, else the eligible one that confirmed the most, with no
	// settle time; when none qualifies, the leader stays. A draining broker
	// is never the target of a planned promotion. Failovers ignore it.
	Draining map[string]bool
	// PreferredAfter is how long the preferred replica must have been
	// registered at its current incarnation before leadership moves to
	// it: a broker that just restarted is let settle (and a flapping one
	// is not handed every shard back at each start).
	PreferredAfter time.Duration
	// MaxClockSkew bounds how far a broker's clock may run ahead of the
	// control plane's. [CP-1] counts a follower registered without a
	// storage id only if Report.ViewAt - MaxClockSkew is at or after its
	// registration. Negative is taken as zero.
	MaxClockSkew time.Duration
	// Twin switches a rule off for the simulator's twins; zero in
	// production.
	Twin Twin
}

// Twin switches single rules off, for simulator twins only (issue 7).
type Twin struct {
	// DisableIDCheck ([CP-1] off): a follower counts whatever id it was
	// reported under.
	DisableIDCheck bool
	// FreshnessFromRenewal ([CP-1] freshness off): a missing-id follower's
	// report counts as taken at the later of TakenAt and VouchedAt, so a
	// renewal after the follower re-registered makes a view taken before
	// it look fresh at its current incarnation. The leader's own time of
	// the view (Report.ViewAt) is not consulted either.
	FreshnessFromRenewal bool
}

// Action is what to do with the shard.
type Action uint8

const (
	// Keep the current assignment.
	Keep Action = iota + 1
	// Promote Decision.Leader at Decision.Epoch.
	Promote
	// Wait: no replica may lead now; Decision.Reason says why.
	Wait
)

// String returns the action's name.
func (a Action) String() string {
	switch a {
	case Keep:
		return "Keep"
	case Promote:
		return "Promote"
	case Wait:
		return "Wait"
	default:
		return fmt.Sprintf("Action(%d)", uint8(a))
	}
}

// Reason explains a decision; the operator uses it as the condition reason
// and in the event.
type Reason uint8

const (
	// ReasonNone accompanies Keep.
	ReasonNone Reason = iota
	// ReasonNewShard: the first assignment of a new shard.
	ReasonNewShard
	// ReasonLeaderUnavailable: the leader is Down, Left or unknown.
	ReasonLeaderUnavailable
	// ReasonLeaderRestarted: the leader's incarnation moved on since the
	// assignment; it may only lead again at a new epoch.
	ReasonLeaderRestarted
	// ReasonNoReplicaUp: no replica is Up.
	ReasonNoReplicaUp
	// ReasonNoReport: no report can be used.
	ReasonNoReport
	// ReasonReportExpired: the report is too old for every follower.
	ReasonReportExpired
	// ReasonNoEligibleFollower: the report is usable but no Up follower
	// is caught up under its registered id.
	ReasonNoEligibleFollower
	// ReasonTooFewRegistered: a new shard waits until a majority of its
	// replicas have registered a storage id, since only registered
	// replicas can be counted for its first fence.
	ReasonTooFewRegistered
	// ReasonTooFewCounted: fewer than a quorum of the replicas still hold
	// the storage ids a new leader's recovery and fence could count them
	// under (the others lost the copies they were counted with, or were
	// never attested), so no leader could ever fence: a promotion would
	// stall in recovery without serving. Also given, keeping the
	// assignment, while an assigned leader that has not fenced yet can no
	// longer count a quorum.
	ReasonTooFewCounted
	// ReasonPreferredLeader: a planned leader change while the current
	// leader is healthy, to the shard's preferred replica (Input.Preferred)
	// once it is caught up under its registered id; the new leader fences
	// at a new epoch exactly as after a failover.
	ReasonPreferredLeader
	// ReasonLeaderDrain: a planned leader change while the current leader
	// is healthy and draining (Input.Draining), to a replica caught up
	// under its registered id; the new leader fences at a new epoch.
	ReasonLeaderDrain
)

// String returns the reason as a CamelCase condition reason.
func (r Reason) String() string {
	switch r {
	case ReasonNone:
		return "None"
	case ReasonNewShard:
		return "NewShard"
	case ReasonLeaderUnavailable:
		return "LeaderUnavailable"
	case ReasonLeaderRestarted:
		return "LeaderRestarted"
	case ReasonNoReplicaUp:
		return "NoReplicaUp"
	case ReasonNoReport:
		return "NoReport"
	case ReasonReportExpired:
		return "ReportExpired"
	case ReasonNoEligibleFollower:
		return "NoEligibleFollower"
	case ReasonTooFewRegistered:
		return "TooFewRegistered"
	case ReasonTooFewCounted:
		return "TooFewCounted"
	case ReasonPreferredLeader:
		return "PreferredLeader"
	case ReasonLeaderDrain:
		return "LeaderDrain"
	default:
		return fmt.Sprintf("Reason(%d)", uint8(r))
	}
}

// Verdict is why one replica is or is not a candidate.
type Verdict uint8

const (
	// Eligible: may be promoted.
	Eligible Verdict = iota + 1
	// NotUp: the broker is not Up.
	NotUp
	// NotInReport: the report has no line for it.
	NotInReport
	// NotCaughtUp: the report says it is not caught up.
	NotCaughtUp
	// IDChanged: its reported id differs from its registered id [CP-1].
	IDChanged
	// IDMissingStale: a broker without a registered id, and the report is
	// not fresh or its view predates the broker's current incarnation
	// [CP-1].
	IDMissingStale
	// ReportTooOld: the report has expired for it [CP-2].
	ReportTooOld
	// IDNotReported: the broker has a registered id but the report names
	// none for it (an older leader, or one that never learned it); it
	// never counts, however fresh the report [CP-1].
	IDNotReported
	// NotCounted: the current assignment does not count the replica
	// towards its leader's recovery and fence (ReasonTooFewCounted).
	NotCounted
)

// String returns the verdict's name.
func (v Verdict) String() string {
	switch v {
	case Eligible:
		return "Eligible"
	case NotUp:
		return "NotUp"
	case NotInReport:
		return "NotInReport"
	case NotCaughtUp:
		return "NotCaughtUp"
	case IDChanged:
		return "IDChanged"
	case IDMissingStale:
		return "IDMissingStale"
	case ReportTooOld:
		return "ReportTooOld"
	case IDNotReported:
		return "IDNotReported"
	case NotCounted:
		return "NotCounted"
	default:
		return fmt.Sprintf("Verdict(%d)", uint8(v))
	}
}

// Candidate is one replica's assessment.
type Candidate struct {
	Broker    string
	Verdict   Verdict
	Confirmed uint64
	IDMatch   bool // reported id equals registered id, both present
}

// Decision is placement's output.
type Decision struct {
	Action Action
	Reason Reason
	// Leader, Epoch and LeaderIncarnation form the new assignment
	// (Promote) or repeat the current one (Keep).
	Leader            string
	Epoch             uint64
	LeaderIncarnation uint64
	// Counted maps each replica that may count towards the new leader's
	// recovery and fence quorums to the storage id placement counted it
	// under (Promote only). A replica absent from it never counts there.
	Counted map[string]string
	// Candidates lists every assessed replica, best first (Promote and
	// Wait after a leader loss), for conditions and events.
	Candidates []Candidate
	// RecheckAfter, with Keep, is how long until the preferred replica
	// has been registered for Input.PreferredAfter, when that alone keeps
	// leadership from moving to it: decide again then. Zero otherwise.
	RecheckAfter time.Duration
}
