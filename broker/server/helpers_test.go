package server

import (
	"bufio"
	"context"
	"errors"
	"net"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"felix.dev/felix/broker/client"
	"felix.dev/felix/broker/logstore"
	"felix.dev/felix/broker/record"
	"felix.dev/felix/broker/wire"
)

// broker is a real log store in t.TempDir() served on a loopback port.
type broker struct {
	t       *testing.T
	store   *logstore.Store
	srv     *Server
	addr    string
	reg     *prometheus.Registry
	served  chan error
	stopped bool
}

func startBroker(t *testing.T, opts Options) *broker {
	t.Helper()
	return startBrokerMode(t, logstore.FsyncNone, opts)
}

// startBrokerMode is startBroker with a chosen fsync mode.
func startBrokerMode(t *testing.T, mode logstore.FsyncMode, opts Options) *broker {
	t.Helper()
	return startBrokerWith(t, mode, opts, func(s *logstore.Store, _ *Metrics) Shards { return StoreShards(s) })
}

// startBrokerWith is startBrokerMode serving the shards mk makes of the store.
func startBrokerWith(t *testing.T, mode logstore.FsyncMode, opts Options, mk func(*logstore.Store, *Metrics) Shards) *broker {
	t.Helper()
	reg := prometheus.NewRegistry()
	m, err := NewMetrics(reg)
	if err != nil {
		t.Fatal(err)
	}
	store, err := logstore.Open(logstore.Options{Dir: t.TempDir(), Fsync: mode, AutoCommit: true, Metrics: m})
	if err != nil {
		t.Fatal(err)
	}
	opts.Metrics = m
	srv := New(mk(store, m), opts)
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	b := &broker{t: t, store: store, srv: srv, addr: l.Addr().String(), reg: reg, served: make(chan error, 1)}
	go func() { b.served <- srv.Serve(l) }()
	t.Cleanup(b.stop)
	return b
}

func (b *broker) stop() {
	if b.stopped {
		return
	}
	b.stopped = true
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if err := b.srv.Shutdown(ctx); err != nil {
		b.t.Errorf("shutdown: %v", err)
	}
	if err := <-b.served; !errors.Is(err, ErrServerClosed) {
		b.t.Errorf("Serve returned %v, want ErrServerClosed", err)
	}
	if err := b.store.Close(); err != nil {
		b.t.Errorf("store close: %v", err)
	}
}

func dial(t *testing.T, addr string, o client.Options) *client.Client {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	c, err := client.Dial(ctx, addr, o)
	if err != nil {
		t.Fatalf("dial: %v", err)
	}
	t.Cleanup(func() { _ = c.Close() })
	return c
}

func ctxT(t *testing.T) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	t.Cleanup(cancel)
	return ctx
}

func recs(payloads ...string) []record.Record {
	out := make([]record.Record, len(payloads))
	for i, p := range payloads {
		out[i] = record.Record{Payload: []byte(p)}
	}
	return out
}

func u64(v uint64) *uint64 { return &v }

var shardA = record.ShardID{Stream: "orders", Shard: 0}

// rawConn is a hand-driven protocol connection for tests of the bytes.
type rawConn struct {
	t  *testing.T
	nc net.Conn
	br *bufio.Reader
}

func dialRaw(t *testing.T, addr string) *rawConn {
	t.Helper()
	nc, err := net.DialTimeout("tcp", addr, 5*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = nc.Close() })
	_ = nc.SetDeadline(time.Now().Add(20 * time.Second))
	return &rawConn{t: t, nc: nc, br: bufio.NewReader(nc)}
}

func (r *rawConn) send(typ wire.MsgType, id uint32, body []byte) {
	r.t.Helper()
	if err := wire.WriteFrame(r.nc, wire.Frame{Type: typ, ReqID: id, Body: body}); err != nil {
		r.t.Fatalf("send: %v", err)
	}
}

func (r *rawConn) recv() wire.Frame {
	r.t.Helper()
	f, err := wire.ReadFrame(r.br, 1<<26)
	if err != nil {
		r.t.Fatalf("recv: %v", err)
	}
	return f
}

func (r *rawConn) hello(feats wire.Features) wire.HelloOK {
	r.t.Helper()
	body, err := wire.EncodeHello(wire.Hello{Version: 1, Features: feats})
	if err != nil {
		r.t.Fatal(err)
	}
	r.send(wire.MsgHello, 0, body)
	f := r.recv()
	if f.Type != wire.MsgHelloOK {
		r.t.Fatalf("hello answered with %v", f.Type)
	}
	h, err := wire.DecodeHelloOK(f.Body)
	if err != nil {
		r.t.Fatal(err)
	}
	return h
}

// expectClosed waits for the broker to close the connection, returning the
// frames it sent first.
func (r *rawConn) expectClosed(within time.Duration) []wire.Frame {
	r.t.Helper()
	_ = r.nc.SetReadDeadline(time.Now().Add(within))
	var frames []wire.Frame
	for {
		f, err := wire.ReadFrame(r.br, 1<<26)
		if err != nil {
			var ne net.Error
			if errors.As(err, &ne) && ne.Timeout() {
				r.t.Fatalf("connection still open after %v", within)
			}
			return frames
		}
		frames = append(frames, f)
	}
}

func decodeErr(t *testing.T, f wire.Frame, feats wire.Features) *wire.Error {
	t.Helper()
	if f.Type != wire.MsgError {
		t.Fatalf("got %v frame, want Error", f.Type)
	}
	e, err := wire.DecodeError(f.Body, feats)
	if err != nil {
		t.Fatal(err)
	}
	return e
}
