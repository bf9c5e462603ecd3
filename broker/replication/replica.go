package replication

import (
	"fmt"

	"felix.dev/felix/broker/record"
)

const numLogs = len(record.LogKinds)

// Replica is the deterministic replication state machine of ONE replica of
// one shard. It has no goroutines, clocks, randomness or I/O other than the
// read-only LogReader: the same inputs in the same order give the same
// Ready. It is not safe for concurrent use; the runtime serialises calls.
//
// Inputs: Step (a message from a peer), Tick (a unit of time), Propose (a
// client batch), Connected/Disconnected/LookupFailed (what a peer's
// connection presented [RP-2]), SetKnownEpoch and Assign (the control
// plane). Output: Ready, acknowledged by Advance.
type Replica struct {
	cfg    Config
	quorum int
	logs   [numLogs]logView

	role       Role
	epoch      uint64 // highest epoch known
	epochKnown bool   // the control plane has told us an epoch [restart rule]
	leader     NodeID
	assign     Assignment

	ticks int
	pass  uint64

	peers map[NodeID]*peer // every replica but Self
	order []NodeID         // peers in replica-set order, for determinism
	// list is peers in the order of order: the passes and the marks walk
	// it, and a message's sender is found in it (peer), without hashing
	// node names (a replica set has a handful of members).
	list []*peer

	// Leader and recovering state.
	fenceOffset    [numLogs]uint64
	fenceCommitted bool
	epochBehind    bool // the fence guard tripped (Status.EpochBehindLog)
	committed      [numLogs]uint64
	allMark        [numLogs]uint64
	pending        [numLogs][3][]Ack // by log and AckMode, in offset order
	recovery       recoveryState

	// Follower state.
	commitTarget [numLogs]uint64
	deferred     []Message // AppendResps waiting for their records to persist

	// Output being gathered for the next Ready.
	out         Ready
	lastCommits [numLogs]uint64
	// msgCap is the capacity given to the messages of the next Ready: the
	// messages of the last Ready that had any, at most maxMsgCap (a pass
	// sends one request per log and follower [RP-4]; one allocation
	// instead of one per doubling).
	msgCap int
	// spare is a message array handed back by Recycle: the messages of
	// the next Ready are gathered in it instead of a new one.
	spare []Message
}

const maxMsgCap = 64

// peer is the leader's view of one follower.
type peer struct {
	node NodeID
	// Connection as last reported by the runtime [RP-2].
	conn   ConnID
	connOK bool
	connID StorageID
	// The id the cursors were learned under [RP-1].
	cursorID      StorageID
	cursorIDKnown bool
	cursors       [numLogs]cursor
	// Recovery: the position the peer answered in the current recovery
	// round, if any.
	probed    bool
	probedPos [numLogs]LogPosition
}

// cursor is the leader's knowledge of one follower on one log [RP-1].
//
// next and inflight describe the Appends sent over connection conn and
// not yet answered. They survive the start of a pass while the peer keeps
// that connection (and the cursor's storage id) and answers keep coming:
// a connection delivers in order, so what is in flight will land, and
// shipping it again would only duplicate it (the no-resend rule).
type cursor struct {
	next      uint64 // next offset to ship
	confirmed uint64 // the follower answered holding our log below this
	answered  uint64 // the pass of the last counted answer (0: none)
	heard     uint64 // the pass in which the last answer on this log arrived
	offered   uint64 // the pass of the last Append of records at our base (a reset offer)
	inflight  int
	conn      ConnID // the connection next and inflight were sent over
	known     bool   // confirmed comes from an answer under the cursor's id
	// answeredOn is the connection the last counted answer came over: a
	// report keeps a follower with a storage id caught up between answers
	// while it keeps that connection (report, leader.go).
	answeredOn ConnID
}

// New builds a replica from its durable log state. The replica starts as a
// follower that refuses all shipping until SetKnownEpoch or Assign tells it
// the current epoch (a restarting broker learns the current epochs from the
// control plane before it accepts shipping).
func New(cfg Config, st State) (*Replica, error) {
	if cfg.Log == nil {
		return nil, fmt.Errorf("replication: Config.Log is required")
	}
	if cfg.PassInterval < 1 {
		cfg.PassInterval = 1
	}
	if cfg.MaxBatch < 1 {
		cfg.MaxBatch = 256
	}
	if cfg.MaxInflight < 1 {
		cfg.MaxInflight = 8
	}
	r := &Replica{cfg: cfg, peers: map[NodeID]*peer{}}
	self := false
	for _, n := range cfg.Replicas {
		if n == cfg.Self {
			self = true
			continue
		}
		if _, dup := r.peers[n]; dup {
			return nil, fmt.Errorf("replication: replica %q listed twice", n)
		}
		r.peers[n] = &peer{node: n}
		r.order = append(r.order, n)
		r.list = append(r.list, r.peers[n])
	}
	if !self {
		return nil, fmt.Errorf("replication: Self %q is not in Replicas", cfg.Self)
	}
	r.quorum = len(cfg.Replicas)/2 + 1
	for i := range r.logs {
		r.logs[i] = newLogView(st.Logs[i])
		r.lastCommits[i] = r.logs[i].base
		r.committed[i] = r.logs[i].base
		r.commitTarget[i] = r.logs[i].base
	}
	return r, nil
}

// Status returns a snapshot of the replica's role and marks.
func (r *Replica) Status() Status {
	s := Status{Role: r.role, Epoch: r.epoch, EpochKnown: r.epochKnown, Leader: r.leader,
		Pass: r.pass, FenceCommitted: r.fenceCommitted, EpochBehindLog: r.epochBehind}
	for i := range r.logs {
		s.Base[i] = r.logs[i].base
		s.Tail[i] = r.logs[i].tail
		s.Persisted[i] = r.logs[i].stable
		s.Committed[i] = r.lastCommits[i]
	}
	return s
}

// SetKnownEpoch tells the replica the current epoch of its shard as the
// control plane knows it. Until it is called (or Assign is), the replica
// answers no shipping at all, so a restarted replica (perhaps with a new
// storage id) can never be counted by a stale leader. Epochs only rise.
func (r *Replica) SetKnownEpoch(e uint64) {
	r.epochKnown = true
	if e > r.epoch {
		r.observeEpoch(e, "")
	}
}

// Assign applies the control plane's assignment. It implies
// SetKnownEpoch(a.Epoch). When a.Leader is Self, a.LeaderIncarnation is this
// process's Incarnation and a.Epoch is newer than every epoch this replica
// followed, the replica starts recovering as leader of a.Epoch: it probes
// the replicas, copies the best log of a quorum counted under a.Counted,
// then writes its fence. An assignment for an older epoch is ignored.
func (r *Replica) Assign(a Assignment) {
	r.epochKnown = true
	if a.Epoch < r.epoch {
		return
	}
	if a.Leader != r.cfg.Self {
		if a.Epoch > r.epoch || r.role == RoleFollower {
			r.observeEpoch(a.Epoch, a.Leader)
			r.assign = a
		}
		return
	}
	if a.LeaderIncarnation != r.cfg.Incarnation {
		// An assignment made for an earlier life of this broker: leading
		// it could reuse an epoch whose records we may have lost.
		r.observeEpoch(a.Epoch, "")
		return
	}
	if a.Epoch == r.epoch && (r.role != RoleFollower || (r.leader != "" && r.leader != r.cfg.Self)) {
		// Already leading this epoch, or this epoch has another leader.
		return
	}
	r.observeEpoch(a.Epoch, r.cfg.Self)
	r.assign = a
	r.startRecovery()
}

// observeEpoch raises the known epoch; a leader or recovering leader of an
// older epoch steps down and refuses its pending proposals with ErrFenced.
func (r *Replica) observeEpoch(e uint64, leader NodeID) {
	if e > r.epoch {
		if r.role != RoleFollower {
			r.stepDown()
		}
		r.epoch = e
		r.leader = ""
		r.deferred = nil
	}
	if leader != "" {
		r.leader = leader
	}
}

func (r *Replica) stepDown() {
	for l := range r.pending {
		for m := range r.pending[l] {
			for _, a := range r.pending[l][m] {
				a.Err = ErrFenced
				r.out.Acks = append(r.out.Acks, a)
			}
			r.pending[l][m] = nil
		}
	}
	r.role = RoleFollower
	r.fenceCommitted = false
	r.epochBehind = false
	r.recovery = recoveryState{}
	for i := range r.commitTarget {
		r.commitTarget[i] = r.lastCommits[i]
	}
}

// Tick advances time by one unit. Every PassInterval ticks a leader starts
// a pass and a recovering leader a new recovery round.
func (r *Replica) Tick() {
	r.ticks++
	if r.ticks < r.cfg.PassInterval {
		return
	}
	r.ticks = 0
	switch r.role {
	case RoleLeader:
		r.startPass()
	case RoleRecovering:
		r.startRecoveryRound()
	}
}

// Connected reports that the connection conn to peer completed its
// handshake presenting storage id id ("" when the peer does not offer the
// feature) [RP-2]. A leader starts an exchange with the peer at once.
func (r *Replica) Connected(peerID NodeID, conn ConnID, id StorageID) {
	p := r.peer(peerID)
	if p == nil {
		return
	}
	p.conn, p.connOK, p.connID = conn, true, id
	p.probed = false // a probe answer describes the copy behind the old connection
	switch r.role {
	case RoleLeader:
		r.beginExchange(p)
	case RoleRecovering:
		r.sendProbe(p)
	}
}

// Disconnected reports that connection conn to peer is gone. Later answers
// over it are ignored.
func (r *Replica) Disconnected(peerID NodeID, conn ConnID) {
	if p := r.peer(peerID); p != nil && p.conn == conn {
		p.connOK = false
	}
}

// LookupFailed reports that asking peer's connection which storage id it
// presented failed. The cursor is left alone [RP-3]; nothing from the peer
// counts until a new Connected.
func (r *Replica) LookupFailed(peerID NodeID) {
	if p := r.peer(peerID); p != nil {
		p.connOK = false
	}
}

// Proposal is a client batch for the leader. Records get their Offset and
// Epoch from the leader; Kind, Timestamp, Floor, Headers and Payload are
// kept. With ExpectTail set the batch lands only if the log's next offset is
// ExpectedTail [TR-1]. A batch holding a trim record is acknowledged only
// once committed, even under AckLeader: the floor moves at the commit
// [TR-2].
type Proposal struct {
	ID           ProposalID
	Log          record.LogKind
	Records      []record.Record
	Mode         AckMode
	ExpectTail   bool
	ExpectedTail uint64
}

// Propose appends a client batch on the leader and ships it at once; its
// Ack comes in a later Ready (or this one, if refused).
func (r *Replica) Propose(p Proposal) {
	ack := Ack{ID: p.ID, Log: p.Log}
	switch {
	case r.role == RoleRecovering:
		ack.Err = ErrRecovering
	case r.role != RoleLeader:
		ack.Err = &NotLeaderError{Leader: r.leader, Epoch: r.epoch}
	case int(p.Log) >= numLogs || p.Mode > AckAll:
		ack.Err = fmt.Errorf("replication: bad proposal (log %d, mode %d)", p.Log, p.Mode)
	default:
		for _, rec := range p.Records {
			if rec.Kind == record.KindFence {
				ack.Err = fmt.Errorf("replication: clients may not propose %s records", rec.Kind)
			}
		}
	}
	if ack.Err != nil {
		r.out.Acks = append(r.out.Acks, ack)
		return
	}
	mode := p.Mode
	if mode == AckLeader && hasTrim(p.Records) {
		// [TR-2] A trim moves the floor only once committed, so it is
		// acknowledged only then, whatever the stream's mode: a reader
		// served right after the acknowledgement must already meet the
		// floor, and a trim lost with its leader must never have been
		// acknowledged.
		mode = AckQuorum
	}
	v := &r.logs[p.Log]
	if p.ExpectTail && p.ExpectedTail != v.tail {
		ack.Err = &record.OffsetMismatchError{Expected: p.ExpectedTail, Tail: v.tail}
		r.out.Acks = append(r.out.Acks, ack)
		return
	}
	ack.First, ack.End = v.tail, v.tail+uint64(len(p.Records))
	if len(p.Records) > 0 {
		recs := make([]record.Record, len(p.Records))
		for i, rec := range p.Records {
			rec.Offset = v.tail + uint64(i)
			rec.Epoch = r.epoch
			if rec.Kind == 0 {
				rec.Kind = record.KindData
			}
			recs[i] = rec
		}
		r.appendLocal(p.Log, recs)
	}
	r.pending[p.Log][mode] = append(r.pending[p.Log][mode], ack)
	for _, pr := range r.list {
		r.ship(pr, p.Log)
	}
	r.updateMarks(p.Log)
}

// hasTrim reports whether recs hold a trim record.
func hasTrim(recs []record.Record) bool {
	for _, rec := range recs {
		if rec.Kind == record.KindTrim {
			return true
		}
	}
	return false
}

// appendLocal writes records to the local log (through Ready).
func (r *Replica) appendLocal(l record.LogKind, recs []record.Record) {
	r.logs[l].appendRecords(recs)
	r.out.Writes = append(r.out.Writes, LogWrite{Op: WriteAppend, Log: l, Offset: recs[0].Offset, Records: recs})
}

// truncateLocal removes the local log's records at or above at.
func (r *Replica) truncateLocal(l record.LogKind, at uint64) {
	if at >= r.logs[l].tail {
		return
	}
	r.logs[l].truncate(at)
	r.out.Writes = append(r.out.Writes, LogWrite{Op: WriteTruncate, Log: l, Offset: at})
}

// resetLocal drops every record of the local log and makes it empty at at
// (WriteReset); prev is the epoch of the record below at, if known. The caller has established that every offset below at is
// committed and that the records it holds at or above at are absent from,
// or divergent with, the log it follows; the committed marks move up to at
// (a committed position is never below the base) and never back.
func (r *Replica) resetLocal(l record.LogKind, at, prev uint64) {
	r.logs[l].reset(at, prev)
	r.out.Writes = append(r.out.Writes, LogWrite{Op: WriteReset, Log: l, Offset: at})
	r.commitTarget[l] = max(r.commitTarget[l], at)
	r.committed[l] = max(r.committed[l], at)
	r.allMark[l] = max(r.allMark[l], at)
	if at > r.lastCommits[l] {
		r.lastCommits[l] = at
		r.out.Commits = append(r.out.Commits, CommitAdvance{Log: l, Committed: at})
	}
}

// Compacted tells the replica that the runtime deleted its local records
// of log l below start (segments below the committed floor, or retention).
// The runtime must delete only records below the committed position. The
// core raises the log's base to start, clamped to its persisted tail, and
// ignores a start at or below the current base; the epoch start covering
// start is kept (moved to start). A leader's cursors below the new base
// ship from the base on: a follower that lacks the records below it gets
// an Append at the base, which lets it reset its log there
// (docs/replication-design.md, "Catch-up from the leader's start").
func (r *Replica) Compacted(l record.LogKind, start uint64) {
	if int(l) >= numLogs {
		return
	}
	v := &r.logs[l]
	start = min(start, v.stable)
	if start <= v.base {
		return
	}
	v.compact(start)
	for _, p := range r.list {
		c := &p.cursors[l]
		if c.next < start {
			c.next = start
		}
	}
}

func (r *Replica) send(m Message) {
	m.From = r.cfg.Self
	if r.out.Messages == nil {
		switch {
		case r.spare != nil:
			r.out.Messages, r.spare = r.spare, nil
		case r.msgCap > 1:
			r.out.Messages = make([]Message, 0, r.msgCap)
		}
	}
	r.out.Messages = append(r.out.Messages, m)
}

// Recycle hands back the Messages of a Ready the runtime is done with:
// every message sent (or dropped) and copied wherever it is kept, so that
// nothing, the Ready included, refers to the slice's array any more. The
// core gathers the messages of a later Ready in that array instead of
// allocating one per Ready (issue 31: an idle pass then allocates no
// message slice). Calling it is optional; it changes where the core's
// messages are stored, never what they are, so the core stays
// deterministic. An array larger than a pass normally needs is not kept.
// Call it at most once per Ready: a second call could hand the core an
// array a later Ready is still being sent from.
func (r *Replica) Recycle(msgs []Message) {
	if cap(msgs) == 0 || cap(msgs) > maxMsgCap {
		return
	}
	if cap(r.out.Messages) > 0 && &r.out.Messages[:1][0] == &msgs[:1][0] {
		return // the messages being gathered: not the caller's to give
	}
	msgs = msgs[:cap(msgs)]
	clear(msgs) // drop what the messages point to (records, epochs), beyond len too
	r.spare = msgs[:0]
}

// peer returns the peer n, nil if n is not one (Self included).
func (r *Replica) peer(n NodeID) *peer {
	for _, p := range r.list {
		if p.node == n {
			return p
		}
	}
	return nil
}

// HasReady reports whether Ready would return something.
func (r *Replica) HasReady() bool { return !r.out.Empty() }

// Ready returns what the runtime must do now and clears it. Each Ready is
// followed by exactly one Advance, in the order the Readies were taken,
// once its Writes (and those of every earlier Ready) are durable. More
// inputs may be fed, and further Readies taken, before that Advance: the
// runtime may persist asynchronously, with several Readies in flight.
func (r *Replica) Ready() Ready {
	rd := r.out
	r.out = Ready{}
	if n := len(rd.Messages); n > 0 {
		r.msgCap = min(n, maxMsgCap)
	}
	for i := range r.logs {
		r.logs[i].ready()
	}
	return rd
}

// Advance tells the replica that every Write of the oldest Ready not yet
// advanced (and of every earlier one) is durable; rd is that Ready. It
// releases answers that waited for those records and recounts marks that
// include the local log. An Advance with no Ready in flight does nothing.
func (r *Replica) Advance(rd Ready) {
	_ = rd
	for i := range r.logs {
		r.logs[i].advance()
	}
	switch r.role {
	case RoleFollower:
		r.releaseDeferred()
		r.followerCommits()
	case RoleLeader:
		for _, l := range record.LogKinds {
			r.updateMarks(l)
		}
	case RoleRecovering:
		r.maybeFinishRecovery()
	}
}

// Step feeds a message from a peer. m.Conn must be the connection it
// arrived on. Messages for another replica, of an unknown type or from
// outside the replica set are ignored.
func (r *Replica) Step(m Message) {
	if m.To != r.cfg.Self || r.peer(m.From) == nil || int(m.Log) >= numLogs {
		return
	}
	switch m.Type {
	case MsgAppend, MsgProbe, MsgFetch:
		r.stepRequest(m)
	case MsgRefuse:
		if m.Epoch > r.epoch {
			r.observeEpoch(m.Epoch, "")
		}
	case MsgAppendResp:
		if r.role == RoleLeader && m.Epoch == r.epoch {
			r.onAppendResp(m)
		}
	case MsgProbeResp:
		if r.role == RoleRecovering && m.Epoch == r.epoch {
			r.onProbeResp(m)
		}
	case MsgFetchResp:
		if r.role == RoleRecovering && m.Epoch == r.epoch {
			r.onFetchResp(m)
		}
	}
}
