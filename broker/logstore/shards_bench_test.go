package logstore

import (
	"context"
	"fmt"
	"os"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	badger "github.com/dgraph-io/badger/v4"

	"felix.dev/felix/broker/record"
)

// storeVariant is one store configuration compared by BenchmarkAppendShards.
type storeVariant struct {
	name string
	opts func(o *Options)
}

// shardVariants are the configurations compared (issue 5); figures in
// docs/performance.md. By default BenchmarkAppendShards runs "default" and
// "vlog-1KiB"; FELIX_BENCH_VARIANTS (comma-separated names, or "all")
// selects others.
var shardVariants = []storeVariant{
	{"default", func(*Options) {}},
	// inline: batches below 1 MiB in badger's tree (what default means today).
	{"inline", func(o *Options) { o.ValueThreshold = 1 << 20 }},
	{"vlog-4KiB", func(o *Options) { o.ValueThreshold = 4 << 10 }},
	{"vlog-512B", func(o *Options) { o.ValueThreshold = 512 }},
	{"inline-memtables-2", func(o *Options) {
		o.ValueThreshold = 1 << 20
		o.tune = func(b *badger.Options) { b.NumMemtables = 2 }
	}},
	{"inline-memtable-16MiB", func(o *Options) {
		o.ValueThreshold = 1 << 20
		o.tune = func(b *badger.Options) { b.MemTableSize = 16 << 20 }
	}},
	{"vlog-1KiB", func(o *Options) { o.ValueThreshold = 1 << 10 }},
	{"inline-l0-10-30", func(o *Options) {
		o.ValueThreshold = 1 << 20
		o.tune = func(b *badger.Options) { b.NumLevelZeroTables, b.NumLevelZeroTablesStall = 10, 30 }
	}},
	{"inline-memtable-128MiB", func(o *Options) {
		o.ValueThreshold = 1 << 20
		o.tune = func(b *badger.Options) { b.MemTableSize = 128 << 20 }
	}},
	{"inline-compactors-3", func(o *Options) {
		o.ValueThreshold = 1 << 20
		o.tune = func(b *badger.Options) { b.NumCompactors = 3 }
	}},
}

// BenchmarkAppendShards is the store under the standalone broker benchmark
// of issue 5: 1 KiB records on 16 logs (one per shard), 4 writers per log
// (the pipelined requests of a connection), batch records per append, for
// each fsync mode and store variant. It reports records/s, MB/s, p50/p99
// per append and the bytes the process wrote per payload byte
// (/proc/self/io, the whole process: the store's writes and badger's
// flushes and compactions during the run). Run:
//
//	go test -run '^$' -bench 'BenchmarkAppendShards' -benchtime 3s ./broker/logstore/
func BenchmarkAppendShards(b *testing.B) {
	const size, logs, perLog = 1024, 16, 4
	pick := map[string]bool{"default": true, "vlog-1KiB": true}
	if env := os.Getenv("FELIX_BENCH_VARIANTS"); env != "" {
		pick = map[string]bool{}
		for _, n := range strings.Split(env, ",") {
			pick[n] = true
		}
	}
	for _, batch := range []int{1, 16} {
		for _, mode := range []FsyncMode{FsyncPeriodic, FsyncOnCommit, FsyncNone} {
			for _, v := range shardVariants {
				if !pick["all"] && !pick[v.name] {
					continue
				}
				b.Run(fmt.Sprintf("batch=%d/%s/%s", batch, mode, v.name), func(b *testing.B) {
					o := Options{Dir: b.TempDir(), Fsync: mode, AutoCommit: true}
					v.opts(&o)
					s, err := Open(o)
					if err != nil {
						b.Fatal(err)
					}
					defer s.Close()
					ls := make([]*Log, logs)
					for i := range ls {
						id := record.LogID{ShardID: record.ShardID{Stream: "bench", Shard: uint32(i)}, Log: record.LogData}
						if ls[i], err = s.Log(id); err != nil {
							b.Fatal(err)
						}
					}
					var n atomic.Int64
					w0 := procWriteBytes(b)
					rps := runAppendBench(b, func(ctx context.Context, recs []record.Record) error {
						_, err := ls[int(n.Add(1))%logs].Append(ctx, recs, nil)
						return err
					}, size, batch, logs*perLog)
					written := procWriteBytes(b) - w0
					b.ReportMetric(float64(written)/float64(b.N*batch*size), "written/payload")
					_ = rps
				})
			}
		}
	}
}

// procWriteBytes returns the bytes this process caused to be written to
// storage so far (write_bytes of /proc/self/io), or 0 if unknown.
func procWriteBytes(b *testing.B) int64 {
	raw, err := os.ReadFile("/proc/self/io")
	if err != nil {
		return 0
	}
	for _, line := range strings.Split(string(raw), "\n") {
		var v int64
		if _, err := fmt.Sscanf(line, "write_bytes: %d", &v); err == nil {
			return v
		}
	}
	return 0
}

// BenchmarkDeleteSegmentsValueLog is BenchmarkDeleteSegments with batches in
// badger's value log (ValueThreshold 1 KiB): 8 segments of 2,048 records of
// 1 KiB (64 per append), the 7 below the floor deleted, badger's levels
// compacted (which records the value log's garbage), then
// Store.CollectValueLog. It reports the value log's disk space (allocated
// blocks) before the deletion and after the collection.
func BenchmarkDeleteSegmentsValueLog(b *testing.B) {
	const segRecs, segs = 2048, 8
	for i := 0; i < b.N; i++ {
		dir := b.TempDir()
		o := Options{Dir: dir, Fsync: FsyncNone, AutoCommit: true, SegmentRecords: segRecs, ValueThreshold: 1 << 10}
		s, err := Open(o)
		if err != nil {
			b.Fatal(err)
		}
		l, _ := s.Log(testLog)
		recs := make([]record.Record, 64)
		for j := range recs {
			p := make([]byte, 1024)
			for k := range p {
				p[k] = byte(k*7 + j*13 + k>>3)
			}
			recs[j] = record.Record{Payload: p}
		}
		for n := 0; n < segs*segRecs/64; n++ {
			if _, err := l.Append(context.Background(), recs, nil); err != nil {
				b.Fatal(err)
			}
		}
		_ = s.Close()
		before := allocated(b, dir, ".vlog")
		if s, err = Open(o); err != nil {
			b.Fatal(err)
		}
		l, _ = s.Log(testLog)
		info := l.Describe()
		if _, err := l.Trim(context.Background(), TrimRequest{Floor: info.Tail - 1, ExpectTail: info.Tail}); err != nil {
			b.Fatal(err)
		}
		if _, err := l.DeleteBelowFloor(context.Background()); err != nil {
			b.Fatal(err)
		}
		_ = s.Close()
		// Compact every level: dropping the deleted versions records how
		// much of each value log file is garbage.
		db, err := badger.Open(badger.DefaultOptions(dir).WithLogger(nil).WithNumLevelZeroTables(1).WithValueThreshold(1 << 10))
		if err != nil {
			b.Fatal(err)
		}
		if err := db.Flatten(1); err != nil {
			b.Fatal(err)
		}
		_ = db.Close()
		if s, err = Open(o); err != nil {
			b.Fatal(err)
		}
		b.ResetTimer()
		t0 := time.Now()
		err = s.CollectValueLog(context.Background())
		took := time.Since(t0)
		b.StopTimer()
		if err != nil {
			b.Fatal(err)
		}
		l, _ = s.Log(testLog)
		if got, err := l.ReadRaw(FromEarliest, ReadOptions{}); err != nil || len(got.Records) == 0 {
			b.Fatalf("after collection: %v", err)
		}
		_ = s.Close()
		after := allocated(b, dir, ".vlog")
		b.ReportMetric(float64(before)/1e6, "vlog-MB-before")
		b.ReportMetric(float64(after)/1e6, "vlog-MB-after")
		b.ReportMetric(float64(took.Milliseconds()), "collect-ms")
	}
}
