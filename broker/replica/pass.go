package replica

import (
	"sync"
	"time"

	"felix.dev/felix/broker/replication"
)

// passClock starts the passes of all the shards of a Manager: one ticker
// goroutine gives each shard a tick every Options.PassInterval, where
// each shard used to run its own ticker (issue 31).
//
// Besides a timer per shard this saves most of the system calls of idle
// shards: every pass sends each follower one request per log [RP-4], and
// with each shard's passes at its own phase nearly every request (and
// every answer) went out alone, one write system call per frame, a read
// on the other side. Passes started together leave their requests in the
// peer connection's queue together, and its writer sends them with one
// write (peer.Pool and the server's connection writer flush once their
// queue is empty), so the answers come back together too.
//
// Only leading and recovering shards get ticks: a follower's core does
// nothing on a Tick (the runtime configures it with PassInterval 1, so it
// counts no ticks), and waking two thirds of the shard goroutines of a
// 3-replica cluster every pass for nothing cost about a third of their
// wake-ups (issue 31). The role is the one the shard last published
// (shard.status): a shard that has just become leader, or started
// recovering, gets its ticks from the next one on, as if it had missed
// one.
//
// An idle shard's pass starts on the clock's goroutine: it ticks the core
// itself and sends what the pass sends (idle.go), so the shard's
// goroutine is not woken. A shard that is not idle gets its tick on its
// channel.
//
// A shard's tick channel holds one tick, as a time.Ticker's does: a
// shard still busy when the next tick comes gets it when it is done, and
// the ticks it missed meanwhile are dropped. The clock never waits for a
// shard, so a busy or blocked shard delays no other shard's passes.
type passClock struct {
	mu     sync.Mutex
	shards map[*shard]struct{}
	quit   chan struct{}
	done   chan struct{}
}

func (c *passClock) start(interval time.Duration) {
	c.shards = map[*shard]struct{}{}
	c.quit, c.done = make(chan struct{}), make(chan struct{})
	go c.run(interval)
}

func (c *passClock) run(interval time.Duration) {
	defer close(c.done)
	t := time.NewTicker(interval)
	defer t.Stop()
	for {
		select {
		case <-c.quit:
			return
		case <-t.C:
		}
		c.mu.Lock()
		for s := range c.shards {
			if !s.wantsTicks() || s.tickIdle() {
				continue // an idle shard's pass starts here (idle.go)
			}
			select {
			case s.tick <- struct{}{}:
			default: // the shard has not taken the last tick yet
			}
		}
		c.mu.Unlock()
	}
}

// wantsTicks reports whether s's core acts on a Tick: every role but
// follower. A shard that has published no status yet gets ticks.
func (s *shard) wantsTicks() bool {
	st := s.status.Load()
	return st == nil || st.Role != replication.RoleFollower
}

// add starts giving s ticks; remove stops.
func (c *passClock) add(s *shard) {
	c.mu.Lock()
	c.shards[s] = struct{}{}
	c.mu.Unlock()
}

func (c *passClock) remove(s *shard) {
	c.mu.Lock()
	delete(c.shards, s)
	c.mu.Unlock()
}

// stop ends the clock and waits for its goroutine.
func (c *passClock) stop() {
	select {
	case <-c.quit:
	default:
		close(c.quit)
	}
	<-c.done
}
