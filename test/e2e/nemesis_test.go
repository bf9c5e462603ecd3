package e2e

import (
	"context"
	"fmt"
	"math/rand/v2"
	"os"
	"strconv"
	"sync"
	"syscall"
	"testing"
	"time"

	felixv1 "felix.dev/felix/api/v1alpha1"
	"felix.dev/felix/broker/client"
	"felix.dev/felix/broker/record"
)

// TestNemesis_QuorumWorkloadSurvivesFaults runs a Quorum append workload on
// a 3-broker cluster while a nemesis injects, one at a time, kill -9 and
// restart, SIGSTOP/SIGCONT, and volume wipe and restart of a random broker,
// waiting between faults until the shard reports every replica caught up
// (so at most one replica is faulty at once). At the end every acknowledged
// record is read back exactly once, in offset order.
//
// FELIX_NEMESIS_DURATION sets the fault period (default 90s); FELIX_NEMESIS_SEED the seed.
func TestNemesis_QuorumWorkloadSurvivesFaults(t *testing.T) {
	if testing.Short() {
		t.Skip("nemesis run skipped with -short")
	}
	duration := 90 * time.Second
	if v := os.Getenv("FELIX_NEMESIS_DURATION"); v != "" {
		d, err := time.ParseDuration(v)
		if err != nil {
			t.Fatal(err)
		}
		duration = d
	}
	seed := uint64(time.Now().UnixNano())
	if v := os.Getenv("FELIX_NEMESIS_SEED"); v != "" {
		s, err := strconv.ParseUint(v, 10, 64)
		if err != nil {
			t.Fatal(err)
		}
		seed = s
	}
	t.Logf("nemesis seed %d (FELIX_NEMESIS_SEED=%d replays the fault choices)", seed, seed)
	rng := rand.New(rand.NewPCG(seed, 0))

	c := newCluster(t, 3, felixv1.FsyncPeriodic)
	for i := 0; i < 3; i++ {
		c.startBroker(i)
	}
	c.createStream(t, "nemesis", 3)

	// The workload: one sequential writer, never retrying blindly.
	var mu sync.Mutex
	acked := map[uint64]string{}
	var order []uint64
	stop := make(chan struct{})
	done := make(chan struct{})
	go func() {
		defer close(done)
		n := 0
		for {
			select {
			case <-stop:
				return
			default:
			}
			sh := c.shard("nemesis", 0)
			if sh == nil || sh.Status.Assignment == nil {
				time.Sleep(50 * time.Millisecond)
				continue
			}
			ctx, cancel := context.WithTimeout(context.Background(), 3*time.Second)
			cl, err := client.Dial(ctx, c.addressOf(sh.Status.Assignment.Leader), client.Options{})
			if err != nil {
				cancel()
				time.Sleep(50 * time.Millisecond)
				continue
			}
			for {
				select {
				case <-stop:
					_ = cl.Close()
					cancel()
					return
				default:
				}
				p := fmt.Sprintf("n-%d", n)
				n++
				actx, acancel := context.WithTimeout(context.Background(), 2*time.Second)
				ok, err := cl.Append(actx, record.ShardID{Stream: "nemesis"}, []record.Record{{Payload: []byte(p)}}, nil)
				acancel()
				if err != nil {
					break
				}
				mu.Lock()
				acked[ok.First] = p
				order = append(order, ok.First)
				mu.Unlock()
				// A steady, modest rate: the run is about faults, and a
				// wiped replica must be copied again between them.
				time.Sleep(2 * time.Millisecond)
			}
			_ = cl.Close()
			cancel()
			time.Sleep(50 * time.Millisecond)
		}
	}()

	faults := map[string]int{}
	end := time.Now().Add(duration)
	for time.Now().Before(end) {
		c.eventually("every replica caught up before the next fault", 3*time.Minute, func() (bool, string) {
			sh := c.shard("nemesis", 0)
			return sh != nil && sh.Status.CaughtUp == "3/3", shardState(sh)
		})
		victim := rng.IntN(3)
		name := fmt.Sprintf("%s-%d", c.name, victim)
		switch rng.IntN(3) {
		case 0:
			c.kill9(name)
			time.Sleep(time.Duration(rng.IntN(1000)) * time.Millisecond)
			c.startBroker(victim)
			faults["kill-9"]++
			t.Logf("fault: kill -9 %s", name)
		case 1:
			c.mu.Lock()
			p := c.brokers[name].cmd.Process
			c.mu.Unlock()
			_ = p.Signal(syscall.SIGSTOP)
			time.Sleep(time.Duration(500+rng.IntN(2500)) * time.Millisecond)
			_ = p.Signal(syscall.SIGCONT)
			faults["freeze"]++
			t.Logf("fault: freeze %s", name)
		case 2:
			c.kill9(name)
			if err := os.RemoveAll(c.brokers[name].dataDir); err != nil {
				t.Fatal(err)
			}
			c.startBroker(victim)
			faults["wipe"]++
			t.Logf("fault: wipe %s", name)
		}
	}
	close(stop)
	<-done

	var leader string
	c.eventually("a serving leader at the end", 2*time.Minute, func() (bool, string) {
		sh := c.shard("nemesis", 0)
		if sh == nil || sh.Status.Assignment == nil {
			return false, "no assignment"
		}
		leader = sh.Status.Assignment.Leader
		return sh.Status.CaughtUp == "3/3", "caught up " + sh.Status.CaughtUp
	})
	got := readAll(t, c.addressOf(leader), "nemesis")
	seen := map[string]uint64{}
	for off, p := range got {
		if prev, dup := seen[p]; dup {
			t.Errorf("payload %q read twice, at %d and %d", p, prev, off)
		}
		seen[p] = off
	}
	mu.Lock()
	defer mu.Unlock()
	for off, want := range acked {
		if got[off] != want {
			t.Errorf("acknowledged record at %d: want %q, read %q", off, want, got[off])
		}
	}
	for i := 1; i < len(order); i++ {
		if order[i] <= order[i-1] {
			t.Errorf("acknowledged offsets out of order: %d after %d", order[i], order[i-1])
		}
	}
	total := 0
	for _, n := range faults {
		total += n
	}
	t.Logf("nemesis: %d faults injected %v over %s; %d acknowledged records verified, %d records read",
		total, faults, duration, len(acked), len(got))
	if len(acked) == 0 {
		t.Fatal("the workload acknowledged nothing")
	}
}

// shardState renders what a timeout message needs to explain a shard.
func shardState(sh *felixv1.FelixShard) string {
	if sh == nil {
		return "no shard"
	}
	s := fmt.Sprintf("caughtUp=%s", sh.Status.CaughtUp)
	if a := sh.Status.Assignment; a != nil {
		s += fmt.Sprintf(" assignment=%s@%d/inc%d counted=%v", a.Leader, a.Epoch, a.LeaderIncarnation, a.Counted)
	}
	if r := sh.Status.Report; r != nil {
		s += fmt.Sprintf(" report{leader=%s inc=%d epoch=%d pos=%d taken=%s followers=%+v}", r.Leader, r.LeaderIncarnation, r.Epoch, r.Position, r.TakenAt.Format(time.RFC3339), r.Followers)
	}
	for _, c := range sh.Status.Conditions {
		s += fmt.Sprintf(" %s=%s(%s: %s)", c.Type, c.Status, c.Reason, c.Message)
	}
	return s
}
