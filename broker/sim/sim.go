package sim

import (
	"fmt"
	"math/rand/v2"
	"sort"

	"felix.dev/felix/broker/placement"
	"felix.dev/felix/broker/record"
	"felix.dev/felix/broker/replication"
)

// proposal is what the simulator remembers of one Propose.
type proposal struct {
	log      record.LogKind
	mode     replication.AckMode
	payloads []string
}

// simulation is one run in progress (Run builds and drives it).
type simulation struct {
	cfg   Config
	shape Shape
	f     int // fault budget (R-1)/2
	// prng decides when a replica's runtime finishes persisting a Ready
	// (several may be in flight, as in broker/replica).
	prng *rand.Rand

	nodes []*node
	net   network
	cp    controlPlane
	now   int
	seq   int // control-plane clock stamps so far
	step  int

	nextSID   int
	nextProp  replication.ProposalID
	proposals map[replication.ProposalID]proposal
	// acked holds every record acknowledged under Quorum or All, per log;
	// ackers holds, in parallel, who acknowledged it.
	acked  [numLogs][]record.Record
	ackers [numLogs][]acker
	// ackedBy is the replica that acknowledged writes at each epoch.
	ackedBy map[uint64]replication.NodeID
	// committed is the record every replica published as committed at
	// each offset, per log (offsets a replica no longer stores when it
	// checks them are skipped).
	committed [numLogs]map[uint64]record.Record
	// floor is the shard's trim floor per log: the simulated trims raise
	// it, never above the serving leader's committed position, and
	// replicas delete records below it (and below their own committed
	// position). Records below it are legitimately gone.
	floor [numLogs]uint64

	stats Stats
	trace []string
	fail  *Failure
}

// acker is the replica (and the storage id it ran under) that
// acknowledged a record.
type acker struct {
	node replication.NodeID
	sid  replication.StorageID
}

// Result is the outcome of one run.
type Result struct {
	Shape   Shape
	Failure *Failure // nil when every invariant held
	Stats   Stats
	Trace   []string
}

// Run simulates one seed. It is deterministic: the same Config gives the
// same Result.
func Run(cfg Config) Result {
	shape, events := Generate(cfg.Seed, cfg.Steps)
	s := &simulation{cfg: cfg, shape: shape, f: (shape.Replicas - 1) / 2, net: newNetwork(shape.Replicas),
		proposals: map[replication.ProposalID]proposal{}, ackedBy: map[uint64]replication.NodeID{},
		stats: newStats(), prng: rand.New(rand.NewPCG(cfg.Seed, 0xa5e7))}
	s.stats.Runs = 1
	for l := range s.committed {
		s.committed[l] = map[uint64]record.Record{}
	}
	s.cp.reg = make([]registration, shape.Replicas)
	lrng := rand.New(rand.NewPCG(cfg.Seed, 0x1e9a))
	for i := 0; i < shape.Replicas; i++ {
		n := &node{id: replication.NodeID(fmt.Sprintf("n%d", i+1)), idx: i, vol: volume{disk: &disk{}}}
		n.legacy = cfg.LegacyPeers && lrng.IntN(2) == 0
		s.nodes = append(s.nodes, n)
	}
	s.tracef("seed %d: %s", cfg.Seed, shape)
	for _, n := range s.nodes {
		if n.legacy {
			s.tracef("  %s is an older broker without storage ids", n.id)
		}
	}
	for _, n := range s.nodes {
		s.start(n)
	}
	s.processAll()
	run := func(i int) bool {
		s.step = i
		e := events[i]
		s.stats.Events++
		s.tracef("#%d t=%d %s", i, s.now, e)
		s.exec(e)
		s.processAll()
		s.check()
		return s.fail == nil
	}
	if cfg.Keep != nil {
		for _, i := range cfg.Keep {
			if i >= 0 && i < len(events) && !run(i) {
				break
			}
		}
	} else {
		for i := range events {
			if !run(i) {
				break
			}
		}
	}
	if s.fail == nil {
		s.heal()
	}
	res := Result{Shape: shape, Failure: s.fail, Stats: s.stats, Trace: s.trace}
	if res.Failure != nil {
		res.Failure.Seed, res.Failure.Shape, res.Failure.Trace = cfg.Seed, shape, s.trace
		if cfg.Keep != nil {
			res.Failure.Keep = append([]int(nil), cfg.Keep...)
		}
	}
	return res
}

func (s *simulation) tracef(format string, args ...any) {
	if s.cfg.Trace {
		s.trace = append(s.trace, fmt.Sprintf(format, args...))
	}
}

func (s *simulation) failf(inv Invariant, format string, args ...any) {
	if s.fail != nil {
		return
	}
	s.fail = &Failure{Invariant: inv, Step: s.step, Detail: fmt.Sprintf(format, args...)}
	s.tracef("  VIOLATION %s: %s", inv, s.fail.Detail)
}

// failLog is failf for a violation seen on log l.
func (s *simulation) failLog(inv Invariant, l record.LogKind, format string, args ...any) {
	if s.fail != nil {
		return
	}
	s.failf(inv, format, args...)
	s.fail.Log = l.String()
}

func (s *simulation) nodeByName(name string) *node {
	for _, n := range s.nodes {
		if string(n.id) == name {
			return n
		}
	}
	return nil
}

// faulty reports whether n counts against the fault budget.
func (s *simulation) faulty(n *node) bool { return !n.up || n.frozen || n.needsCopy }

// budgetAllows reports whether making n faulty keeps the budget.
func (s *simulation) budgetAllows(n *node) bool {
	if s.faulty(n) {
		return true
	}
	c := 0
	for _, o := range s.nodes {
		if s.faulty(o) {
			c++
		}
	}
	return c+1 <= s.f
}

// heal ends every run: partitions heal, frozen and stopped brokers come
// back, and the shard runs with a drained network, so a loss that only
// shows at the next fence is seen.
func (s *simulation) heal() {
	s.step = -1
	s.tracef("#heal t=%d", s.now)
	clear(s.net.cut)
	clear(s.net.cutUntil)
	for i := range s.net.cpCut {
		s.net.cpCut[i] = false
	}
	rng := rand.New(rand.NewPCG(s.cfg.Seed, 0x4ea1))
	for i := 0; i < finalTicks && s.fail == nil; i++ {
		for _, n := range s.nodes {
			if !n.up {
				s.start(n)
			}
		}
		s.tick(rng)
		s.processAll()
		s.drain(rng)
		s.check()
	}
	if s.fail == nil && s.servingLeader() != nil {
		s.stats.EndedServed++
	}
}

// start runs a broker's startup [ID-4]: the rotation decision [ID-3] with
// the control plane's incarnation, registration, the core built from the
// disk, the current epoch learned before any shipping, then connections.
func (s *simulation) start(n *node) {
	if s.net.cpCut[n.idx] {
		return // the control plane is unreachable: startup holds
	}
	rng := rand.New(rand.NewPCG(s.cfg.Seed^uint64(s.now), uint64(n.idx)<<32|uint64(s.step+1)))
	syncOK := rng.IntN(20) != 0
	if syncOK {
		n.vol.disk.sync() // syncfs of the data directory
	}
	act, reason := s.rotation(n, syncOK)
	rotated := act
	if rotated {
		s.nextSID++
		n.vol.sid = replication.StorageID(fmt.Sprintf("%s-s%d", n.id, s.nextSID))
		n.vol.sidFile = true
		s.stats.Rotations++
	}
	g := &s.cp.reg[n.idx]
	// A broker's very first start has nothing to lose.
	lossPossible := (rotated && g.known) || n.lostData
	n.lostData = false
	g.known = true
	g.inc++
	g.sid = n.vol.sid
	g.registeredAt = s.stamp()
	g.lastHB, g.lastHBAt, g.state = s.now, g.registeredAt, placement.Up
	n.vol.regInc, n.vol.regFile = g.inc, true
	n.vol.run.Phase, n.vol.run.BootID, n.vol.run.Fsync = runningPhase, n.bootID(), s.shape.Fsync
	n.vol.runFile = true
	n.inc, n.sid = g.inc, n.vol.sid
	if n.legacy {
		// An older broker without the storage-id feature: it presents no
		// id and registers none.
		n.sid, g.sid = "", ""
	}
	if lossPossible {
		n.needsCopy = true
	}
	r, err := replication.New(replication.Config{
		Shard: record.ShardID{Stream: "sim", Shard: 0}, Self: n.id, SelfStorageID: n.sid,
		Incarnation: n.inc, Replicas: s.names(), PassInterval: passTicks, MaxBatch: 4, MaxInflight: 2,
		Log: n.vol.disk, Rules: s.cfg.Rules,
	}, n.vol.disk.state())
	if err != nil {
		s.failf(InvCore, "replication.New(%s): %v", n.id, err)
		return
	}
	n.r, n.up, n.frozen = r, true, false
	n.lastCommitted, n.checked = [numLogs]uint64{}, [numLogs]uint64{}
	n.report, n.pending = nil, nil
	n.writer = reportWriter{}
	n.passes = [2]passStart{}
	n.assignSeen = 0
	n.r.SetKnownEpoch(s.cp.epoch())
	s.notePass(n)
	if s.cp.assign != nil {
		n.assignSeen = s.cp.assign.Epoch
		n.r.Assign(coreAssignment(s.cp.assign))
		s.notePass(n)
	}
	s.tracef("  start %s inc%d id=%s (%s) tails=%v", n.id, n.inc, n.sid, reason, n.tails())
	for _, o := range s.nodes {
		if o != n && o.running() {
			s.connect(n, o)
			s.connect(o, n)
		}
	}
}

func (s *simulation) names() []replication.NodeID {
	out := make([]replication.NodeID, len(s.nodes))
	for i, n := range s.nodes {
		out[i] = n.id
	}
	return out
}

// connect opens a new connection from leader side a to follower side b.
func (s *simulation) connect(a, b *node) {
	k := link{a.idx, b.idx}
	if old, ok := s.net.conns[k]; ok {
		a.r.Disconnected(b.id, old)
		s.notePass(a)
	}
	s.net.nextConn++
	s.net.conns[k] = s.net.nextConn
	a.r.Connected(b.id, s.net.nextConn, b.sid)
	s.notePass(a)
}

// stop takes a broker's process down: its peers see its connections close
// (a frozen peer sees it when it resumes).
func (s *simulation) stop(n *node) {
	n.up, n.frozen = false, false
	n.report = nil
	n.inflight = nil // never handed to the OS
	for _, o := range s.nodes {
		if o == n {
			continue
		}
		k := link{o.idx, n.idx}
		if c, ok := s.net.conns[k]; ok {
			if o.running() {
				o.r.Disconnected(n.id, c)
				s.notePass(o)
			} else if o.up {
				o.pending = append(o.pending, closed{peer: n.id, conn: c})
			}
		}
		delete(s.net.conns, k)
		delete(s.net.conns, link{n.idx, o.idx})
	}
}

// thaw resumes a frozen broker where it stopped.
func (s *simulation) thaw(n *node) {
	n.frozen = false
	s.tracef("  resume %s (frozen leader back)", n.id)
	for _, c := range n.pending {
		n.r.Disconnected(c.peer, c.conn)
		s.notePass(n)
	}
	n.pending = nil
	for _, o := range s.nodes {
		if o == n || !o.running() {
			continue
		}
		if _, ok := s.net.conns[link{n.idx, o.idx}]; !ok {
			s.connect(n, o)
		}
		if _, ok := s.net.conns[link{o.idx, n.idx}]; !ok {
			s.connect(o, n)
		}
	}
}

// processAll hands every running replica's Ready to the runtime until
// none has output. Persisting is asynchronous, as in broker/replica: a
// Ready's writes may stay in flight across later Readies, message
// deliveries and processAll calls; each call finishes the oldest in-flight
// Ready of a running replica with probability 1/2 per round.
func (s *simulation) processAll() {
	for round := 0; round < 64; round++ {
		any := false
		for _, n := range s.nodes {
			if !n.running() {
				continue
			}
			if len(n.inflight) > 0 && s.prng.IntN(2) == 0 {
				s.persistOldest(n)
			}
			if n.r.HasReady() {
				any = true
				s.process(n)
			}
		}
		if !any || s.fail != nil {
			return
		}
	}
}

// process handles one Ready of n: messages leave; commits,
// acknowledgements and the report are taken (they never depend on this
// Ready's writes); the writes join the in-flight ones, persisted in order
// later (persistOldest), and the core is told with Advance then. A Ready
// holding a reset is a barrier, as in the runtime: everything in flight is
// persisted, then its writes, then its commits are taken.
func (s *simulation) process(n *node) {
	if len(n.inflight) > 0 {
		s.stats.Overlapped++
	}
	rd := n.r.Ready()
	s.net.send(s.now, rd.Messages)
	// The network copied them: handed back, as the runtime does.
	n.r.Recycle(rd.Messages)
	rd.Messages = nil
	if hasReset(rd.Writes) {
		for len(n.inflight) > 0 && s.fail == nil {
			s.persistOldest(n)
		}
		s.persistWrites(n, rd.Writes)
		s.deliver(n, rd)
		n.r.Advance(rd)
		s.notePass(n)
		return
	}
	s.deliver(n, rd)
	n.inflight = append(n.inflight, rd)
	if s.prng.IntN(2) == 0 {
		s.persistOldest(n)
	}
}

func hasReset(ws []replication.LogWrite) bool {
	for _, w := range ws {
		if w.Op == replication.WriteReset {
			return true
		}
	}
	return false
}

// persistOldest persists the writes of n's oldest in-flight Ready and
// advances the core with it.
func (s *simulation) persistOldest(n *node) {
	rd := n.inflight[0]
	n.inflight = n.inflight[1:]
	s.persistWrites(n, rd.Writes)
	if s.fail == nil {
		n.r.Advance(rd)
		s.notePass(n)
	}
}

// persistWrites puts writes in the page cache (and on the disk under
// OnCommit), checking the invariants a write can break.
func (s *simulation) persistWrites(n *node, ws []replication.LogWrite) {
	for _, w := range ws {
		if w.Op == replication.WriteTruncate && w.Offset < n.lastCommitted[w.Log] {
			s.failLog(InvCommittedTruncated, w.Log, "%s truncates %s at %d below its committed %d", n.id, w.Log, w.Offset, n.lastCommitted[w.Log])
		}
		if w.Op == replication.WriteTruncate && w.Offset < n.checked[w.Log] {
			n.checked[w.Log] = w.Offset
		}
		if w.Op == replication.WriteReset {
			s.checkReset(n, w)
			n.checked[w.Log] = w.Offset
			s.stats.Resets++
			s.tracef("  %s resets %s at %d (tail %d, floor %d)", n.id, w.Log, w.Offset, n.vol.disk.tail(int(w.Log)), s.floor[w.Log])
		}
		if err := n.vol.disk.apply(w); err != nil {
			s.failf(InvCore, "%s: %v", n.id, err)
			return
		}
	}
	if s.shape.Fsync == fsyncOnCommit && len(ws) > 0 {
		n.vol.disk.sync()
	}
}

// deliver takes a Ready's commits, acknowledgements and report.
func (s *simulation) deliver(n *node, rd replication.Ready) {
	for _, c := range rd.Commits {
		if c.Committed < n.lastCommitted[c.Log] {
			s.failLog(InvCommitBack, c.Log, "%s: %s committed %d after %d", n.id, c.Log, c.Committed, n.lastCommitted[c.Log])
		}
		n.lastCommitted[c.Log] = max(n.lastCommitted[c.Log], c.Committed)
	}
	for _, a := range rd.Acks {
		s.onAck(n, a)
	}
	if rd.Report != nil {
		n.report, n.reportViewAt = rd.Report, n.viewAt(rd.Report.Pass)
	}
}

// onAck records an acknowledgement and checks it names the proposal's
// records, at an epoch no other replica acknowledged at.
func (s *simulation) onAck(n *node, a replication.Ack) {
	p, ok := s.proposals[a.ID]
	if !ok {
		return
	}
	delete(s.proposals, a.ID)
	if a.Err != nil {
		s.tracef("  %s refuses p%d: %v", n.id, a.ID, a.Err)
		return
	}
	// Offsets below the log's base were compacted under the trim floor
	// before the acknowledgement came (an All acknowledgement can wait
	// that long): they are legitimately gone and are not checked.
	d, l := n.vol.disk, int(a.Log)
	if a.End > d.tail(l) || a.End-a.First != uint64(len(p.payloads)) {
		s.failLog(InvAckMismatch, a.Log, "%s acks p%d [%d,%d) but its %s log holds [%d,%d)", n.id, a.ID, a.First, a.End, a.Log,
			d.base(l), d.tail(l))
		return
	}
	epoch := n.r.Status().Epoch
	if first, ok := d.at(l, max(a.First, d.base(l))); ok {
		epoch = first.Epoch
	}
	for i, pl := range p.payloads {
		r, ok := d.at(l, a.First+uint64(i))
		if !ok {
			if a.First+uint64(i) >= s.floor[l] {
				s.failLog(InvAckMismatch, a.Log, "%s acks p%d but offset %d at or above the floor %d is not in its log [%d,%d)",
					n.id, a.ID, a.First+uint64(i), s.floor[l], d.base(l), d.tail(l))
				return
			}
			continue
		}
		if string(r.Payload) != pl || r.Epoch != epoch {
			s.failLog(InvAckMismatch, a.Log, "%s acks p%d but offset %d holds %q@e%d", n.id, a.ID, r.Offset, r.Payload, r.Epoch)
			return
		}
	}
	if o, ok := s.ackedBy[epoch]; ok && o != n.id {
		s.failf(InvTwoLeaders, "%s and %s both acknowledged writes at epoch %d", o, n.id, epoch)
	}
	s.ackedBy[epoch] = n.id
	s.stats.Acked[p.mode]++
	s.tracef("  %s acks p%d %s %s [%d,%d) e%d", n.id, a.ID, p.mode, a.Log, a.First, a.End, epoch)
	if p.mode == replication.AckQuorum || p.mode == replication.AckAll {
		for o := a.First; o < a.End; o++ {
			r, ok := d.at(l, o)
			if !ok {
				continue // below the floor: trimmed before it was acknowledged
			}
			s.acked[a.Log] = append(s.acked[a.Log], r)
			s.ackers[a.Log] = append(s.ackers[a.Log], acker{node: n.id, sid: n.sid})
			s.stats.AckedRecords[a.Log]++
		}
	}
}

// servingLeader is the replica that leads the control plane's current
// epoch with its fence committed, if any.
func (s *simulation) servingLeader() *node {
	e := s.cp.epoch()
	for _, n := range s.nodes {
		if !n.running() {
			continue
		}
		st := n.r.Status()
		if st.Role == replication.RoleLeader && st.FenceCommitted && st.Epoch == e {
			return n
		}
	}
	return nil
}

// updateWhole clears needsCopy for replicas that are whole again: the
// control plane's report of the serving leader counts them caught up under
// their current id, and their log holds every acknowledged record.
func (s *simulation) updateWhole() {
	rep := s.cp.report
	if rep == nil || rep.Epoch != s.cp.epoch() {
		return
	}
	for _, n := range s.nodes {
		if !n.needsCopy || !n.up {
			continue
		}
		for _, f := range rep.Followers {
			if f.Broker == string(n.id) && f.CaughtUp && f.StorageID == string(n.sid) && n.holdsAll(&s.acked, &s.floor) {
				n.needsCopy = false
				s.tracef("  %s is whole again", n.id)
			}
		}
	}
}

func sortStrings(s []string) { sort.Strings(s) }
