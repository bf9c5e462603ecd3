package logstore

import (
	"context"
	"encoding/binary"
	"fmt"
	badger "github.com/dgraph-io/badger/v4"
	"github.com/dgraph-io/badger/v4/options"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"felix.dev/felix/broker/record"
)

// Benchmarks for issue 3.8. Run:
//
//	go test -run '^$' -bench 'BenchmarkAppend$' -benchtime 1s -count 3 ./broker/logstore/
//
// Every sub-benchmark reports records/s, MB/s, p50 and p99 append latency
// (µs); the store's sub-benchmarks also report ratio-vs-raw, their
// records/s divided by the raw-file group-commit baseline's with the same
// record size, batch and concurrency, measured just before in the same run.

// appender is what the harness drives: one append of a batch.
type appender func(ctx context.Context, recs []record.Record) error

// runAppendBench runs b.N appends of batch records of size bytes from conc
// goroutines and reports the figures. It returns records/s.
func runAppendBench(b *testing.B, app appender, size, batch, conc int) float64 {
	recs := make([]record.Record, batch)
	for i := range recs {
		p := make([]byte, size)
		for j := range p {
			p[j] = byte(i + j)
		}
		recs[i] = record.Record{Epoch: 1, Timestamp: 1, Payload: p}
	}
	var next atomic.Int64
	lat := make([][]time.Duration, conc)
	var wg sync.WaitGroup
	ctx := context.Background()
	b.ResetTimer()
	start := time.Now()
	for w := 0; w < conc; w++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for next.Add(1) <= int64(b.N) {
				t0 := time.Now()
				if err := app(ctx, recs); err != nil {
					b.Error(err)
					return
				}
				lat[w] = append(lat[w], time.Since(t0))
			}
		}()
	}
	wg.Wait()
	elapsed := time.Since(start)
	b.StopTimer()
	all := slices.Concat(lat...)
	slices.Sort(all)
	rps := float64(b.N*batch) / elapsed.Seconds()
	b.ReportMetric(rps, "records/s")
	b.ReportMetric(rps*float64(size)/1e6, "MB/s")
	if len(all) > 0 {
		b.ReportMetric(float64(all[len(all)/2].Microseconds()), "p50-µs")
		b.ReportMetric(float64(all[len(all)*99/100].Microseconds()), "p99-µs")
	}
	return rps
}

func BenchmarkAppend(b *testing.B) {
	raw := map[string]float64{}
	for _, size := range []int{128, 1024} {
		for _, batch := range []int{1, 64} {
			for _, conc := range []int{1, 64} {
				key := fmt.Sprintf("size=%d/batch=%d/conc=%d", size, batch, conc)
				b.Run(key+"/raw", func(b *testing.B) {
					r := openRawLog(b, filepath.Join(b.TempDir(), "raw.log"))
					defer r.close()
					raw[key] = runAppendBench(b, r.append, size, batch, conc)
				})
				for _, mode := range []FsyncMode{FsyncOnCommit, FsyncPeriodic, FsyncNone} {
					b.Run(key+"/"+mode.String(), func(b *testing.B) {
						s, err := Open(Options{Dir: b.TempDir(), Fsync: mode, AutoCommit: true})
						if err != nil {
							b.Fatal(err)
						}
						defer s.Close()
						l, err := s.Log(testLog)
						if err != nil {
							b.Fatal(err)
						}
						rps := runAppendBench(b, func(ctx context.Context, recs []record.Record) error {
							_, err := l.Append(ctx, recs, nil)
							return err
						}, size, batch, conc)
						if base := raw[key]; base > 0 {
							b.ReportMetric(rps/base, "ratio-vs-raw")
						}
					})
				}
			}
		}
	}
}

// rawLog is the baseline: records framed into one file, written under a
// mutex, made durable by fdatasync with group commit (a writer whose data
// is not yet synced either runs the next fdatasync for everyone written so
// far or waits for the one running).
type rawLog struct {
	mu      sync.Mutex
	f       *os.File
	written uint64
	buf     []byte

	smu     sync.Mutex
	cond    *sync.Cond
	synced  uint64
	syncing bool
}

func openRawLog(b *testing.B, path string) *rawLog {
	f, err := os.OpenFile(path, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
	if err != nil {
		b.Fatal(err)
	}
	r := &rawLog{f: f}
	r.cond = sync.NewCond(&r.smu)
	return r
}

func (r *rawLog) close() { _ = r.f.Close() }

func (r *rawLog) append(_ context.Context, recs []record.Record) error {
	r.mu.Lock()
	r.buf = r.buf[:0]
	for i := range recs {
		r.buf = binary.AppendUvarint(r.buf, uint64(len(recs[i].Payload)))
		r.buf = append(r.buf, recs[i].Payload...)
	}
	if _, err := r.f.Write(r.buf); err != nil {
		r.mu.Unlock()
		return err
	}
	r.written++
	seq := r.written
	r.mu.Unlock()

	r.smu.Lock()
	defer r.smu.Unlock()
	for r.synced < seq {
		if r.syncing {
			r.cond.Wait()
			continue
		}
		r.syncing = true
		r.mu.Lock()
		target := r.written
		r.mu.Unlock()
		r.smu.Unlock()
		err := unix.Fdatasync(int(r.f.Fd()))
		r.smu.Lock()
		r.syncing = false
		if err != nil {
			r.cond.Broadcast()
			return err
		}
		r.synced = max(r.synced, target)
		r.cond.Broadcast()
	}
	return nil
}

// BenchmarkDeleteSegments measures deleting whole segments below the floor
// and the space reclaimed: the value bytes removed, and the disk space
// (allocated blocks) of badger's tables before the deletion and after
// badger compacted level 0 (which holds the data and the tombstones).
func BenchmarkDeleteSegments(b *testing.B) {
	const segRecs, segs = 2048, 8
	for i := 0; i < b.N; i++ {
		b.StopTimer()
		dir := b.TempDir()
		o := Options{Dir: dir, Fsync: FsyncNone, AutoCommit: true, SegmentRecords: segRecs}
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
		_ = s.Close() // flushes the memtable into tables
		before := allocated(b, dir, ".sst")
		if s, err = Open(o); err != nil {
			b.Fatal(err)
		}
		l, _ = s.Log(testLog)
		info := l.Describe()
		if _, err := l.Trim(context.Background(), TrimRequest{Floor: info.Tail - 1, ExpectTail: info.Tail}); err != nil {
			b.Fatal(err)
		}
		b.StartTimer()
		t0 := time.Now()
		res, err := l.DeleteBelowFloor(context.Background())
		took := time.Since(t0)
		b.StopTimer()
		if err != nil {
			b.Fatal(err)
		}
		_ = s.Close()
		// Let badger compact level 0 (where both the data and the
		// tombstones are) into the level below, as it would under load.
		db, err := badger.Open(badger.DefaultOptions(dir).WithLogger(nil).WithNumLevelZeroTables(1).WithCompression(options.None))
		if err != nil {
			b.Fatal(err)
		}
		if err := db.Flatten(1); err != nil {
			b.Fatal(err)
		}
		_ = db.Close()
		after := allocated(b, dir, ".sst")
		b.ReportMetric(float64(res.Segments), "segments")
		b.ReportMetric(float64(res.Bytes)/1e6, "value-MB-deleted")
		b.ReportMetric(float64(took.Microseconds())/float64(max(res.Segments, 1)), "µs/segment")
		b.ReportMetric(float64(before)/1e6, "sst-MB-before")
		b.ReportMetric(float64(after)/1e6, "sst-MB-after")
	}
}

// allocated sums the disk blocks of the files in dir with the suffix.
func allocated(b *testing.B, dir, suffix string) int64 {
	var n int64
	entries, err := os.ReadDir(dir)
	if err != nil {
		b.Fatal(err)
	}
	for _, e := range entries {
		var st unix.Stat_t
		if e.IsDir() || !strings.HasSuffix(e.Name(), suffix) {
			continue
		}
		if err := unix.Stat(filepath.Join(dir, e.Name()), &st); err == nil {
			n += st.Blocks * 512
		}
	}
	return n
}

// BenchmarkAppendValueThreshold is the 1 KiB x 64, concurrency 64 row of
// BenchmarkAppend with the store's default ValueThreshold and with 16 KiB
// (batches in badger's value log), each against a raw baseline run just
// before it.
func BenchmarkAppendValueThreshold(b *testing.B) {
	const size, batch, conc = 1024, 64, 64
	for _, vt := range []int64{0, 16 << 10} {
		var raw float64
		b.Run(fmt.Sprintf("threshold=%d/raw", vt), func(b *testing.B) {
			r := openRawLog(b, filepath.Join(b.TempDir(), "raw.log"))
			defer r.close()
			raw = runAppendBench(b, r.append, size, batch, conc)
		})
		for _, mode := range []FsyncMode{FsyncOnCommit, FsyncNone} {
			b.Run(fmt.Sprintf("threshold=%d/%s", vt, mode), func(b *testing.B) {
				s, err := Open(Options{Dir: b.TempDir(), Fsync: mode, AutoCommit: true, ValueThreshold: vt})
				if err != nil {
					b.Fatal(err)
				}
				defer s.Close()
				l, _ := s.Log(testLog)
				rps := runAppendBench(b, func(ctx context.Context, recs []record.Record) error {
					_, err := l.Append(ctx, recs, nil)
					return err
				}, size, batch, conc)
				if raw > 0 {
					b.ReportMetric(rps/raw, "ratio-vs-raw")
				}
			})
		}
	}
}
