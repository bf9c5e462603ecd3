package replication

import (
	"fmt"

	"felix.dev/felix/broker/record"
)

// NodeID names a broker (the FelixBroker name). Every replica of a shard
// lives on a distinct broker, so a NodeID also names a replica of a shard.
type NodeID string

// StorageID is the id a broker's data directory presented in the
// replication handshake [RP-2], rendered as text (hex). The empty value means
// the peer did not present one (an older broker without the feature bit);
// two empty ids compare equal, so such a peer keeps its cursor and is judged
// by placement on report age alone [CP-1].
type StorageID string

// ConnID names one connection from the leader to a follower. The runtime
// numbers connections so that a newer connection has a different ConnID
// than every earlier one to the same peer; zero is never a valid ConnID.
type ConnID uint64

// ProposalID is chosen by the caller of Propose and returned in its Ack.
type ProposalID uint64

// AckMode says when an appended batch is acknowledged to its client.
type AckMode uint8

const (
	// AckLeader acknowledges once the leader has persisted the batch (and
	// the leader's fence is committed).
	AckLeader AckMode = iota
	// AckQuorum acknowledges once the batch is below the committed
	// position: a majority of the replica set holds it, counted under
	// [RP-5].
	AckQuorum
	// AckAll acknowledges once every replica of the set holds it, each
	// counted under [RP-5].
	AckAll
)

// String returns the mode's name as the FelixStream API spells it.
func (m AckMode) String() string {
	switch m {
	case AckLeader:
		return "Leader"
	case AckQuorum:
		return "Quorum"
	case AckAll:
		return "All"
	default:
		return fmt.Sprintf("AckMode(%d)", uint8(m))
	}
}

// Role is what a replica currently does for its shard.
type Role uint8

const (
	// RoleFollower accepts shipping from the leader of the highest epoch it
	// knows.
	RoleFollower Role = iota
	// RoleRecovering is a newly promoted leader collecting the logs of a
	// quorum and copying the best of them before it writes its fence.
	RoleRecovering
	// RoleLeader has written its fence; it acknowledges nothing until the
	// fence is committed (Status.FenceCommitted).
	RoleLeader
)

// String returns the role's name.
func (r Role) String() string {
	switch r {
	case RoleFollower:
		return "follower"
	case RoleRecovering:
		return "recovering"
	case RoleLeader:
		return "leader"
	default:
		return fmt.Sprintf("Role(%d)", uint8(r))
	}
}

// EpochStart says that the records of a log from Offset on (up to the next
// EpochStart or the tail) were written at Epoch. A log's epoch starts are
// strictly increasing in both fields.
type EpochStart struct {
	Epoch  uint64
	Offset uint64
}

// LogState is the durable state of one local log when a Replica is built:
// the log holds exactly the offsets [Base, Tail), and Epochs lists the epoch
// starts of those records (empty when Base == Tail). The first record of
// every epoch a leader of this design wrote is its fence (record.KindFence),
// so a store can keep Epochs as an index of fence records.
type LogState struct {
	Base   uint64
	Tail   uint64
	Epochs []EpochStart
}

// State is the durable state of a replica's four logs, indexed by
// record.LogKind.
type State struct {
	Logs [len(record.LogKinds)]LogState
}

// LogReader is read-only access to the replica's own persisted logs. The core
// calls it only for offsets it was told are persisted (below the tail of
// the last Advance), and only to fetch record contents to ship.
//
// Read returns the records of log l with offsets in [from, to), in order,
// at most max of them and at least one when from < to. The returned slice
// is owned by the core until the next call into it; records are not
// modified. An error leaves the exchange that needed the records without a
// request; the next pass tries again.
type LogReader interface {
	Read(l record.LogKind, from, to uint64, max int) ([]record.Record, error)
}

// Assignment is the control plane's word on who leads a shard ([CP-1..3]
// decide it; brokers act only on it).
//
// Counted holds, per replica, the storage id placement counted it under.
// Until the new leader's fence is committed, a replica counts towards the
// recovery and fence quorums only while its connection presents exactly
// that id; a replica absent from Counted never counts for them. An empty
// StorageID value counts a peer that presents no id.
type Assignment struct {
	Leader            NodeID
	Epoch             uint64
	LeaderIncarnation uint64
	Counted           map[NodeID]StorageID
}

// Rules switches off single rules for the simulator's twins (issue 7). The
// zero value, every rule on, is the only configuration a broker may run.
type Rules struct {
	// DisableIDReset ([RP-3] off): a follower presenting a different
	// storage id keeps its cursor; the cursor silently adopts the new id.
	DisableIDReset bool
	// DisableIdleProbe ([RP-4] off): an exchange whose cursor is at the
	// leader's tail ends "up to date" without asking the follower, and
	// counts it for the pass.
	DisableIdleProbe bool
	// DisablePassCounting ([RP-5] off): the quorum mark counts every
	// follower at its last confirmed position, answered this pass or not.
	DisablePassCounting bool
	// DisableFenceIDCheck (fence id rule off): the recovery and fence
	// quorums count replicas whatever id they present.
	DisableFenceIDCheck bool
	// CaughtUpDataLogOnly ([RP-6] off for the group, dead-letter and
	// counter logs): a follower is reported caught up once its data-log
	// cursor reaches the data log's committed position, whatever its
	// cursors on the other logs say.
	CaughtUpDataLogOnly bool
}

// Config builds a Replica.
type Config struct {
	// Shard is only carried into reports.
	Shard record.ShardID
	// Self is this replica's broker; it must be one of Replicas.
	Self NodeID
	// SelfStorageID is the id of this broker's data directory [ID-1].
	SelfStorageID StorageID
	// Incarnation is this broker's registration incarnation for this
	// process life [ID-2]. A leader assignment is acted upon only when its
	// LeaderIncarnation equals it, so a restarted broker never leads again
	// at an epoch it may have led before with a log it has since lost.
	Incarnation uint64
	// Replicas is the shard's replica set, Self included, without
	// duplicates. Its majority is the quorum.
	Replicas []NodeID
	// PassInterval is the number of Ticks between passes (at least 1). It
	// must be comfortably longer than a round trip: a follower counts for a
	// pass only with an answer to a request of that same pass [RP-5].
	PassInterval int
	// MaxBatch caps the records of one Append or Fetch (default 256).
	MaxBatch int
	// MaxInflight caps the unanswered Appends per follower per log within
	// a pass (default 8).
	MaxInflight int
	// Log reads this replica's persisted records (required).
	Log LogReader
	// Rules switches rules off for simulator twins only.
	Rules Rules
}
