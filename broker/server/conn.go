package server

import (
	"bufio"
	"context"
	"crypto/tls"
	"encoding/binary"
	"errors"
	"io"
	"net"
	"os"
	"runtime"
	"sync"
	"sync/atomic"
	"time"

	"github.com/go-logr/logr"

	"felix.dev/felix/broker/auth"
	"felix.dev/felix/broker/record"
	"felix.dev/felix/broker/wire"
)

// outFrame is an encoded answer and the budget bytes its request holds until
// the answer is written.
type outFrame struct {
	b       []byte
	release charge
	// free, when set, takes b back once written (a replication frame:
	// PeerConn.Buffer hands it out again).
	free chan<- []byte
}

// freeFrames is how many written replication frames a peer connection
// keeps for PeerConn.Buffer, and maxFreeFrame the largest it keeps (an
// idle pass's bundles are a few hundred bytes; a pass answers one for
// every shard the peer leads, in a burst, so the writer keeps about as
// many: at most 256 KiB).
const (
	freeFrames   = 128
	maxFreeFrame = 2 << 10
)

// conn is one client connection: a reader goroutine that decodes frames and
// dispatches them, handler goroutines, and a writer goroutine that sends the
// answers in the order they are queued.
type conn struct {
	s   *Server
	nc  net.Conn
	log logr.Logger

	feats  wire.Features
	peerID []byte    // storage id the peer presented [RP-2]
	repl   *peerConn // set at the first replication frame (replication.go)
	// principal is who the connection authenticated as, set by the
	// handshake before any request is read.
	principal auth.Principal
	// notAfter is the earliest NotAfter of the certificate chain the
	// peer presented (zero: none presented); once Options.Now passes it
	// the connection is refused (certExpired).
	notAfter atomic.Int64 // UnixNano; 0: none
	// expired is set by the server's certificate check (expireCheck).
	expired atomic.Bool
	// warnedRepl: a refused replication frame was logged (reader only).
	warnedRepl bool

	budget *budget
	out    chan outFrame
	reqWG  sync.WaitGroup // requests read and not yet answered
	// unanswered counts the client requests read and not yet answered;
	// the writer yields before a flush only while it is above zero (more
	// answers are coming that could share the write). replicating: the
	// connection carries replication, whose answers always may.
	unanswered  atomic.Int64
	replicating atomic.Bool

	// waitCtx ends when the reader stops (peer gone, violation, drain).
	waitCtx    context.Context
	waitCancel context.CancelFunc

	dmu      sync.Mutex // orders the drain flag with read deadlines
	draining bool

	violated bool // a connection-level error was sent (reader goroutine only)

	qmu    sync.Mutex
	queues map[record.ShardID]*shardQueue
	// submitted holds a token per append submitted to a Submitter log
	// and not yet answered (bounded by maxSubmitted).
	submitted chan struct{}
}

func newConn(s *Server, nc net.Conn) *conn {
	if s.opts.TLS != nil {
		nc = tls.Server(nc, s.opts.TLS)
	}
	c := &conn{s: s, nc: nc, log: s.log.WithValues("remote", nc.RemoteAddr().String()),
		budget: newBudget(s.opts.MaxInFlightBytes), out: make(chan outFrame, 256),
		queues: map[record.ShardID]*shardQueue{}, submitted: make(chan struct{}, maxSubmitted)}
	c.waitCtx, c.waitCancel = context.WithCancel(s.waitCtx)
	return c
}

// drain stops reading new requests; requests already read are answered.
func (c *conn) drain() {
	c.dmu.Lock()
	c.draining = true
	_ = c.nc.SetReadDeadline(time.Now())
	c.dmu.Unlock()
}

// errCertExpired answers the requests of a connection whose certificate
// expired.
var errCertExpired = &wire.Error{Code: wire.CodeUnauthenticated, Message: "certificate expired"}

// certExpired reports whether the certificate the connection presented
// has expired by the server's clock.
func (c *conn) certExpired() bool {
	na := c.notAfter.Load()
	if na == 0 {
		return false
	}
	if c.expired.Load() {
		return true
	}
	if c.s.opts.Now().After(time.Unix(0, na)) {
		c.expired.Store(true)
		return true
	}
	return false
}

// expireCheck is the server's periodic check: a connection whose
// certificate expired stops waiting (follow-mode reads end) and its reader
// wakes to refuse it.
func (c *conn) expireCheck(now time.Time) {
	na := c.notAfter.Load()
	if na == 0 || c.expired.Load() || !now.After(time.Unix(0, na)) {
		return
	}
	c.expired.Store(true)
	c.log.Info("closing connection: its certificate expired", "notAfter", time.Unix(0, na).UTC())
	c.waitCancel()
	c.dmu.Lock()
	if !c.draining {
		_ = c.nc.SetReadDeadline(time.Now())
	}
	c.dmu.Unlock()
}

// setReadDeadline sets d unless draining; it reports false when draining.
func (c *conn) setReadDeadline(d time.Time) bool {
	c.dmu.Lock()
	defer c.dmu.Unlock()
	if c.draining {
		return false
	}
	_ = c.nc.SetReadDeadline(d)
	return true
}

func (c *conn) isDraining() bool {
	c.dmu.Lock()
	defer c.dmu.Unlock()
	return c.draining
}

func (c *conn) serve() {
	m := c.s.opts.Metrics
	m.connOpened()
	defer m.connClosed()
	writerDone := make(chan struct{})
	go func() {
		defer close(writerDone)
		c.writeLoop()
	}()
	br := bufio.NewReaderSize(c.nc, 64<<10)
	if c.handshake(br) {
		c.readLoop(br)
	}
	c.waitCancel()
	c.reqWG.Wait()
	close(c.out)
	<-writerDone
	if c.violated {
		lingerClose(c.nc)
		return
	}
	_ = c.nc.Close()
}

// lingerClose closes a connection the broker refused so that its last frame
// (an Error) reaches the peer: closing with unread input would make the
// kernel reset the connection and the peer could lose that frame. It shuts
// the write side, then reads and discards for up to a second.
func lingerClose(nc net.Conn) {
	defer func() { _ = nc.Close() }()
	cw, ok := nc.(interface{ CloseWrite() error })
	if !ok || cw.CloseWrite() != nil {
		return
	}
	_ = nc.SetReadDeadline(time.Now().Add(time.Second))
	_, _ = io.Copy(io.Discard, io.LimitReader(nc, 1<<20))
}

// handshake reads the Hello within HandshakeTimeout and answers it. It
// reports whether the connection may go on.
func (c *conn) handshake(br *bufio.Reader) bool {
	if !c.setReadDeadline(time.Now().Add(c.s.opts.HandshakeTimeout)) {
		return false
	}
	if tc, ok := c.nc.(*tls.Conn); ok {
		// The TLS handshake first, on its own, so that its refusals
		// (VerifyConnection) are seen and counted.
		_ = tc.SetWriteDeadline(time.Now().Add(c.s.opts.HandshakeTimeout))
		if err := tc.HandshakeContext(c.waitCtx); err != nil {
			if !c.isDraining() {
				c.s.opts.Metrics.connDropped("tls-handshake")
				c.log.V(1).Info("TLS handshake failed", "error", err.Error())
				if cb := c.s.opts.OnTLSHandshakeError; cb != nil {
					cb(err)
				}
			}
			return false
		}
	}
	f, err := wire.ReadFrame(br, min(c.s.opts.MaxFrameSize, maxHelloFrame))
	if err != nil {
		if c.isDraining() {
			c.violation("draining", &wire.Error{Code: wire.CodeUnavailable, Message: "the broker is stopping"})
			return false
		}
		c.violation("handshake", &wire.Error{Code: wire.CodeBadRequest, Message: "expected a Hello frame: " + err.Error()})
		return false
	}
	if f.Type != wire.MsgHello {
		c.violation("handshake", &wire.Error{Code: wire.CodeBadRequest, Message: "expected a Hello frame, got " + f.Type.String()})
		return false
	}
	hello, err := wire.DecodeHello(f.Body)
	if err != nil {
		c.violation("handshake", &wire.Error{Code: wire.CodeBadRequest, Message: err.Error()})
		return false
	}
	v, feats, err := wire.Negotiate(hello, c.s.opts.Features)
	if err != nil {
		c.violation("version", wire.ErrorFrom(err))
		return false
	}
	c.feats = feats
	if !c.authenticate() {
		return false
	}
	if feats.Has(wire.FeatureStorageID) {
		c.peerID = hello.StorageID
	}
	body, err := wire.EncodeHelloOK(wire.HelloOK{Version: v, Features: feats, MaxFrameSize: c.s.opts.MaxFrameSize,
		MaxBatchRecords: uint32(c.s.opts.MaxBatchRecords), StorageID: c.s.opts.StorageID})
	if err != nil {
		c.violation("handshake", &wire.Error{Code: wire.CodeUnavailable, Message: err.Error()})
		return false
	}
	c.out <- outFrame{b: wire.AppendFrame(nil, wire.Frame{Type: wire.MsgHelloOK, Body: body})}
	c.log.V(1).Info("connection opened", "version", v, "features", feats.String())
	return true
}

// authenticate learns the connection's principal (Options.Authenticate,
// after the TLS handshake the Hello completed) and refuses the connection
// (an error answering the Hello, then close) when it may not go on: the
// authentication failed; on the peer port, the principal is not a broker;
// on the client port, it is anonymous and the Authorizer refuses anonymous
// connections. It reports whether the connection may go on.
func (c *conn) authenticate() bool {
	o := &c.s.opts
	var p auth.Principal
	if o.Authenticate != nil {
		var cs *tls.ConnectionState
		if tc, ok := c.nc.(*tls.Conn); ok {
			st := tc.ConnectionState()
			cs = &st
		}
		if cs != nil {
			var na time.Time
			for _, pc := range cs.PeerCertificates {
				if na.IsZero() || pc.NotAfter.Before(na) {
					na = pc.NotAfter
				}
			}
			if !na.IsZero() {
				c.notAfter.Store(na.UnixNano())
			}
		}
		var err error
		if p, err = o.Authenticate(cs); err != nil {
			c.violation("unauthenticated", &wire.Error{Code: wire.CodeUnauthenticated, Message: err.Error()})
			return false
		}
	}
	switch {
	case o.Role == RolePeer && p.Kind == auth.Anonymous:
		o.Metrics.ReplicationFrameRefused(RefusedNotBroker)
		c.violation("unauthenticated", &wire.Error{Code: wire.CodeUnauthenticated,
			Message: "the peer port accepts only brokers: present a broker certificate"})
		return false
	case o.Role == RolePeer && p.Kind == auth.Broker && p.Name == "":
		// A nameless broker could not be held to the sender it names.
		o.Metrics.ReplicationFrameRefused(RefusedNotBroker)
		c.violation("unauthenticated", &wire.Error{Code: wire.CodeUnauthenticated,
			Message: "the broker certificate names no broker"})
		return false
	case o.Role == RolePeer && p.Kind != auth.Broker:
		o.Metrics.ReplicationFrameRefused(RefusedNotBroker)
		c.violation("not-broker", &wire.Error{Code: wire.CodeNotAuthorized,
			Message: p.String() + " is not a broker; the peer port accepts only brokers"})
		return false
	case o.Role == RoleClient && p.Kind == auth.Anonymous:
		if g, ok := o.Authorizer.(auth.AnonymousGate); ok && !g.AnonymousAllowed() {
			c.violation("unauthenticated", &wire.Error{Code: wire.CodeUnauthenticated,
				Message: "anonymous connections are not allowed: present a client certificate"})
			return false
		}
	}
	c.principal = p
	c.log = c.log.WithValues("principal", p.String())
	return true
}

// violation answers a connection-level error (request id 0) and stops the
// connection.
func (c *conn) violation(reason string, e *wire.Error) {
	c.violated = true
	c.s.opts.Metrics.connDropped(reason)
	c.log.V(1).Info("closing connection", "reason", reason, "error", e.Error())
	body, err := wire.EncodeErrorFor(e, c.feats)
	if err != nil {
		return
	}
	c.out <- outFrame{b: wire.AppendFrame(nil, wire.Frame{Type: wire.MsgError, Body: body})}
}

func (c *conn) readLoop(br *bufio.Reader) {
	o := &c.s.opts
	armed := true // a deadline is set on the connection: the handshake's
	for {
		if c.isDraining() {
			return
		}
		if c.certExpired() {
			c.violation("certificate-expired", errCertExpired)
			return
		}
		// A frame already whole in the buffer is read without touching
		// the connection, so it needs no deadline (the pipelined case).
		buffered := frameBuffered(br)
		if !buffered {
			if o.IdleTimeout > 0 || armed {
				idle := time.Time{}
				if o.IdleTimeout > 0 {
					idle = time.Now().Add(o.IdleTimeout)
				}
				if !c.setReadDeadline(idle) {
					return
				}
				armed = o.IdleTimeout > 0
			}
			if _, err := br.Peek(1); err != nil {
				if c.isDraining() || errors.Is(err, io.EOF) || errors.Is(err, net.ErrClosed) {
					return
				}
				if errors.Is(err, os.ErrDeadlineExceeded) && c.certExpired() {
					c.violation("certificate-expired", errCertExpired)
					return
				}
				if errors.Is(err, os.ErrDeadlineExceeded) {
					// A connection waiting for its own answers (a
					// follow read parked at the broker) is not idle.
					if c.unanswered.Load() > 0 {
						continue
					}
					c.violation("idle", &wire.Error{Code: wire.CodeBadRequest, Message: "idle timeout"})
				}
				return
			}
			if c.certExpired() {
				c.violation("certificate-expired", errCertExpired)
				return
			}
			// The frame has begun: all of it must arrive within
			// FrameTimeout.
			if !c.setReadDeadline(time.Now().Add(o.FrameTimeout)) {
				return
			}
			armed = true
		}
		h, err := wire.ReadFrameHeader(br, o.MaxFrameSize)
		if err != nil {
			c.readFailed(err)
			return
		}
		f, held, kept, ok := c.readBody(br, h, buffered)
		if !ok {
			return
		}
		if !kept {
			continue // refused and answered; the body was read past
		}
		if !c.dispatch(f, held) {
			return
		}
	}
}

// opName is the metrics label of a request type.
func opName(t wire.MsgType) string {
	switch t {
	case wire.MsgAppend:
		return "append"
	case wire.MsgRead:
		return "read"
	case wire.MsgTrim:
		return "trim"
	case wire.MsgDescribe:
		return "describe"
	case wire.MsgHello:
		return "hello"
	case wire.MsgCounterAdd:
		return "counter_add"
	case wire.MsgCounterGet:
		return "counter_get"
	case wire.MsgCounterSnapshot:
		return "counter_snapshot"
	case wire.MsgGroupClaim:
		return "group_claim"
	case wire.MsgGroupHeartbeat:
		return "group_heartbeat"
	case wire.MsgGroupCommit:
		return "group_commit"
	case wire.MsgGroupLeave:
		return "group_leave"
	case wire.MsgGroupDescribe:
		return "group_describe"
	case wire.MsgGroupAckConfig:
		return "group_ack_config"
	case wire.MsgGroupFetch:
		return "group_fetch"
	case wire.MsgGroupAck:
		return "group_ack"
	case wire.MsgGroupNak:
		return "group_nak"
	case wire.MsgDeadLetterRead:
		return "dead_letter_read"
	case wire.MsgDeadLetterRedrive:
		return "dead_letter_redrive"
	case wire.MsgDeadLetterTrim:
		return "dead_letter_trim"
	}
	return "unknown"
}

// readFailed ends the connection after a frame could not be read.
func (c *conn) readFailed(err error) {
	var tooLarge *wire.FrameTooLargeError
	switch {
	case c.isDraining():
	case errors.As(err, &tooLarge):
		c.violation("frame-too-large", &wire.Error{Code: wire.CodeRecordTooLarge, Message: err.Error(), Limit: tooLarge.Limit})
	case errors.Is(err, wire.ErrFrameTooShort):
		c.violation("bad-frame", &wire.Error{Code: wire.CodeBadRequest, Message: err.Error()})
	case errors.Is(err, os.ErrDeadlineExceeded):
		c.violation("frame-timeout", &wire.Error{Code: wire.CodeBadRequest, Message: "frame not completed within the frame timeout"})
	default:
		c.s.opts.Metrics.connDropped("read-error")
	}
}

// frameBuffered reports whether br holds a whole frame.
func frameBuffered(br *bufio.Reader) bool {
	n := br.Buffered()
	if n < 4 {
		return false
	}
	p, err := br.Peek(4)
	if err != nil {
		return false
	}
	return uint64(n) >= 4+uint64(binary.BigEndian.Uint32(p))
}

// answer queues an answer frame; release is the budget its request held.
func (c *conn) answer(t wire.MsgType, reqID uint32, body []byte, release charge) {
	c.out <- outFrame{b: wire.AppendFrame(make([]byte, 0, wire.FrameHeaderSize+len(body)), wire.Frame{Type: t, ReqID: reqID, Body: body}), release: release}
}

func (c *conn) writeLoop() {
	bw := bufio.NewWriterSize(c.nc, 64<<10)
	broken := false
	for of := range c.out {
		if !broken {
			_ = c.nc.SetWriteDeadline(time.Now().Add(c.s.opts.WriteTimeout))
			_, err := bw.Write(of.b)
			if err == nil && len(c.out) == 0 && (c.unanswered.Load() > 0 || c.replicating.Load()) {
				// Let handlers about to answer join this write: one
				// syscall for many pipelined answers. A lone answer
				// (a synchronous client) goes out at once.
				runtime.Gosched()
			}
			if err == nil && len(c.out) == 0 {
				err = bw.Flush()
			}
			if err != nil {
				// The peer is gone or stalled: stop reading too. Keep
				// draining the queue so handlers never block.
				broken = true
				c.s.opts.Metrics.connDropped("write-error")
				_ = c.nc.Close()
			}
		}
		c.budget.release(of.release.conn)
		of.release.frame.release()
		if of.free != nil && cap(of.b) <= maxFreeFrame {
			// Written (or dropped): nothing refers to it any more.
			select {
			case of.free <- of.b[:0]:
			default:
			}
		}
	}
	if !broken {
		_ = bw.Flush()
	}
}
