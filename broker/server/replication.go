package server

import (
	"sync/atomic"

	"felix.dev/felix/broker/wire"
)

// ReplicationHandler receives the broker-to-broker replication frames
// (types 0x40..0x4F, wire.MsgType.ReservedReplication) that arrive on a
// connection, with the connection they came on. A server without one
// answers those frames with BadRequest, as a broker without replication
// always did.
//
// ServeReplication is called from the connection's reader goroutine, once
// per frame, in arrival order; while it blocks the connection is not read
// (TCP backpressure). Replication frames are not charged to the
// connection's in-flight budget and are not request/answer pairs: the
// handler answers (or not) through PeerConn.Send whenever it likes.
type ReplicationHandler interface {
	ServeReplication(pc PeerConn, f wire.Frame)
}

// PeerConn is one accepted connection as a ReplicationHandler sees it. The
// same PeerConn value (comparable, usable as a map key) is passed for every
// frame of one connection.
type PeerConn interface {
	// StorageID is the storage id the peer presented in its Hello, or nil
	// if it did not negotiate wire.FeatureStorageID [RP-2].
	StorageID() []byte
	// Send queues f on the connection's bounded send queue, after every
	// frame sent before it, and returns at once: it never waits for the
	// network. It reports false, sending nothing, once the connection is
	// done or when the queue is full (Options.PeerQueueFrames,
	// PeerQueueBytes; the frame is dropped and counted in
	// felix_broker_peer_sends_dropped_total; the replication core treats
	// it as lost on the network and asks again).
	Send(f wire.Frame) bool
	// Done is closed when the connection stops reading (peer gone,
	// violation, drain); Send reports false from then on.
	Done() <-chan struct{}
}

// peerConn implements PeerConn over a server connection. Its queue is
// drained into the connection's answer queue by a goroutine of its own,
// which holds the connection's request wait group while the connection
// reads, so the answer queue stays open for it.
type peerConn struct {
	c      *conn
	q      chan []byte
	queued atomic.Int64 // bytes in q
	shut   atomic.Bool
	done   chan struct{}
}

func (p *peerConn) StorageID() []byte     { return p.c.peerID }
func (p *peerConn) Done() <-chan struct{} { return p.done }

func (p *peerConn) Send(f wire.Frame) bool {
	if p.shut.Load() {
		return false
	}
	o := &p.c.s.opts
	b := wire.AppendFrame(make([]byte, 0, wire.FrameHeaderSize+len(f.Body)), f)
	n := int64(len(b))
	if p.queued.Add(n) > o.PeerQueueBytes {
		p.queued.Add(-n)
		o.Metrics.peerSendDropped()
		return false
	}
	select {
	case p.q <- b:
		return true
	default:
		p.queued.Add(-n)
		o.Metrics.peerSendDropped()
		return false
	}
}

// forward moves queued frames to the connection's writer until the
// connection stops reading; frames still queued then are dropped.
func (p *peerConn) forward() {
	defer p.c.reqWG.Done()
	for {
		select {
		case b := <-p.q:
			p.c.out <- outFrame{b: b}
			p.queued.Add(-int64(len(b)))
			if p.c.waitCtx.Err() == nil {
				continue
			}
		case <-p.c.waitCtx.Done():
		}
		p.shut.Store(true)
		close(p.done)
		return
	}
}

// serveReplication hands a replication frame to the configured handler. It
// reports false for frames it does not take (no handler, or not a
// replication type), which the caller then dispatches as before.
func (c *conn) serveReplication(f wire.Frame) bool {
	h := c.s.opts.Replication
	if h == nil || !f.Type.ReservedReplication() {
		return false
	}
	if c.repl == nil {
		p := &peerConn{c: c, q: make(chan []byte, c.s.opts.PeerQueueFrames), done: make(chan struct{})}
		c.repl = p
		c.replicating.Store(true)
		c.reqWG.Add(1)
		go p.forward()
	}
	h.ServeReplication(c.repl, f)
	return true
}
