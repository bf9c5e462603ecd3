package server

import (
	"sync/atomic"
	"time"

	"felix.dev/felix/broker/auth"
	"felix.dev/felix/broker/wire"
)

// ReplicationHandler receives the broker-to-broker replication frames
// (types 0x40..0x4F, wire.MsgType.ReservedReplication) that arrive on a
// connection of a RolePeer server (whose principal is then always a
// broker), with the connection they came on. A server without one answers
// those frames with BadRequest, as a broker without replication always
// did; a RoleClient server answers them NotAuthorized and never hands them
// on (unless Options.InsecurePeersOnClientPort, for tests).
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
	// Features are the feature bits the connection's handshake accepted
	// (the peer offered them and this server supports them); e.g. with
	// wire.FeatureShipBundle the peer takes bundled replication frames.
	Features() wire.Features
	// Send queues f on the connection's bounded send queue, after every
	// frame sent before it, and returns at once: it never waits for the
	// network. It reports false, sending nothing, once the connection is
	// done or when the queue is full (Options.PeerQueueFrames,
	// PeerQueueBytes; the frame is dropped and counted in
	// felix_broker_peer_sends_dropped_total; the replication core treats
	// it as lost on the network and asks again).
	Send(f wire.Frame) bool
	// SendFrame is Send of a frame already encoded whole (header and
	// body, as wire.AppendFrame builds it), without copying it: the
	// connection owns frame from then on, and the caller must not touch
	// it again.
	SendFrame(frame []byte) bool
	// Buffer returns an empty buffer, from a frame this connection has
	// finished writing, to build a frame for SendFrame in, or nil when it
	// has none: the caller's alone (issue 31: an idle shard's answers
	// reuse their frames' memory).
	Buffer() []byte
	// Done is closed when the connection stops reading (peer gone,
	// violation, drain); Send reports false from then on.
	Done() <-chan struct{}
	// Identity is the name of the broker the connection authenticated as
	// (Options.Authenticate returned an auth.Broker principal), or "" if
	// none: then the frame came over a RoleClient server with
	// Options.InsecurePeersOnClientPort, a test set-up. A handler applies
	// a frame only if the sender it names is Identity.
	Identity() string
	// Refused counts a frame the handler refused for reason (one of the
	// Refused* constants, e.g. RefusedSenderMismatch) in
	// felix_broker_replication_frames_refused_total.
	Refused(reason string)
}

// peerConn implements PeerConn over a server connection. Its queue is
// drained into the connection's answer queue by a goroutine of its own,
// which holds the connection's request wait group while the connection
// reads, so the answer queue stays open for it.
type peerConn struct {
	c      *conn
	q      chan []byte
	free   chan []byte  // written frames' buffers for Buffer (writeLoop fills it)
	queued atomic.Int64 // bytes in q
	shut   atomic.Bool
	done   chan struct{}
}

func (p *peerConn) StorageID() []byte       { return p.c.peerID }
func (p *peerConn) Features() wire.Features { return p.c.feats }
func (p *peerConn) Done() <-chan struct{}   { return p.done }
func (p *peerConn) Refused(reason string)   { p.c.s.opts.Metrics.ReplicationFrameRefused(reason) }

func (p *peerConn) Identity() string {
	if p.c.principal.Kind != auth.Broker {
		return ""
	}
	return p.c.principal.Name
}

func (p *peerConn) Send(f wire.Frame) bool {
	if p.shut.Load() {
		return false
	}
	return p.SendFrame(wire.AppendFrame(make([]byte, 0, wire.FrameHeaderSize+len(f.Body)), f))
}

func (p *peerConn) Buffer() []byte {
	select {
	case b := <-p.free:
		return b
	default:
		return nil
	}
}

func (p *peerConn) SendFrame(b []byte) bool {
	if p.shut.Load() {
		return false
	}
	o := &p.c.s.opts
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
			p.c.out <- outFrame{b: b, free: p.free}
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

// mayReplicate reports whether the connection's replication frames go to
// the handler: on the peer port (whose connections are all brokers), or
// on the client port of an insecure test set-up.
func (c *conn) mayReplicate() bool {
	o := &c.s.opts
	return o.Replication != nil && (o.Role == RolePeer || o.InsecurePeersOnClientPort)
}

// clientPortReplication is the message of a replication frame refused on
// the client port.
const clientPortReplication = "replication frames are not accepted on the client port; brokers replicate over the peer port"

// serveReplication hands a replication frame to the configured handler, or
// answers it NotAuthorized on the client port; hold is what the frame
// holds of a frame budget. It reports false for frames it does not take
// (no handler, or not a replication type), which the caller then
// dispatches as before.
func (c *conn) serveReplication(f wire.Frame, hold frameHold) bool {
	h := c.s.opts.Replication
	if h == nil || !f.Type.ReservedReplication() {
		return false
	}
	if !c.mayReplicate() {
		c.s.opts.Metrics.ReplicationFrameRefused(RefusedClientPort)
		if !c.warnedRepl {
			c.warnedRepl = true
			c.log.Info("refusing replication frames on the client port", "principal", c.principal.String())
		}
		c.reqWG.Add(1)
		c.unanswered.Add(1)
		c.fail(f.ReqID, "replication", time.Now(), charge{frame: hold},
			&wire.Error{Code: wire.CodeNotAuthorized, Message: clientPortReplication})
		return true
	}
	hold.release()
	if c.repl == nil {
		p := &peerConn{c: c, q: make(chan []byte, c.s.opts.PeerQueueFrames), free: make(chan []byte, freeFrames),
			done: make(chan struct{})}
		c.repl = p
		c.replicating.Store(true)
		c.reqWG.Add(1)
		go p.forward()
	}
	h.ServeReplication(c.repl, f)
	return true
}
