package peer

import (
	"bufio"
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"io"
	"net"
	"runtime"
	"sync"
	"sync/atomic"
	"time"

	"github.com/go-logr/logr"

	"felix.dev/felix/broker/record"
	"felix.dev/felix/broker/replication"
	"felix.dev/felix/broker/wire"
)

// Events receives what the pool learns. Calls come from the pool's
// goroutines; for one peer they are ordered (Connected, then that
// connection's Messages, then its Disconnected). Implementations may block
// briefly (that stops reading the connection), never on the pool.
type Events interface {
	// Connected: connection conn to node completed its handshake and the
	// follower presented storage id id ("" when it did not negotiate the
	// feature: an older broker) [RP-2].
	Connected(node replication.NodeID, conn replication.ConnID, id replication.StorageID)
	// Disconnected: connection conn to node is gone.
	Disconnected(node replication.NodeID, conn replication.ConnID)
	// LookupFailed: the handshake with node negotiated the storage-id
	// feature but the follower's id could not be learned (absent or
	// malformed); the connection is dropped and retried.
	LookupFailed(node replication.NodeID)
	// Message: an answer arrived for shard over m.Conn.
	Message(shard record.ShardID, m replication.Message)
}

// BatchEvents is an Events that also takes several answers for one shard
// at once. Where Options.Events implements it, the pool hands it each run
// of consecutive answers for one shard in a frame (a bundle's) with one
// Messages call instead of a Message call each, in the same order and
// with Conn set as for Message. ms is valid only during the call (its
// elements may be kept).
type BatchEvents interface {
	Events
	Messages(shard record.ShardID, ms []replication.Message)
}

// Options configures a Pool.
type Options struct {
	// Self names this broker (carried for logging only).
	Self replication.NodeID
	// StorageID is this broker's 16-byte storage id, presented in every
	// Hello; nil presents none.
	StorageID []byte
	// Resolve maps a peer to its replication address (host:port).
	Resolve func(replication.NodeID) (string, error)
	// Dial opens a connection; nil uses a net.Dialer over TCP.
	Dial func(ctx context.Context, addr string) (net.Conn, error)
	// TLS, when set, returns the client configuration for dialing node
	// (in a cluster: pki.PeerDialConfig, which checks that the server is
	// exactly that broker); every dialed connection is then wrapped in a
	// TLS client whose handshake completes, within HandshakeTimeout,
	// before the Felix Hello. A failed handshake is a failed dial (retried
	// with backoff). Nil: plain TCP.
	TLS func(node replication.NodeID) *tls.Config
	// Events receives connection events and answers. Required.
	Events Events
	// ConnIDs numbers connections; nil uses a pool-private one. Share one
	// with the accepting side so every ConnID of a broker is distinct.
	ConnIDs *ConnIDs
	// Backoff spaces reconnection attempts.
	Backoff Backoff
	// After is the clock that waits out a backoff; nil means time.After.
	After func(time.Duration) <-chan time.Time
	// HandshakeTimeout bounds dial plus handshake (default 5s).
	HandshakeTimeout time.Duration
	// MaxFrameSize bounds frames read (default wire.DefaultMaxFrameSize).
	MaxFrameSize uint32
	// QueueFrames is how many frames may wait for one connection's writer
	// (default 4096), and QueueBytes how many bytes (default 64 MiB). A
	// connection whose queue is full is dropped (and re-dialled), so the
	// frames of one connection are never reordered or silently skipped.
	QueueFrames int
	QueueBytes  int64
	// Logger receives connection events; zero discards. A failing peer is
	// logged at Info when its failure changes (the first failure, one of
	// another kind, the recovery), each retry only at V(1).
	Logger logr.Logger
	// OnConnectFailed, when set, is called with every failed connection
	// attempt's error (resolve, dial, TLS handshake wrapped in
	// ErrTLSHandshake, Hello), for counting.
	OnConnectFailed func(node replication.NodeID, err error)
}

func (o Options) withDefaults() Options {
	if o.Dial == nil {
		o.Dial = func(ctx context.Context, addr string) (net.Conn, error) {
			var d net.Dialer
			return d.DialContext(ctx, "tcp", addr)
		}
	}
	if o.ConnIDs == nil {
		o.ConnIDs = &ConnIDs{}
	}
	if o.After == nil {
		o.After = time.After
	}
	if o.HandshakeTimeout <= 0 {
		o.HandshakeTimeout = 5 * time.Second
	}
	if o.MaxFrameSize == 0 {
		o.MaxFrameSize = wire.DefaultMaxFrameSize
	}
	if o.QueueFrames <= 0 {
		o.QueueFrames = 4096
	}
	if o.QueueBytes <= 0 {
		o.QueueBytes = 64 << 20
	}
	if o.Logger.GetSink() == nil {
		o.Logger = logr.Discard()
	}
	return o
}

// Pool keeps one outgoing connection to each peer it is asked to, and
// re-dials lost ones with backoff. Safe for concurrent use.
type Pool struct {
	o Options

	mu     sync.Mutex
	links  map[replication.NodeID]*link
	closed bool
	wg     sync.WaitGroup
}

// link is the pool's state for one peer.
type link struct {
	node   replication.NodeID
	refs   int
	cancel context.CancelFunc
	cur    *liveConn // nil while not connected
}

// liveConn is one handshaken connection.
type liveConn struct {
	id     replication.ConnID
	sid    replication.StorageID
	feats  wire.Features // accepted by the peer's HelloOK
	nc     net.Conn
	out    chan []byte
	free   chan []byte  // written frames' buffers for Buffer (the writer fills it)
	queued atomic.Int64 // bytes in out
	once   sync.Once
	close  chan struct{}
}

func (c *liveConn) kill() {
	c.once.Do(func() {
		close(c.close)
		_ = c.nc.Close()
	})
}

// NewPool returns a pool with no connections.
func NewPool(o Options) *Pool {
	return &Pool{o: o.withDefaults(), links: map[replication.NodeID]*link{}}
}

// Want asks for a connection to node; calls are counted, and Release
// undoes one. The first Want starts dialling.
func (p *Pool) Want(node replication.NodeID) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.closed {
		return
	}
	if l := p.links[node]; l != nil {
		l.refs++
		return
	}
	ctx, cancel := context.WithCancel(context.Background())
	l := &link{node: node, refs: 1, cancel: cancel}
	p.links[node] = l
	p.wg.Add(1)
	go func() {
		defer p.wg.Done()
		p.run(ctx, l)
	}()
}

// Release undoes one Want; the last one closes the connection.
func (p *Pool) Release(node replication.NodeID) {
	p.mu.Lock()
	defer p.mu.Unlock()
	l := p.links[node]
	if l == nil {
		return
	}
	if l.refs--; l.refs > 0 {
		return
	}
	delete(p.links, node)
	l.cancel()
	if l.cur != nil {
		l.cur.kill()
	}
}

// Current returns the connection to node that is up now, and the storage
// id it presented.
func (p *Pool) Current(node replication.NodeID) (replication.ConnID, replication.StorageID, bool) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if l := p.links[node]; l != nil && l.cur != nil {
		return l.cur.id, l.cur.sid, true
	}
	return 0, "", false
}

// Bundles reports whether conn is node's current connection and its
// handshake accepted wire.FeatureShipBundle: frames sent over it may be
// bundles (AppendBundleFrame).
func (p *Pool) Bundles(node replication.NodeID, conn replication.ConnID) bool {
	c := p.current(node, conn)
	return c != nil && c.feats.Has(wire.FeatureShipBundle)
}

// current returns conn when it is node's current connection, else nil.
func (p *Pool) current(node replication.NodeID, conn replication.ConnID) *liveConn {
	p.mu.Lock()
	defer p.mu.Unlock()
	if l := p.links[node]; l != nil && l.cur != nil && l.cur.id == conn {
		return l.cur
	}
	return nil
}

// Send queues a complete frame (as AppendFrame builds it) on connection
// conn to node. It reports false, sending nothing, when conn is not the
// peer's current connection. A full queue drops the connection (the peer
// sees Disconnected and a new connection) rather than skip a frame. The
// pool owns frame from then on (Buffer may hand it out again once
// written): the caller must not touch it again.
func (p *Pool) Send(node replication.NodeID, conn replication.ConnID, frame []byte) bool {
	c := p.current(node, conn)
	if c == nil {
		return false
	}
	if c.queued.Add(int64(len(frame))) > p.o.QueueBytes {
		p.o.Logger.Info("replication queue over its byte limit; dropping connection", "peer", node, "conn", conn)
		c.kill()
		return false
	}
	select {
	case c.out <- frame:
		return true
	case <-c.close:
		return false
	default:
		p.o.Logger.Info("replication queue full; dropping connection", "peer", node, "conn", conn)
		c.kill()
		return false
	}
}

// freeFrames is how many written frames a connection keeps for Buffer,
// and maxFreeFrame the largest it keeps (an idle pass's bundles are a few
// hundred bytes; a pass sends one to a peer for every shard this broker
// leads, in a burst, so the writer keeps about as many: at most 256 KiB).
const (
	freeFrames   = 128
	maxFreeFrame = 2 << 10
)

// Buffer returns an empty buffer, from a frame connection conn to node has
// finished writing, to build a frame for Send in, or nil when there is
// none (or conn is not node's current connection). It is the caller's
// alone: the writer gave it up (issue 31: an idle shard's requests reuse
// their frames' memory).
func (p *Pool) Buffer(node replication.NodeID, conn replication.ConnID) []byte {
	c := p.current(node, conn)
	if c == nil {
		return nil
	}
	select {
	case b := <-c.free:
		return b
	default:
		return nil
	}
}

// Close drops every connection and waits for the pool's goroutines.
func (p *Pool) Close() {
	p.mu.Lock()
	p.closed = true
	for n, l := range p.links {
		l.cancel()
		if l.cur != nil {
			l.cur.kill()
		}
		delete(p.links, n)
	}
	p.mu.Unlock()
	p.wg.Wait()
}

// failureKind is what makes two connection failures the same for
// logging: their text (the address, the TLS alert or verification error,
// the refusal), so a change of cause is logged at Info again.
func failureKind(err error) string { return err.Error() }

// run dials node until ctx ends, serving each connection until it fails.
func (p *Pool) run(ctx context.Context, l *link) {
	log := p.o.Logger.WithValues("peer", l.node)
	failures := 0
	lastFailure := "" // the kind of the last failure logged at Info
	for ctx.Err() == nil {
		c, err := p.connect(ctx, l.node)
		if err != nil {
			if ctx.Err() != nil {
				return
			}
			failures++
			if p.o.OnConnectFailed != nil {
				p.o.OnConnectFailed(l.node, err)
			}
			if kind := failureKind(err); kind != lastFailure {
				lastFailure = kind
				log.Info("replication connection failing", "error", err.Error(), "failures", failures)
			} else {
				log.V(1).Info("replication connection failed", "error", err.Error(), "failures", failures)
			}
			if errors.Is(err, errLookup) {
				p.o.Events.LookupFailed(l.node)
			}
			select {
			case <-p.o.After(p.o.Backoff.Delay(failures)):
			case <-ctx.Done():
				return
			}
			continue
		}
		if lastFailure != "" {
			log.Info("replication connection recovered", "conn", c.id, "after", failures)
			lastFailure = ""
		}
		failures = 0
		p.mu.Lock()
		if ctx.Err() != nil {
			p.mu.Unlock()
			c.kill()
			return
		}
		l.cur = c
		p.mu.Unlock()
		log.V(1).Info("replication connection up", "conn", c.id, "storageID", c.sid)
		p.o.Events.Connected(l.node, c.id, c.sid)
		p.serve(c, l.node, log)
		p.mu.Lock()
		if l.cur == c {
			l.cur = nil
		}
		p.mu.Unlock()
		p.o.Events.Disconnected(l.node, c.id)
		// A connection that was up and broke is re-dialled after the
		// shortest wait, so a restart is noticed fast but not in a spin.
		failures = 1
		select {
		case <-p.o.After(p.o.Backoff.Delay(failures)):
		case <-ctx.Done():
			return
		}
	}
}

// serve runs c's writer and reads answers until the connection fails.
func (p *Pool) serve(c *liveConn, node replication.NodeID, log logr.Logger) {
	done := make(chan struct{})
	go func() {
		defer close(done)
		bw := bufio.NewWriterSize(c.nc, 256<<10)
		for {
			var b []byte
			select {
			case b = <-c.out:
			case <-c.close:
				return
			}
			_, err := bw.Write(b)
			c.queued.Add(-int64(len(b)))
			if cap(b) <= maxFreeFrame {
				// Copied into bw or written: Buffer may hand it out.
				select {
				case c.free <- b[:0]:
				default:
				}
			}
			if err != nil {
				c.kill()
				return
			}
			if len(c.out) == 0 {
				// Let shards about to send join this write: the
				// passes of a broker's shards start together
				// (replica's pass clock), one write for all their
				// requests to this peer.
				runtime.Gosched()
			}
			if len(c.out) == 0 {
				if err := bw.Flush(); err != nil {
					c.kill()
					return
				}
			}
		}
	}()
	br := bufio.NewReaderSize(c.nc, 256<<10)
	var got []Shipped // the messages of the frame read last
	var run []replication.Message
	var names Names  // this connection's names, decoded once
	var spare []byte // the last frame's body, when nothing decoded from it is kept
	for {
		f, err := readFrame(br, p.o.MaxFrameSize, spare)
		spare = nil
		if err != nil {
			break
		}
		if f.Type == wire.MsgError {
			e, _ := wire.DecodeError(f.Body, wire.FeatureStorageID)
			log.Info("peer refused replication", "error", fmt.Sprint(e))
			break
		}
		got, err = DecodeFrameNames(f, got[:0], &names)
		if err != nil {
			log.Info("bad replication frame; dropping connection", "error", err.Error())
			break
		}
		if be, ok := p.o.Events.(BatchEvents); ok {
			run = p.deliverRuns(be, c.id, got, run[:0])
		} else {
			for i := range got {
				m := got[i].Msg
				if IsRequest(m.Type) {
					continue // requests travel the other way; ignore
				}
				m.Conn = c.id
				p.o.Events.Message(got[i].Shard, m)
			}
		}
		if aliasFree(got) && cap(f.Body) <= maxSpareBody {
			// Nothing handed on refers to the body (answers without
			// records: what an idle pass gets back), so the next
			// frame is read into it.
			spare = f.Body[:0]
		}
		clear(got) // drop what the messages point to (frame bodies)
	}
	c.kill()
	<-done
}

// maxSpareBody bounds the body a connection's reader keeps for the next
// frame (wire.ReadFrameBody allocates at most this much before a body's
// bytes arrive).
const maxSpareBody = 64 << 10

// readFrame is wire.ReadFrame reading the body into spare when it fits
// (spare is then the caller's no longer: the frame owns it).
func readFrame(br *bufio.Reader, max uint32, spare []byte) (wire.Frame, error) {
	h, err := wire.ReadFrameHeader(br, max)
	if err != nil {
		return wire.Frame{}, err
	}
	n := h.BodyLen()
	if n <= 0 || n > cap(spare) {
		return wire.ReadFrameBody(br, h)
	}
	body := spare[:n]
	if _, err := io.ReadFull(br, body); err != nil {
		if errors.Is(err, io.EOF) {
			err = io.ErrUnexpectedEOF
		}
		return wire.Frame{}, err
	}
	return wire.Frame{Type: h.Type, ReqID: h.ReqID, Body: body}, nil
}

// aliasFree reports whether no decoded message refers to its frame's
// body: only records (payloads, header values) do; names, epochs and the
// rest are copied out.
func aliasFree(got []Shipped) bool {
	for i := range got {
		if len(got[i].Msg.Records) > 0 {
			return false
		}
	}
	return true
}

// deliverRuns hands be the answers of got, each run of consecutive answers
// for one shard in one Messages call, with Conn set to conn; it returns
// buf, emptied, for the next frame.
func (p *Pool) deliverRuns(be BatchEvents, conn replication.ConnID, got []Shipped, buf []replication.Message) []replication.Message {
	var shard record.ShardID
	flush := func() {
		if len(buf) > 0 {
			be.Messages(shard, buf)
			clear(buf) // drop what the messages point to
			buf = buf[:0]
		}
	}
	for i := range got {
		m := got[i].Msg
		if IsRequest(m.Type) {
			continue // requests travel the other way; ignore
		}
		if len(buf) > 0 && got[i].Shard != shard {
			flush()
		}
		shard = got[i].Shard
		m.Conn = conn
		buf = append(buf, m)
	}
	flush()
	return buf
}
