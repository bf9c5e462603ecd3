package localcluster_test

import (
	"context"
	"fmt"
	"sync"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	felixv1 "felix.dev/felix/api/v1alpha1"
	fclient "felix.dev/felix/broker/client"
	"felix.dev/felix/broker/record"
)

// shardWriter appends to one shard through a routing, idempotent Cluster
// client, one append at a time, and keeps what was acknowledged and the
// longest time between two acknowledgements: how long the shard could
// not take a write, as a client with retries sees it.
type shardWriter struct {
	shard   record.ShardID
	mu      sync.Mutex
	acked   map[uint64]string
	last    time.Time
	longest time.Duration
	failed  int
	lastErr error
}

func (w *shardWriter) run(ctx context.Context, cl *fclient.Cluster, pace time.Duration) {
	for n := 0; ctx.Err() == nil; n++ {
		p := fmt.Sprintf("%s-%d-%d", w.shard.Stream, w.shard.Shard, n)
		actx, cancel := context.WithTimeout(ctx, 10*time.Second)
		res, err := cl.Append(actx, w.shard, []record.Record{{Payload: []byte(p)}}, nil)
		cancel()
		now := time.Now()
		w.mu.Lock()
		if err != nil {
			if ctx.Err() == nil {
				w.failed++
				w.lastErr = err
			}
		} else {
			w.acked[res.First] = p
			if !w.last.IsZero() && now.Sub(w.last) > w.longest {
				w.longest = now.Sub(w.last)
			}
			w.last = now
		}
		w.mu.Unlock()
		time.Sleep(pace) // a steady, modest rate
	}
}

// scenarioRollingRestart: under a steady write load on every shard, a
// spec change rolls every broker of the cluster. The roll moves each
// leader's shards off it before its pod goes (planned promotions), so no
// shard fails over: no Promoted event; every acknowledged record is read
// back afterwards, each once; and each shard's longest write gap, as a
// retrying client sees it, is logged (measured, not asserted).
func scenarioRollingRestart(tn *tenant) {
	t := tn.t
	const stream, shards = "rolled", 3
	if err := tn.c.Create(tn.ctx, &felixv1.FelixStream{ObjectMeta: metav1.ObjectMeta{Name: stream, Namespace: tn.ns},
		Spec: felixv1.FelixStreamSpec{Cluster: tn.cluster, Shards: shards, Replicas: 3, Ack: felixv1.AckQuorum}}); err != nil {
		t.Fatal(err)
	}
	for i := range shards {
		tn.shardCaughtUp(fmt.Sprintf("%s-%d", stream, i), 3*time.Minute)
	}
	cfg, err := tn.user.config(tn.ctx)
	if err != nil {
		t.Fatal(err)
	}
	var addrs []string
	for i := range tn.brokers {
		addrs = append(addrs, tn.broker(fmt.Sprintf("%s-%d", tn.cluster, i)).Address)
	}
	cl, err := fclient.NewCluster(tn.ctx, fclient.ClusterOptions{Options: fclient.Options{TLS: cfg}, Idempotent: true, Attempts: 60}, addrs...)
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = cl.Close() }()
	promotedBefore, err := tn.events("Promoted")
	if err != nil {
		t.Fatal(err)
	}

	wctx, stop := context.WithCancel(tn.ctx)
	var wg sync.WaitGroup
	writers := make([]*shardWriter, shards)
	for i := range writers {
		writers[i] = &shardWriter{shard: record.ShardID{Stream: stream, Shard: uint32(i)}, acked: map[uint64]string{}}
		wg.Add(1)
		go func() { defer wg.Done(); writers[i].run(wctx, cl, 5*time.Millisecond) }()
	}
	defer func() { stop(); wg.Wait() }()
	eventually(t, "every shard writing", time.Minute, func() (bool, string) {
		for _, w := range writers {
			w.mu.Lock()
			n := len(w.acked)
			w.mu.Unlock()
			if n < 20 {
				return false, fmt.Sprintf("%s: %d acknowledged", w.shard, n)
			}
		}
		return true, ""
	})

	// A spec change that changes every pod's spec hash: a rolling update.
	start := time.Now()
	var c felixv1.FelixCluster
	if err := tn.get(tn.cluster, &c); err != nil {
		t.Fatal(err)
	}
	c.Spec.Resources.Requests = corev1.ResourceList{corev1.ResourceCPU: resource.MustParse("10m")}
	if err := tn.c.Update(tn.ctx, &c); err != nil {
		t.Fatal(err)
	}
	rolling := func(c *felixv1.FelixCluster) bool {
		p := meta.FindStatusCondition(c.Status.Conditions, felixv1.ConditionProgressing)
		return p != nil && p.Reason == "RollingUpdate"
	}
	eventually(t, "the rolling update to start", time.Minute, func() (bool, string) {
		var c felixv1.FelixCluster
		if err := tn.get(tn.cluster, &c); err != nil {
			return false, err.Error()
		}
		return rolling(&c) || tn.replaced("BrokerReplaced") > 0, "not rolling yet"
	})
	eventually(t, "the rolling update to finish", 6*time.Minute, func() (bool, string) {
		var c felixv1.FelixCluster
		if err := tn.get(tn.cluster, &c); err != nil {
			return false, err.Error()
		}
		p := meta.FindStatusCondition(c.Status.Conditions, felixv1.ConditionProgressing)
		if p == nil {
			return false, "no Progressing condition"
		}
		return !rolling(&c) && c.Status.ObservedGeneration == c.Generation && tn.replaced("BrokerReplaced") >= tn.brokers,
			fmt.Sprintf("%s: %s; %d pods replaced", p.Reason, p.Message, tn.replaced("BrokerReplaced"))
	})
	took := time.Since(start)
	for i := range shards {
		tn.shardCaughtUp(fmt.Sprintf("%s-%d", stream, i), 3*time.Minute)
	}
	stop()
	wg.Wait()

	promoted, err := tn.events("Promoted")
	if err != nil {
		t.Fatal(err)
	}
	if promoted != promotedBefore {
		t.Errorf("%d failover promotions during the rolling update (Promoted events), want none", promoted-promotedBefore)
	}
	switchovers, _ := tn.events("Switchover")
	for _, w := range writers {
		name := fmt.Sprintf("%s-%d", stream, w.shard.Shard)
		s := tn.shardNamed(name)
		held := tn.readShard(tn.broker(s.Status.Assignment.Leader).Address, w.shard)
		seen := map[string]bool{}
		for _, r := range held {
			if seen[string(r.Payload)] {
				t.Errorf("%s: %q read twice", w.shard, r.Payload)
			}
			seen[string(r.Payload)] = true
		}
		checkAcked(t, w.acked, held, "the leader of "+name)
		t.Logf("ROLLING-RESTART %s: %d acknowledged, longest gap between acknowledgements %v, %d appends failed (last: %v), epoch %d",
			w.shard, len(w.acked), w.longest.Round(time.Millisecond), w.failed, w.lastErr, s.Status.Assignment.Epoch)
	}
	t.Logf("ROLLING-RESTART %d brokers rolled in %v; %d Switchover events, %d Promoted", tn.brokers, took.Round(100*time.Millisecond), switchovers, promoted-promotedBefore)
}

// replaced counts the cluster's events with reason.
func (tn *tenant) replaced(reason string) int {
	n, err := tn.events(reason)
	if err != nil {
		return 0
	}
	return n
}
