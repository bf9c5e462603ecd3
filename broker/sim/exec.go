package sim

import (
	"fmt"
	"math/rand/v2"
	"strings"

	"felix.dev/felix/broker/datadir"
	"felix.dev/felix/broker/record"
	"felix.dev/felix/broker/replication"
)

const (
	runningPhase  = datadir.PhaseRunning
	fsyncOnCommit = datadir.FsyncOnCommit
)

// exec applies one event.
func (s *simulation) exec(e Event) {
	rng := rand.New(rand.NewPCG(e.Sub, 0xe7e7))
	n := s.nodes[e.Node%len(s.nodes)]
	if e.Arg == 1 && (e.Kind == EvProcessCrash || e.Kind == EvMachineCrash || e.Kind == EvWipe || e.Kind == EvCleanStop) {
		if s.cp.assign != nil {
			if l := s.nodeByName(s.cp.assign.Leader); l != nil {
				n = l
			}
		}
	}
	switch e.Kind {
	case EvPropose:
		s.propose(e, rng)
	case EvTick:
		s.tick(rng)
	case EvDeliver:
		for i := 0; i < e.Arg; i++ {
			if !s.deliverOne(rng) {
				break
			}
			s.processAll()
		}
	case EvIdle:
		for i := 0; i < e.Arg && s.fail == nil; i++ {
			s.tick(rng)
			s.processAll()
			s.drain(rng)
			s.check()
		}
	case EvProcessCrash:
		if n.running() && s.budgetAllows(n) {
			s.fault("process-crash", n)
			s.stop(n)
		}
	case EvMidReadyCrash:
		if n.running() && (n.r.HasReady() || len(n.inflight) > 0) && s.budgetAllows(n) {
			rd := n.r.Ready()
			inflight := 0
			for _, f := range n.inflight {
				inflight += len(f.Writes)
			}
			s.partialReady(n, rd, rng.IntN(inflight+len(rd.Writes)+1))
			if e.Arg == 1 {
				s.fault("mid-ready-machine-crash", n)
				s.stop(n)
				s.powerLoss(n)
			} else {
				s.fault("mid-ready-crash", n)
				s.stop(n)
			}
		}
	case EvMachineCrash:
		if n.running() && s.budgetAllows(n) {
			s.fault("machine-crash", n)
			s.stop(n)
			s.powerLoss(n)
		}
	case EvCleanStop:
		if n.running() && s.budgetAllows(n) {
			s.fault("clean-stop", n)
			s.stop(n)
			n.vol.disk.sync()
			n.vol.run.Phase = datadir.PhaseCleanStop
		}
	case EvWipe:
		s.wipe(n)
	case EvSnapshot:
		if n.up || n.vol.sidFile {
			v := n.vol
			v.disk = n.vol.disk.snapshot()
			v.takenInc = n.inc
			n.snap = &v
			s.tracef("  snapshot of %s at inc%d tails=%v", n.id, n.inc, v.disk.state().Logs[0].Tail)
		}
	case EvRestore:
		if n.snap == nil || n.frozen || !s.budgetAllows(n) {
			return
		}
		s.fault("restore", n)
		if n.up {
			s.stop(n)
		}
		v := *n.snap
		v.disk = n.snap.disk.snapshot()
		n.lostData = true
		if v.regFile && v.regInc >= s.cp.reg[n.idx].inc && !s.cfg.NoRestoreRotation {
			// Taken during the current registration: the incarnation
			// check cannot see it, so restore-point deletes storage-id
			// before the broker starts [ID-5].
			v.sidFile = false
		}
		n.vol = v
		s.start(n)
	case EvRestart:
		for i := range s.nodes {
			m := s.nodes[(e.Node+i)%len(s.nodes)]
			if !m.up && !s.net.cpCut[m.idx] {
				s.start(m)
				return
			}
		}
	case EvPartition:
		s.partition(e, n, rng)
	case EvHeal:
		s.healNet(e.Arg == 1)
	case EvFreeze:
		if s.cp.assign == nil {
			return
		}
		l := s.nodeByName(s.cp.assign.Leader)
		if l != nil && l.running() && s.budgetAllows(l) {
			s.fault("freeze", l)
			l.frozen, l.thawAt = true, s.now+e.Arg
		}
	case EvFailoverBurst:
		s.failoverBurst(e, rng)
	case EvLookupFail:
		if n.running() && n.r.Status().Role == replication.RoleLeader {
			peer := s.nodes[(e.Node+1+rng.IntN(len(s.nodes)-1))%len(s.nodes)]
			if _, ok := s.net.conns[link{n.idx, peer.idx}]; ok {
				s.fault("lookup-fail", n)
				n.r.LookupFailed(peer.id)
				s.notePass(n)
				s.net.relink = append(s.net.relink, link{n.idx, peer.idx})
			}
		}
	}
}

// fault counts and traces an injected fault.
func (s *simulation) fault(kind string, n *node) {
	s.stats.Faults[kind]++
	s.tracef("  inject %s on %s", kind, n.id)
}

// partialReady handles a Ready taken from a replica that dies during it:
// the messages left, only the first k writes of those in flight (the
// in-flight Readies' first, in order, then rd's) reached the page cache.
func (s *simulation) partialReady(n *node, rd replication.Ready, k int) {
	s.net.send(s.now, rd.Messages)
	var ws []replication.LogWrite
	for _, f := range n.inflight {
		ws = append(ws, f.Writes...)
	}
	ws = append(ws, rd.Writes...)
	n.inflight = nil
	for i, w := range ws {
		if i >= k {
			break
		}
		if err := n.vol.disk.apply(w); err != nil {
			s.failf(InvCore, "%s: %v", n.id, err)
			return
		}
	}
}

// powerLoss is the machine half of a machine crash.
func (s *simulation) powerLoss(n *node) {
	lost := n.vol.disk.powerLoss()
	n.boot++
	if lost && s.shape.Fsync != fsyncOnCommit {
		// Under OnCommit only writes never acknowledged can be lost.
		n.lostData = true
	}
	if lost {
		s.tracef("  %s lost unsynced writes; tails now %v", n.id, n.tails())
	}
}

// rotation applies [ID-3] through datadir.Decide.
func (s *simulation) rotation(n *node, syncOK bool) (bool, string) {
	f := datadir.Facts{CurrentBootID: n.bootID(), SyncFSOK: syncOK}
	if n.vol.sidFile {
		f.StorageID = datadir.FileValid
	}
	if n.vol.runFile {
		f.RunState, f.Run = datadir.FileValid, n.vol.run
	}
	if n.vol.regFile {
		f.Registration, f.Registered = datadir.FileValid, datadir.Incarnation(n.vol.regInc)
	}
	if g := s.cp.reg[n.idx]; g.known && !s.cfg.NoRestoreRotation {
		f.ControlPlane = datadir.ControlPlane{State: datadir.ControlPlaneKnown, Incarnation: datadir.Incarnation(g.inc)}
	} else {
		f.ControlPlane = datadir.ControlPlane{State: datadir.ControlPlaneNoRecord}
	}
	d := datadir.Decide(f)
	return d.Action == datadir.New, d.Reason.String()
}

// propose sends a client batch to a replica: usually the assigned leader,
// sometimes one that only believes it leads (a resumed stale leader), or
// any replica.
func (s *simulation) propose(e Event, rng *rand.Rand) {
	var target *node
	switch {
	case e.Arg < 8:
		if s.cp.assign != nil {
			target = s.nodeByName(s.cp.assign.Leader)
		}
	case e.Arg == 8:
		for i := range s.nodes {
			m := s.nodes[(e.Node+i)%len(s.nodes)]
			if m.running() && m.r.Status().Role == replication.RoleLeader {
				target = m
				break
			}
		}
	default:
		target = s.nodes[e.Node%len(s.nodes)]
	}
	if target == nil || !target.running() {
		return
	}
	mode := replication.AckQuorum
	switch k := rng.IntN(10); {
	case k < 2:
		mode = replication.AckLeader
	case k < 4:
		mode = replication.AckAll
	}
	log := record.LogData
	if rng.IntN(10) < 3 {
		log = record.LogKinds[1+rng.IntN(numLogs-1)]
	}
	if to := s.cfg.ProposeTo; len(to) > 0 {
		log = to[int(log)%len(to)]
	}
	s.nextProp++
	id := s.nextProp
	p := proposal{log: log, mode: mode}
	var recs []record.Record
	for i := 0; i <= rng.IntN(3); i++ {
		pl := fmt.Sprintf("p%d.%d", id, i)
		p.payloads = append(p.payloads, pl)
		recs = append(recs, record.Record{Kind: record.KindData, Payload: []byte(pl)})
	}
	prop := replication.Proposal{ID: id, Log: log, Records: recs, Mode: mode}
	if rng.IntN(8) == 0 {
		prop.ExpectTail = true
		prop.ExpectedTail = target.r.Status().Tail[log] + uint64(rng.IntN(2))
	}
	s.proposals[id] = p
	s.stats.Proposals++
	s.tracef("  propose p%d to %s %s %s n=%d", id, target.id, mode, log, len(recs))
	target.r.Propose(prop)
	s.notePass(target)
}

// tick advances simulated time by one tick.
func (s *simulation) tick(rng *rand.Rand) {
	// Delay is bounded: what was sent before this tick arrives (or is
	// lost) now, in a shuffled order.
	for s.fail == nil && s.deliverOlder(rng, s.now) {
		s.processAll()
	}
	s.now++
	s.net.expire(s.now)
	for _, n := range s.nodes {
		if n.up && n.frozen && s.now >= n.thawAt {
			s.thaw(n)
		}
	}
	for _, k := range s.net.relink {
		a, b := s.nodes[k[0]], s.nodes[k[1]]
		if a.running() && b.running() {
			s.connect(a, b)
		}
	}
	s.net.relink = nil
	for _, n := range s.nodes {
		if !n.running() {
			continue
		}
		n.r.Tick()
		s.notePass(n)
		switch s.shape.Fsync {
		case datadir.FsyncPeriodic:
			if s.now%periodicSyncTicks == n.idx%periodicSyncTicks {
				n.vol.disk.sync()
			}
		case datadir.FsyncNone:
			if rng.IntN(100) < noneWritebackPct {
				n.vol.disk.sync()
			}
		}
	}
	s.processAll()
	s.trim()
	s.cpStep(func() bool { return rng.IntN(100) < assignLagPct })
	s.stats.Ticks++
	if s.servingLeader() != nil {
		s.stats.ServingTicks++
	}
	if s.cfg.Trace {
		s.tracef("  t=%d %s", s.now, s.statusLine())
	}
}

// statusLine renders every replica's role, epoch and data-log marks, and
// the control plane's assignment.
func (s *simulation) statusLine() string {
	var b []string
	for _, n := range s.nodes {
		switch {
		case !n.up:
			b = append(b, fmt.Sprintf("%s:down", n.id))
		case n.frozen:
			b = append(b, fmt.Sprintf("%s:frozen", n.id))
		default:
			st := n.r.Status()
			b = append(b, fmt.Sprintf("%s:%s/e%d tail=%d commit=%d", n.id, st.Role, st.Epoch,
				st.Tail[record.LogData], st.Committed[record.LogData]))
		}
	}
	a := "none"
	if s.cp.assign != nil {
		a = fmt.Sprintf("%s@e%d", s.cp.assign.Leader, s.cp.assign.Epoch)
	}
	return fmt.Sprintf("[%s] assigned=%s", strings.Join(b, " "), a)
}

// deliverOne delivers (or loses) one message; false when none can go.
func (s *simulation) deliverOne(rng *rand.Rand) bool {
	return s.deliverOlder(rng, s.now+1)
}

// deliverOlder delivers (or loses) one message sent before tick before;
// false when none can go.
func (s *simulation) deliverOlder(rng *rand.Rand, before int) bool {
	i := s.net.pick(rng, func(f flight) bool {
		to := s.nodeByName(string(f.m.To))
		return f.at < before && (to == nil || !to.frozen)
	})
	if i < 0 {
		return false
	}
	m := s.net.remove(i)
	from, to := s.nodeByName(string(m.From)), s.nodeByName(string(m.To))
	if from == nil || to == nil || !to.running() {
		return true
	}
	k := link{from.idx, to.idx}
	if !isRequest(m) {
		k = link{to.idx, from.idx}
	}
	if c, ok := s.net.conns[k]; !ok || c != m.Conn {
		return true // the connection it was sent on is gone
	}
	if s.net.cut[link{from.idx, to.idx}] || rng.IntN(100) < s.shape.LossPct {
		s.stats.Lost++
		return true
	}
	s.stats.Delivered++
	to.r.Step(m)
	s.notePass(to)
	return true
}

// drain delivers every deliverable message (an idle, healthy network
// still loses some under the seed's loss rate).
func (s *simulation) drain(rng *rand.Rand) {
	for i := 0; i < 10000 && s.fail == nil; i++ {
		if !s.deliverOne(rng) {
			return
		}
		s.processAll()
	}
}

// partition cuts links: isolate a broker from its peers, cut one link, or
// cut a broker off from the control plane.
func (s *simulation) partition(e Event, n *node, rng *rand.Rand) {
	until := s.now + 2 + rng.IntN(16)
	switch e.Arg {
	case 0:
		for _, o := range s.nodes {
			if o != n {
				s.net.cutLink(n.idx, o.idx, until)
			}
		}
		s.fault("partition-isolate", n)
	case 1:
		o := s.nodes[(n.idx+1+rng.IntN(len(s.nodes)-1))%len(s.nodes)]
		s.net.cutLink(n.idx, o.idx, until)
		s.fault("partition-link", n)
	default:
		s.net.cpCut[n.idx] = true
		s.net.cpCutUntil[n.idx] = max(s.net.cpCutUntil[n.idx], until)
		s.fault("partition-control-plane", n)
	}
}

// healNet heals every partition; with reconnect the cut links' connections
// are re-established (as after a TCP timeout).
func (s *simulation) healNet(reconnect bool) {
	var links []link
	for k := range s.net.cut {
		links = append(links, k)
	}
	sortLinks(links)
	clear(s.net.cut)
	clear(s.net.cutUntil)
	for i := range s.net.cpCut {
		s.net.cpCut[i] = false
	}
	if !reconnect {
		return
	}
	for _, k := range links {
		a, b := s.nodes[k[0]], s.nodes[k[1]]
		if a.running() && b.running() {
			s.connect(a, b)
		}
	}
}

func sortLinks(ls []link) {
	for i := 1; i < len(ls); i++ {
		for j := i; j > 0 && (ls[j][0] < ls[j-1][0] || (ls[j][0] == ls[j-1][0] && ls[j][1] < ls[j-1][1])); j-- {
			ls[j], ls[j-1] = ls[j-1], ls[j]
		}
	}
}

// Burst flavours (Event.Arg / 10 of an EvFailoverBurst); Arg % 10 is a
// number of ticks.
const (
	// burstWipeThenLeader wipes a follower (it restarts at once), runs
	// some ticks, then crashes the leader: the window in which the wiped
	// replica's lost copy may still be counted or reported.
	burstWipeThenLeader = iota
	// burstLeaderThenWipe crashes the leader, runs until placement
	// promotes (or gives up), then wipes a replica the promotion counted
	// before the new leader's fence: a replica whose id changed since it
	// was counted must not stand in for its lost copy.
	burstLeaderThenWipe
	// burstWipeWhileDown crashes a follower and wipes it while it is down,
	// proposes and delivers, restarts it, runs some ticks, then crashes
	// the leader: the quorum mark must not count the lost copy.
	burstWipeWhileDown
	// burstStaleLeader cuts the leader off from the control plane only,
	// keeps proposing to it while placement promotes another replica, and
	// cuts the old and new leaders apart: a stale leader must not gather
	// a quorum after the fence.
	burstStaleLeader
	burstFlavours
)

// failoverBurst runs one burst flavour, each fault only as the budget
// allows.
func (s *simulation) failoverBurst(e Event, rng *rand.Rand) {
	if s.cp.assign == nil {
		return
	}
	l := s.nodeByName(s.cp.assign.Leader)
	v := s.nodes[e.Node%len(s.nodes)]
	if v == l {
		v = s.nodes[(e.Node+1)%len(s.nodes)]
	}
	ticks := e.Arg % 10
	run := func(n int) {
		for i := 0; i < n && s.fail == nil; i++ {
			s.tick(rng)
			s.processAll()
			for j := rng.IntN(16); j > 0 && s.deliverOne(rng); j-- {
				s.processAll()
			}
			s.check()
		}
	}
	crashLeader := func() {
		if l != nil && l.running() && s.budgetAllows(l) {
			s.fault("process-crash", l)
			s.stop(l)
		}
	}
	switch e.Arg / 10 {
	case burstWipeThenLeader:
		if e.Node%2 == 0 {
			// The lowest-named follower: placement breaks ties by name,
			// so its lost copy, if still reported, would be promoted.
			for _, m := range s.nodes {
				if m != l {
					v = m
					break
				}
			}
		}
		if !s.wipe(v) {
			return
		}
		if !v.legacy {
			run(2 + ticks)
			crashLeader()
			return
		}
		// An id-less follower: its leader is lost within a few ticks,
		// while its report from before the wipe may still call the
		// follower caught up and its renewals vouch for it [CP-1]. When
		// the budget refuses a crash, the leader is cut off from its
		// peers and the control plane instead (a partition, no fault in
		// the budget's sense), so the wiped copy stays empty.
		if rng.IntN(2) == 0 {
			run(rng.IntN(3))
		} else {
			run(2 + ticks)
		}
		crashLeader()
		if l != nil && l.running() && !s.net.cpCut[l.idx] {
			until := s.now + 4*nodeExpiryTicks
			for _, o := range s.nodes {
				if o != l {
					s.net.cutLink(l.idx, o.idx, until)
				}
			}
			s.fault("partition-isolate", l)
			s.net.cpCut[l.idx] = true
			s.net.cpCutUntil[l.idx] = until
		}
	case burstLeaderThenWipe:
		crashLeader()
		epoch := s.cp.epoch()
		for i := 0; i < 3*nodeExpiryTicks && s.cp.epoch() == epoch && s.fail == nil; i++ {
			run(1)
		}
		if s.cp.epoch() == epoch || s.fail != nil {
			return
		}
		for j := rng.IntN(4); j > 0 && s.deliverOne(rng); j-- {
			s.processAll()
		}
		// A replica the new assignment counted, other than its leader.
		var names []string
		for n := range s.cp.assign.Counted {
			if n != s.cp.assign.Leader {
				names = append(names, n)
			}
		}
		sortStrings(names)
		if len(names) > 0 {
			s.wipe(s.nodeByName(names[rng.IntN(len(names))]))
		}
	case burstStaleLeader:
		if l == nil || !l.running() {
			return
		}
		s.fault("stale-leader", l)
		s.net.cpCut[l.idx] = true
		s.net.cpCutUntil[l.idx] = s.now + 4*nodeExpiryTicks
		epoch := s.cp.epoch()
		for i := 0; i < 4*nodeExpiryTicks && s.fail == nil; i++ {
			if l.running() {
				s.propose(Event{Kind: EvPropose, Node: l.idx, Arg: 8}, rng)
				s.processAll()
			}
			if s.cp.epoch() != epoch {
				if nl := s.nodeByName(s.cp.assign.Leader); nl != nil && nl != l && rng.IntN(2) == 0 {
					s.net.cutLink(l.idx, nl.idx, s.now+2+rng.IntN(8))
				}
			}
			run(1)
		}
	case burstWipeWhileDown:
		if !v.running() || !s.budgetAllows(v) {
			return
		}
		s.fault("process-crash", v)
		s.stop(v)
		s.fault("wipe", v)
		v.vol = volume{disk: &disk{}}
		v.snap = nil
		v.lostData = true
		if l != nil && l.running() {
			for i := 0; i < 1+rng.IntN(3); i++ {
				s.propose(Event{Kind: EvPropose, Node: l.idx, Arg: 0}, rng)
				s.processAll()
			}
		}
		run(1 + rng.IntN(2))
		s.start(v)
		s.processAll()
		run(ticks)
		crashLeader()
	}
}

// wipe destroys v's volume and restarts it at once, if the budget allows.
func (s *simulation) wipe(v *node) bool {
	if v == nil || v.frozen || !s.budgetAllows(v) {
		return false
	}
	s.fault("wipe", v)
	v.lostData = true
	if v.up {
		s.stop(v)
	}
	if s.cfg.LogOutsideDir != [numLogs]bool{} {
		// Twin: only the logs outside the data directory are lost; the
		// directory, its identity files and the other logs survive.
		for l, out := range s.cfg.LogOutsideDir {
			if out {
				v.vol.disk.drop(l)
				s.tracef("  %s loses its %s log only (kept outside the data directory)", v.id, record.LogKind(l))
			}
		}
	} else {
		v.vol = volume{disk: &disk{}}
		v.snap = nil
	}
	s.start(v)
	s.processAll()
	return true
}

// trim raises the shard's trim floors and lets replicas delete their
// segments below them (the head trim of [TR-2]..[TR-6], reduced to
// its effect on replication). Its randomness comes from the seed and the
// tick alone, so it leaves every scheduled event's draws unchanged. A
// replica deletes only below its own committed position, as a store
// deletes only segments below a committed floor, and never its last
// record (the active segment).
func (s *simulation) trim() {
	rng := rand.New(rand.NewPCG(s.cfg.Seed^0x7219, uint64(s.now)))
	if rng.IntN(100) >= trimPct {
		return
	}
	l := s.servingLeader()
	if l == nil {
		return
	}
	st := l.r.Status()
	for lk := range s.floor {
		// A trim keeps the newest few committed records above the floor
		// (retention), so recent acknowledgements stay checkable.
		keep := uint64(2 + rng.IntN(trimKeep))
		if c := st.Committed[lk]; c > s.floor[lk]+keep {
			s.floor[lk] = c - keep
			s.stats.Trims++
		}
	}
	for _, n := range s.nodes {
		if !n.running() || rng.IntN(100) >= compactPct {
			continue
		}
		for lk := range s.floor {
			d := n.vol.disk
			old := d.base(lk)
			// The active segment is never deleted: the last record stays.
			if d.tail(lk) == 0 {
				continue
			}
			if nb := d.compact(lk, min(s.floor[lk], n.lastCommitted[lk], d.tail(lk)-1)); nb > old {
				n.r.Compacted(record.LogKind(lk), nb)
				s.notePass(n)
				s.stats.Compactions++
				s.tracef("  %s compacts %s below %d (floor %d)", n.id, record.LogKind(lk), nb, s.floor[lk])
			}
		}
	}
	s.processAll()
}

// checkReset checks a WriteReset against the ground truth: it may drop
// only records below the shard's trim floor, and records at or above its
// offset only if the replica never published them as committed.
func (s *simulation) checkReset(n *node, w replication.LogWrite) {
	l := int(w.Log)
	if w.Offset > s.floor[l] {
		s.failLog(InvCommittedTruncated, w.Log, "%s resets %s at %d above the trim floor %d", n.id, w.Log, w.Offset, s.floor[l])
		return
	}
	if t := n.vol.disk.tail(l); t > w.Offset && n.lastCommitted[l] > w.Offset {
		s.failLog(InvCommittedTruncated, w.Log, "%s resets %s at %d dropping its committed records up to %d (tail %d)",
			n.id, w.Log, w.Offset, n.lastCommitted[l], t)
	}
}
