package server

import (
	"sync"

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
	// Send queues f on the connection, after every answer queued before
	// it. It reports false, sending nothing, once the connection is done.
	Send(f wire.Frame) bool
	// Done is closed when the connection stops reading (peer gone,
	// violation, drain); Send reports false from then on.
	Done() <-chan struct{}
}

// peerConn implements PeerConn over a server connection. It holds the
// connection's request wait group while open, so the connection's answer
// queue stays open for Send until Done is closed.
type peerConn struct {
	c    *conn
	mu   sync.Mutex
	shut bool
	done chan struct{}
}

func (p *peerConn) StorageID() []byte     { return p.c.peerID }
func (p *peerConn) Done() <-chan struct{} { return p.done }

func (p *peerConn) Send(f wire.Frame) bool {
	b := wire.AppendFrame(make([]byte, 0, wire.FrameHeaderSize+len(f.Body)), f)
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.shut {
		return false
	}
	p.c.out <- outFrame{b: b}
	return true
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
		p := &peerConn{c: c, done: make(chan struct{})}
		c.repl = p
		c.replicating.Store(true)
		c.reqWG.Add(1)
		go func() {
			<-c.waitCtx.Done()
			p.mu.Lock()
			p.shut = true
			close(p.done)
			p.mu.Unlock()
			c.reqWG.Done()
		}()
	}
	h.ServeReplication(c.repl, f)
	return true
}
