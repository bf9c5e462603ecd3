package replica

import (
	"context"
	"fmt"
	"os"
	"testing"
	"time"

	"felix.dev/felix/broker/logstore"
	"felix.dev/felix/broker/replication"
)

// BenchmarkCatchUpFromStart measures a wiped follower rebuilding a shard
// whose head was trimmed and deleted, over loopback: the leader holds
// 16 MiB of 1 KiB records below a committed floor, deleted by maintenance
// (4 MiB segments), and 64 MiB above it (FELIX_CATCHUP_MB overrides); a
// follower with an empty directory joins, resets its log to the leader's
// first stored offset (WriteReset) and copies from there. The stores run
// under periodic; FELIX_CATCHUP_FSYNC=on-commit runs them as brokers run
// by default, reading the leader's batches from its commit log. The time is from
// EnsureShard on the new follower until its data log is durable up to the
// leader's tail; MB/s counts the records copied (tail - start) x 1 KiB.
func BenchmarkCatchUpFromStart(b *testing.B) {
	mb := 64
	if v := os.Getenv("FELIX_CATCHUP_MB"); v != "" {
		_, _ = fmt.Sscan(v, &mb)
	}
	mode := logstore.FsyncPeriodic
	if v := os.Getenv("FELIX_CATCHUP_FSYNC"); v != "" {
		var err error
		if mode, err = logstore.ParseFsyncMode(v); err != nil {
			b.Fatal(err)
		}
	}
	const below, segRecs = 16 * 1024, 4096
	n := mb*1024 + below
	var total, cpu time.Duration
	var copied uint64
	for i := 0; i < b.N; i++ {
		b.StopTimer()
		var dirs []string
		mkdir := func() string {
			d, err := os.MkdirTemp("", "felix-catchup-")
			if err != nil {
				b.Fatal(err)
			}
			dirs = append(dirs, d)
			return d
		}
		c := newClusterCfg(b, mode, mkdir, DefaultPassInterval, func(c *cluster) {
			c.segRecs, c.maintain = segRecs, -1
		}, "a", "b", "c")
		a, dl := catchUpLeader(b, c, n)
		tail := dl.Describe().Tail
		if _, err := dl.Trim(context.Background(), logstore.TrimRequest{Floor: below, ExpectTail: tail}); err != nil {
			b.Fatal(err)
		}
		lg := dataLogOf(b, a)
		eventually(b, "the trim committed on the leader", 30*time.Second, func() bool { return lg.Describe().Floor == below })
		if _, err := a.mgr.Maintain(context.Background()); err != nil {
			b.Fatal(err)
		}
		want := lg.Describe()
		if want.Start == 0 {
			b.Fatalf("maintenance deleted nothing: %+v", want)
		}
		fresh := c.start("c", mkdir(), 2)
		b.SetBytes(int64(want.Tail-want.Start) * 1024)
		b.StartTimer()
		cpu0 := cpuTime()
		start := time.Now()
		if err := fresh.mgr.EnsureShard(testShard, c.replicas(), replication.AckLeader, 0); err != nil {
			b.Fatal(err)
		}
		if err := fresh.mgr.SetKnownEpoch(testShard, 1); err != nil {
			b.Fatal(err)
		}
		flg := dataLogOf(b, fresh)
		deadline := time.Now().Add(5 * time.Minute)
		for {
			got := flg.Describe()
			if got.Durable >= want.Tail && got.Start == want.Start {
				break
			}
			if time.Now().After(deadline) {
				b.Fatalf("the wiped follower did not catch up from %d: %+v", want.Start, got)
			}
			time.Sleep(time.Millisecond)
		}
		total += time.Since(start)
		cpu += cpuTime() - cpu0
		copied += want.Tail - want.Start
		b.StopTimer()
		for _, nd := range c.nodes {
			nd.stop()
		}
		for _, d := range dirs {
			_ = os.RemoveAll(d)
		}
	}
	b.ReportMetric(float64(copied)*1024/total.Seconds()/1e6, "MB/s")
	b.ReportMetric(float64(cpu)/float64(time.Microsecond)/float64(copied), "cpu-µs/record")
}
