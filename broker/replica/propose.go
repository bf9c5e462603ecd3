package replica

import (
	"context"
	"fmt"
	"time"

	"felix.dev/felix/broker/record"
	"felix.dev/felix/broker/replication"
)

// propose submits p and waits for its Ack.
func (s *shard) propose(ctx context.Context, p replication.Proposal) (replication.Ack, error) {
	wait, err := s.submit(ctx, p)
	if err != nil {
		return replication.Ack{}, err
	}
	return wait(ctx)
}

// submit queues p (its ID is assigned here) behind every proposal queued
// before it and returns a function that waits for its Ack; the function is
// called at most once. Proposals queued by one goroutine reach the core in
// the order queued. An error means p was not queued.
func (s *shard) submit(ctx context.Context, p replication.Proposal) (func(context.Context) (replication.Ack, error), error) {
	ch := make(chan replication.Ack, 1)
	s.wmu.Lock()
	s.nextID++
	p.ID = s.nextID
	s.waiters[p.ID] = waiter{ch: ch, since: time.Now()}
	s.wmu.Unlock()
	forget := func() {
		s.wmu.Lock()
		delete(s.waiters, p.ID)
		s.wmu.Unlock()
	}
	if !s.inbox.put(&event{kind: evPropose, prop: p}, s.done, ctx.Done()) {
		forget()
		select {
		case <-s.done:
			return nil, s.stoppedErr()
		default:
			return nil, ctx.Err()
		}
	}
	return func(ctx context.Context) (replication.Ack, error) {
		select {
		case a := <-ch:
			return a, nil
		case <-s.done:
			select {
			case a := <-ch:
				return a, nil
			default:
			}
			forget()
			return replication.Ack{}, s.stoppedErr()
		case <-ctx.Done():
			forget()
			return replication.Ack{}, ctx.Err()
		}
	}, nil
}

// waiter is a submitted proposal's answer channel and when it was
// submitted.
type waiter struct {
	ch    chan replication.Ack
	since time.Time
}

func (s *shard) complete(a replication.Ack) {
	s.wmu.Lock()
	w, ok := s.waiters[a.ID]
	delete(s.waiters, a.ID)
	s.wmu.Unlock()
	if ok {
		if a.Err == nil {
			s.counters.committed(time.Since(w.since))
		}
		w.ch <- a
	}
}

// failWaiters ends every waiting proposal when the goroutine stops; their
// outcome is unknown.
func (s *shard) failWaiters() {
	s.wmu.Lock()
	defer s.wmu.Unlock()
	for id := range s.waiters {
		delete(s.waiters, id)
	}
}

// stoppedErr says why the shard no longer runs.
func (s *shard) stoppedErr() error {
	if e := s.failed.Load(); e != nil {
		return fmt.Errorf("replica: %s failed: %w", s.id, *e)
	}
	return fmt.Errorf("replica: %s: %w", s.id, record.ErrClosed)
}
