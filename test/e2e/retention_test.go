package e2e

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"k8s.io/apimachinery/pkg/api/resource"
	ctrlclient "sigs.k8s.io/controller-runtime/pkg/client"

	felixv1 "felix.dev/felix/api/v1alpha1"
	"felix.dev/felix/broker/record"
	"felix.dev/felix/broker/wire"
)

// retentionSegRecs is the brokers' segment size in these tests, so a few
// hundred records span many segments.
const retentionSegRecs = 32

// maintFlags run a broker with small segments and a short maintenance
// interval.
var maintFlags = []string{"--segment-records", strconv.Itoa(retentionSegRecs), "--maintain-interval", "300ms"}

// metricValue scrapes one sample (name with its labels as printed, e.g.
// `x_total{reason="floor"}`) from a broker's /metrics; ok is false if the
// broker or the sample is not there.
func (c *cluster) metricValue(broker, sample string) (float64, bool) {
	c.mu.Lock()
	b := c.brokers[broker]
	c.mu.Unlock()
	resp, err := c.metricsClient(c.t).Get(c.metricsURL(b))
	if err != nil {
		return 0, false
	}
	defer resp.Body.Close()
	sc := bufio.NewScanner(resp.Body)
	sc.Buffer(make([]byte, 1<<20), 1<<20)
	for sc.Scan() {
		name, val, ok := strings.Cut(sc.Text(), " ")
		if ok && name == sample {
			v, err := strconv.ParseFloat(strings.TrimSpace(val), 64)
			return v, err == nil
		}
	}
	return 0, false
}

// leaderOf returns the assigned leader of shard 0 of stream.
func (c *cluster) leaderOf(stream string) string {
	if sh := c.shard(stream, 0); sh != nil && sh.Status.Assignment != nil {
		return sh.Status.Assignment.Leader
	}
	return ""
}

// appendBatchesAcked appends batches of per records to the leader of
// shard 0, following leadership changes, and returns the acknowledged
// payloads by offset (a batch whose outcome is unknown is not counted).
func (c *cluster) appendBatchesAcked(t *testing.T, stream, prefix string, batches, per int) map[uint64]string {
	t.Helper()
	acked := map[uint64]string{}
	deadline := time.Now().Add(60 * time.Second)
	for i := 0; i < batches; {
		if time.Now().After(deadline) {
			t.Fatalf("appended %d of %d batches before the deadline; shard: %s", i, batches, shardState(c.shard(stream, 0)))
		}
		leader := c.leaderOf(stream)
		if leader == "" {
			time.Sleep(50 * time.Millisecond)
			continue
		}
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		cl, err := c.dial(ctx, c.addressOf(leader))
		if err != nil {
			cancel()
			time.Sleep(50 * time.Millisecond)
			continue
		}
		for ; i < batches; i++ {
			recs := make([]record.Record, per)
			for j := range recs {
				recs[j].Payload = []byte(fmt.Sprintf("%s-%d-%d", prefix, i, j))
			}
			ok, err := cl.Append(ctx, record.ShardID{Stream: stream}, recs, nil)
			if err != nil {
				break
			}
			for j := range recs {
				acked[ok.First+uint64(j)] = string(recs[j].Payload)
			}
		}
		_ = cl.Close()
		cancel()
		if i < batches {
			time.Sleep(50 * time.Millisecond)
		}
	}
	return acked
}

// [TR-6] with catch-up from the leader's start, on real broker processes:
// a committed trim's whole segments are deleted by every broker's
// maintenance; a follower whose data directory is wiped comes back with a
// new storage id and is copied from the leader's first stored offset (its
// log reset there, WriteReset); then the leader is killed, and every
// acknowledged record at or above the floor is readable from the new
// leader, while reads below the floor get CursorTooOld.
func TestRetention_TrimDeletesSegmentsAndWipedFollowerCatchesUpFromLeaderStart(t *testing.T) {
	c := newCluster(t, 3, felixv1.FsyncPeriodic)
	for i := 0; i < 3; i++ {
		c.startBroker(i, maintFlags...)
	}
	c.createStream(t, "orders", 3)
	acked := c.appendBatchesAcked(t, "orders", "before", 30, 20) // 600 records
	leader := c.leaderOf("orders")
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	cl, err := c.dial(ctx, c.addressOf(leader))
	if err != nil {
		t.Fatal(err)
	}
	d, err := cl.Describe(ctx, record.ShardID{Stream: "orders"})
	if err != nil {
		t.Fatal(err)
	}
	floor := d.Tail - 100 // well above the first segments
	if _, err := cl.Trim(ctx, wire.TrimRequest{Shard: record.ShardID{Stream: "orders"}, Floor: floor, ExpectTail: d.Tail}); err != nil {
		t.Fatalf("trim to %d at tail %d: %v", floor, d.Tail, err)
	}
	_ = cl.Close()
	t.Logf("leader %s: trimmed to floor %d at tail %d", leader, floor, d.Tail)

	// Every broker's maintenance deletes the segments below the floor.
	wantSegs := float64(floor / retentionSegRecs)
	const floorSegs = `felix_broker_maintenance_deleted_segments_total{reason="floor"}`
	for i := 0; i < 3; i++ {
		name := fmt.Sprintf("%s-%d", c.name, i)
		c.eventually(name+" deleting the segments below the floor", 30*time.Second, func() (bool, string) {
			v, ok := c.metricValue(name, floorSegs)
			return ok && v >= wantSegs, fmt.Sprintf("%s = %v (scraped: %t), want %v", floorSegs, v, ok, wantSegs)
		})
	}

	// Wipe a follower and bring it back: a new storage id, an empty log.
	var follower string
	var ordinal int
	for i := 0; i < 3; i++ {
		if n := fmt.Sprintf("%s-%d", c.name, i); n != leader {
			follower, ordinal = n, i
			break
		}
	}
	c.mu.Lock()
	old := c.brokers[follower]
	c.mu.Unlock()
	c.kill9(follower)
	if err := os.RemoveAll(old.dataDir); err != nil {
		t.Fatal(err)
	}
	fresh := c.startBroker(ordinal, maintFlags...)
	if fresh.id == old.id {
		t.Fatalf("wiped follower %s kept its storage id %s", follower, old.id)
	}
	t.Logf("wiped %s: storage id %s -> %s", follower, old.id, fresh.id)
	c.eventually(follower+" caught up under its new storage id", 60*time.Second, func() (bool, string) {
		sh := c.shard("orders", 0)
		if sh == nil || sh.Status.Report == nil {
			return false, shardState(sh)
		}
		for _, f := range sh.Status.Report.Followers {
			if f.Name == follower && f.StorageID == fresh.id && f.CaughtUp && f.Confirmed >= int64(d.Tail)+1 {
				return true, ""
			}
		}
		return false, shardState(sh)
	})
	if logs, err := os.ReadFile(filepath.Join(c.dir, follower+".log")); err != nil {
		t.Fatal(err)
	} else if !strings.Contains(string(logs), "log reset to start at the leader's first stored offset") {
		t.Errorf("%s caught up without a log reset; log tail:\n%s", follower, c.brokerLog(follower))
	}
	for k, v := range c.appendBatchesAcked(t, "orders", "after-wipe", 5, 20) {
		acked[k] = v
	}

	// Kill the leader; the operator promotes a follower.
	old2 := c.shard("orders", 0).Status.Assignment
	c.kill9(leader)
	var now *felixv1.Assignment
	c.eventually("a promotion", 90*time.Second, func() (bool, string) {
		sh := c.shard("orders", 0)
		if sh == nil || sh.Status.Assignment == nil {
			return false, "no shard"
		}
		now = sh.Status.Assignment
		return now.Leader != leader && now.Epoch > old2.Epoch, shardState(sh)
	})
	t.Logf("promoted %s at epoch %d", now.Leader, now.Epoch)
	got := c.readAll(t, c.addressOf(now.Leader), "orders")
	missing := 0
	for off, want := range acked {
		if off >= floor && got[off] != want {
			missing++
			if missing < 5 {
				t.Errorf("acknowledged record %d: want %q, new leader has %q", off, want, got[off])
			}
		}
	}
	if missing > 0 {
		t.Fatalf("%d acknowledged records at or above the floor %d missing on the new leader", missing, floor)
	}
	rctx, rcancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer rcancel()
	rc, err := c.dial(rctx, c.addressOf(now.Leader))
	if err != nil {
		t.Fatal(err)
	}
	defer rc.Close()
	_, err = rc.Read(rctx, wire.ReadRequest{Shard: record.ShardID{Stream: "orders"}, From: wire.FromOffset, Offset: floor - 1})
	if !errors.Is(err, record.ErrCursorTooOld) {
		t.Fatalf("read below the floor from the new leader: %v, want CursorTooOld", err)
	}
}

// [TR-7] Retention by bytes set on a running stream that is not fenced
// reaches every broker, which deletes the oldest whole segments, and the
// shard keeps serving what is left.
func TestRetention_ByBytesDeletesOldSegmentsInClusterMode(t *testing.T) {
	c := newCluster(t, 3, felixv1.FsyncPeriodic)
	for i := 0; i < 3; i++ {
		c.startBroker(i, maintFlags...)
	}
	c.createStream(t, "events", 3)                          // retention off
	acked := c.appendBatchesAcked(t, "events", "r", 20, 20) // 400 records of ~10 bytes
	// Retention set on the running stream reaches every broker.
	maxBytes := resource.MustParse("4Ki")
	var st felixv1.FelixStream
	if err := c.c.Get(context.Background(), ctrlclient.ObjectKey{Namespace: c.namespace, Name: "events"}, &st); err != nil {
		t.Fatal(err)
	}
	// A merge patch of the spec alone: the operator writes the stream's
	// status concurrently, so an Update could meet a conflict.
	base := st.DeepCopy()
	st.Spec.Retention = &felixv1.RetentionSpec{MaxBytes: &maxBytes}
	if err := c.c.Patch(context.Background(), &st, ctrlclient.MergeFrom(base)); err != nil {
		t.Fatal(err)
	}

	const retSegs = `felix_broker_maintenance_deleted_segments_total{reason="retention"}`
	for i := 0; i < 3; i++ {
		name := fmt.Sprintf("%s-%d", c.name, i)
		c.eventually(name+" applying retention", 30*time.Second, func() (bool, string) {
			v, ok := c.metricValue(name, retSegs)
			return ok && v > 0, fmt.Sprintf("%s = %v (scraped: %t)", retSegs, v, ok)
		})
	}
	leader := c.leaderOf("events")
	got := c.readAll(t, c.addressOf(leader), "events")
	first := ^uint64(0)
	for off := range got {
		first = min(first, off)
	}
	if first < retentionSegRecs || first == ^uint64(0) {
		t.Fatalf("after retention the leader's first readable record is %d (held %d records)", first, len(got))
	}
	for off, want := range acked {
		if off >= first && got[off] != want {
			t.Fatalf("record %d kept by retention: %q, want %q", off, got[off], want)
		}
	}
	t.Logf("retention kept offsets %d.. on leader %s (%d records)", first, leader, len(got))
}
