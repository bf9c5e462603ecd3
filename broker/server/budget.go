package server

import (
	"context"
	"sync"
)

// budget is a byte budget: acquire blocks while the bytes held would exceed
// the limit. Each connection has one for its accepted-but-unanswered bytes,
// and the server ones for the frames of all connections together (client,
// small-frame and replication pools, see readBody).
type budget struct {
	mu      sync.Mutex
	limit   int64
	held    int64
	waiters int           // acquirers waiting on freed
	freed   chan struct{} // closed and replaced on a release while waiters > 0
	moved   func(delta int64)
}

func newBudget(limit int64) *budget {
	return &budget{limit: limit, freed: make(chan struct{})}
}

// tryAcquire takes n bytes (clamped to the limit) if they fit now.
func (b *budget) tryAcquire(n int64) (int64, bool) {
	n = min(n, b.limit)
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.held+n > b.limit {
		return 0, false
	}
	b.held += n
	if b.moved != nil {
		b.moved(n)
	}
	return n, true
}

// acquire takes n bytes (n is clamped to the limit), waiting for releases.
// It returns the bytes taken, or ctx's error.
func (b *budget) acquire(ctx context.Context, n int64) (int64, error) {
	n = min(n, b.limit)
	for {
		b.mu.Lock()
		if b.held+n <= b.limit {
			b.held += n
			if b.moved != nil {
				b.moved(n)
			}
			b.mu.Unlock()
			return n, nil
		}
		ch := b.freed
		b.waiters++
		b.mu.Unlock()
		select {
		case <-ch:
		case <-ctx.Done():
			b.mu.Lock()
			b.waiters--
			b.mu.Unlock()
			return 0, ctx.Err()
		}
		b.mu.Lock()
		b.waiters--
		b.mu.Unlock()
	}
}

func (b *budget) release(n int64) {
	if n == 0 {
		return
	}
	b.mu.Lock()
	b.held -= n
	if b.moved != nil {
		b.moved(-n)
	}
	if b.waiters > 0 {
		close(b.freed)
		b.freed = make(chan struct{})
	}
	b.mu.Unlock()
}

// charge is what one request holds until its answer is written: bytes of
// its connection's budget and of the server's frame budget.
type charge struct {
	conn  int64
	frame frameHold
}
