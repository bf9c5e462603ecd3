package e2e

import (
	"context"
	"fmt"
	"slices"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	felixv1 "felix.dev/felix/api/v1alpha1"
	"felix.dev/felix/broker/record"
)

// TestCounters_ConcurrentAddsSumExactlyAcrossLeaderKill is issue #28's
// counter scenario on three broker processes: four clients, each a
// routing client of its own with idempotent adds, add 1 to a counter of
// shard 0 and 2 to one of shard 1, over and over, while the leader broker
// of shard 0 is killed with SIGKILL in the middle. Every add must be
// answered (the client resends one whose outcome is unknown, and the new
// leader answers a resend with the first answer), and each counter must
// end at exactly the sum of the answered adds. Stronger still, the values
// the adds were answered with must be exactly delta, 2*delta, ...,
// n*delta: an add applied twice, or lost after it was answered, leaves a
// gap, a repeat or a different end value.
func TestCounters_ConcurrentAddsSumExactlyAcrossLeaderKill(t *testing.T) {
	c := newCluster(t, 3, felixv1.FsyncPeriodic)
	for i := 0; i < 3; i++ {
		c.startBroker(i)
	}
	c.createStreamShards(t, "tally", 3, groupShards)
	c.waitAllServing(t, "tally")
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()

	const (
		clients  = 4
		perShard = 150 // adds per client per counter
		key      = "hits"
	)
	deltas := []int64{1, 2} // shard 0, shard 1
	var (
		mu      sync.Mutex
		answers = make([][]int64, len(deltas))
		done    atomic.Int64
		wg      sync.WaitGroup
	)
	for w := 0; w < clients; w++ {
		cl := c.newGroupClient(t, ctx)
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := 0; i < perShard; i++ {
				for s, d := range deltas {
					ok, err := cl.CounterAdd(ctx, record.ShardID{Stream: "tally", Shard: uint32(s)}, key, d)
					if err != nil {
						t.Errorf("client %d: add %d to tally-%d: %v", w, i, s, err)
						return
					}
					mu.Lock()
					answers[s] = append(answers[s], ok.Value)
					mu.Unlock()
					done.Add(1)
				}
			}
		}()
	}

	// Kill shard 0's leader once about a quarter of the adds are in.
	c.eventually("a quarter of the adds answered", 90*time.Second, func() (bool, string) {
		n := done.Load()
		return n >= clients*perShard*int64(len(deltas))/4, fmt.Sprintf("%d answered", n)
	})
	sh := c.shard("tally", 0)
	if sh == nil || sh.Status.Assignment == nil {
		t.Fatalf("tally-0 has no assignment: %s", shardState(sh))
	}
	leader := sh.Status.Assignment.Leader
	t.Logf("killing broker %s, the leader of tally-0, after %d adds", leader, done.Load())
	c.kill9(leader)
	wg.Wait()
	if t.Failed() {
		t.FailNow()
	}

	check := c.newGroupClient(t, ctx)
	for s, d := range deltas {
		got := answers[s]
		slices.Sort(got)
		want := make([]int64, clients*perShard)
		for i := range want {
			want[i] = int64(i+1) * d
		}
		if !slices.Equal(got, want) {
			t.Errorf("tally-%d: %d answers, want the values %d..%d once each; first difference at %d", s, len(got), d, int64(len(want))*d, firstDiff(got, want))
		}
		v, err := check.CounterGet(ctx, record.ShardID{Stream: "tally", Shard: uint32(s)}, key)
		if err != nil {
			t.Fatalf("get tally-%d: %v", s, err)
		}
		if sum := int64(clients*perShard) * d; v.Value != sum {
			t.Errorf("tally-%d: counter %s = %d, want %d (the sum of the answered adds)", s, key, v.Value, sum)
		}
	}
}

// firstDiff is the first index where a and b differ (len of the shorter
// when one is a prefix of the other).
func firstDiff(a, b []int64) int {
	for i := range min(len(a), len(b)) {
		if a[i] != b[i] {
			return i
		}
	}
	return min(len(a), len(b))
}
