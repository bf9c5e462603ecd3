package replica

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"os"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	dto "github.com/prometheus/client_model/go"

	"felix.dev/felix/broker/logstore"
	"felix.dev/felix/broker/record"
	"felix.dev/felix/broker/replication"
	"felix.dev/felix/broker/wire"
)

// maintSegRecs is the segment size of the maintenance tests: small, so a
// few hundred records span many segments.
const maintSegRecs = 64

// newMaintCluster starts a, b and c with small segments, metrics and no
// maintenance timer (the tests call Maintain), leading with a at epoch 1.
func newMaintCluster(t *testing.T) *cluster {
	t.Helper()
	c := newClusterCfg(t, logstore.FsyncPeriodic, t.TempDir, 20*time.Millisecond, func(c *cluster) {
		c.segRecs, c.maintain, c.metrics = maintSegRecs, -1, true
	}, "a", "b", "c")
	c.ensure(replication.AckQuorum, "a", "b", "c")
	c.assign(c.firstAssignment("a"))
	c.waitLeading(c.nodes["a"])
	return c
}

// appendBatches appends batches of per records through cl and returns the
// acknowledged payloads by offset.
func appendBatches(t *testing.T, cl interface {
	Append(context.Context, record.ShardID, []record.Record, *uint64) (wire.AppendOK, error)
}, prefix string, batches, per int) map[uint64][]byte {
	t.Helper()
	acked := map[uint64][]byte{}
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	for i := 0; i < batches; i++ {
		recs := make([]record.Record, per)
		for j := range recs {
			recs[j].Payload = []byte(fmt.Sprintf("%s-%d-%d", prefix, i, j))
		}
		ok, err := cl.Append(ctx, testShard, recs, nil)
		if err != nil {
			t.Fatalf("append batch %d: %v", i, err)
		}
		for j := range recs {
			acked[ok.First+uint64(j)] = recs[j].Payload
		}
	}
	return acked
}

// dataLogOf returns n's data log of the test shard.
func dataLogOf(t testing.TB, n *node) *logstore.Log {
	t.Helper()
	lg, ok := n.store.Lookup(record.LogID{ShardID: testShard, Log: record.LogData})
	if !ok {
		t.Fatalf("%s has no data log", n.name)
	}
	return lg
}

// readFromEarliest reads every committed data record n serves, from the
// readable start.
func readFromEarliest(t *testing.T, n *node) map[uint64][]byte {
	t.Helper()
	cl := dial(t, n)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	out := map[uint64][]byte{}
	req := wire.ReadRequest{Shard: testShard, From: wire.FromEarliest, MaxRecords: 1000}
	for {
		res, err := cl.Read(ctx, req)
		if err != nil {
			t.Fatalf("read %+v from %s: %v", req, n.name, err)
		}
		for _, r := range res.Records {
			out[r.Offset] = r.Payload
		}
		if len(res.Records) == 0 {
			return out
		}
		req.From, req.Offset = wire.FromOffset, res.Next
	}
}

// trimTo trims the shard through the leader to floor at its current tail
// and waits until every running node's data log has the floor committed.
func trimTo(t *testing.T, c *cluster, leader *node, floor uint64) {
	t.Helper()
	cl := dial(t, leader)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	d, err := cl.Describe(ctx, testShard)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := cl.Trim(ctx, wire.TrimRequest{Shard: testShard, Floor: floor, ExpectTail: d.Tail}); err != nil {
		t.Fatalf("trim to %d at tail %d: %v", floor, d.Tail, err)
	}
	eventually(t, fmt.Sprintf("the floor %d on every replica", floor), 10*time.Second, func() bool {
		for _, n := range c.nodes {
			if n.srv != nil && dataLogOf(t, n).Describe().Floor < floor {
				return false
			}
		}
		return true
	})
}

// maintainAll runs one maintenance pass on every running node and waits
// until each core's base has followed its data log's first stored offset.
func maintainAll(t *testing.T, c *cluster) {
	t.Helper()
	for _, n := range c.nodes {
		if n.srv == nil {
			continue
		}
		if _, err := n.mgr.Maintain(context.Background()); err != nil {
			t.Fatalf("maintain %s: %v", n.name, err)
		}
	}
	eventually(t, "every core's base at its log's start", 10*time.Second, func() bool {
		for _, n := range c.nodes {
			if n.srv == nil {
				continue
			}
			st, err := n.mgr.Status(testShard)
			if err != nil || st.Base[record.LogData] != dataLogOf(t, n).Describe().Start {
				return false
			}
		}
		return true
	})
}

// [TR-6] Maintenance deletes the whole segments below the committed floor
// on every replica and tells each core; a follower that comes back wiped
// is reset to the leader's first stored offset (not the shard's base, long
// gone) and copied from there; after the leader is lost, every
// acknowledged record at or above the floor is readable from the new
// leader and reads below the floor are refused with CursorTooOld.
func TestTR6_MaintenanceDeletesBelowFloorAndWipedFollowerCatchesUpFromStart(t *testing.T) {
	c := newMaintCluster(t)
	a := c.nodes["a"]
	acked := appendBatches(t, dial(t, a), "r", 20, 50) // offsets 1..1000
	const floor = 700
	trimTo(t, c, a, floor)
	maintainAll(t, c)
	want := uint64(floor / maintSegRecs * maintSegRecs) // the floor's segment start
	for _, n := range c.nodes {
		if got := dataLogOf(t, n).Describe().Start; got != want {
			t.Fatalf("%s: data log starts at %d after maintenance, want %d", n.name, got, want)
		}
	}
	segs := counterValue(t, a.metrics.segments.WithLabelValues(ReasonFloor))
	if segs != float64(want/maintSegRecs) {
		t.Fatalf("leader counted %v segments deleted below the floor, want %d", segs, want/maintSegRecs)
	}

	// Wipe c: it comes back with a new storage id and an empty directory.
	old := c.nodes["c"]
	old.stop()
	if err := os.RemoveAll(old.dir); err != nil {
		t.Fatal(err)
	}
	fresh := c.start("c", t.TempDir(), old.incarnation+1)
	c.ensure(replication.AckQuorum, "c")
	if err := fresh.mgr.SetKnownEpoch(testShard, 1); err != nil {
		t.Fatal(err)
	}
	deadline := time.Now().Add(20 * time.Second)
	for {
		got, wantInfo := dataLogOf(t, fresh).Describe(), dataLogOf(t, a).Describe()
		if got.Start == wantInfo.Start && got.Durable == wantInfo.Tail {
			break
		}
		if time.Now().After(deadline) {
			st, _ := fresh.mgr.Status(testShard)
			lst, _ := a.mgr.Status(testShard)
			rep, _ := a.lastReport()
			t.Fatalf("the wiped follower did not copy from the leader's start:\nfollower %+v\nleader %+v\nfollower core %+v\nleader core %+v\nreport %+v",
				got, wantInfo, st, lst, rep)
		}
		time.Sleep(10 * time.Millisecond)
	}
	lw, fr := readAllRaw(t, a, record.LogData), readAllRaw(t, fresh, record.LogData)
	if len(lw) != len(fr) {
		t.Fatalf("wiped follower holds %d records, leader %d", len(fr), len(lw))
	}
	for i := range lw {
		if lw[i].Offset != fr[i].Offset || lw[i].Epoch != fr[i].Epoch || !bytes.Equal(lw[i].Payload, fr[i].Payload) {
			t.Fatalf("record %d: follower %+v, leader %+v", i, fr[i], lw[i])
		}
	}
	if got := counterValue(t, a.metrics.shippedRecords.WithLabelValues(testShard.String(), "c")); got < float64(len(lw)) {
		t.Fatalf("leader counted %v records shipped to c, it copied %d", got, len(lw))
	}
	if got := counterValue(t, fresh.metrics.receivedBytes.WithLabelValues(testShard.String())); got == 0 {
		t.Fatal("the wiped follower counted no bytes received")
	}
	for k, v := range appendBatches(t, dial(t, a), "s", 4, 50) {
		acked[k] = v
	}

	// Lose the leader; c (wiped, caught up) leads epoch 2 with b.
	a.stop()
	next := replication.Assignment{Leader: "c", Epoch: 2, LeaderIncarnation: fresh.incarnation,
		Counted: map[replication.NodeID]replication.StorageID{
			"b": replication.StorageID(c.nodes["b"].id.String()), "c": replication.StorageID(fresh.id.String())}}
	for _, nm := range []replication.NodeID{"b", "c"} {
		if err := c.nodes[nm].mgr.SetAssignment(testShard, next); err != nil {
			t.Fatal(err)
		}
	}
	c.waitLeading(fresh)
	got := readFromEarliest(t, fresh)
	for off, p := range acked {
		if off < floor {
			continue
		}
		if !bytes.Equal(got[off], p) {
			t.Fatalf("acknowledged record %d: %q on the new leader, want %q", off, got[off], p)
		}
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	_, err := dial(t, fresh).Read(ctx, wire.ReadRequest{Shard: testShard, From: wire.FromOffset, Offset: floor - 1})
	if !errors.Is(err, record.ErrCursorTooOld) {
		t.Fatalf("read below the floor from the new leader: %v, want CursorTooOld", err)
	}
}

// [TR-7] Retention by bytes on a stream that is not fenced deletes the
// oldest whole segments on every replica, never the active one and never a
// record that is not committed.
func TestTR7_RetentionByBytesDeletesOldSegmentsOnEveryReplica(t *testing.T) {
	c := newMaintCluster(t)
	a := c.nodes["a"]
	for _, n := range c.nodes {
		if err := n.mgr.SetLogPolicy(testShard, LogPolicy{Retention: logstore.RetentionPolicy{MaxBytes: 4 << 10}}); err != nil {
			t.Fatalf("%s: %v", n.name, err)
		}
	}
	acked := appendBatches(t, dial(t, a), "r", 20, 50)
	eventually(t, "every replica committed the appends", 10*time.Second, func() bool {
		for _, n := range c.nodes {
			if info := dataLogOf(t, n).Describe(); info.Committed < 1001 {
				return false
			}
		}
		return true
	})
	maintainAll(t, c)
	for _, n := range c.nodes {
		info := dataLogOf(t, n).Describe()
		if info.Start == 0 || info.Start%maintSegRecs != 0 || info.Start > info.Committed || info.Start > info.Tail-1 {
			t.Fatalf("%s after retention: %+v", n.name, info)
		}
		if b := counterValue(t, n.metrics.bytes.WithLabelValues(ReasonRetention)); b == 0 {
			t.Fatalf("%s: no retention bytes counted", n.name)
		}
	}
	start := dataLogOf(t, a).Describe().Start
	got := readFromEarliest(t, a)
	for off, p := range acked {
		if off >= start && !bytes.Equal(got[off], p) {
			t.Fatalf("record %d kept by retention: %q, want %q", off, got[off], p)
		}
	}
	// The shard still replicates after the deletion.
	more := appendBatches(t, dial(t, a), "s", 2, 10)
	eventually(t, "followers hold the new records", 10*time.Second, func() bool {
		for _, n := range c.nodes {
			if dataLogOf(t, n).Describe().Durable < 1021 {
				return false
			}
		}
		return true
	})
	if len(more) != 20 {
		t.Fatalf("%d appended", len(more))
	}
}

// [TR-7] A fenced stream never gets retention: the broker refuses it,
// logs and counts the refusal, keeps the stream fenced with retention off
// and does not stop. Changes between the two apply in the order the store
// accepts.
func TestTR7_SetLogPolicy(t *testing.T) {
	ret := logstore.RetentionPolicy{MaxBytes: 1 << 20}
	for _, tc := range []struct {
		name        string
		steps       []LogPolicy
		wantFenced  bool
		wantRet     logstore.RetentionPolicy
		wantRefused float64
		wantErr     error
	}{
		{name: "retention", steps: []LogPolicy{{Retention: ret}}, wantRet: ret},
		{name: "fenced", steps: []LogPolicy{{Fenced: true}}, wantFenced: true},
		{name: "fenced with retention is refused", steps: []LogPolicy{{Fenced: true, Retention: ret}},
			wantFenced: true, wantRefused: 1, wantErr: logstore.ErrRetentionOnFencedStream},
		{name: "retention then fenced", steps: []LogPolicy{{Retention: ret}, {Fenced: true}}, wantFenced: true},
		{name: "fenced then unfenced with retention is refused", steps: []LogPolicy{{Fenced: true}, {Retention: ret}},
			wantFenced: true, wantRefused: 1, wantErr: ErrUnfenceWithRecords}, // [FD-4]: a fenced log stays fenced
		{name: "retention then refused", steps: []LogPolicy{{Retention: ret}, {Fenced: true, Retention: ret}},
			wantFenced: true, wantRefused: 1, wantErr: ErrRetentionOnFencedStream},
		{name: "off again", steps: []LogPolicy{{Retention: ret}, {}}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c := newClusterCfg(t, logstore.FsyncNone, t.TempDir, 20*time.Millisecond, func(c *cluster) {
				c.maintain, c.metrics = -1, true
			}, "a")
			n := c.nodes["a"]
			if err := n.mgr.EnsureShard(testShard, []replication.NodeID{"a"}, replication.AckLeader, 0); err != nil {
				t.Fatal(err)
			}
			var err error
			for _, p := range tc.steps {
				err = n.mgr.SetLogPolicy(testShard, p)
			}
			if (tc.wantErr == nil) != (err == nil) || (tc.wantErr != nil && !errors.Is(err, tc.wantErr)) {
				t.Fatalf("last SetLogPolicy: %v, want %v", err, tc.wantErr)
			}
			info := dataLogOf(t, n).Describe()
			if info.Fenced != tc.wantFenced || info.Retention != tc.wantRet {
				t.Fatalf("fenced=%t retention=%+v, want %t %+v", info.Fenced, info.Retention, tc.wantFenced, tc.wantRet)
			}
			if got := counterValue(t, n.metrics.refused); got != tc.wantRefused {
				t.Fatalf("refusals counted %v, want %v", got, tc.wantRefused)
			}
			if _, err := n.mgr.Maintain(context.Background()); err != nil {
				t.Fatalf("maintain after the policy: %v", err)
			}
		})
	}
}

// [FD-4] A fenced log that holds records stays fenced: a policy that
// unfences it (alone, or together with retention on, the way around
// "retention stays off" under a running holder) is refused, the log stays
// fenced with retention off, and maintenance deletes nothing by age or
// size. An empty fenced log stays fenced too.
func TestFD4_FencedLogWithRecordsStaysFenced(t *testing.T) {
	ret := logstore.RetentionPolicy{MaxBytes: 1}
	for _, tc := range []struct {
		name        string
		unfence     LogPolicy
		wantRefused float64
		wantErrs    []error
	}{
		{name: "unfence", unfence: LogPolicy{}, wantErrs: []error{ErrUnfenceWithRecords}},
		{name: "unfence with retention", unfence: LogPolicy{Retention: ret}, wantRefused: 1,
			wantErrs: []error{ErrUnfenceWithRecords, ErrRetentionOnFencedStream}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			n := newFencedSingle(t)
			lg := dataLogOf(t, n)
			if _, err := lg.Append(context.Background(), []record.Record{{Epoch: 1, Payload: []byte("fence")}}, nil); err != nil {
				t.Fatal(err)
			}
			err := n.mgr.SetLogPolicy(testShard, tc.unfence)
			for _, want := range tc.wantErrs {
				if !errors.Is(err, want) {
					t.Fatalf("SetLogPolicy: %v, want it to match %v", err, want)
				}
			}
			info := lg.Describe()
			if !info.Fenced || info.Retention.Enabled() {
				t.Fatalf("fenced=%t retention=%+v, want fenced with retention off", info.Fenced, info.Retention)
			}
			if got := counterValue(t, n.metrics.refused); got != tc.wantRefused {
				t.Fatalf("refusals counted %v, want %v", got, tc.wantRefused)
			}
			if _, err := n.mgr.Maintain(context.Background()); err != nil {
				t.Fatalf("maintain: %v", err)
			}
			if start := lg.Describe().Start; start != info.Base {
				t.Fatalf("maintenance deleted below %d on a fenced log", start)
			}
		})
	}
	t.Run("empty log stays fenced", func(t *testing.T) {
		// A replica whose fenced log is empty (newly added, or emptied
		// after damage) refuses to unfence like the others [TR-7].
		n := newFencedSingle(t)
		err := n.mgr.SetLogPolicy(testShard, LogPolicy{Retention: ret})
		if !errors.Is(err, ErrUnfenceWithRecords) || !errors.Is(err, ErrRetentionOnFencedStream) {
			t.Fatalf("unfence an empty fenced log with retention: %v", err)
		}
		if info := dataLogOf(t, n).Describe(); !info.Fenced || info.Retention.Enabled() {
			t.Fatalf("fenced=%t retention=%+v, want fenced with retention off", info.Fenced, info.Retention)
		}
	})
}

// The Manager's own timer runs maintenance: a committed trim's segments go
// without any call from outside, and Close waits for the pass.
func TestMaintenanceRunsOnTheInterval(t *testing.T) {
	c := newClusterCfg(t, logstore.FsyncNone, t.TempDir, 20*time.Millisecond, func(c *cluster) {
		c.segRecs, c.maintain, c.metrics = maintSegRecs, 50*time.Millisecond, true
	}, "a")
	n := c.nodes["a"]
	if err := n.mgr.EnsureShard(testShard, []replication.NodeID{"a"}, replication.AckLeader, 0); err != nil {
		t.Fatal(err)
	}
	if err := n.mgr.SetAssignment(testShard, c.firstAssignment("a")); err != nil {
		t.Fatal(err)
	}
	c.waitLeading(n)
	appendBatches(t, dial(t, n), "r", 5, 50)
	trimTo(t, c, n, 200)
	eventually(t, "segments below the floor deleted by the timer", 10*time.Second, func() bool {
		st, err := n.mgr.Status(testShard)
		return err == nil && dataLogOf(t, n).Describe().Start == 192 && st.Base[record.LogData] == 192
	})
	// The pass is counted when it ends, after the deletion is visible.
	eventually(t, "the pass counted", 10*time.Second, func() bool {
		return counterValue(t, n.metrics.passes) >= 1
	})
}

// counterValue reads a counter.
func counterValue(t *testing.T, c prometheus.Counter) float64 {
	t.Helper()
	var m dto.Metric
	if err := c.Write(&m); err != nil {
		t.Fatal(err)
	}
	return m.GetCounter().GetValue()
}

// newFencedSingle returns the only node of a one-replica cluster (metrics
// on, no maintenance loop) whose testShard's data log is fenced.
func newFencedSingle(t *testing.T) *node {
	t.Helper()
	c := newClusterCfg(t, logstore.FsyncNone, t.TempDir, 20*time.Millisecond, func(c *cluster) {
		c.maintain, c.metrics = -1, true
	}, "a")
	n := c.nodes["a"]
	if err := n.mgr.EnsureShard(testShard, []replication.NodeID{"a"}, replication.AckQuorum, 0); err != nil {
		t.Fatal(err)
	}
	if err := n.mgr.SetLogPolicy(testShard, LogPolicy{Fenced: true}); err != nil {
		t.Fatal(err)
	}
	return n
}
