package replica

import (
	"sync"

	"felix.dev/felix/broker/peer"
	"felix.dev/felix/broker/record"
	"felix.dev/felix/broker/replication"
	"felix.dev/felix/broker/server"
	"felix.dev/felix/broker/wire"
)

// inbound numbers the connections peers opened to this broker's server,
// so a follower's answers go back over the connection their request came
// on (Message.Conn).
type inbound struct {
	mu   sync.Mutex
	byPC map[server.PeerConn]inConn
	byID map[replication.ConnID]server.PeerConn
	// forged holds the connections that sent a frame naming a sender
	// other than their identity (logged once per connection).
	forged map[server.PeerConn]bool
	spawn  func(func()) // runs the cleanup watcher (a goroutine)
}

func (in *inbound) init() {
	in.byPC = map[server.PeerConn]inConn{}
	in.byID = map[replication.ConnID]server.PeerConn{}
	in.forged = map[server.PeerConn]bool{}
	in.spawn = func(f func()) { go f() }
}

// firstForgery records that pc sent a frame with a forged sender and
// reports whether it is the connection's first.
func (in *inbound) firstForgery(pc server.PeerConn) bool {
	in.mu.Lock()
	defer in.mu.Unlock()
	if in.forged[pc] {
		return false
	}
	in.forged[pc] = true
	in.spawn(func() {
		<-pc.Done()
		in.mu.Lock()
		delete(in.forged, pc)
		in.mu.Unlock()
	})
	return true
}

// inConn is what inbound keeps of an accepted connection: its ConnID and
// the names decoded from its frames (used only by the connection's reader
// goroutine, which calls ServeReplication).
type inConn struct {
	id    replication.ConnID
	names *peer.Names
}

// conn returns pc's ConnID, numbering it on first sight from ids, and its
// names.
func (in *inbound) conn(pc server.PeerConn, ids *peer.ConnIDs) inConn {
	in.mu.Lock()
	defer in.mu.Unlock()
	if c, ok := in.byPC[pc]; ok {
		return c
	}
	id := ids.Next()
	c := inConn{id: id, names: new(peer.Names)}
	in.byPC[pc] = c
	in.byID[id] = pc
	in.spawn(func() {
		<-pc.Done()
		in.mu.Lock()
		delete(in.byPC, pc)
		delete(in.byID, id)
		in.mu.Unlock()
	})
	return c
}

// known returns pc's entry if it was numbered (the zero inConn if not).
func (in *inbound) known(pc server.PeerConn) inConn {
	in.mu.Lock()
	defer in.mu.Unlock()
	return in.byPC[pc]
}

func (in *inbound) lookup(id replication.ConnID) server.PeerConn {
	in.mu.Lock()
	defer in.mu.Unlock()
	return in.byID[id]
}

// handler is the server hook: it decodes replication requests from
// leaders and steps them into the shard's replica.
//
// A frame is applied only if the sender it names (Message.From) is the
// broker its connection authenticated as (PeerConn.Identity): a broker of
// the cluster can speak only for itself, so it cannot pose as a shard's
// leader to make a follower truncate. Any other frame is dropped, counted
// (felix_broker_replication_frames_refused_total{reason="sender_mismatch"})
// and logged once per connection. A connection without identity reaches
// the handler only from a test server with
// server.Options.InsecurePeersOnClientPort; its frames are taken as sent.
type handler struct{ m *Manager }

func (h handler) ServeReplication(pc server.PeerConn, f wire.Frame) {
	m := h.m
	// A frame holds one message, or several in a bundle
	// (wire.FeatureShipBundle); each is handled as if it came alone. An
	// idle pass's bundle (one message per log) decodes into buf, on the
	// stack.
	var buf [2 * len(record.LogKinds)]peer.Shipped
	// The connection's names (once it is numbered, at its first accepted
	// request): its frames' stream and node names decode to the strings
	// already held.
	ic := m.in.known(pc)
	msgs, err := peer.DecodeFrameNames(f, buf[:0], ic.names)
	if err != nil {
		m.o.Logger.V(1).Info("dropping bad replication frame", "error", err.Error())
		return
	}
	// The requests of one shard in a row (an idle pass's bundle) are
	// stepped together: on this goroutine if the shard is idle (idle.go),
	// else through its inbox.
	var run [2 * len(record.LogKinds)]replication.Message
	var cur *shard
	pending := run[:0]
	for i := range msgs {
		s, msg, ok := h.accept(pc, msgs[i], &ic)
		if !ok {
			continue
		}
		if s != cur {
			deliver(cur, pending)
			cur, pending = s, pending[:0]
		}
		pending = append(pending, msg)
	}
	deliver(cur, pending)
	clear(pending)
}

// accept checks one decoded message and returns the shard it is for; ok
// is false if it is dropped. ic is the connection's entry, numbered here
// if it is not yet.
func (h handler) accept(pc server.PeerConn, sh peer.Shipped, ic *inConn) (s *shard, msg replication.Message, ok bool) {
	m := h.m
	shard, msg := sh.Shard, sh.Msg
	if id := pc.Identity(); id != "" && msg.From != replication.NodeID(id) {
		pc.Refused(server.RefusedSenderMismatch)
		if m.in.firstForgery(pc) {
			m.o.Logger.Info("dropping replication frames whose sender is not the connection's broker",
				"identity", id, "from", string(msg.From), "shard", shard.String(), "type", msg.Type.String())
		}
		return nil, msg, false
	}
	if !peer.IsRequest(msg.Type) {
		return nil, msg, false // answers travel over the connections this broker opened
	}
	if ic.id == 0 {
		*ic = m.in.conn(pc, m.ids)
	}
	msg.Conn = ic.id
	s, err := m.shard(shard)
	if err != nil {
		// Not (yet) a replica here: say nothing; the leader retries.
		return nil, msg, false
	}
	if msg.Type == replication.MsgAppend {
		s.counters.receivedFrame(sh.Size)
	}
	return s, msg, true
}

// deliver steps msgs, in order, into s: on the calling goroutine if s is
// idle (idle.go), else through its inbox. A nil s takes nothing.
func deliver(s *shard, msgs []replication.Message) {
	if s == nil || len(msgs) == 0 || s.stepIdle(msgs) {
		return
	}
	for i := range msgs {
		s.post(event{kind: evStep, msg: msgs[i]})
	}
}
