package client_test

import (
	"context"
	"errors"
	"sync"
	"testing"
	"time"

	"felix.dev/felix/broker/client"
	"felix.dev/felix/broker/wire"
)

// A Cluster's counter add whose answer is lost is resent under the same
// producer and sequence (the leader de-duplicates it); the next add takes
// the next sequence. A broker without counters is never sent one.
func TestClusterCounterAddResendsUnknownOutcome(t *testing.T) {
	type sent struct {
		id  [16]byte
		seq uint64
	}
	var (
		b    *scripted
		mu   sync.Mutex
		seen []sent
	)
	b = startScriptedWith(t, allFeatures|wire.FeatureCounters, func(f wire.Frame, n int) (wire.MsgType, []byte, bool) {
		if f.Type == wire.MsgMetadata {
			return wire.MsgMetadataOK, metaLeading(b.addr), true
		}
		req, err := wire.DecodeCounterAdd(f.Body)
		if err != nil || req.Producer == nil || req.Key != "k" {
			t.Errorf("counter add %+v %v: want key k with a producer", req, err)
			return 0, nil, false
		}
		mu.Lock()
		seen = append(seen, sent{req.Producer.ID, req.Producer.Seq})
		mu.Unlock()
		if n == 1 {
			return 0, nil, false // the answer is lost: the connection closes
		}
		return wire.MsgCounterAddOK, wire.EncodeCounterAddOK(wire.CounterAddOK{Value: int64(n), Offset: uint64(n)}), true
	})
	c := newTestCluster(t, 4, b.addr)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	for i, want := range []int64{2, 3} {
		got, err := c.CounterAdd(ctx, shard, "k", 1)
		if err != nil || got.Value != want {
			t.Fatalf("add %d = %+v, %v; want value %d", i, got, err, want)
		}
	}
	mu.Lock()
	defer mu.Unlock()
	if len(seen) != 3 || seen[0] != seen[1] || seen[0].seq != 0 || seen[2].id != seen[0].id || seen[2].seq != 1 {
		t.Fatalf("broker saw %+v; want the first add twice under sequence 0, then sequence 1", seen)
	}

	old := startScripted(t, func(f wire.Frame, n int) (wire.MsgType, []byte, bool) {
		if f.Type == wire.MsgMetadata {
			return wire.MsgMetadataOK, metaLeading(""), true
		}
		t.Errorf("a broker without counters was sent %v", f.Type)
		return 0, nil, false
	})
	oc := newTestCluster(t, 2, old.addr)
	if _, err := oc.CounterAdd(ctx, shard, "k", 1); !errors.Is(err, client.ErrNoCounters) {
		t.Fatalf("counter add to a broker without counters: %v, want ErrNoCounters", err)
	}
}
