package felixd

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/go-logr/logr"
	"k8s.io/utils/clock"

	"felix.dev/felix/broker/client"
	"felix.dev/felix/broker/record"
	"felix.dev/felix/broker/wire"
)

// ErrNoTrimTag is returned by NewClientLog for a connection that did not
// negotiate the trim tag: a stale holder trimmed past would be refused
// without learning the newer epoch, so felixd refuses such a connection.
var ErrNoTrimTag = errors.New("felixd: the connection did not negotiate the trim-tag feature")

// DialFunc opens a new connection to the broker; ctx bounds the dial and
// the handshake.
type DialFunc func(ctx context.Context) (*client.Client, error)

// Redial bounds: a redial makes at most redialAttempts dials, waiting
// redialBackoff, then twice that, ... between them.
const (
	redialAttempts = 3
	redialBackoff  = 100 * time.Millisecond
)

// ClientLog adapts a broker/client connection to Log for one shard.
// Broker errors are converted to the record package's typed errors
// (*record.OffsetMismatchError, *record.CursorTooOldError) and unanswered
// appends and trims match ErrUnknownOutcome.
//
// A ClientLog made by NewRedialingClientLog survives the broker closing
// its connection (an idle timeout, a broker restart): a call that finds
// the connection gone (client.ErrClosed) drops it, dials a new one and
// sends the call again once, but only when sending it again cannot change
// what the holder learns or writes: always for Read and Describe (the same
// request, from the same position [FD-1]), and for Append and Trim only
// when the first request was never written (client.ErrClosed without
// client.ErrUnknownOutcome). An append or trim that was written and not
// answered is never sent again here: it fails with ErrUnknownOutcome, the
// holder re-reads from its cursor on the next connection and decides
// [FD-2]. Safe for concurrent use.
type ClientLog struct {
	shard record.ShardID
	dial  DialFunc // nil: the one connection of NewClientLog
	log   logr.Logger
	clk   clock.Clock

	mu sync.Mutex
	c  *client.Client // nil after the connection was dropped
}

// NewClientLog returns the Log of shard over c. c must have negotiated
// wire.FeatureTrimTag (the client offers it by default). The log never
// redials: once c is closed every call fails with client.ErrClosed. The
// caller keeps owning c.
func NewClientLog(c *client.Client, shard record.ShardID) (*ClientLog, error) {
	if !c.Features().Has(wire.FeatureTrimTag) {
		return nil, ErrNoTrimTag
	}
	return &ClientLog{c: c, shard: shard, log: logr.Discard(), clk: clock.RealClock{}}, nil
}

// NewRedialingClientLog returns the Log of shard over connections made by
// dial: it dials the first one now (ctx bounds it) and a new one whenever
// the broker closed the current one, as ClientLog describes. Every
// connection must negotiate wire.FeatureTrimTag; one that does not is
// closed and the call fails with ErrNoTrimTag. The log owns its
// connections: Close closes the current one.
func NewRedialingClientLog(ctx context.Context, dial DialFunc, shard record.ShardID, log logr.Logger) (*ClientLog, error) {
	if dial == nil {
		return nil, errors.New("felixd: NewRedialingClientLog needs a dial function")
	}
	l := &ClientLog{shard: shard, dial: dial, log: log, clk: clock.RealClock{}}
	c, err := l.dialOnce(ctx)
	if err != nil {
		return nil, err
	}
	l.c = c
	return l, nil
}

// Close closes the connection of a redialing log; later calls dial again.
// It does nothing for a log made by NewClientLog, whose caller owns the
// connection.
func (l *ClientLog) Close() error {
	if l.dial == nil {
		return nil
	}
	l.mu.Lock()
	c := l.c
	l.c = nil
	l.mu.Unlock()
	if c != nil {
		return c.Close()
	}
	return nil
}

func (l *ClientLog) dialOnce(ctx context.Context) (*client.Client, error) {
	c, err := l.dial(ctx)
	if err != nil {
		return nil, err
	}
	if !c.Features().Has(wire.FeatureTrimTag) {
		_ = c.Close()
		return nil, ErrNoTrimTag
	}
	return c, nil
}

// conn returns the current connection, dialing a new one (with backoff,
// bounded by ctx and redialAttempts) when the last one was dropped.
func (l *ClientLog) conn(ctx context.Context) (*client.Client, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.c != nil {
		return l.c, nil
	}
	if l.dial == nil {
		return nil, client.ErrClosed
	}
	wait := redialBackoff
	var err error
	for attempt := 1; ; attempt++ {
		var c *client.Client
		if c, err = l.dialOnce(ctx); err == nil {
			l.log.Info("redialed the broker", "attempt", attempt)
			l.c = c
			return c, nil
		}
		if attempt == redialAttempts || errors.Is(err, ErrNoTrimTag) || ctx.Err() != nil {
			break
		}
		select {
		case <-l.clk.After(wait):
		case <-ctx.Done():
			return nil, fmt.Errorf("felixd: redial: %w (last dial: %w)", ctx.Err(), err)
		}
		wait *= 2
	}
	return nil, fmt.Errorf("felixd: redial: %w", err)
}

// drop forgets c, the connection a call found closed, unless it was
// already replaced.
func (l *ClientLog) drop(c *client.Client, cause error) {
	l.mu.Lock()
	if l.c == c {
		l.c = nil
		l.log.Info("broker connection closed; the next call redials", "err", cause.Error())
	}
	l.mu.Unlock()
	_ = c.Close()
}

// call runs f on the current connection. When f fails because the
// connection is gone, a redialing log drops it and, if resend says sending
// again is safe for that error, runs f once more on a new connection.
func (l *ClientLog) call(ctx context.Context, resend func(error) bool, f func(*client.Client) error) error {
	c, err := l.conn(ctx)
	if err != nil {
		return err
	}
	err = f(c)
	if err == nil || l.dial == nil || !errors.Is(err, client.ErrClosed) {
		return err
	}
	l.drop(c, err)
	if !resend(err) || ctx.Err() != nil {
		return err
	}
	c, derr := l.conn(ctx)
	if derr != nil {
		return fmt.Errorf("%w; then %w", err, derr)
	}
	return f(c)
}

// always: a read or describe may be sent again after any failure.
func always(error) bool { return true }

// notWritten: a conditional append or trim may be sent again only if the
// failed one never reached the connection. An error matching
// client.ErrClosed and not client.ErrUnknownOutcome says so (the
// broker/client contract); one that may have been written might have
// landed and is left to the holder [FD-2].
func notWritten(err error) bool { return !errors.Is(err, client.ErrUnknownOutcome) }

// Append implements Log.
func (l *ClientLog) Append(ctx context.Context, recs []record.Record, expectTail uint64) (uint64, error) {
	var ok wire.AppendOK
	err := l.call(ctx, notWritten, func(c *client.Client) (err error) {
		ok, err = c.Append(ctx, l.shard, recs, &expectTail)
		return err
	})
	if err != nil {
		return 0, convertErr(err)
	}
	return ok.Tail, nil
}

// Read implements Log.
func (l *ClientLog) Read(ctx context.Context, pos Position, max int) (ReadResult, error) {
	req := wire.ReadRequest{Shard: l.shard, From: wire.FromOffset, Offset: pos.Offset, MaxRecords: uint32(max)}
	if pos.Earliest {
		req.From, req.Offset = wire.FromEarliest, 0
	}
	var res wire.ReadOK
	err := l.call(ctx, always, func(c *client.Client) (err error) {
		res, err = c.Read(ctx, req)
		return err
	})
	if err != nil {
		return ReadResult{}, convertErr(err)
	}
	return ReadResult{Records: res.Records, Next: res.Next}, nil
}

// Trim implements Log.
func (l *ClientLog) Trim(ctx context.Context, floor, expectTail uint64, headers []record.Header) (TrimResult, error) {
	var res wire.TrimOK
	err := l.call(ctx, notWritten, func(c *client.Client) (err error) {
		res, err = c.Trim(ctx, wire.TrimRequest{Shard: l.shard, Floor: floor, ExpectTail: expectTail, Headers: headers})
		return err
	})
	if err != nil {
		return TrimResult{}, convertErr(err)
	}
	return TrimResult{Tail: res.Tail, Floor: res.Floor}, nil
}

// Describe implements Log. Retention is the broker's own setting for the
// shard's data log when the connection negotiated wire.FeatureLogPolicy
// (the client offers it by default), and RetentionUnknown with a broker
// that does not know the feature: CheckStream then stands in for it
// [FD-4].
func (l *ClientLog) Describe(ctx context.Context) (Info, error) {
	var (
		res    wire.DescribeOK
		policy bool
	)
	err := l.call(ctx, always, func(c *client.Client) (err error) {
		res, err = c.Describe(ctx, l.shard)
		policy = c.Features().Has(wire.FeatureLogPolicy) // of the connection that answered
		return err
	})
	if err != nil {
		return Info{}, convertErr(err)
	}
	r := RetentionUnknown
	if policy {
		r = RetentionOff
		if res.Retention {
			r = RetentionOn
		}
	}
	return Info{Base: res.Base, Floor: res.Floor, Tail: res.Tail, Retention: r}, nil
}

// convertErr turns broker errors into the record package's typed errors and
// marks unanswered writes with ErrUnknownOutcome.
func convertErr(err error) error {
	if errors.Is(err, client.ErrUnknownOutcome) {
		return fmt.Errorf("%w: %w", ErrUnknownOutcome, err)
	}
	if errors.Is(err, client.ErrClosed) {
		return err // a connection-level error answers no request: not a refusal
	}
	var we *wire.Error
	if errors.As(err, &we) {
		if re := we.RecordError(); re != error(we) {
			return re
		}
	}
	return err
}
