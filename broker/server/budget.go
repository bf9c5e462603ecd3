package server

import (
	"context"
	"sync"
)

// budget is a byte budget: acquire blocks while the bytes held would exceed
// the limit. It bounds a connection's accepted-but-unanswered bytes.
type budget struct {
	mu      sync.Mutex
	limit   int64
	held    int64
	waiters int           // acquirers waiting on freed
	freed   chan struct{} // closed and replaced on a release while waiters > 0
}

func newBudget(limit int64) *budget {
	return &budget{limit: limit, freed: make(chan struct{})}
}

// acquire takes n bytes (n is clamped to the limit), waiting for releases.
// It returns the bytes taken, or ctx's error.
func (b *budget) acquire(ctx context.Context, n int64) (int64, error) {
	n = min(n, b.limit)
	for {
		b.mu.Lock()
		if b.held+n <= b.limit {
			b.held += n
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
	if b.waiters > 0 {
		close(b.freed)
		b.freed = make(chan struct{})
	}
	b.mu.Unlock()
}
