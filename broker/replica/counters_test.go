package replica

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"sync"
	"testing"
	"time"

	"felix.dev/felix/broker/client"
	"felix.dev/felix/broker/wire"
)

// Counter values acknowledged by one leader are served by the next: the
// new leader folds its own replica of the counter log (snapshot, trim and
// the adds after them), and answers a retried add with the first answer.
func TestCounterSurvivesLeaderChange(t *testing.T) {
	c, meta := routedCluster(t)
	assignReplicas(t, c, meta, replicaAssignment(c, "a", 1))
	c.waitLeading(c.nodes["a"])
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()

	p := func(seq uint64) *wire.Producer { return &wire.Producer{ID: [16]byte{0xc0, 1}, Seq: seq} }
	ca := dial(t, c.nodes["a"])
	for i, d := range []int64{5, 7} {
		if _, err := ca.CounterAdd(ctx, testShard, "k", d, p(uint64(i))); err != nil {
			t.Fatalf("add %d: %v", i, err)
		}
	}
	snap, err := ca.CounterSnapshot(ctx, testShard, true)
	if err != nil || snap.Floor != snap.Offset {
		t.Fatalf("snapshot: %+v %v", snap, err)
	}
	last, err := ca.CounterAdd(ctx, testShard, "k", 3, p(2))
	if err != nil || last.Value != 15 {
		t.Fatalf("add after the snapshot: %+v %v, want 15", last, err)
	}
	if _, err := ca.CounterAdd(ctx, testShard, "other", -4, nil); err != nil {
		t.Fatal(err)
	}

	c.nodes["a"].stop()
	assignReplicas(t, c, meta, replicaAssignment(c, "b", 2))
	c.waitLeading(c.nodes["b"])
	cb := dial(t, c.nodes["b"])
	var g wire.CounterGetOK
	eventually(t, "the new leader serves counters", 20*time.Second, func() bool {
		g, err = cb.CounterGet(ctx, testShard, "k")
		return err == nil
	})
	if g.Value != 15 || g.Through <= last.Offset {
		t.Fatalf("k on the new leader: %+v, want 15 through beyond %d", g, last.Offset)
	}
	if g, err := cb.CounterGet(ctx, testShard, "other"); err != nil || g.Value != -4 {
		t.Fatalf("other on the new leader: %+v %v, want -4", g, err)
	}
	if again, err := cb.CounterAdd(ctx, testShard, "k", 3, p(2)); err != nil || again != last {
		t.Fatalf("retry on the new leader: %+v %v, want the first answer %+v", again, err, last)
	}
	if next, err := cb.CounterAdd(ctx, testShard, "k", 1, p(3)); err != nil || next.Value != 16 {
		t.Fatalf("next add on the new leader: %+v %v, want 16", next, err)
	}
	if _, err := cb.CounterAdd(ctx, testShard, "k", 1, p(9)); !errors.Is(err, wire.ErrOutOfSequence) {
		t.Fatalf("a gap: %v, want OutOfSequence", err)
	}
}

// Adds streamed by several clients, each through its own Cluster, while
// the leader is stopped and a follower promoted sum exactly: every add is
// acknowledged once (the unknown outcomes of the ones in flight are resent
// and de-duplicated), each client sees its values rise, and the new
// leader's value is the number of acknowledged adds.
func TestCounterAddsSumExactlyAcrossFailover(t *testing.T) {
	c, meta := routedCluster(t)
	assignReplicas(t, c, meta, replicaAssignment(c, "a", 1))
	c.waitLeading(c.nodes["a"])
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	const clients = 3
	var (
		mu    sync.Mutex
		acked int64
	)
	count := func() int64 { mu.Lock(); defer mu.Unlock(); return acked }
	stop := make(chan struct{})
	done := make(chan error, clients)
	var reader *client.Cluster
	for i := range clients {
		cl, err := client.NewCluster(ctx, client.ClusterOptions{Attempts: 40,
			Rand: bytes.NewReader(bytes.Repeat([]byte{byte(9 + i)}, 256))}, c.nodes["d"].addr, c.nodes["c"].addr)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = cl.Close() })
		reader = cl
		go func() {
			var prev int64
			for {
				select {
				case <-stop:
					done <- nil
					return
				default:
				}
				res, err := cl.CounterAdd(ctx, testShard, "n", 1)
				if err != nil {
					done <- fmt.Errorf("client %d: add: %w", i, err)
					return
				}
				if res.Value <= prev {
					done <- fmt.Errorf("client %d: add answered value %d after %d", i, res.Value, prev)
					return
				}
				prev = res.Value
				mu.Lock()
				acked++
				mu.Unlock()
			}
		}()
	}
	failed := func() {
		select {
		case err := <-done:
			t.Fatalf("an adder stopped: %v", err)
		default:
		}
	}
	eventually(t, "60 adds acknowledged by a", 20*time.Second, func() bool { failed(); return count() >= 60 })
	c.nodes["a"].stop()
	before := count()
	assignReplicas(t, c, meta, replicaAssignment(c, "b", 2))
	eventually(t, "60 more adds acknowledged after the failover", 30*time.Second, func() bool { failed(); return count() >= before+60 })
	close(stop)
	for range clients {
		if err := <-done; err != nil {
			t.Fatal(err)
		}
	}
	g, err := reader.CounterGet(ctx, testShard, "n")
	if err != nil || g.Value != count() {
		t.Fatalf("n = %+v %v, want exactly the %d acknowledged adds", g, err, count())
	}
	t.Logf("%d adds acknowledged by %d clients, %d after the failover", count(), clients, count()-before)
}
