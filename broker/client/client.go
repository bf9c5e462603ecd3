package client

import (
	"bufio"
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"net"
	"runtime"
	"sync"
	"sync/atomic"
	"time"

	"felix.dev/felix/broker/auth"
	"felix.dev/felix/broker/record"
	"felix.dev/felix/broker/wire"
)

// ErrClosed is returned by calls on a closed client, and wraps the cause for
// calls whose connection broke (a connection-level error from the broker,
// such as its idle timeout, or a read or write failure). The client does
// not redial: a caller that wants to go on dials a new Client.
//
// For Append, AppendAsync and Trim an error matching ErrClosed and not
// ErrUnknownOutcome means the request was never written: the connection
// was already finished when it was made, so sending it again on a new
// connection is its first send. An error matching ErrUnknownOutcome (it
// also matches ErrClosed when the connection broke) means it may have
// landed.
var ErrClosed = errors.New("client: connection closed")

// ErrUnknownOutcome is matched by the error of an append or trim that was
// sent but not answered (deadline or broken connection): it may have landed.
var ErrUnknownOutcome = errors.New("client: outcome unknown")

// UnknownOutcomeError wraps the cause of an unanswered append or trim.
type UnknownOutcomeError struct{ Err error }

func (e *UnknownOutcomeError) Error() string {
	return "client: request sent but not answered, it may have landed: " + e.Err.Error()
}

// Is makes errors.Is(err, ErrUnknownOutcome) true.
func (e *UnknownOutcomeError) Is(target error) bool { return target == ErrUnknownOutcome }

// Unwrap returns the cause.
func (e *UnknownOutcomeError) Unwrap() error { return e.Err }

// DefaultHandshakeTimeout bounds the handshake when the context given to
// Dial or NewClient has no deadline.
const DefaultHandshakeTimeout = 10 * time.Second

// Options configures Dial.
type Options struct {
	// TLS, when set, wraps the connection in a TLS client.
	TLS *tls.Config
	// Features are the bits the client offers. Zero offers
	// wire.FeatureTrimTag, wire.FeatureLogPolicy, wire.FeatureStorageErrors,
	// wire.FeatureAuth, wire.FeatureMetadata, wire.FeatureIdempotent,
	// wire.FeatureCounters, wire.FeatureGroups and wire.FeatureAcks (a
	// client has no storage id); use NoFeatures to offer none.
	Features wire.Features
	// NoFeatures offers no feature bit at all: the version-1 frames.
	NoFeatures bool
	// StorageID is presented when Features offers wire.FeatureStorageID
	// (brokers talking to peers) [RP-2].
	StorageID []byte
	// MaxFrameSize bounds answers read; zero means twice the broker's
	// advertised maximum.
	MaxFrameSize uint32
}

// Client is one pipelined connection to a broker. Safe for concurrent use.
type Client struct {
	nc    net.Conn
	hello wire.HelloOK

	out  chan []byte
	done chan struct{} // closed when the connection is finished

	// wmu guards bw, the connection's write buffer: the writer goroutine
	// writes queued frames through it, and a lone request is written by
	// its caller (send). queued counts frames put on out and not yet
	// written: a caller writes directly only when it is zero, so frames
	// go out in the order they were sent.
	wmu    sync.Mutex
	bw     *bufio.Writer
	queued atomic.Int32

	mu      sync.Mutex
	nextID  uint32
	pending map[uint32]chan wire.Frame
	err     error // why the connection finished
	// waiting is len(pending), readable without mu (the writer's hint
	// that other requests are in flight).
	waiting atomic.Int32
}

// countPending publishes len(pending) in waiting; the caller holds mu
// and calls it after every change to pending.
func (c *Client) countPending() { c.waiting.Store(int32(len(c.pending))) }

// Dial connects to addr, performs the handshake and returns a client.
// ctx bounds the dial and the handshake.
func Dial(ctx context.Context, addr string, opts Options) (*Client, error) {
	var d net.Dialer
	nc, err := d.DialContext(ctx, "tcp", addr)
	if err != nil {
		return nil, fmt.Errorf("client: dial %s: %w", addr, err)
	}
	if opts.TLS != nil {
		tc := tls.Client(nc, opts.TLS)
		hctx := ctx
		if _, ok := ctx.Deadline(); !ok {
			var cancel context.CancelFunc
			hctx, cancel = context.WithTimeout(ctx, DefaultHandshakeTimeout)
			defer cancel()
		}
		if err := tc.HandshakeContext(hctx); err != nil {
			_ = nc.Close()
			return nil, &HandshakeError{Addr: addr, Err: err}
		}
		nc = tc
	}
	c, err := NewClient(ctx, nc, opts)
	if err != nil {
		_ = nc.Close()
		return nil, err
	}
	return c, nil
}

// NewClient performs the handshake on an open connection and returns a
// client that owns it.
func NewClient(ctx context.Context, nc net.Conn, opts Options) (*Client, error) {
	feats := opts.Features
	if feats == 0 && !opts.NoFeatures {
		feats = wire.FeatureTrimTag | wire.FeatureLogPolicy | wire.FeatureStorageErrors | wire.FeatureAuth | wire.FeatureMetadata | wire.FeatureIdempotent | wire.FeatureCounters | wire.FeatureGroups | wire.FeatureAcks
	}
	if opts.NoFeatures {
		feats = 0
	}
	body, err := wire.EncodeHello(wire.Hello{Version: wire.ProtocolVersion, Features: feats, StorageID: opts.StorageID})
	if err != nil {
		return nil, err
	}
	dl, ok := ctx.Deadline()
	if !ok {
		dl = time.Now().Add(DefaultHandshakeTimeout)
	}
	_ = nc.SetDeadline(dl)
	if err := wire.WriteFrame(nc, wire.Frame{Type: wire.MsgHello, Body: body}); err != nil {
		return nil, fmt.Errorf("client: send hello: %w", err)
	}
	br := bufio.NewReaderSize(nc, 64<<10)
	f, err := wire.ReadFrame(br, wire.DefaultMaxFrameSize)
	if err != nil {
		return nil, fmt.Errorf("client: read hello answer: %w", err)
	}
	switch f.Type {
	case wire.MsgHelloOK:
	case wire.MsgError:
		e, derr := wire.DecodeError(f.Body, 0)
		if derr != nil {
			return nil, fmt.Errorf("client: handshake refused: %w", derr)
		}
		return nil, authError(e, 0, record.ShardID{})
	default:
		return nil, fmt.Errorf("client: handshake answered with %s: %w", f.Type, wire.ErrMalformed)
	}
	hello, err := wire.DecodeHelloOK(f.Body)
	if err != nil {
		return nil, fmt.Errorf("client: hello answer: %w", err)
	}
	if hello.Features&^feats != 0 {
		return nil, fmt.Errorf("client: broker accepted features %v that were not offered: %w", hello.Features, wire.ErrMalformed)
	}
	_ = nc.SetDeadline(time.Time{})
	limit := opts.MaxFrameSize
	if limit == 0 {
		limit = 2 * max(hello.MaxFrameSize, wire.DefaultMaxFrameSize)
	}
	c := &Client{nc: nc, hello: hello, out: make(chan []byte, 256), done: make(chan struct{}), pending: map[uint32]chan wire.Frame{},
		bw: bufio.NewWriterSize(nc, 64<<10)}
	go c.writeLoop()
	go c.readLoop(br, limit)
	return c, nil
}

// Features returns the features negotiated on the connection.
func (c *Client) Features() wire.Features { return c.hello.Features }

// Limits returns the broker's advertised maximum frame size and records per
// append.
func (c *Client) Limits() (maxFrameSize, maxBatchRecords uint32) {
	return c.hello.MaxFrameSize, c.hello.MaxBatchRecords
}

// BrokerStorageID returns the storage id the broker presented, or nil when
// wire.FeatureStorageID was not negotiated [RP-2].
func (c *Client) BrokerStorageID() []byte { return c.hello.StorageID }

// Close closes the connection; calls in flight fail with ErrClosed.
func (c *Client) Close() error {
	c.finish(ErrClosed)
	return nil
}

// finish records why the connection ended (first cause wins), closes it and
// fails every pending call.
func (c *Client) finish(err error) {
	c.mu.Lock()
	if c.err != nil {
		c.mu.Unlock()
		return
	}
	c.err = err
	pending := c.pending
	c.pending = map[uint32]chan wire.Frame{}
	close(c.done)
	c.mu.Unlock()
	_ = c.nc.Close()
	for _, ch := range pending {
		close(ch)
	}
}

func (c *Client) closedErr() error {
	c.mu.Lock()
	defer c.mu.Unlock()
	if errors.Is(c.err, ErrClosed) {
		return c.err
	}
	return fmt.Errorf("%w: %w", ErrClosed, c.err)
}

func (c *Client) writeLoop() {
	for {
		select {
		case b := <-c.out:
			c.wmu.Lock()
			_, err := c.bw.Write(b)
			c.queued.Add(-1)
			c.wmu.Unlock()
			if err != nil {
				c.finish(err)
				return
			}
			if len(c.out) == 0 && c.waiting.Load() > 1 {
				// Other requests are in flight, so callers pipeline:
				// let those about to send join this write (one
				// syscall for many). A lone request is sent at once.
				runtime.Gosched()
			}
			if len(c.out) == 0 {
				c.wmu.Lock()
				err := c.bw.Flush()
				c.wmu.Unlock()
				if err != nil {
					c.finish(err)
					return
				}
			}
		case <-c.done:
			return
		}
	}
}

// writeLone writes frame at once on the caller's goroutine when it is the
// connection's only request in flight and no frame waits for the writer
// goroutine (a synchronous caller): one hand-off less per request. It
// reports false, having written nothing, otherwise.
func (c *Client) writeLone(frame []byte, inFlight int) (bool, error) {
	if inFlight != 1 || c.queued.Load() != 0 {
		return false, nil
	}
	c.wmu.Lock()
	defer c.wmu.Unlock()
	if c.queued.Load() != 0 {
		return false, nil
	}
	_, err := c.bw.Write(frame)
	if err == nil {
		err = c.bw.Flush()
	}
	return true, err
}

func (c *Client) readLoop(br *bufio.Reader, limit uint32) {
	for {
		f, err := wire.ReadFrame(br, limit)
		if err != nil {
			c.finish(err)
			return
		}
		if f.ReqID == 0 {
			// A connection-level error: the broker closes the connection.
			if f.Type == wire.MsgError {
				if e, derr := wire.DecodeError(f.Body, c.hello.Features); derr == nil {
					c.finish(e)
					return
				}
			}
			c.finish(fmt.Errorf("client: unexpected %s frame with request id 0: %w", f.Type, wire.ErrMalformed))
			return
		}
		c.mu.Lock()
		ch, ok := c.pending[f.ReqID]
		delete(c.pending, f.ReqID)
		c.countPending()
		c.mu.Unlock()
		if ok {
			ch <- f // buffered: never blocks
		}
	}
}

// roundTrip sends one request and waits for its answer. sent reports
// whether the request may have reached the broker.
func (c *Client) roundTrip(ctx context.Context, t wire.MsgType, body []byte) (f wire.Frame, sent bool, err error) {
	w, err := c.send(ctx, frameOf(t, body))
	if err != nil {
		return wire.Frame{}, false, err
	}
	return w.wait(ctx)
}

// waiter is a sent request waiting for its answer.
type waiter struct {
	c  *Client
	id uint32
	ch chan wire.Frame
}

// frameOf returns the builder of a frame with an encoded body.
func frameOf(t wire.MsgType, body []byte) func(id uint32) ([]byte, error) {
	return func(id uint32) ([]byte, error) {
		return wire.AppendFrame(make([]byte, 0, wire.FrameHeaderSize+len(body)), wire.Frame{Type: t, ReqID: id, Body: body}), nil
	}
}

// appendFrame returns the builder of an Append frame, encoded in place.
func appendFrame(r wire.AppendRequest) func(id uint32) ([]byte, error) {
	return func(id uint32) ([]byte, error) { return wire.AppendAppendFrame(nil, id, r) }
}

// send builds the request's frame with a fresh request id, queues it for
// writing, in call order, and returns its waiter. It fails only if the
// request was not queued.
func (c *Client) send(ctx context.Context, build func(id uint32) ([]byte, error)) (*waiter, error) {
	ch := make(chan wire.Frame, 1)
	c.mu.Lock()
	if c.err != nil {
		c.mu.Unlock()
		return nil, c.closedErr()
	}
	c.nextID++
	if c.nextID == 0 {
		c.nextID = 1
	}
	id := c.nextID
	c.pending[id] = ch
	c.countPending()
	inFlight := len(c.pending)
	c.mu.Unlock()
	frame, err := build(id)
	if err != nil {
		c.forget(id)
		return nil, err
	}
	if wrote, err := c.writeLone(frame, inFlight); wrote {
		if err != nil {
			c.finish(err) // the request may have reached the broker: its waiter reports the failure
		}
		return &waiter{c: c, id: id, ch: ch}, nil
	}
	c.queued.Add(1)
	select {
	case c.out <- frame:
		return &waiter{c: c, id: id, ch: ch}, nil
	case <-ctx.Done():
		c.queued.Add(-1)
		c.forget(id)
		return nil, ctx.Err()
	case <-c.done:
		c.queued.Add(-1)
		return nil, c.closedErr()
	}
}

func (w *waiter) wait(ctx context.Context) (wire.Frame, bool, error) {
	select {
	case f, ok := <-w.ch:
		if !ok {
			return wire.Frame{}, true, w.c.closedErr()
		}
		return f, true, nil
	case <-ctx.Done():
		w.c.forget(w.id)
		return wire.Frame{}, true, ctx.Err()
	}
}

func (c *Client) forget(id uint32) {
	c.mu.Lock()
	delete(c.pending, id)
	c.countPending()
	c.mu.Unlock()
}

// answer decodes an answer frame: want's body via decode, or the broker's
// error.
func answer[T any](c *Client, f wire.Frame, want wire.MsgType, decode func([]byte) (T, error)) (T, error) {
	var zero T
	switch f.Type {
	case want:
		v, err := decode(f.Body)
		if err != nil {
			return zero, fmt.Errorf("client: %s: %w", want, err)
		}
		return v, nil
	case wire.MsgError:
		e, err := wire.DecodeError(f.Body, c.hello.Features)
		if err != nil {
			return zero, fmt.Errorf("client: error answer: %w", err)
		}
		return zero, e
	default:
		return zero, fmt.Errorf("client: expected %s, got %s: %w", want, f.Type, wire.ErrMalformed)
	}
}

// Append appends recs (their Headers and Payload) to shard as one batch:
// all land at consecutive offsets or none do. With expectTail set the batch
// lands only if the shard's next offset equals it; otherwise the error is a
// *wire.Error with Code OffsetMismatch carrying the current Tail [TR-1].
// An append sent but not answered fails with ErrUnknownOutcome.
func (c *Client) Append(ctx context.Context, shard record.ShardID, recs []record.Record, expectTail *uint64) (wire.AppendOK, error) {
	w, err := c.send(ctx, appendFrame(wire.AppendRequest{Shard: shard, ExpectTail: expectTail, Records: recs}))
	if err != nil {
		return wire.AppendOK{}, err
	}
	ok, err := w.appendOutcome(ctx) // no PendingAppend: the caller waits here
	return ok, authError(err, auth.OpAppend, shard)
}

// ErrNoIdempotence is returned by AppendIdempotent when the connection did
// not negotiate wire.FeatureIdempotent (an older broker): nothing was sent.
var ErrNoIdempotence = errors.New("client: the broker does not take idempotent appends")

// AppendIdempotent is Append carrying producer p: the leader writes the
// batch only if p.Seq is the producer's next sequence on shard, and
// answers a retry of a batch it wrote (same producer and sequence, on any
// connection, after a leader change too) with the original offsets and
// writes nothing. A sequence the leader cannot place fails with a
// *wire.Error with Code OutOfSequence (matching wire.ErrOutOfSequence)
// naming the sequence it expects. Resending the same batch with the same
// p after ErrUnknownOutcome or Unavailable is safe; sending another batch
// under a sequence already used is not (it would be answered as the first).
func (c *Client) AppendIdempotent(ctx context.Context, shard record.ShardID, recs []record.Record, expectTail *uint64, p wire.Producer) (wire.AppendOK, error) {
	if !c.hello.Features.Has(wire.FeatureIdempotent) {
		return wire.AppendOK{}, ErrNoIdempotence
	}
	w, err := c.send(ctx, appendFrame(wire.AppendRequest{Shard: shard, ExpectTail: expectTail, Records: recs, Producer: &p}))
	if err != nil {
		return wire.AppendOK{}, err
	}
	ok, err := w.appendOutcome(ctx)
	return ok, authError(err, auth.OpAppend, shard)
}

// Read reads records as req describes. With req.WaitMillis set the broker
// waits up to that long for records (follow mode); ctx must allow for it.
// A start below the floor fails with a *wire.Error with Code CursorTooOld
// carrying the floor and, when the trim tag was negotiated, the headers of
// the trim that set it [TR-4].
func (c *Client) Read(ctx context.Context, req wire.ReadRequest) (wire.ReadOK, error) {
	body, err := wire.EncodeRead(req)
	if err != nil {
		return wire.ReadOK{}, err
	}
	f, _, err := c.roundTrip(ctx, wire.MsgRead, body)
	if err != nil {
		return wire.ReadOK{}, err
	}
	ok, err := answer(c, f, wire.MsgReadOK, wire.DecodeReadOK)
	return ok, authError(err, auth.OpRead, req.Shard)
}

// Trim asks for a conditional head trim [TR-2] [TR-3]. A trim sent but not
// answered fails with ErrUnknownOutcome.
func (c *Client) Trim(ctx context.Context, req wire.TrimRequest) (wire.TrimOK, error) {
	body, err := wire.EncodeTrim(req)
	if err != nil {
		return wire.TrimOK{}, err
	}
	f, sent, err := c.roundTrip(ctx, wire.MsgTrim, body)
	if err != nil {
		if sent {
			return wire.TrimOK{}, &UnknownOutcomeError{Err: err}
		}
		return wire.TrimOK{}, err
	}
	ok, err := answer(c, f, wire.MsgTrimOK, wire.DecodeTrimOK)
	return ok, authError(err, auth.OpTrim, req.Shard)
}

// Describe returns a shard's base, floor, tail and committed positions.
func (c *Client) Describe(ctx context.Context, shard record.ShardID) (wire.DescribeOK, error) {
	body, err := wire.EncodeDescribe(wire.DescribeRequest{Shard: shard})
	if err != nil {
		return wire.DescribeOK{}, err
	}
	f, _, err := c.roundTrip(ctx, wire.MsgDescribe, body)
	if err != nil {
		return wire.DescribeOK{}, err
	}
	ok, err := answer(c, f, wire.MsgDescribeOK, func(b []byte) (wire.DescribeOK, error) {
		return wire.DecodeDescribeOKFor(b, c.hello.Features)
	})
	return ok, authError(err, auth.OpDescribe, shard)
}

// finished reports whether the connection is finished (closed or broken).
func (c *Client) finished() bool {
	select {
	case <-c.done:
		return true
	default:
		return false
	}
}
