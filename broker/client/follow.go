package client

import (
	"context"
	"errors"
	"time"

	"felix.dev/felix/broker/wire"
)

// DefaultFollowWait is how long one read of Follow waits at the broker for
// new records when FollowOptions.Wait is zero.
const DefaultFollowWait = 10 * time.Second

// ErrStopFollowing, returned by a Follow callback, ends Follow with nil.
var ErrStopFollowing = errors.New("client: stop following")

// FollowOptions configures Cluster.Follow.
type FollowOptions struct {
	// Wait is how long each read waits at the broker for records past
	// the end; zero means DefaultFollowWait.
	Wait time.Duration
	// MaxRecords bounds one read's answer; zero lets the broker choose.
	MaxRecords uint32
	// OnRetry, when set, is told of each failed read Follow retries and
	// of the wait before the next one (for a log line or a metric).
	OnRetry func(err error, wait time.Duration)
}

// Follow reads shard from the position of req (its Shard, From and Offset;
// its WaitMillis and MaxRecords come from opts) and hands every answer
// that holds records to fn, in offset order, until ctx ends, fn returns an
// error, or a read fails for good. Each read starts where the last answer
// ended, so nothing is handed twice and nothing is skipped, across
// reconnections, leader changes and brokers that restart: a failed read
// is sent again from the same position, after a backoff, for as long as
// the failure may pass (no leader yet, a leader that moved, a broker that
// is gone, Unavailable, a corrupt batch that another replica may serve).
//
// It returns nil when ctx ends or fn returns ErrStopFollowing, fn's other
// errors as they are, and the refusals no retry changes as the read
// returned them: CursorTooOld (the position was trimmed; reading on from
// the floor would skip records, so the caller decides), NotAuthorized,
// Unauthenticated, a refused TLS identity, BadRequest, UnsupportedVersion,
// and a closed Cluster.
func (c *Cluster) Follow(ctx context.Context, req wire.ReadRequest, opts FollowOptions, fn func(wire.ReadOK) error) error {
	wait := opts.Wait
	if wait <= 0 {
		wait = DefaultFollowWait
	}
	req.WaitMillis = uint32(wait / time.Millisecond)
	req.MaxRecords = opts.MaxRecords
	failures := 0
	for {
		if ctx.Err() != nil {
			return nil
		}
		rctx, cancel := context.WithTimeout(ctx, wait+c.o.DialTimeout)
		res, err := c.Read(rctx, req)
		cancel()
		if err != nil {
			if ctx.Err() != nil {
				return nil
			}
			if followStops(err) {
				return err
			}
			failures++
			d := c.o.Backoff.Delay(failures)
			if opts.OnRetry != nil {
				opts.OnRetry(err, d)
			}
			c.log.V(1).Info("follow: read failed; reading again from the same position", "shard", req.Shard.String(),
				"from", req.Offset, "wait", d, "error", err.Error())
			select {
			case <-ctx.Done():
				return nil
			case <-c.o.After(d):
			}
			// The read may have given up on a leader that is gone:
			// learn the shard's leader again before the next one.
			if _, rerr := c.refresh(ctx, []string{req.Shard.Stream}); rerr != nil {
				c.log.V(1).Info("follow: metadata refresh failed", "shard", req.Shard.String(), "error", rerr.Error())
			}
			continue
		}
		failures = 0
		if len(res.Records) > 0 {
			if err := fn(res); err != nil {
				if errors.Is(err, ErrStopFollowing) {
					return nil
				}
				return err
			}
		}
		// Skipped trim records move Next without records: the position
		// moves on all the same.
		req.From, req.Offset = wire.FromOffset, res.Next
	}
}

// followStops reports whether a failed read of Follow is final.
func followStops(err error) bool {
	if errors.Is(err, errClusterClosed) || refusedIdentity(err) {
		return true
	}
	var we *wire.Error
	if errors.As(err, &we) {
		switch we.Code {
		case wire.CodeCursorTooOld, wire.CodeBadRequest, wire.CodeUnsupportedVersion,
			wire.CodeNotAuthorized, wire.CodeUnauthenticated:
			return true
		}
	}
	return false
}
