package replica

import (
	"context"
	"fmt"
	"os"
	"sort"
	"sync"
	"syscall"
	"testing"
	"time"

	"felix.dev/felix/broker/client"
	"felix.dev/felix/broker/logstore"
	"felix.dev/felix/broker/record"
	"felix.dev/felix/broker/replication"
	"felix.dev/felix/broker/server"
)

// benchCluster starts a 3-replica Quorum cluster led by a, fence committed.
func benchCluster(b *testing.B, fsync logstore.FsyncMode) *cluster {
	c := newClusterIn(b, fsync, b.TempDir, DefaultPassInterval, "a", "b", "c")
	c.ensure(replication.AckQuorum, "a", "b", "c")
	c.assign(c.firstAssignment("a"))
	c.waitLeading(c.nodes["a"])
	return c
}

// percentiles returns p50 and p99 of ds in milliseconds.
func percentiles(ds []time.Duration) (p50, p99 float64) {
	if len(ds) == 0 {
		return 0, 0
	}
	sort.Slice(ds, func(i, j int) bool { return ds[i] < ds[j] })
	at := func(q float64) float64 {
		i := int(q * float64(len(ds)-1))
		return float64(ds[i]) / float64(time.Millisecond)
	}
	return at(0.50), at(0.99)
}

// runAppends runs b.N single-record 1 KiB appends to the leader with
// `conns` connections and `perConn` appends in flight on each, and reports
// records/s, MB/s, p50 and p99 of the append round trip.
func runAppends(b *testing.B, c *cluster, conns, perConn int) {
	payload := make([]byte, 1024)
	var clients []*client.Client
	for i := 0; i < conns; i++ {
		clients = append(clients, dial(b, c.nodes["a"]))
	}
	work := make(chan struct{}, b.N)
	for i := 0; i < b.N; i++ {
		work <- struct{}{}
	}
	close(work)
	lat := make([][]time.Duration, conns*perConn)
	var wg sync.WaitGroup
	b.SetBytes(1024)
	b.ResetTimer()
	cpu0 := cpuTime()
	start := time.Now()
	for w := 0; w < conns*perConn; w++ {
		wg.Add(1)
		go func(w int) {
			defer wg.Done()
			cl := clients[w%conns]
			for range work {
				t0 := time.Now()
				if _, err := cl.Append(context.Background(), testShard, []record.Record{{Payload: payload}}, nil); err != nil {
					b.Error(err)
					return
				}
				lat[w] = append(lat[w], time.Since(t0))
			}
		}(w)
	}
	wg.Wait()
	el := time.Since(start)
	cpu := cpuTime() - cpu0
	b.StopTimer()
	var all []time.Duration
	for _, l := range lat {
		all = append(all, l...)
	}
	p50, p99 := percentiles(all)
	b.ReportMetric(float64(b.N)/el.Seconds(), "records/s")
	b.ReportMetric(float64(b.N)*1024/el.Seconds()/1e6, "MB/s")
	b.ReportMetric(p50, "p50-ms")
	b.ReportMetric(p99, "p99-ms")
	// CPU time of the whole process (three brokers and the clients) per
	// record: a figure that holds up on a shared, loaded machine.
	b.ReportMetric(float64(cpu)/float64(time.Microsecond)/float64(b.N), "cpu-µs/record")
}

// cpuTime is the process's user plus system CPU time.
func cpuTime() time.Duration {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		return 0
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

// BenchmarkQuorumAppend is the R=3 Quorum append benchmark of issue 6
// item 8: three brokers (each its own badger store and server) and the
// clients in one process on loopback, 1 KiB records, one record per
// append. "pipelined": 16 connections with 8 appends in flight each;
// "sync16": 16 connections, one append in flight each (16 synchronous
// clients); "batched": one connection with a client.Batcher (default
// options: up to 256 records per append, 1 ms linger), records added by 64
// goroutines that each wait for their acknowledgements every 32 records.
func BenchmarkQuorumAppend(b *testing.B) {
	for _, mode := range benchModes() {
		for _, shape := range []struct {
			name           string
			conns, perConn int
		}{{"pipelined", 16, 8}, {"sync16", 16, 1}, {"batched", 0, 0}} {
			b.Run(fmt.Sprintf("%s/%s", mode, shape.name), func(b *testing.B) {
				c := benchCluster(b, mode)
				if shape.conns == 0 {
					runBatched(b, c)
					return
				}
				runAppends(b, c, shape.conns, shape.perConn)
			})
		}
	}
}

// BenchmarkCatchUp measures a new follower rebuilding a shard from the
// leader over loopback [RP-3]: the leader holds 64 MiB of 1 KiB records
// (FELIX_CATCHUP_MB overrides), a follower with an empty directory joins,
// and the time until its data log reaches the leader's tail is measured.
func BenchmarkCatchUp(b *testing.B) {
	mb := 64
	if v := os.Getenv("FELIX_CATCHUP_MB"); v != "" {
		_, _ = fmt.Sscan(v, &mb)
	}
	n := mb * 1024
	var total, cpu time.Duration
	for i := 0; i < b.N; i++ {
		b.StopTimer()
		// Directories are removed after every iteration: each holds the
		// whole shard.
		var dirs []string
		mkdir := func() string {
			d, err := os.MkdirTemp("", "felix-catchup-")
			if err != nil {
				b.Fatal(err)
			}
			dirs = append(dirs, d)
			return d
		}
		c := newClusterIn(b, logstore.FsyncPeriodic, mkdir, DefaultPassInterval, "a", "b", "c")
		_, dl := catchUpLeader(b, c, n)
		want := dl.Describe().Tail
		fresh := c.start("c", mkdir(), 2)
		b.SetBytes(int64(n) * 1024)
		b.StartTimer()
		cpu0 := cpuTime()
		start := time.Now()
		if err := fresh.mgr.EnsureShard(testShard, c.replicas(), replication.AckLeader, 0); err != nil {
			b.Fatal(err)
		}
		if err := fresh.mgr.SetKnownEpoch(testShard, 1); err != nil {
			b.Fatal(err)
		}
		flg, _ := fresh.store.Lookup(record.LogID{ShardID: testShard, Log: record.LogData})
		for flg.Describe().Durable < want {
			time.Sleep(time.Millisecond)
		}
		total += time.Since(start)
		cpu += cpuTime() - cpu0
		b.StopTimer()
		for _, nd := range c.nodes {
			nd.stop()
		}
		for _, d := range dirs {
			_ = os.RemoveAll(d)
		}
	}
	b.ReportMetric(float64(b.N)*float64(n)*1024/total.Seconds()/1e6, "MB/s")
	b.ReportMetric(float64(cpu)/float64(time.Microsecond)/float64(b.N*n), "cpu-µs/record")
}

// benchModes are the fsync modes BenchmarkQuorumAppend runs: periodic and
// on-commit, plus none with FELIX_BENCH_NONE set.
func benchModes() []logstore.FsyncMode {
	ms := []logstore.FsyncMode{logstore.FsyncPeriodic, logstore.FsyncOnCommit}
	if os.Getenv("FELIX_BENCH_NONE") != "" {
		ms = append(ms, logstore.FsyncNone)
	}
	return ms
}

// runBatched adds b.N 1 KiB records through one client.Batcher and waits
// for every acknowledgement; it reports records/s, MB/s and p50/p99 of the
// time from Add to acknowledgement.
func runBatched(b *testing.B, c *cluster) {
	payload := make([]byte, 1024)
	bt := dial(b, c.nodes["a"]).NewBatcher(testShard, client.BatcherOptions{})
	const adders, window = 64, 32 // at most 2,048 records outstanding
	work := make(chan struct{}, b.N)
	for i := 0; i < b.N; i++ {
		work <- struct{}{}
	}
	close(work)
	type pend struct {
		f  *client.Future
		t0 time.Time
	}
	lat := make([][]time.Duration, adders)
	var wg sync.WaitGroup
	b.SetBytes(1024)
	b.ResetTimer()
	cpu0 := cpuTime()
	start := time.Now()
	for w := 0; w < adders; w++ {
		wg.Add(1)
		go func(w int) {
			defer wg.Done()
			var ps []pend
			wait := func() bool {
				for _, p := range ps {
					if _, err := p.f.Wait(context.Background()); err != nil {
						b.Error(err)
						return false
					}
					lat[w] = append(lat[w], time.Since(p.t0))
				}
				ps = ps[:0]
				return true
			}
			for range work {
				ps = append(ps, pend{bt.Add(record.Record{Payload: payload}), time.Now()})
				if len(ps) == window && !wait() {
					return
				}
			}
			bt.Flush()
			wait()
		}(w)
	}
	wg.Wait()
	el := time.Since(start)
	cpu := cpuTime() - cpu0
	b.StopTimer()
	var all []time.Duration
	for _, l := range lat {
		all = append(all, l...)
	}
	p50, p99 := percentiles(all)
	b.ReportMetric(float64(b.N)/el.Seconds(), "records/s")
	b.ReportMetric(float64(b.N)*1024/el.Seconds()/1e6, "MB/s")
	b.ReportMetric(p50, "p50-ms")
	b.ReportMetric(p99, "p99-ms")
	b.ReportMetric(float64(cpu)/float64(time.Microsecond)/float64(b.N), "cpu-µs/record")
}

// catchUpLeader makes node a lead the shard of c (replicas a, b, c) with
// c stopped, so the shard is committed by a and b alone, and appends n
// 1 KiB records to a's data log in batches of 256. It returns a and the
// log; a catch-up benchmark then starts c.
func catchUpLeader(b *testing.B, c *cluster, n int) (*node, server.Log) {
	c.ensure(replication.AckLeader, "a", "b")
	a := c.nodes["a"]
	first := c.firstAssignment("a")
	c.nodes["c"].stop()
	for _, nm := range []replication.NodeID{"a", "b"} {
		if err := c.nodes[nm].mgr.SetAssignment(testShard, first); err != nil {
			b.Fatal(err)
		}
	}
	c.waitLeading(a)
	dl, err := a.mgr.Shards().DataLog(testShard)
	if err != nil {
		b.Fatal(err)
	}
	payload := make([]byte, 1024)
	batch := make([]record.Record, 256)
	for j := range batch {
		batch[j].Payload = payload
	}
	for j := 0; j < n; j += len(batch) {
		if _, err := dl.Append(context.Background(), batch, nil); err != nil {
			b.Fatal(err)
		}
	}
	return a, dl
}
