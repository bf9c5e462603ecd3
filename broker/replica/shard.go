package replica

import (
	"fmt"
	"sync"
	"sync/atomic"
	"time"

	"felix.dev/felix/broker/logstore"
	"felix.dev/felix/broker/peer"
	"felix.dev/felix/broker/record"
	"felix.dev/felix/broker/replication"
)

// drainMax bounds the events fed between two Readies.
const drainMax = 4096

// maxPersisting bounds the Readies handed to the persister and not yet
// advanced. While it is reached the core gathers its output (and batches
// it) until the persister catches up.
const maxPersisting = 16

type evKind uint8

const (
	evStep evKind = iota + 1
	evPropose
	evConnected
	evDisconnected
	evLookupFailed
	evAssign
	evKnownEpoch
	evCompacted
)

// event is one input of a shard's drive loop.
type event struct {
	kind   evKind
	msg    replication.Message
	prop   replication.Proposal
	node   replication.NodeID
	conn   replication.ConnID
	sid    replication.StorageID
	assign replication.Assignment
	epoch  uint64
	log    record.LogKind // evCompacted
	offset uint64         // evCompacted: the log's first stored offset
}

// shard is one replica's runtime: the core, owned by the run goroutine,
// and what other goroutines may read of it.
type shard struct {
	m        *Manager
	id       record.ShardID
	replicas []replication.NodeID
	peers    []replication.NodeID
	mode     atomic.Uint32 // replication.AckMode
	logs     [len(record.LogKinds)]*logstore.Log

	// cmu owns the core and everything marked "core owner only" below:
	// the run goroutine holds it for each round of its loop, and while
	// the shard is idle another goroutine may take it to drive the core
	// itself (idle.go): the pass clock for a tick, a peer reader for the
	// messages it decoded.
	cmu    sync.Mutex
	recent [len(record.LogKinds)]recent // core owner only
	core   *replication.Replica         // core owner only

	// Core owner only, for the idle path (idle.go): exited once the run
	// loop has returned; loud while the last Ready that sent messages
	// shipped records, or the last Ready wrote; handoff holds Readies with
	// writes an idle driver took and left to the run goroutine, in order,
	// and idleErr a failure it met (both announced on kick).
	exited  bool
	loud    bool
	handoff []replication.Ready
	idleErr error
	kick    chan struct{}
	// Counts of the run loop's rounds and of the core calls idle
	// drivers made (ticks, stepped message runs), for tests and
	// diagnosis.
	rounds, idleTicks, idleSteps atomic.Uint64

	inbox    *inbox
	tick     chan struct{} // the Manager's passClock: a pass is due
	stopping chan struct{}
	done     chan struct{}
	stopOnce sync.Once

	// The persister (persist.go): Readies go out on toPersist in order and
	// come back on persisted in the same order once their Writes are
	// durable; persisting counts those in between (core owner only).
	toPersist  chan replication.Ready
	persisted  chan persistDone
	persisting int

	// holding is set while the persister holds writes the store refused
	// for want of space (persist.go). Meanwhile the run goroutine drops
	// the Appends it receives (a follower answers none of them anyway),
	// and keeps taking Readies beyond maxPersisting into queued (in
	// order, behind those in flight) so that the core's output does not
	// pile up however long the hold lasts (queued: core owner only).
	holding atomic.Bool
	queued  []queuedReady

	counters shipCounters // replication metrics, resolved once

	// out gathers a Ready's messages by connection for sendAll (core
	// owner only; kept between Readies with its buffers).
	out []outConn

	// passes holds the core's current and previous pass with when each
	// started (by Options.Now, read before the core call that started
	// it), for OnReport's viewAt [CP-1] (core owner only).
	passes [2]passStart

	status atomic.Pointer[replication.Status]
	failed atomic.Pointer[error]
	// report is the last report this replica made as leader (one per
	// pass, its Followers copied), for the follower lag metric
	// (shardmetrics.go); nil before the first.
	report atomic.Pointer[replication.Report]
	// serving is the epoch whose leader's fence commit (Ready.Serving) has
	// been applied to the logs: reads are served only while the replica
	// leads that epoch [TR-4].
	serving atomic.Uint64

	wmu     sync.Mutex
	nextID  replication.ProposalID
	waiters map[replication.ProposalID]waiter
}

func newShard(m *Manager, id record.ShardID, replicas []replication.NodeID, mode replication.AckMode, base uint64) (*shard, error) {
	s := &shard{m: m, id: id, replicas: append([]replication.NodeID(nil), replicas...),
		inbox: newInbox(), tick: make(chan struct{}, 1), kick: make(chan struct{}, 1), stopping: make(chan struct{}), done: make(chan struct{}),
		toPersist: make(chan replication.Ready, maxPersisting), persisted: make(chan persistDone, maxPersisting),
		waiters: map[replication.ProposalID]waiter{}}
	s.mode.Store(uint32(mode))
	var peerNames []string
	for _, n := range replicas {
		if n != m.o.Self {
			s.peers = append(s.peers, n)
			peerNames = append(peerNames, string(n))
		}
	}
	s.counters = m.o.Metrics.shardCounters(id.String(), peerNames)
	for _, l := range record.LogKinds {
		lid := record.LogID{ShardID: id, Log: l}
		lg, ok := m.o.Store.Lookup(lid)
		if !ok {
			var err error
			if lg, err = m.o.Store.CreateLog(lid, logstore.LogOptions{Base: base}); err != nil {
				return nil, fmt.Errorf("replica: create %s: %w", lid, err)
			}
		}
		s.logs[l] = lg
		s.recent[l].limit = m.o.RecentBytes
	}
	st, err := loadState(&s.logs)
	if err != nil {
		return nil, err
	}
	// PassInterval 1: every tick of the Manager's clock is a pass, and a
	// follower's core counts no ticks, so the clock skips followers
	// (passClock, wantsTicks).
	core, err := replication.New(replication.Config{
		Shard: id, Self: m.o.Self, SelfStorageID: m.selfID, Incarnation: m.o.Incarnation,
		Replicas: s.replicas, PassInterval: 1, MaxBatch: m.o.MaxBatch, MaxInflight: m.o.MaxInflight,
		Log: logReader{logs: &s.logs, recent: &s.recent},
	}, st)
	if err != nil {
		return nil, fmt.Errorf("replica: %s: %w", id, err)
	}
	s.core = core
	stv := core.Status()
	s.status.Store(&stv)
	return s, nil
}

func (s *shard) hasPeer(n replication.NodeID) bool {
	for _, p := range s.peers {
		if p == n {
			return true
		}
	}
	return false
}

// post queues ev; it reports false if the shard has stopped.
func (s *shard) post(ev event) bool {
	return s.inbox.put(&ev, s.done, nil)
}

// stop ends the goroutine and waits for it.
func (s *shard) stop() {
	s.stopOnce.Do(func() { close(s.stopping) })
	<-s.done
}

// wake is why the run loop woke.
type wake uint8

const (
	wakeInbox wake = iota + 1
	wakePersisted
	wakeTick
	wakeKick
)

// run is the drive loop (see the package documentation).
func (s *shard) run() {
	defer close(s.done)
	log := s.m.o.Logger.WithValues("shard", s.id.String())
	defer s.failWaiters()
	persisterDone := make(chan struct{})
	go s.persistLoop(persisterDone)
	defer func() {
		close(s.toPersist)
		<-persisterDone
	}()
	defer func() {
		// Before the persister's queue closes: no idle driver takes the
		// core from here on.
		s.cmu.Lock()
		s.exited = true
		s.cmu.Unlock()
	}()
	for {
		// t0 is read before this round's first core call: a pass the
		// core starts in the round started at or after it.
		var t0 time.Time
		var w wake
		var d persistDone
		select {
		case <-s.inbox.ready:
			w = wakeInbox
		case d = <-s.persisted:
			w = wakePersisted
		case <-s.tick:
			w = wakeTick
		case <-s.kick:
			w = wakeKick
		case <-s.stopping:
			return
		}
		t0 = s.m.o.Now()
		if err := s.round(w, d, t0); err != nil {
			log.Error(err, "replica stopped: cannot persist") // round recorded it in s.failed
			return
		}
	}
}

// round is one round of the drive loop, woken by w (d: the persister's
// answer for wakePersisted), with the core owned throughout.
//
// A round that fails records the failure before it releases the core, so
// no idle driver takes the shard up between the failure and the
// goroutine's exit.
func (s *shard) round(w wake, d persistDone, t0 time.Time) (err error) {
	s.cmu.Lock()
	defer s.cmu.Unlock()
	defer func() {
		if err != nil {
			s.failed.Store(&err)
		}
	}()
	s.rounds.Add(1)
	// What an idle driver left comes first: its Readies were taken
	// before anything this round makes.
	if err := s.takeHandoff(); err != nil {
		return err
	}
	n := 0
	switch w {
	case wakeInbox:
		n += s.applyInbox()
	case wakePersisted:
		if err := s.advance(d); err != nil {
			return err
		}
	case wakeTick:
		s.core.Tick()
	}
drain:
	for n < drainMax {
		if len(s.inbox.ready) == 0 && len(s.persisted) == 0 {
			// Nothing more waits (most wake-ups): no select. A
			// signal or answer racing this check is taken at the
			// next round's select.
			break
		}
		select {
		case <-s.inbox.ready:
			n += s.applyInbox()
		case d := <-s.persisted:
			n++
			if err := s.advance(d); err != nil {
				return err
			}
		default:
			break drain
		}
	}
	s.notePass(s.core.Status().Pass, t0)
	for (s.persisting < maxPersisting || s.holding.Load()) && s.core.HasReady() {
		if err := s.handle(s.core.Ready()); err != nil {
			return err
		}
	}
	s.publish(t0)
	return nil
}

// publish records the core's pass and publishes its status if it
// changed (core owner only).
func (s *shard) publish(t0 time.Time) {
	st := s.core.Status()
	s.notePass(st.Pass, t0)
	if st != *s.status.Load() {
		p := new(replication.Status) // allocated only on change
		*p = st
		s.status.Store(p)
	}
}

// passStart is a core pass and when the run loop saw it start.
type passStart struct {
	pass uint64
	at   time.Time
}

// notePass records that the core is at pass, started no earlier than t0
// (the time read before the iteration's first core call) [CP-1].
func (s *shard) notePass(pass uint64, t0 time.Time) {
	if pass != s.passes[0].pass {
		s.passes[1], s.passes[0] = s.passes[0], passStart{pass: pass, at: t0}
	}
}

// viewAt is when the core's pass started, zero if the loop did not see it
// start (a report names the pass that is ending or the current one).
func (s *shard) viewAt(pass uint64) time.Time {
	for _, p := range s.passes {
		if p.pass == pass && pass != 0 {
			return p.at
		}
	}
	return time.Time{}
}

// applyInbox feeds the core every event waiting in the inbox and returns
// how many there were.
func (s *shard) applyInbox() int {
	evs := s.inbox.take()
	for i := range evs {
		s.apply(&evs[i])
	}
	n := len(evs)
	s.inbox.recycle(evs)
	return n
}

func (s *shard) apply(ev *event) {
	c := s.core
	switch ev.kind {
	case evStep:
		if ev.msg.Type == replication.MsgAppend && s.holding.Load() {
			// Its records could not be written now; the leader asks
			// again after a pass without answer.
			return
		}
		c.Step(ev.msg)
	case evPropose:
		c.Propose(ev.prop)
	case evConnected:
		c.Connected(ev.node, ev.conn, ev.sid)
	case evDisconnected:
		c.Disconnected(ev.node, ev.conn)
	case evLookupFailed:
		c.LookupFailed(ev.node)
	case evAssign:
		c.Assign(ev.assign)
	case evKnownEpoch:
		c.SetKnownEpoch(ev.epoch)
	case evCompacted:
		c.Compacted(ev.log, ev.offset)
	}
}

// handle carries out one Ready: messages first (they may go before the
// writes are durable), then commits, acks and the report (they never
// depend on this Ready's writes), and the writes go to the persister,
// behind those of earlier Readies; the Ready is advanced when they are
// durable. A Ready holding a reset is the exception: its commits follow
// the reset, so it waits for the persister to finish everything before it
// and is persisted and advanced here. A write refused for want of space
// is not a failure: it is written again once space returns (space.go).
func (s *shard) handle(rd replication.Ready) error {
	s.noteLoud(rd)
	s.sendAll(rd.Messages)
	// Encoded and queued (sendAll keeps no message): the core reuses
	// the array for a later Ready's messages.
	s.core.Recycle(rd.Messages)
	rd.Messages = nil
	s.cacheWrites(rd.Writes)
	if hasReset(rd.Writes) {
		for s.persisting > 0 || len(s.queued) > 0 {
			if err := s.advance(<-s.persisted); err != nil {
				return err
			}
		}
		if err := s.persist(rd.Writes); isFull(err) {
			// Refused for want of space: written again once space
			// returns; this loop waits (resets are rare).
			s.refuseWaiting(err)
			if err := s.persistWhenRoom(rd.Writes); err != nil {
				return err
			}
		} else if err != nil {
			return err
		}
		if err := s.deliver(rd); err != nil {
			return err
		}
		s.core.Advance(rd)
		return nil
	}
	if err := s.deliver(rd); err != nil {
		return err
	}
	if len(s.queued) > 0 || s.persisting >= maxPersisting {
		s.enqueue(rd)
		return nil
	}
	if len(rd.Writes) == 0 && s.persisting == 0 {
		s.core.Advance(rd)
		return nil
	}
	s.persisting++
	s.toPersist <- rd // never blocks: at most maxPersisting are out
	return nil
}

// queuedReady is a Ready taken while the persister was full (only during a
// hold): its Writes, or, for Readies without writes, how many of them in
// a row (Advance takes only the order of the Readies; their messages,
// commits and acks are already carried out).
type queuedReady struct {
	writes []replication.LogWrite
	empty  int
}

// enqueue queues rd behind the Readies in flight and queued before it.
func (s *shard) enqueue(rd replication.Ready) {
	if len(rd.Writes) == 0 {
		if n := len(s.queued); n > 0 && s.queued[n-1].empty > 0 {
			s.queued[n-1].empty++
			return
		}
		s.queued = append(s.queued, queuedReady{empty: 1})
		return
	}
	s.queued = append(s.queued, queuedReady{writes: rd.Writes})
}

// pump moves queued Readies on, in order: to the persister while it has
// room, and those without writes to Advance once nothing is in flight
// before them.
func (s *shard) pump() {
	for len(s.queued) > 0 {
		q := &s.queued[0]
		switch {
		case q.empty > 0 && s.persisting == 0:
			for ; q.empty > 0; q.empty-- {
				s.core.Advance(replication.Ready{})
			}
		case q.empty == 0 && s.persisting < maxPersisting:
			s.persisting++
			s.toPersist <- replication.Ready{Writes: q.writes}
		default:
			return
		}
		s.queued[0] = queuedReady{}
		s.queued = s.queued[1:]
	}
	s.queued = nil
}

// deliver applies a Ready's commits, completes the client calls its acks
// answer and hands on its report.
func (s *shard) deliver(rd replication.Ready) error {
	for _, c := range rd.Commits {
		if err := s.logs[c.Log].SetCommitted(c.Committed); err != nil {
			return fmt.Errorf("commit %s/%s at %d: %w", s.id, c.Log, c.Committed, err)
		}
	}
	if rd.Serving != 0 {
		s.serving.Store(rd.Serving)
	}
	for _, a := range rd.Acks {
		s.complete(a)
	}
	if rd.Report != nil {
		// The core builds a new Report each pass and never touches it
		// again: kept as it is, no copy per pass.
		s.report.Store(rd.Report)
		if s.m.o.OnReport != nil {
			s.m.o.OnReport(*rd.Report, s.viewAt(rd.Report.Pass))
		}
	}
	return nil
}

// advance takes the persister's answer for the oldest Ready in flight.
func (s *shard) advance(d persistDone) error {
	s.persisting--
	if d.err != nil {
		return d.err
	}
	s.core.Advance(d.rd)
	s.pump()
	return nil
}

func hasReset(ws []replication.LogWrite) bool {
	for _, w := range ws {
		if w.Op == replication.WriteReset {
			return true
		}
	}
	return false
}

// send puts a message on the wire: requests over the pool's connection
// the core chose, answers over the accepted connection of the request.
// Neither waits for the network (peer.Pool.Send drops a connection whose
// queue is full, server.PeerConn.Send drops the frame), so a peer that
// stops reading never stalls this shard's loop; the core asks again for
// what is lost.
func (s *shard) send(msg replication.Message) {
	if whole(msg, s.m.o.MaxMessageBytes) {
		s.sendOne(msg) // most messages: no slice for split's one part
		return
	}
	for _, part := range split(msg, s.m.o.MaxMessageBytes) {
		s.sendOne(part)
	}
}

// sendOne encodes and sends one message as its own frame; one without
// records is built in a buffer of a frame the connection has finished
// writing, when it has one.
func (s *shard) sendOne(msg replication.Message) {
	if peer.IsRequest(msg.Type) {
		var dst []byte
		if len(msg.Records) == 0 {
			dst = s.m.pool.Buffer(msg.To, msg.Conn)
		}
		b, err := peer.AppendFrame(dst, s.id, msg)
		if err != nil {
			s.m.o.Logger.Error(err, "cannot encode replication message", "shard", s.id.String())
			return
		}
		if msg.Type == replication.MsgAppend {
			s.counters.shipped(string(msg.To), len(b), len(msg.Records))
		}
		s.m.pool.Send(msg.To, msg.Conn, b)
		return
	}
	pc := s.m.in.lookup(msg.Conn)
	if pc == nil {
		return // the connection is gone; the leader asks again
	}
	var dst []byte
	if len(msg.Records) == 0 {
		dst = pc.Buffer()
	}
	b, err := peer.AppendFrame(dst, s.id, msg)
	if err != nil {
		s.m.o.Logger.Error(err, "cannot encode replication message", "shard", s.id.String())
		return
	}
	pc.SendFrame(b) // built whole: no copy
}
