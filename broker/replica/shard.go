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

// inboxSize bounds the events waiting for one shard; a full inbox blocks
// the senders (peer readers stop reading: backpressure).
const inboxSize = 4096

// drainMax bounds the events fed between two Readies.
const drainMax = 4096

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
	recent   [len(record.LogKinds)]recent // run goroutine only
	core     *replication.Replica         // run goroutine only

	inbox    chan event
	stopping chan struct{}
	done     chan struct{}
	stopOnce sync.Once

	counters shipCounters // replication metrics, resolved once

	status atomic.Pointer[replication.Status]
	failed atomic.Pointer[error]

	wmu     sync.Mutex
	nextID  replication.ProposalID
	waiters map[replication.ProposalID]chan replication.Ack
}

func newShard(m *Manager, id record.ShardID, replicas []replication.NodeID, mode replication.AckMode, base uint64) (*shard, error) {
	s := &shard{m: m, id: id, replicas: append([]replication.NodeID(nil), replicas...),
		inbox: make(chan event, inboxSize), stopping: make(chan struct{}), done: make(chan struct{}),
		waiters: map[replication.ProposalID]chan replication.Ack{}}
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
	select {
	case s.inbox <- ev:
		return true
	case <-s.done:
		return false
	}
}

// stop ends the goroutine and waits for it.
func (s *shard) stop() {
	s.stopOnce.Do(func() { close(s.stopping) })
	<-s.done
}

// run is the drive loop (see the package documentation).
func (s *shard) run() {
	defer close(s.done)
	log := s.m.o.Logger.WithValues("shard", s.id.String())
	ticker := time.NewTicker(s.m.o.PassInterval)
	defer ticker.Stop()
	defer s.failWaiters()
	for {
		select {
		case ev := <-s.inbox:
			s.apply(ev)
		case <-ticker.C:
			s.core.Tick()
		case <-s.stopping:
			return
		}
	drain:
		for i := 0; i < drainMax; i++ {
			select {
			case ev := <-s.inbox:
				s.apply(ev)
			default:
				break drain
			}
		}
		for s.core.HasReady() {
			rd := s.core.Ready()
			if err := s.handle(rd); err != nil {
				log.Error(err, "replica stopped: cannot persist")
				s.failed.Store(&err)
				return
			}
			s.core.Advance(rd)
		}
		st := s.core.Status()
		s.status.Store(&st)
	}
}

func (s *shard) apply(ev event) {
	c := s.core
	switch ev.kind {
	case evStep:
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
// writes are durable), then the writes in order, then commits, acks and
// the report.
func (s *shard) handle(rd replication.Ready) error {
	for _, msg := range rd.Messages {
		s.send(msg)
	}
	if err := s.persist(rd.Writes); err != nil {
		return err
	}
	for _, c := range rd.Commits {
		if err := s.logs[c.Log].SetCommitted(c.Committed); err != nil {
			return fmt.Errorf("commit %s/%s at %d: %w", s.id, c.Log, c.Committed, err)
		}
	}
	for _, a := range rd.Acks {
		s.complete(a)
	}
	if rd.Report != nil && s.m.o.OnReport != nil {
		s.m.o.OnReport(*rd.Report)
	}
	return nil
}

// send puts a message on the wire: requests over the pool's connection
// the core chose, answers over the accepted connection of the request.
func (s *shard) send(whole replication.Message) {
	for _, msg := range split(whole, s.m.o.MaxMessageBytes) {
		s.sendOne(msg)
	}
}

func (s *shard) sendOne(msg replication.Message) {
	if peer.IsRequest(msg.Type) {
		b, err := peer.AppendFrame(nil, s.id, msg)
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
	f, err := peer.Encode(s.id, msg)
	if err != nil {
		s.m.o.Logger.Error(err, "cannot encode replication message", "shard", s.id.String())
		return
	}
	pc.Send(f)
}
