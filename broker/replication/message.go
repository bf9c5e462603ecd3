package replication

import (
	"fmt"

	"felix.dev/felix/broker/record"
)

// MsgType says what a Message is. Requests go from a leader (or a
// recovering leader) to a follower; each has one response type.
type MsgType uint8

const (
	// MsgAppend ships Records of Log starting at Index, whose preceding
	// record (Index-1) the leader holds at PrevEpoch. Base is the leader's
	// log start when Index is at it (the leader holds no previous record to
	// offer: PrevEpoch is 0), and 0 otherwise; a follower that cannot match
	// such an Append resets its log to Index when the leader vouches that
	// every offset below Index is committed (Index <= Commit), see
	// docs/replication-design.md, "Catch-up from the leader's start".
	// Records may be empty: the request then only asks where the follower
	// really is [RP-4]. Commit is the leader's committed position of Log.
	MsgAppend MsgType = iota + 1
	// MsgAppendResp answers a MsgAppend of the same Pass and Log. Match
	// true: the follower holds the leader's log up to MatchEnd (persisted).
	// Match false: the previous record did not match; Tail and Epochs
	// describe the follower's persisted log so the leader can find the
	// common prefix in one round trip.
	MsgAppendResp
	// MsgProbe asks, at a new Epoch, for the follower's persisted position
	// on every log. A follower accepting it refuses every older epoch from
	// then on.
	MsgProbe
	// MsgProbeResp answers a MsgProbe of the same Pass with Logs.
	MsgProbeResp
	// MsgFetch asks the follower for its persisted records of Log from
	// Index (at most Max); used by a recovering leader copying the best
	// log of its quorum.
	MsgFetch
	// MsgFetchResp answers a MsgFetch with Records (possibly empty) from
	// Index, the epoch of the record before them (PrevEpoch, 0 when Index
	// is the follower's Base), and the follower's Base and persisted Tail.
	// Index < Base says the records asked for are no longer stored.
	MsgFetchResp
	// MsgRefuse answers any request whose Epoch is older than the highest
	// epoch the follower knows; Epoch carries that known epoch.
	MsgRefuse
)

// String returns the type's name.
func (t MsgType) String() string {
	switch t {
	case MsgAppend:
		return "Append"
	case MsgAppendResp:
		return "AppendResp"
	case MsgProbe:
		return "Probe"
	case MsgProbeResp:
		return "ProbeResp"
	case MsgFetch:
		return "Fetch"
	case MsgFetchResp:
		return "FetchResp"
	case MsgRefuse:
		return "Refuse"
	default:
		return fmt.Sprintf("MsgType(%d)", uint8(t))
	}
}

// LogPosition is a follower's persisted position on one log: [Base, Tail)
// with its epoch starts.
type LogPosition struct {
	Base   uint64
	Tail   uint64
	Epochs []EpochStart
}

// Message is one replication message. Which fields are meaningful depends
// on Type (see the MsgType constants); the others are zero.
//
// Conn is set by the RECEIVING runtime to the connection the message
// arrived on (the leader-to-follower connection in both directions); on an
// outgoing response the core sets it to the connection of the request it
// answers, and the runtime should answer over that connection.
type Message struct {
	Type  MsgType
	From  NodeID
	To    NodeID
	Conn  ConnID
	Epoch uint64
	Pass  uint64
	Log   record.LogKind

	// Append / Fetch.
	Index     uint64
	PrevEpoch uint64
	Records   []record.Record
	Commit    uint64
	Max       int

	// AppendResp / FetchResp.
	Match    bool
	MatchEnd uint64
	Tail     uint64
	Base     uint64
	Epochs   []EpochStart

	// ProbeResp.
	Logs [len(record.LogKinds)]LogPosition
}

// String renders the message compactly for traces and tests.
func (m Message) String() string {
	s := fmt.Sprintf("%s->%s %s e%d p%d", m.From, m.To, m.Type, m.Epoch, m.Pass)
	switch m.Type {
	case MsgAppend:
		s += fmt.Sprintf(" %s idx=%d prev=e%d n=%d commit=%d", m.Log, m.Index, m.PrevEpoch, len(m.Records), m.Commit)
		if m.Base != 0 {
			s += fmt.Sprintf(" base=%d", m.Base)
		}
	case MsgAppendResp:
		if m.Match {
			s += fmt.Sprintf(" %s match end=%d", m.Log, m.MatchEnd)
		} else {
			s += fmt.Sprintf(" %s mismatch tail=%d epochs=%v", m.Log, m.Tail, m.Epochs)
		}
	case MsgProbeResp:
		s += fmt.Sprintf(" data-tail=%d", m.Logs[record.LogData].Tail)
	case MsgFetch:
		s += fmt.Sprintf(" %s idx=%d max=%d", m.Log, m.Index, m.Max)
	case MsgFetchResp:
		s += fmt.Sprintf(" %s idx=%d n=%d base=%d tail=%d", m.Log, m.Index, len(m.Records), m.Base, m.Tail)
	}
	return s
}

// WriteOp says what a LogWrite does.
type WriteOp uint8

const (
	// WriteAppend appends Records to Log; Records[0].Offset equals the
	// log's tail after every earlier write of the same log.
	WriteAppend WriteOp = iota + 1
	// WriteTruncate removes every record of Log at or above Offset.
	WriteTruncate
	// WriteReset drops every stored record of Log and makes it an empty
	// log starting at Offset (logstore's ResetAt(Offset)): base, tail and
	// persisted position all Offset. Offset is at or above the log's base.
	// The core asks for it only when every offset below Offset is
	// committed (and the records there are, for the shard, below a
	// committed floor) and every record it drops at or above Offset is
	// either absent or divergent from the current leader's log; see
	// docs/replication-design.md, "Catch-up from the leader's start".
	// Once persisted it must never be undone by a crash.
	WriteReset
)

// LogWrite is one change to the local log, to be persisted in Ready order.
type LogWrite struct {
	Op      WriteOp
	Log     record.LogKind
	Offset  uint64
	Records []record.Record
}

// Ack is the outcome of one Propose. Err nil: acknowledged under its mode;
// [First, End) are the offsets the batch took. Otherwise Err matches one of
// ErrNotLeader, ErrRecovering, ErrFenced or record.ErrOffsetMismatch
// (errors.Is). ErrFenced means "not acknowledged": the batch may or may not
// survive in the log.
type Ack struct {
	ID    ProposalID
	Log   record.LogKind
	First uint64
	End   uint64
	Err   error
}

// CommitAdvance says that the committed position of Log moved up to
// Committed: every offset below it is durable on a quorum counted under the
// rules (on a follower: as learned from its leader and held locally). It
// never moves back within a Replica's life.
type CommitAdvance struct {
	Log       record.LogKind
	Committed uint64
}

// FollowerReport is one follower's line in a Report [RP-6].
type FollowerReport struct {
	Node NodeID
	// StorageID is the id the cursor was learned under (the id the
	// follower was counted under), "" when none was presented or learned.
	StorageID StorageID
	// Answered is true when the follower answered a request of the
	// reported pass on every log over a connection presenting StorageID.
	Answered bool
	// Confirmed is the last position the follower answered holding, per
	// log.
	Confirmed [len(record.LogKinds)]uint64
	// CaughtUp is Answered and Confirmed reaching Position on every log.
	CaughtUp bool
}

// Report is a leader's account of one completed pass, for the control plane
// [RP-6]. Position is the committed position per log the report is made
// against.
type Report struct {
	Shard             record.ShardID
	Epoch             uint64
	Leader            NodeID
	LeaderIncarnation uint64
	LeaderStorageID   StorageID
	Pass              uint64
	Position          [len(record.LogKinds)]uint64
	Followers         []FollowerReport
}

// Status is a snapshot of a replica's role and marks.
type Status struct {
	Role           Role
	Epoch          uint64
	EpochKnown     bool
	Leader         NodeID
	Pass           uint64
	FenceCommitted bool
	Tail           [len(record.LogKinds)]uint64
	Persisted      [len(record.LogKinds)]uint64
	Committed      [len(record.LogKinds)]uint64
	// Base is each log's first stored offset as the core sees it.
	Base [len(record.LogKinds)]uint64
	// EpochBehindLog is set while a recovering leader refuses to write its
	// fence because its epoch is not above the last epoch of a log it
	// would fence over (its own or the best log of its quorum): for
	// example a cluster restored from snapshots whose shard epochs
	// restarted low. The replica stays recovering; the control plane must
	// assign a higher epoch.
	EpochBehindLog bool
}

// Ready is everything the runtime must do after feeding inputs. Writes are
// persisted in order, after the Writes of every earlier Ready; Messages may
// be sent before, during or after that (a response never claims a record
// that is not yet persisted, because the core only answers from positions
// reached by an earlier Advance); Commits, Acks and Report are delivered to
// their consumers, and may be delivered before the Writes of the same Ready
// are durable: they never depend on them (a commit or an acknowledgement
// covers only records made durable by an earlier Advance). Then Advance(rd)
// says the Writes are durable.
//
// Serving is set (to the leader's epoch) in the Ready whose Commits first
// carry a new leader's committed positions past its fence, on every log.
// A leader may serve reads only from then on, once those Commits are
// applied to its logs, and only while it still leads that epoch [TR-4]:
// before, its floor is the one it knew as a follower (its committed
// positions may lag what the previous leader committed and acknowledged),
// and committing its fence commits everything before it.
type Ready struct {
	Writes   []LogWrite
	Messages []Message
	Commits  []CommitAdvance
	Acks     []Ack
	Report   *Report
	Serving  uint64
}

// Empty reports whether the Ready holds nothing.
func (rd Ready) Empty() bool {
	return len(rd.Writes) == 0 && len(rd.Messages) == 0 && len(rd.Commits) == 0 &&
		len(rd.Acks) == 0 && rd.Report == nil && rd.Serving == 0
}

// SameAs reports whether two reports say the same thing, ignoring the pass
// they describe: the runtime can write a report to the control plane on
// change and otherwise only refresh it as often as expiry needs.
func (r *Report) SameAs(o *Report) bool {
	if r == nil || o == nil {
		return r == o
	}
	if r.Shard != o.Shard || r.Epoch != o.Epoch || r.Leader != o.Leader || r.LeaderIncarnation != o.LeaderIncarnation ||
		r.LeaderStorageID != o.LeaderStorageID || r.Position != o.Position || len(r.Followers) != len(o.Followers) {
		return false
	}
	for i := range r.Followers {
		if r.Followers[i] != o.Followers[i] {
			return false
		}
	}
	return true
}
