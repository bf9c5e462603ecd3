package replica

import (
	"time"

	"felix.dev/felix/broker/replication"
)

// Idle shards are driven off their own goroutines (issue 31).
//
// An idle shard's pass is a tick on its leader, one request per log to
// each follower [RP-4], and each follower's answers. Driven through the
// shards' goroutines that is about four goroutine wake-ups per shard and
// pass (the leader's tick, the follower's bundle, the answers of each
// follower), each a hand-off through a channel or the inbox, a select
// and a trip through the scheduler, for a few microseconds of core work.
// Instead, while a shard is idle, the goroutine that has the work in
// hand drives the core itself: the pass clock ticks every idle leader in
// its own walk over the shards, a peer connection's reader steps the
// answers (pool side) or requests (server side) it decoded for an idle
// shard, and the shard's goroutine sleeps through the pass. The core is
// the same state machine fed the same inputs; only the goroutine that
// feeds it changes.
//
// Ownership. The core, and the runtime state around it (persisting,
// queued, the recent caches, the send buffers, the pass times), belong to
// whoever holds shard.cmu: the run goroutine for each round of its loop,
// an idle driver for one call. An idle driver never waits for cmu
// (TryLock): a shard whose goroutine is at work is not idle.
//
// A shard is idle when, with cmu held: its goroutine still runs (and has
// not failed: a round that failed releases cmu before the goroutine
// exits); no event
// waits in its inbox; nothing is with the persister (no Ready in flight
// or queued, no hold for want of space); no Ready an idle driver left is
// waiting for the goroutine; and its last Ready that sent messages
// shipped no records, and its last Ready wrote nothing (loud). Messages
// carrying records are not taken idle either. Everything else goes
// through the inbox as before; a shard with client traffic, a follower
// being copied to, a leader catching one up, returns to its goroutine.
//
// Order. An idle driver steps its messages only when the inbox is empty,
// with cmu held, and the run goroutine holds cmu from taking events out of
// the inbox until it has applied them and carried out the Readies they
// made. So what a sender posted before (a Connected before the answers
// on the new connection, a bundle before the next one) has been applied
// before an idle driver steps what the sender hands it next, and what it
// hands to the inbox after an idle step is applied after that step.
//
// Hand-over. An idle driver carries out the Readies its step made as the
// run goroutine would (messages, commits, acks, report), except those with
// writes: the first such Ready, and nothing after it, is left in
// shard.handoff for the run goroutine, which takes it before anything
// else (writes belong with the persister, and a reset waits for it). A
// failure is left the same way (idleErr). Until the run goroutine has
// taken them the shard is not idle, so the Readies keep their order.

// idleLocked reports whether s is idle (see above) as far as the state
// cmu guards shows; the caller holds cmu and checks the inbox too.
func (s *shard) idleLocked() bool {
	return !s.exited && s.failed.Load() == nil && !s.loud && s.idleErr == nil && len(s.handoff) == 0 &&
		s.persisting == 0 && len(s.queued) == 0 && !s.holding.Load()
}

// tryIdle takes cmu if s is idle, and reports whether it did; the caller
// then drives the core and calls settleIdle.
func (s *shard) tryIdle() bool {
	if !s.cmu.TryLock() {
		return false
	}
	if s.idleLocked() && s.inbox.empty() {
		return true
	}
	s.cmu.Unlock()
	return false
}

// tickIdle starts a pass of an idle shard on the calling goroutine (the
// pass clock) and reports whether it did; if not, the tick goes to the
// shard's goroutine. A tick already waiting for the goroutine counts as
// this one.
func (s *shard) tickIdle() bool {
	if len(s.tick) > 0 || !s.tryIdle() {
		return false
	}
	defer s.cmu.Unlock()
	t0 := s.m.o.Now()
	s.core.Tick()
	s.idleTicks.Add(1)
	s.settleIdle(t0)
	return true
}

// stepIdle steps msgs, in order, into an idle shard's core on the calling
// goroutine (a peer connection's reader) and reports whether it did; if
// not it did nothing, and the caller posts them to the inbox.
func (s *shard) stepIdle(msgs []replication.Message) bool {
	for i := range msgs {
		if len(msgs[i].Records) > 0 {
			return false // copying: the shard's goroutine persists them
		}
	}
	if !s.tryIdle() {
		return false
	}
	defer s.cmu.Unlock()
	t0 := s.m.o.Now()
	for i := range msgs {
		s.core.Step(msgs[i])
	}
	s.idleSteps.Add(1)
	s.settleIdle(t0)
	return true
}

// settleIdle carries out the Readies an idle driver's core calls made,
// leaving the first with writes (and the rest of the core's output) to
// the run goroutine, and publishes the status (cmu held).
func (s *shard) settleIdle(t0 time.Time) {
	s.notePass(s.core.Status().Pass, t0)
	for s.core.HasReady() {
		rd := s.core.Ready()
		if len(rd.Writes) > 0 {
			s.handoff = append(s.handoff, rd)
			s.kickRun()
			break
		}
		// Nothing is with the persister (idle): handle advances rd
		// here, it never waits.
		if err := s.handle(rd); err != nil {
			s.idleErr = err
			s.kickRun()
			break
		}
	}
	s.publish(t0)
}

// kickRun wakes the run goroutine for what an idle driver left.
func (s *shard) kickRun() {
	select {
	case s.kick <- struct{}{}:
	default:
	}
}

// takeHandoff carries out, on the run goroutine, the Readies an idle
// driver left, in order, and returns the failure it met, if any (cmu
// held).
func (s *shard) takeHandoff() error {
	if err := s.idleErr; err != nil {
		return err
	}
	for i, rd := range s.handoff {
		s.handoff[i] = replication.Ready{}
		if err := s.handle(rd); err != nil {
			s.handoff = s.handoff[i+1:]
			return err
		}
	}
	s.handoff = s.handoff[:0]
	return nil
}

// noteLoud records whether rd makes the shard loud (see idleLocked): a
// Ready with writes does, one whose messages ship records does, and one
// that sends messages without records and writes nothing makes it quiet.
func (s *shard) noteLoud(rd replication.Ready) {
	if len(rd.Writes) > 0 {
		s.loud = true
		return
	}
	if len(rd.Messages) == 0 {
		return
	}
	for i := range rd.Messages {
		if len(rd.Messages[i].Records) > 0 {
			s.loud = true
			return
		}
	}
	s.loud = false
}
