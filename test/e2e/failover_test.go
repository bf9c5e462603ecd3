package e2e

import (
	"context"
	"fmt"
	"testing"
	"time"

	felixv1 "felix.dev/felix/api/v1alpha1"
	"felix.dev/felix/broker/record"
	"felix.dev/felix/broker/wire"
)

// appendUntilAcked appends records one batch at a time to whichever broker
// leads the shard now, and returns the payloads that were acknowledged
// with their offsets. A batch whose outcome is unknown is not counted as
// acknowledged (and never retried blindly).
func (c *cluster) appendAcked(t *testing.T, stream string, n int, prefix string) map[uint64]string {
	t.Helper()
	acked := map[uint64]string{}
	shard := record.ShardID{Stream: stream, Shard: 0}
	for i := 0; i < n; {
		sh := c.shard(stream, 0)
		if sh == nil || sh.Status.Assignment == nil {
			time.Sleep(50 * time.Millisecond)
			continue
		}
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		cl, err := c.dial(ctx, c.addressOf(sh.Status.Assignment.Leader))
		if err != nil {
			cancel()
			time.Sleep(50 * time.Millisecond)
			continue
		}
		for ; i < n; i++ {
			payload := fmt.Sprintf("%s-%d", prefix, i)
			ok, err := cl.Append(ctx, shard, []record.Record{{Payload: []byte(payload)}}, nil)
			if err != nil {
				break // not leader yet, recovering, or gone: look again
			}
			acked[ok.First] = payload
		}
		_ = cl.Close()
		cancel()
		if i < n {
			time.Sleep(50 * time.Millisecond)
		}
	}
	return acked
}

// readAll reads the whole data log of shard 0 from a broker. A broker that
// was just assigned the lead serves once it has seen the assignment and
// fenced the shard, so refusals are retried until a deadline.
func (c *cluster) readAll(t *testing.T, addr, stream string) map[uint64]string {
	t.Helper()
	deadline := time.Now().Add(60 * time.Second)
	for {
		out, err := c.tryReadAll(addr, stream)
		if err == nil {
			return out
		}
		if time.Now().After(deadline) {
			t.Fatalf("read from %s: %v", addr, err)
		}
		time.Sleep(100 * time.Millisecond)
	}
}

func (c *cluster) tryReadAll(addr, stream string) (map[uint64]string, error) {
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	cl, err := c.dial(ctx, addr)
	if err != nil {
		return nil, err
	}
	defer cl.Close()
	out := map[uint64]string{}
	req := wire.ReadRequest{Shard: record.ShardID{Stream: stream, Shard: 0}, From: wire.FromEarliest, MaxRecords: 1000}
	for {
		r, err := cl.Read(ctx, req)
		if err != nil {
			return nil, err
		}
		for _, rec := range r.Records {
			out[rec.Offset] = string(rec.Payload)
		}
		if len(r.Records) == 0 {
			return out, nil
		}
		req.From, req.Offset = wire.FromOffset, r.Next
	}
}

// TestRP5_QuorumFailoverKeepsAcknowledgedRecords: three broker processes,
// a Quorum stream, appends, kill -9 of the leader; the operator promotes a
// follower counted under its registered storage id [CP-1] and every
// acknowledged record is readable from the new leader.
func TestRP5_QuorumFailoverKeepsAcknowledgedRecords(t *testing.T) {
	c := newCluster(t, 3, felixv1.FsyncPeriodic)
	for i := 0; i < 3; i++ {
		c.startBroker(i)
	}
	c.createStream(t, "orders", 3)
	acked := c.appendAcked(t, "orders", 200, "before")
	old := c.shard("orders", 0).Status.Assignment
	t.Logf("leader %s at epoch %d acknowledged %d records; killing it", old.Leader, old.Epoch, len(acked))
	c.kill9(old.Leader)

	var now *felixv1.Assignment
	c.eventually("a promotion", 90*time.Second, func() (bool, string) {
		sh := c.shard("orders", 0)
		if sh == nil || sh.Status.Assignment == nil {
			return false, "no shard"
		}
		now = sh.Status.Assignment
		return now.Leader != old.Leader && now.Epoch > old.Epoch, shardState(sh)
	})
	t.Logf("promoted %s (storage id %s) at epoch %d", now.Leader, c.registered(t, now.Leader).StorageID, now.Epoch)
	for k, v := range c.appendAcked(t, "orders", 50, "after") {
		acked[k] = v
	}
	got := c.readAll(t, c.addressOf(now.Leader), "orders")
	for off, want := range acked {
		if got[off] != want {
			t.Errorf("acknowledged record at %d: want %q, new leader has %q", off, want, got[off])
		}
	}
	if len(got) < len(acked) {
		t.Errorf("new leader holds %d records, %d were acknowledged", len(got), len(acked))
	}
}
