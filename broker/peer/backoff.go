package peer

import (
	"sync/atomic"
	"time"

	"felix.dev/felix/broker/replication"
)

// Backoff is the wait between reconnection attempts to a peer: Min after
// the first failure, doubling per further failure, capped at Max. A
// successful handshake starts over. It is a pure value; the clock that
// waits is Options.After.
type Backoff struct {
	Min time.Duration
	Max time.Duration
}

// Default backoff bounds.
const (
	DefaultBackoffMin = 50 * time.Millisecond
	DefaultBackoffMax = 2 * time.Second
)

// Delay returns the wait before attempt number failures+1, after failures
// consecutive failures (failures >= 1).
func (b Backoff) Delay(failures int) time.Duration {
	lo, hi := b.Min, b.Max
	if lo <= 0 {
		lo = DefaultBackoffMin
	}
	if hi < lo {
		hi = max(lo, DefaultBackoffMax)
	}
	d := lo
	for i := 1; i < failures && d < hi; i++ {
		d *= 2
	}
	return min(d, hi)
}

// ConnIDs hands out replication.ConnIDs: increasing from 1, never reused
// within one ConnIDs. One broker uses one ConnIDs for its outgoing and
// accepted connections alike. Safe for concurrent use.
type ConnIDs struct{ n atomic.Uint64 }

// Next returns a ConnID no earlier call returned.
func (c *ConnIDs) Next() replication.ConnID { return replication.ConnID(c.n.Add(1)) }
