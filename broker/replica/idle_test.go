package replica

import (
	"bytes"
	"context"
	"fmt"
	"sync"
	"testing"
	"time"

	"felix.dev/felix/broker/logstore"
	"felix.dev/felix/broker/record"
	"felix.dev/felix/broker/replication"
)

// testShardOf returns n's runtime of the test shard.
func testShardOf(t *testing.T, n *node) *shard {
	t.Helper()
	s, err := n.mgr.shard(testShard)
	if err != nil {
		t.Fatal(err)
	}
	return s
}

// reportsSince returns n's reports of passes after pass.
func reportsSince(n *node, pass uint64) []replication.Report {
	n.repMu.Lock()
	defer n.repMu.Unlock()
	var out []replication.Report
	for _, r := range n.reports {
		if r.Pass > pass {
			out = append(out, r)
		}
	}
	return out
}

// An idle shard's passes run off its goroutines (idle.go): the pass clock
// ticks the leader, the peer readers step the requests into the followers
// and the answers into the leader. [RP-4] holds all the same: every pass
// asks both followers on every log, and each answers (every report names
// both followers answered and caught up).
func TestIdleShardPassesRunOffTheShardGoroutines(t *testing.T) {
	c := newCluster(t, logstore.FsyncPeriodic, "a", "b", "c")
	c.ensure(replication.AckQuorum, "a", "b", "c")
	c.assign(c.firstAssignment("a"))
	a := c.nodes["a"]
	c.waitLeading(a)
	appendN(t, dial(t, a), "r", 3)
	la, fb, fc := testShardOf(t, a), testShardOf(t, c.nodes["b"]), testShardOf(t, c.nodes["c"])

	// Settled: the pass clock drives the leader.
	eventually(t, "the leader's passes start on the clock", 10*time.Second, func() bool {
		n := la.idleTicks.Load()
		r, ok := a.lastReport()
		return ok && n > 0 && len(r.Followers) == 2 && r.Followers[0].CaughtUp && r.Followers[1].CaughtUp
	})
	r0, _ := a.lastReport()
	ticks0, lsteps0 := la.idleTicks.Load(), la.idleSteps.Load()
	bsteps0, csteps0 := fb.idleSteps.Load(), fc.idleSteps.Load()
	const passes = 20
	eventually(t, fmt.Sprintf("%d more passes", passes), 20*time.Second, func() bool {
		r, _ := a.lastReport()
		return r.Pass >= r0.Pass+passes
	})
	for _, r := range reportsSince(a, r0.Pass) {
		if len(r.Followers) != 2 {
			t.Fatalf("pass %d reports %d followers", r.Pass, len(r.Followers))
		}
		for _, f := range r.Followers {
			if !f.Answered || !f.CaughtUp {
				t.Fatalf("pass %d: follower %s answered %v, caught up %v", r.Pass, f.Node, f.Answered, f.CaughtUp)
			}
		}
	}
	// Most passes never went through a shard goroutine (a pass may still
	// find a shard busy with a maintenance event or a stale signal).
	half := uint64(passes / 2)
	if got := la.idleTicks.Load() - ticks0; got < half {
		t.Errorf("leader: %d passes started on the clock in %d passes", got, passes)
	}
	if got := la.idleSteps.Load() - lsteps0; got < half {
		t.Errorf("leader: %d answer runs stepped by the pool's readers in %d passes", got, passes)
	}
	for name, n := range map[string]uint64{"b": fb.idleSteps.Load() - bsteps0, "c": fc.idleSteps.Load() - csteps0} {
		if n < half {
			t.Errorf("follower %s: %d request runs stepped by the server's reader in %d passes", name, n, passes)
		}
	}
}

// A shard that gets busy goes back to its goroutine and comes back to the
// idle path once quiet, and nothing is lost or reordered across the
// hand-overs: bursts of appends from several writers between idle
// stretches leave every replica with the same records in the same order.
func TestIdleShardBusyAndBackKeepsOrder(t *testing.T) {
	c := newCluster(t, logstore.FsyncPeriodic, "a", "b", "c")
	c.ensure(replication.AckQuorum, "a", "b", "c")
	c.assign(c.firstAssignment("a"))
	a := c.nodes["a"]
	c.waitLeading(a)
	la, fb := testShardOf(t, a), testShardOf(t, c.nodes["b"])
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	const writers, perWriter = 4, 25
	for burst := 0; burst < 3; burst++ {
		ticks, rounds := la.idleTicks.Load(), fb.rounds.Load()
		eventually(t, "idle again: the clock starts the leader's passes", 10*time.Second, func() bool {
			return la.idleTicks.Load() >= ticks+2
		})
		var wg sync.WaitGroup
		errs := make(chan error, writers)
		for w := 0; w < writers; w++ {
			wg.Add(1)
			go func(w int) {
				defer wg.Done()
				cl := dial(t, a)
				for i := 0; i < perWriter; i++ {
					p := []byte(fmt.Sprintf("b%d-w%d-%03d", burst, w, i))
					if _, err := cl.Append(ctx, testShard, []record.Record{{Payload: p}}, nil); err != nil {
						errs <- fmt.Errorf("burst %d writer %d append %d: %w", burst, w, i, err)
						return
					}
				}
			}(w)
		}
		wg.Wait()
		close(errs)
		for err := range errs {
			t.Fatal(err)
		}
		// The follower persisted the copies on its goroutine.
		if fb.rounds.Load() == rounds {
			t.Fatalf("burst %d: the follower's goroutine never ran while records were copied", burst)
		}
	}
	eventually(t, "every follower caught up", 10*time.Second, func() bool {
		r, ok := a.lastReport()
		return ok && len(r.Followers) == 2 && r.Followers[0].CaughtUp && r.Followers[1].CaughtUp
	})
	want := readAllRaw(t, a, record.LogData)
	// Each writer's records in the order it wrote them.
	next := map[string]int{}
	data := 0
	for _, r := range want {
		var burst, w, i int
		if _, err := fmt.Sscanf(string(r.Payload), "b%d-w%d-%03d", &burst, &w, &i); err != nil {
			continue // the fence
		}
		data++
		key := fmt.Sprintf("%d/%d", burst, w)
		if i != next[key] {
			t.Fatalf("leader: writer %s's record %d where %d was next", key, i, next[key])
		}
		next[key]++
	}
	if data != 3*writers*perWriter {
		t.Fatalf("leader holds %d records, want %d", data, 3*writers*perWriter)
	}
	for _, nm := range []replication.NodeID{"b", "c"} {
		// A report may predate the last commits: wait for the copies.
		var got []record.Record
		eventually(t, string(nm)+" holds every record", 10*time.Second, func() bool {
			got = readAllRaw(t, c.nodes[nm], record.LogData)
			return len(got) >= len(want)
		})
		if len(got) != len(want) {
			t.Fatalf("%s holds %d records, the leader %d", nm, len(got), len(want))
		}
		for i := range want {
			if !bytes.Equal(got[i].Payload, want[i].Payload) {
				t.Fatalf("%s record %d: %q, the leader's %q", nm, i, got[i].Payload, want[i].Payload)
			}
		}
	}
	t0 := la.idleTicks.Load()
	eventually(t, "idle again after the bursts", 10*time.Second, func() bool { return la.idleTicks.Load() > t0 })
}

// A Ready with writes that an idle driver's core call made is left to the
// run goroutine (it persists it), the shard is not idle until that is
// done, and the write is persisted, committed and acknowledged in order
// after what came before.
func TestIdleDriverHandsWritesToTheRunGoroutine(t *testing.T) {
	c := newCluster(t, logstore.FsyncPeriodic, "a", "b", "c")
	c.ensure(replication.AckQuorum, "a", "b", "c")
	c.assign(c.firstAssignment("a"))
	a := c.nodes["a"]
	c.waitLeading(a)
	appendN(t, dial(t, a), "before", 3)
	s := testShardOf(t, a)

	// Drive the leader's core as an idle driver would, with a proposal
	// (its Ready carries the leader's own write).
	ch := make(chan replication.Ack, 1)
	s.wmu.Lock()
	s.nextID++
	id := s.nextID
	s.waiters[id] = waiter{ch: ch, since: time.Now()}
	s.wmu.Unlock()
	rounds := s.rounds.Load()
	var handedOff, idleAfter bool
	eventually(t, "the leader idle", 10*time.Second, func() bool {
		if !s.tryIdle() {
			return false
		}
		defer s.cmu.Unlock()
		s.core.Propose(replication.Proposal{ID: id, Log: record.LogData, Mode: replication.AckQuorum,
			Records: []record.Record{{Payload: []byte("handed-over")}}})
		s.settleIdle(time.Now())
		handedOff, idleAfter = len(s.handoff) > 0, s.idleLocked()
		return true
	})
	if !handedOff {
		t.Fatal("the Ready with the proposal's write was not left to the run goroutine")
	}
	if idleAfter {
		t.Fatal("the shard counts as idle with a Ready left for its goroutine")
	}
	var ack replication.Ack
	select {
	case ack = <-ch:
	case <-time.After(10 * time.Second):
		t.Fatal("the handed-over proposal was never acknowledged")
	}
	if ack.Err != nil {
		t.Fatal(ack.Err)
	}
	if s.rounds.Load() == rounds {
		t.Fatal("the run goroutine never ran")
	}
	after := appendN(t, dial(t, a), "after", 2)
	for off := range after {
		if off <= ack.First {
			t.Fatalf("an append after the handed-over one got offset %d, not above %d", off, ack.First)
		}
	}
	for _, nm := range []replication.NodeID{"a", "b", "c"} {
		n := c.nodes[nm]
		eventually(t, string(nm)+" holds the handed-over record", 10*time.Second, func() bool {
			recs := readAllRaw(t, n, record.LogData)
			var order []string
			for _, r := range recs {
				order = append(order, string(r.Payload))
			}
			j := 0
			for _, want := range []string{"before-0", "before-1", "before-2", "handed-over", "after-0", "after-1"} {
				for j < len(order) && order[j] != want {
					j++
				}
				if j == len(order) {
					return false
				}
			}
			return true
		})
	}
}
