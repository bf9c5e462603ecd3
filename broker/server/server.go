package server

import (
	"context"
	"errors"
	"net"
	"sync"
	"sync/atomic"
	"time"

	"github.com/go-logr/logr"

	"felix.dev/felix/broker/wire"
)

// ErrServerClosed is returned by Serve after Shutdown or Close.
var ErrServerClosed = errors.New("server: closed")

// Server serves the wire protocol on any number of listeners. It is safe for
// concurrent use.
type Server struct {
	opts   Options
	shards Shards
	log    logr.Logger

	// storeCtx ends only on Close (a forced stop): store calls in flight
	// are abandoned then. waitCtx ends when draining starts: follow-mode
	// reads answer with what they have.
	storeCtx    context.Context
	storeCancel context.CancelFunc
	waitCtx     context.Context
	waitCancel  context.CancelFunc

	// frames is the budget of client frames of all connections
	// (Options.MaxFrameMemory); smallFrames the pool small frames take
	// from when frames is full; peerFrames the budget of replication
	// frames (Options.MaxPeerFrameMemory). See readBody.
	frames, smallFrames, peerFrames *budget

	mu        sync.Mutex
	listeners map[net.Listener]struct{}
	conns     map[*conn]struct{}
	perAddr   map[string]int // open connections by remote IP
	draining  bool
	serving   atomic.Int32 // listeners in Serve
	wg        sync.WaitGroup
	checkOnce sync.Once // starts expiryLoop at the first Serve

	idem     perShard[idemShard]    // idempotent producers' tables, per shard
	counters perShard[counterShard] // counter logs' folds, per shard
	groups   perShard[groupShard]   // group logs' folds and leases, per shard
	dead     perShard[deadShard]    // dead-letter logs' folds, per shard
}

// New returns a server that answers requests from shards.
func New(shards Shards, opts Options) *Server {
	opts = opts.withDefaults()
	if opts.Metadata != nil {
		shards = hintingShards{Shards: shards, meta: opts.Metadata}
	}
	s := &Server{opts: opts, shards: shards, log: opts.Logger,
		listeners: map[net.Listener]struct{}{}, conns: map[*conn]struct{}{}, perAddr: map[string]int{},
		frames: newBudget(opts.MaxFrameMemory), smallFrames: newBudget(smallFrameMemory),
		peerFrames: newBudget(opts.MaxPeerFrameMemory)}
	for _, b := range []*budget{s.frames, s.smallFrames, s.peerFrames} {
		b.moved = opts.Metrics.frameMemoryMoved
	}
	s.storeCtx, s.storeCancel = context.WithCancel(context.Background())
	s.waitCtx, s.waitCancel = context.WithCancel(s.storeCtx)
	return s
}

// Serve accepts connections on l until Shutdown or Close, and returns
// ErrServerClosed then, or the listener's error.
func (s *Server) Serve(l net.Listener) error {
	s.mu.Lock()
	if s.draining {
		s.mu.Unlock()
		_ = l.Close()
		return ErrServerClosed
	}
	s.listeners[l] = struct{}{}
	s.serving.Add(1)
	s.mu.Unlock()
	s.checkOnce.Do(func() { go s.expiryLoop() })
	defer s.serving.Add(-1)
	backoff := time.Duration(0)
	for {
		nc, err := l.Accept()
		if err != nil {
			s.mu.Lock()
			draining := s.draining
			if draining || errors.Is(err, net.ErrClosed) {
				delete(s.listeners, l)
			}
			s.mu.Unlock()
			if draining {
				return ErrServerClosed
			}
			if errors.Is(err, net.ErrClosed) {
				return err
			}
			// Out of file descriptors and the like: keep serving the
			// connections we have and try again a little later.
			backoff = min(max(2*backoff, 5*time.Millisecond), time.Second)
			s.log.Error(err, "accept failed; retrying", "after", backoff.String())
			time.Sleep(backoff)
			continue
		}
		backoff = 0
		s.mu.Lock()
		if s.draining {
			s.mu.Unlock()
			_ = nc.Close()
			continue
		}
		addr := remoteIP(nc)
		if len(s.conns) >= s.opts.MaxConnections {
			s.mu.Unlock()
			s.refuse(nc, "too-many-connections", "too many connections")
			continue
		}
		if limit := s.opts.MaxConnectionsPerAddress; limit > 0 && s.perAddr[addr] >= limit {
			s.mu.Unlock()
			s.refuse(nc, "too-many-from-address", "too many connections from "+addr)
			continue
		}
		c := newConn(s, nc)
		s.conns[c] = struct{}{}
		s.perAddr[addr]++
		s.wg.Add(1)
		s.mu.Unlock()
		go func() {
			defer s.wg.Done()
			c.serve()
			s.mu.Lock()
			delete(s.conns, c)
			if s.perAddr[addr]--; s.perAddr[addr] <= 0 {
				delete(s.perAddr, addr)
			}
			s.mu.Unlock()
		}()
	}
}

// expiryLoop checks every CertCheckInterval, until draining starts, the
// certificate expiry of every connection (conn.expireCheck).
func (s *Server) expiryLoop() {
	t := time.NewTicker(s.opts.CertCheckInterval)
	defer t.Stop()
	for {
		select {
		case <-s.waitCtx.Done():
			return
		case <-t.C:
		}
		now := s.opts.Now()
		s.mu.Lock()
		for c := range s.conns {
			c.expireCheck(now)
		}
		s.mu.Unlock()
	}
}

// remoteIP is the address a connection limit counts: the peer's IP, or the
// whole remote address when it has no host part.
func remoteIP(nc net.Conn) string {
	a := nc.RemoteAddr()
	if t, ok := a.(*net.TCPAddr); ok {
		return t.IP.String()
	}
	if host, _, err := net.SplitHostPort(a.String()); err == nil {
		return host
	}
	return a.String()
}

// refuse counts a connection refused at accept for reason and closes it,
// after an Unavailable error frame unless it is TLS (a plaintext frame
// means nothing to a TLS client).
func (s *Server) refuse(nc net.Conn, reason, msg string) {
	s.opts.Metrics.connDropped(reason)
	s.log.V(1).Info("refusing connection", "remote", nc.RemoteAddr().String(), "reason", reason)
	if s.opts.TLS != nil {
		_ = nc.Close()
		return
	}
	go refuseConn(nc, &wire.Error{Code: wire.CodeUnavailable, Message: msg})
}

// refuseConn answers a connection the server will not serve with a
// connection-level error (no features negotiated) and closes it.
func refuseConn(nc net.Conn, e *wire.Error) {
	body, err := wire.EncodeErrorFor(e, 0)
	if err != nil {
		_ = nc.Close()
		return
	}
	_ = nc.SetWriteDeadline(time.Now().Add(time.Second))
	_ = wire.WriteFrame(nc, wire.Frame{Type: wire.MsgError, Body: body})
	lingerClose(nc)
}

// Ready reports whether the server is accepting connections and not
// draining: the /ready answer.
func (s *Server) Ready() bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	return !s.draining && s.serving.Load() > 0
}

// Shutdown stops gracefully: it stops accepting, stops reading new requests,
// answers every request already read (follow-mode reads answer at once with
// what they have), flushes the answers and closes the connections. If ctx
// ends first, Shutdown closes everything at once (Close) and returns
// ctx.Err(). The caller syncs and closes the store afterwards.
func (s *Server) Shutdown(ctx context.Context) error {
	s.beginDrain()
	done := make(chan struct{})
	go func() {
		s.wg.Wait()
		close(done)
	}()
	select {
	case <-done:
		return nil
	case <-ctx.Done():
		s.Close()
		<-done
		return ctx.Err()
	}
}

// Close stops at once: listeners and connections are closed and store calls
// in flight are abandoned (their outcome is unknown to the clients).
func (s *Server) Close() {
	s.beginDrain()
	s.storeCancel()
	s.mu.Lock()
	for c := range s.conns {
		_ = c.nc.Close()
	}
	s.mu.Unlock()
}

func (s *Server) beginDrain() {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.draining {
		return
	}
	s.draining = true
	for l := range s.listeners {
		_ = l.Close()
	}
	s.waitCancel()
	for c := range s.conns {
		c.drain()
	}
}
