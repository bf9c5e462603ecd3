package replica

import (
	"context"
	"errors"
	"fmt"
	"sync"

	"felix.dev/felix/broker/peer"
	"felix.dev/felix/broker/record"
	"felix.dev/felix/broker/replication"
	"felix.dev/felix/broker/server"
)

// ErrReplicaSetChanged refuses EnsureShard for a shard this Manager already
// runs with another replica set; RemoveShard it first.
var ErrReplicaSetChanged = errors.New("replica: shard's replica set changed")

// Manager runs the shard replicas of one broker. Safe for concurrent use.
type Manager struct {
	o      Options
	selfB  []byte
	selfID replication.StorageID
	ids    *peer.ConnIDs
	pool   *peer.Pool

	// ctx ends on Close; store calls of the shard goroutines use it.
	ctx    context.Context
	cancel context.CancelFunc
	// maintCancel ends the maintenance goroutine, which closes maintDone.
	maintCancel context.CancelFunc
	maintDone   chan struct{}

	// clock starts the passes of every shard (pass.go).
	clock passClock

	// mu guards shards and closed. Shard goroutines never take it, so it
	// may be held while waiting for a shard's inbox.
	mu     sync.Mutex
	shards map[record.ShardID]*shard
	closed bool

	in inbound
}

// NewManager returns a Manager with no shards.
func NewManager(o Options) (*Manager, error) {
	if o.Store == nil {
		return nil, errors.New("replica: Options.Store is required")
	}
	if o.Self == "" {
		return nil, errors.New("replica: Options.Self is required")
	}
	o = o.withDefaults()
	m := &Manager{o: o, ids: &peer.ConnIDs{}, shards: map[record.ShardID]*shard{}}
	m.selfB, m.selfID = o.selfIDs()
	m.in.init()
	m.ctx, m.cancel = context.WithCancel(context.Background())
	resolve := o.Resolve
	if resolve == nil {
		resolve = func(n replication.NodeID) (string, error) {
			return "", fmt.Errorf("replica: no resolver for %s", n)
		}
	}
	m.pool = peer.NewPool(peer.Options{
		Self: o.Self, StorageID: m.selfB, Resolve: resolve, Dial: o.Dial, TLS: o.PeerTLS, Events: poolEvents{m},
		ConnIDs: m.ids, Backoff: o.Backoff, After: o.After, Logger: o.Logger.WithName("peer"),
		OnConnectFailed: o.PeerConnectFailed,
	})
	m.clock.start(o.PassInterval)
	m.maintDone = make(chan struct{})
	if o.MaintainInterval > 0 {
		var mctx context.Context
		mctx, m.maintCancel = context.WithCancel(m.ctx)
		go m.runMaintenance(mctx)
	} else {
		m.maintCancel = func() {}
		close(m.maintDone)
	}
	return m, nil
}

// EnsureShard starts this broker's replica of shard (idempotent): it
// creates the shard's four logs at base if they do not exist, builds the
// core from what they hold, and starts the shard's goroutine and the
// connections to its peers. replicas is the shard's replica set, Self
// included. The replica accepts no shipping and serves no client until
// the control plane calls SetKnownEpoch or SetAssignment. Calling it again
// with the same replica set updates the ack mode only.
func (m *Manager) EnsureShard(id record.ShardID, replicas []replication.NodeID, mode replication.AckMode, base uint64) error {
	if done, err := m.updateShard(id, replicas, mode); done || err != nil {
		return err
	}
	// Built outside mu: the epoch scan reads the whole log.
	s, err := newShard(m, id, replicas, mode, base)
	if err != nil {
		return err
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.closed {
		return record.ErrClosed
	}
	if old := m.shards[id]; old != nil {
		// Another EnsureShard won the race; s never started.
		if !sameSet(old.replicas, replicas) {
			return fmt.Errorf("replica: %s: %w", id, ErrReplicaSetChanged)
		}
		old.mode.Store(uint32(mode))
		return nil
	}
	m.shards[id] = s
	for _, p := range s.peers {
		m.pool.Want(p)
	}
	m.clock.add(s)
	go s.run()
	// Tell the new replica about connections already up. Holding mu orders
	// this with the pool's later events for the same connections.
	for _, p := range s.peers {
		if conn, sid, ok := m.pool.Current(p); ok {
			s.post(event{kind: evConnected, node: p, conn: conn, sid: sid})
		}
	}
	return nil
}

// updateShard applies EnsureShard to a shard that already runs; done is
// false when it does not.
func (m *Manager) updateShard(id record.ShardID, replicas []replication.NodeID, mode replication.AckMode) (done bool, err error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.closed {
		return true, record.ErrClosed
	}
	s := m.shards[id]
	if s == nil {
		return false, nil
	}
	if !sameSet(s.replicas, replicas) {
		return true, fmt.Errorf("replica: %s: %w", id, ErrReplicaSetChanged)
	}
	s.mode.Store(uint32(mode))
	return true, nil
}

// SetAssignment applies the control plane's assignment for shard (FelixShard
// status.assignment). It implies SetKnownEpoch(a.Epoch).
func (m *Manager) SetAssignment(id record.ShardID, a replication.Assignment) error {
	s, err := m.shard(id)
	if err != nil {
		return err
	}
	if !s.post(event{kind: evAssign, assign: a}) {
		return record.ErrClosed
	}
	return nil
}

// SetKnownEpoch tells shard's replica the current epoch as the control
// plane knows it. Until this (or SetAssignment) a restarted replica answers
// no shipping.
func (m *Manager) SetKnownEpoch(id record.ShardID, epoch uint64) error {
	s, err := m.shard(id)
	if err != nil {
		return err
	}
	if !s.post(event{kind: evKnownEpoch, epoch: epoch}) {
		return record.ErrClosed
	}
	return nil
}

// Status returns the last published status of shard's replica. For a
// replica that stopped because its store failed it returns that status
// with the failure (its shard answers Unavailable until RemoveShard and
// EnsureShard start it again).
func (m *Manager) Status(id record.ShardID) (replication.Status, error) {
	s, err := m.shard(id)
	if err != nil {
		return replication.Status{}, err
	}
	st := *s.status.Load()
	if e := s.failed.Load(); e != nil {
		return st, fmt.Errorf("replica: %s failed: %w", id, *e)
	}
	return st, nil
}

// RemoveShard stops shard's replica; its logs stay in the store. Client
// calls waiting on it fail with Unavailable. A replica whose store write
// failed stops by itself (its shard answers Unavailable); RemoveShard and
// EnsureShard start it again from what the store holds.
func (m *Manager) RemoveShard(id record.ShardID) {
	m.mu.Lock()
	s := m.shards[id]
	delete(m.shards, id)
	m.mu.Unlock()
	if s == nil {
		return
	}
	m.clock.remove(s)
	s.stop()
	for _, p := range s.peers {
		m.pool.Release(p)
	}
	m.o.Metrics.dropShard(id.String())
}

// Shards returns the server.Shards of the replicated mode (see the package
// documentation).
func (m *Manager) Shards() server.Shards { return shardsView{m} }

// ReplicationHandler returns the handler to install as
// server.Options.Replication on the server peers connect to.
func (m *Manager) ReplicationHandler() server.ReplicationHandler { return handler{m} }

// Close stops maintenance, every replica and peer connection. The store
// stays open.
func (m *Manager) Close() {
	m.maintCancel()
	<-m.maintDone
	m.mu.Lock()
	m.closed = true
	all := m.shards
	m.shards = map[record.ShardID]*shard{}
	m.mu.Unlock()
	m.clock.stop()
	for _, s := range all {
		s.stop()
	}
	m.cancel()
	m.pool.Close()
}

func (m *Manager) shard(id record.ShardID) (*shard, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	s := m.shards[id]
	if s == nil {
		return nil, fmt.Errorf("replica: %s: %w", id, record.ErrShardUnknown)
	}
	return s, nil
}

// fanOut posts ev to every shard that has node as a peer. Holding mu keeps
// the order with EnsureShard's replay of current connections.
func (m *Manager) fanOut(node replication.NodeID, ev event) {
	m.mu.Lock()
	defer m.mu.Unlock()
	for _, s := range m.shards {
		if s.hasPeer(node) {
			s.post(ev)
		}
	}
}

// poolEvents feeds the pool's events to the shards.
type poolEvents struct{ m *Manager }

func (e poolEvents) Connected(n replication.NodeID, c replication.ConnID, id replication.StorageID) {
	e.m.fanOut(n, event{kind: evConnected, node: n, conn: c, sid: id})
}

func (e poolEvents) Disconnected(n replication.NodeID, c replication.ConnID) {
	e.m.fanOut(n, event{kind: evDisconnected, node: n, conn: c})
}

func (e poolEvents) LookupFailed(n replication.NodeID) {
	e.m.fanOut(n, event{kind: evLookupFailed, node: n})
}

func (e poolEvents) Message(id record.ShardID, msg replication.Message) {
	if s, err := e.m.shard(id); err == nil {
		deliver(s, []replication.Message{msg})
	}
}

// Messages takes the answers of one frame for one shard together
// (peer.BatchEvents): stepped on the pool's reader if the shard is idle
// (idle.go), else through its inbox.
func (e poolEvents) Messages(id record.ShardID, msgs []replication.Message) {
	if s, err := e.m.shard(id); err == nil {
		deliver(s, msgs)
	}
}

func sameSet(a, b []replication.NodeID) bool {
	if len(a) != len(b) {
		return false
	}
	in := map[replication.NodeID]bool{}
	for _, n := range a {
		in[n] = true
	}
	for _, n := range b {
		if !in[n] {
			return false
		}
	}
	return true
}
