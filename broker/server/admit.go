package server

import (
	"bufio"
	"context"
	"errors"
	"io"
	"time"

	"felix.dev/felix/broker/wire"
)

const (
	// smallFrame is the largest frame, prefix included, that may take
	// from the small-frame pool when the client pool is full: a Describe,
	// a Trim, a Read request or a small Append never waits on memory held
	// by large frames.
	smallFrame = 64 << 10
	// smallFrameMemory is the small-frame pool's size.
	smallFrameMemory = 8 << 20
	// firstBodyChunk is the budget a body takes when its first byte
	// arrives; the body's buffer and charge then at most double each time
	// it fills, so a frame holds at most twice what its sender sent.
	firstBodyChunk = 64 << 10
)

// frameHold is what one frame holds of one of the server's frame pools
// until its answer is written (replication frames until handed on).
type frameHold struct {
	pool *budget
	n    int64
}

func (h frameHold) release() {
	if h.pool != nil {
		h.pool.release(h.n)
	}
}

// frameRefusedMessage is the Unavailable message of a refused frame.
const frameRefusedMessage = "the broker's frame memory is full (--max-frame-memory); nothing of the request was applied, retry later"

// readBody reads the body of the frame whose prefix is h, charging its bytes
// to a frame pool as they arrive, never before: a peer that announces a
// frame and stalls holds at most what it sent (doubled, at least the first
// 64 KiB chunk of it). Replication frames take from the peer pool; a small
// frame from the client pool, or from the small-frame pool when that is
// full; a large one from the client pool. A charge that does not fit waits
// up to FrameMemoryWait; then the frame is read past without being kept and
// refused (kept false; a request is answered Unavailable). ok is false when
// the connection must stop.
func (c *conn) readBody(br *bufio.Reader, h wire.FrameHeader, buffered bool) (f wire.Frame, hold frameHold, kept, ok bool) {
	s := c.s
	peer := h.Type.ReservedReplication() && c.mayReplicate()
	n := h.BodyLen()
	var buf []byte
	if !buffered && n > 0 {
		s.opts.Metrics.framesInProgress(1)
		defer s.opts.Metrics.framesInProgress(-1)
	}
	for first := true; first || len(buf) < n; first = false {
		if br.Buffered() == 0 && n > 0 {
			// Take budget only once the sender has sent more.
			if _, err := br.Peek(1); err != nil {
				hold.release()
				c.readFailed(unexpected(err))
				return wire.Frame{}, frameHold{}, false, false
			}
		}
		grow := min(n, max(2*cap(buf), firstBodyChunk))
		want := int64(grow - cap(buf))
		if first {
			want += wire.FrameHeaderSize
		}
		var (
			got    int64
			waited bool
			err    error
			pool   = s.frames
		)
		switch {
		case peer:
			pool = s.peerFrames
			got, waited, err = c.take(pool, want)
		case h.Size() <= smallFrame:
			// One chunk: from the client pool if it fits now, else
			// from the small-frame pool.
			var fits bool
			if got, fits = pool.tryAcquire(want); !fits {
				pool = s.smallFrames
				got, waited, err = c.take(pool, want)
			}
		default:
			got, waited, err = c.take(pool, want)
		}
		if c.waitCtx.Err() != nil || (waited && !buffered && !c.setReadDeadline(time.Now().Add(s.opts.FrameTimeout))) {
			// Draining, or the connection failed.
			if err == nil {
				pool.release(got)
			}
			hold.release()
			return wire.Frame{}, frameHold{}, false, false
		}
		if err != nil {
			hold.release()
			return wire.Frame{}, frameHold{}, false, c.refuse(br, h, n-len(buf))
		}
		hold = frameHold{pool: pool, n: hold.n + got}
		if grow > cap(buf) {
			nb := make([]byte, len(buf), grow)
			copy(nb, buf)
			buf = nb
		}
		if _, err := io.ReadFull(br, buf[len(buf):cap(buf)]); err != nil {
			hold.release()
			c.readFailed(unexpected(err))
			return wire.Frame{}, frameHold{}, false, false
		}
		buf = buf[:cap(buf)]
	}
	return wire.Frame{Type: h.Type, ReqID: h.ReqID, Body: buf}, hold, true, true
}

// take acquires n bytes of pool, waiting up to FrameMemoryWait; waited
// reports whether it had to wait (the wait counts against neither the
// frame's deadline nor the idle one).
func (c *conn) take(pool *budget, n int64) (got int64, waited bool, err error) {
	if got, ok := pool.tryAcquire(n); ok {
		return got, false, nil
	}
	ctx, cancel := context.WithTimeout(c.waitCtx, c.s.opts.FrameMemoryWait)
	defer cancel()
	got, err = pool.acquire(ctx, n)
	return got, true, err
}

// refuse reads past the rest (left bytes) of a frame that did not fit its
// pool and answers a request with Unavailable; replication frames are
// dropped (the replication core sends again). It reports whether the
// connection may go on.
func (c *conn) refuse(br *bufio.Reader, h wire.FrameHeader, left int) bool {
	o := &c.s.opts
	o.Metrics.frameMemoryRefused()
	c.log.V(1).Info("frame refused: frame memory budget full", "type", h.Type.String(), "bytes", h.Size())
	if left > 0 {
		if _, err := io.CopyN(io.Discard, br, int64(left)); err != nil {
			c.readFailed(unexpected(err))
			return false
		}
	}
	if h.Type.ReservedReplication() {
		return true
	}
	c.reqWG.Add(1)
	c.unanswered.Add(1)
	c.fail(h.ReqID, opName(h.Type), time.Now(), charge{}, &wire.Error{Code: wire.CodeUnavailable, Message: frameRefusedMessage})
	return true
}

// unexpected reports a stream that ended inside a frame as such.
func unexpected(err error) error {
	if errors.Is(err, io.EOF) {
		return io.ErrUnexpectedEOF
	}
	return err
}
