package replica

import (
	"bufio"
	"fmt"
	"os"
	"runtime"
	"runtime/debug"
	"runtime/pprof"
	"strings"
	"testing"
	"time"

	"felix.dev/felix/broker/logstore"
	"felix.dev/felix/broker/record"
	"felix.dev/felix/broker/replication"
)

// BenchmarkIdleShards measures what idle shards cost (issue 31): three
// in-process brokers (each its own badger store and server, default pass
// interval), N shards replicated on all three with leaders spread round
// robin, no traffic. Once every leader has committed its fence and the
// shards have settled it measures, over a window, the process's CPU time
// (all three brokers) and the heap in use against the same three brokers
// before the shards were created. b.N is ignored: run with -benchtime=1x.
//
// FELIX_IDLE_SHARDS sets N (default 200), FELIX_IDLE_WINDOW the window
// (default 10s), FELIX_IDLE_CPUPROFILE a file for a CPU profile of the
// window, FELIX_IDLE_HEAPPROFILE one for a heap profile taken at its end
// (-cpuprofile and -memprofile would cover the start of the shards and
// the heap after the cluster stopped).
func BenchmarkIdleShards(b *testing.B) {
	n := 200
	if v := os.Getenv("FELIX_IDLE_SHARDS"); v != "" {
		_, _ = fmt.Sscan(v, &n)
	}
	window := 10 * time.Second
	if v := os.Getenv("FELIX_IDLE_WINDOW"); v != "" {
		if d, err := time.ParseDuration(v); err == nil {
			window = d
		}
	}
	c := newClusterIn(b, logstore.FsyncPeriodic, b.TempDir, DefaultPassInterval, "a", "b", "c")
	names := []replication.NodeID{"a", "b", "c"}
	time.Sleep(500 * time.Millisecond)
	heap0, rss0 := heapInUse(), rssBytes()
	g0 := runtime.NumGoroutine()

	shards := make([]record.ShardID, n)
	for i := range shards {
		shards[i] = record.ShardID{Stream: "idle", Shard: uint32(i)}
		leader := names[i%len(names)]
		a := c.firstAssignment(leader)
		for _, nm := range names {
			nd := c.nodes[nm]
			if err := nd.mgr.EnsureShard(shards[i], c.replicas(), replication.AckQuorum, 0); err != nil {
				b.Fatal(err)
			}
			if err := nd.mgr.SetAssignment(shards[i], a); err != nil {
				b.Fatal(err)
			}
		}
	}
	for i, sh := range shards {
		leader := c.nodes[names[i%len(names)]]
		eventually(b, "leading "+sh.String(), 60*time.Second, func() bool {
			st, err := leader.mgr.Status(sh)
			return err == nil && st.Role == replication.RoleLeader && st.FenceCommitted
		})
	}
	time.Sleep(2 * time.Second) // settle: the fence commits' reports and writes
	b.ResetTimer()
	if path := os.Getenv("FELIX_IDLE_CPUPROFILE"); path != "" {
		// A CPU profile of the window alone.
		f, err := os.Create(path)
		if err != nil {
			b.Fatal(err)
		}
		if err := pprof.StartCPUProfile(f); err != nil {
			b.Fatal(err)
		}
		defer func() { pprof.StopCPUProfile(); _ = f.Close() }()
	}
	cpu0, r0, w0, t0 := cpuTime(), procIO("syscr:"), procIO("syscw:"), time.Now()
	time.Sleep(window)
	cpu, el := cpuTime()-cpu0, time.Since(t0)
	reads, writes := procIO("syscr:")-r0, procIO("syscw:")-w0
	b.StopTimer()
	heap1, rss1 := heapInUse(), rssBytes()
	if path := os.Getenv("FELIX_IDLE_HEAPPROFILE"); path != "" {
		// The live heap while the shards idle (go test -memprofile
		// writes its profile after the cluster has stopped).
		f, err := os.Create(path)
		if err != nil {
			b.Fatal(err)
		}
		if err := pprof.WriteHeapProfile(f); err != nil {
			b.Fatal(err)
		}
		_ = f.Close()
	}
	g1 := runtime.NumGoroutine()
	replicas := float64(n * len(names))
	b.ReportMetric(float64(cpu)/float64(el), "cores")
	b.ReportMetric(float64(cpu)/float64(time.Microsecond)/el.Seconds()/replicas, "cpu-µs/s/replica")
	b.ReportMetric(float64(heap1-heap0)/replicas/1024, "heap-KiB/replica")
	b.ReportMetric(float64(int64(rss1)-int64(rss0))/replicas/1024, "rss-KiB/replica")
	// Without the garbage not yet returned to the system (the stores'
	// arenas count as live heap, so the collector lets garbage grow to
	// about their size before it runs).
	debug.FreeOSMemory()
	b.ReportMetric(float64(int64(rssBytes())-int64(rss0))/replicas/1024, "rss-freed-KiB/replica")
	b.ReportMetric(float64(g1-g0)/replicas, "goroutines/replica")
	b.ReportMetric(float64(reads)/el.Seconds(), "read-syscalls/s")
	b.ReportMetric(float64(writes)/el.Seconds(), "write-syscalls/s")
	b.Logf("%d shards x 3 replicas: %.3f cores over %v; heap %d -> %d MiB, rss %d -> %d MiB, goroutines %d -> %d",
		n, float64(cpu)/float64(el), el.Round(time.Millisecond), heap0>>20, heap1>>20, rss0>>20, rss1>>20, g0, g1)
}

// heapInUse is the live heap after a collection.
func heapInUse() uint64 {
	runtime.GC()
	var ms runtime.MemStats
	runtime.ReadMemStats(&ms)
	return ms.HeapInuse
}

// rssBytes is the process's resident set (0 where /proc is missing).
func rssBytes() uint64 {
	f, err := os.Open("/proc/self/status")
	if err != nil {
		return 0
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		if rest, ok := strings.CutPrefix(sc.Text(), "VmRSS:"); ok {
			var kb uint64
			_, _ = fmt.Sscan(strings.TrimSpace(strings.TrimSuffix(strings.TrimSpace(rest), "kB")), &kb)
			return kb << 10
		}
	}
	return 0
}

// procIO is a counter of /proc/self/io (syscr: read system calls, syscw:
// writes; 0 where /proc is missing).
func procIO(name string) uint64 {
	f, err := os.Open("/proc/self/io")
	if err != nil {
		return 0
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		if rest, ok := strings.CutPrefix(sc.Text(), name); ok {
			var n uint64
			_, _ = fmt.Sscan(strings.TrimSpace(rest), &n)
			return n
		}
	}
	return 0
}
