package felixd

import (
	"context"
	"errors"
	"net"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/go-logr/logr"

	"felix.dev/felix/broker/client"
	"felix.dev/felix/broker/logstore"
	"felix.dev/felix/broker/record"
	"felix.dev/felix/broker/server"
)

// testIdleTimeout is the broker's idle timeout in the redial tests.
const testIdleTimeout = 200 * time.Millisecond

// lossyConn is a connection whose next read after arm() is lost: the
// connection closes instead, so the answer to the request in flight
// reaches the client's socket but never the client.
// ended is closed once a read failed or the client closed the connection:
// the client saw the connection end.
type lossyConn struct {
	net.Conn
	armed atomic.Bool
	once  sync.Once
	ended chan struct{}
}

// Close implements net.Conn; the client closes a connection the broker
// ended with an error frame without reading again.
func (c *lossyConn) Close() error {
	c.once.Do(func() { close(c.ended) })
	return c.Conn.Close()
}

func (c *lossyConn) arm() { c.armed.Store(true) }

func (c *lossyConn) Read(b []byte) (int, error) {
	n, err := c.Conn.Read(b)
	if n > 0 && c.armed.CompareAndSwap(true, false) {
		_ = c.Conn.Close()
		n, err = 0, errors.New("test: answer lost")
	}
	if err != nil {
		c.once.Do(func() { close(c.ended) })
	}
	return n, err
}

// countingDial dials addr and records every connection it made.
type countingDial struct {
	addr  string
	conns []*lossyConn
}

func (d *countingDial) dial(ctx context.Context) (*client.Client, error) {
	var nd net.Dialer
	nc, err := nd.DialContext(ctx, "tcp", d.addr)
	if err != nil {
		return nil, err
	}
	lc := &lossyConn{Conn: nc, ended: make(chan struct{})}
	c, err := client.NewClient(ctx, lc, client.Options{})
	if err != nil {
		_ = nc.Close()
		return nil, err
	}
	d.conns = append(d.conns, lc)
	return c, nil
}

func newRedialingLog(t *testing.T, d *countingDial) *ClientLog {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	l, err := NewRedialingClientLog(ctx, d.dial, testShard.ShardID, logr.Discard())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = l.Close() })
	return l
}

// idleOut waits, sending nothing, until the broker closed the current
// connection of l (dialed by d) for being idle and the client saw it.
func idleOut(t *testing.T, d *countingDial) {
	t.Helper()
	select {
	case <-d.conns[len(d.conns)-1].ended:
	case <-time.After(10 * time.Second):
		t.Fatal("the broker did not close an idle connection")
	}
}

func openedLog(t *testing.T, store *logstore.Store) *logstore.Log {
	t.Helper()
	lg, ok := store.Lookup(testShard)
	if !ok {
		t.Fatal("no data log")
	}
	return lg
}

// TestClientLog_RedialsAfterIdleTimeout: a holder over a redialing
// ClientLog goes silent past the broker's idle timeout before each of its
// calls (append, snapshot and trim, catch-up read, describe) and every one
// succeeds on a new connection, each write landing exactly once and the
// holder's cursor and expected tail following the log.
func TestClientLog_RedialsAfterIdleTimeout(t *testing.T) {
	ctx := context.Background()
	store, addr := serveStoreWith(t, server.Options{IdleTimeout: testIdleTimeout})
	d := &countingDial{addr: addr}
	l := newRedialingLog(t, d)
	w := &Counter{}
	h, err := NewHolder(HolderConfig{Log: l, Epoch: 1, Workload: w, Logger: logr.Discard()})
	if err != nil {
		t.Fatal(err)
	}
	if err := h.Start(ctx); err != nil {
		t.Fatal(err)
	}
	steps := []struct {
		name string
		do   func() error
	}{
		{"append", func() error { out, _ := w.Next(ctx); return h.Append(ctx, out) }},
		{"snapshot and trim", func() error { return h.Snapshot(ctx) }},
		{"catch-up read", func() error { return h.CatchUp(ctx) }},
		{"describe", func() error { _, err := l.Describe(ctx); return err }},
		{"append again", func() error { out, _ := w.Next(ctx); return h.Append(ctx, out) }},
	}
	for i, s := range steps {
		idleOut(t, d)
		if err := s.do(); err != nil {
			t.Fatalf("%s after the broker closed the idle connection: %v", s.name, err)
		}
		if got, want := len(d.conns), i+2; got != want {
			t.Fatalf("%s: %d connections dialed, want %d", s.name, got, want)
		}
	}
	info := openedLog(t, store).Describe()
	// fence, output 1, snapshot, trim, output 2: every write landed once.
	if info.Tail != 5 || h.Expected() != info.Tail || h.Cursor() != info.Tail || w.Value() != 2 {
		t.Fatalf("log tail %d, holder expected %d cursor %d, counter %d; want 5, 5, 5, 2",
			info.Tail, h.Expected(), h.Cursor(), w.Value())
	}
}

// TestFD2_ClientLogDoesNotResendUnansweredAppend: an append whose answer is
// lost with its connection landed, but the log cannot know: it fails with
// ErrUnknownOutcome and is not sent again on a new connection (a resend
// with the same expected tail would be refused and report a mismatch for
// a write that landed). The holder then re-reads from its cursor on a new
// connection, finds its own output and stays consistent with the log.
func TestFD2_ClientLogDoesNotResendUnansweredAppend(t *testing.T) {
	ctx := context.Background()
	store, addr := serveStoreWith(t, server.Options{IdleTimeout: time.Minute})
	d := &countingDial{addr: addr}
	l := newRedialingLog(t, d)
	w := &Counter{}
	h, err := NewHolder(HolderConfig{Log: l, Epoch: 1, Workload: w, Logger: logr.Discard()})
	if err != nil {
		t.Fatal(err)
	}
	if err := h.Start(ctx); err != nil {
		t.Fatal(err)
	}
	lg := openedLog(t, store)
	before := lg.Describe().Tail

	// The log itself: unknown outcome, sent once.
	d.conns[len(d.conns)-1].arm()
	_, err = l.Append(ctx, []record.Record{{Headers: headersFor(1, KindFence)}}, before)
	if !errors.Is(err, ErrUnknownOutcome) || isMismatch(err) {
		t.Fatalf("append whose answer was lost: %v, want ErrUnknownOutcome and no mismatch", err)
	}
	if tail := lg.Describe().Tail; tail != before+1 {
		t.Fatalf("tail %d after one lost answer, want %d (landed exactly once)", tail, before+1)
	}

	// The holder over it: a lost answer to its output re-reads from the
	// cursor on a new connection.
	if err := h.CatchUp(ctx); err != nil {
		t.Fatal(err)
	}
	dialed := len(d.conns)
	d.conns[dialed-1].arm()
	out, _ := w.Next(ctx)
	if err := h.Append(ctx, out); !errors.Is(err, ErrNotWritten) {
		t.Fatalf("holder append whose answer was lost: %v, want ErrNotWritten after re-reading", err)
	}
	if len(d.conns) != dialed+1 {
		t.Fatalf("%d connections, want %d: the re-read redials once", len(d.conns), dialed+1)
	}
	tail := lg.Describe().Tail
	if tail != before+2 || h.Expected() != tail || w.Value() != 1 {
		t.Fatalf("log tail %d, holder expected %d, counter %d; want %d, %d, 1", tail, h.Expected(), w.Value(), before+2, before+2)
	}
}

// A redialing log refuses every connection that did not negotiate the trim
// tag, the first and any redial: a stale holder trimmed past would be
// refused without learning the newer epoch.
func TestRedialingClientLogRefusesConnectionsWithoutTrimTag(t *testing.T) {
	ctx := context.Background()
	_, addr := serveStore(t)
	var noTag atomic.Bool
	dial := func(ctx context.Context) (*client.Client, error) {
		return client.Dial(ctx, addr, client.Options{NoFeatures: noTag.Load()})
	}
	noTag.Store(true)
	if _, err := NewRedialingClientLog(ctx, dial, testShard.ShardID, logr.Discard()); !errors.Is(err, ErrNoTrimTag) {
		t.Fatalf("first connection without the trim tag: %v, want ErrNoTrimTag", err)
	}
	noTag.Store(false)
	l, err := NewRedialingClientLog(ctx, dial, testShard.ShardID, logr.Discard())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = l.Close() })
	_ = l.Close() // the next call dials again
	noTag.Store(true)
	if _, err := l.Describe(ctx); !errors.Is(err, ErrNoTrimTag) {
		t.Fatalf("redial without the trim tag: %v, want ErrNoTrimTag", err)
	}
	noTag.Store(false)
	if _, err := l.Describe(ctx); err != nil {
		t.Fatalf("redial with the trim tag: %v", err)
	}
}
