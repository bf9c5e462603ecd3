package logstore

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"sync"
	"testing"

	"golang.org/x/sys/unix"
)

// BenchmarkSyncFileShapes measures one write plus its sync on the shapes a
// commit-log file can have: appended (the file grows, so every sync also
// writes its size), extended with fallocate first (unwritten extents),
// written with zeros first (every block already written), and written
// with zeros first then written directly (O_DIRECT|O_DSYNC, one system
// call, no page cache), the last one also through native AIO
// (direct-aio: the goroutine parks instead of blocking a thread). files=3 runs three files at once, one goroutine
// each, as the three replicas of a shard on one disk do in the in-process
// benchmarks. It measures the file system, not our code: it is the
// evidence for writing commit-log files ahead and writing them directly
// (docs/performance.md).
func BenchmarkSyncFileShapes(b *testing.B) {
	for _, files := range []int{1, 3} {
		for _, size := range []int{4 << 10, 16 << 10} {
			for _, shape := range []string{"append", "fallocate", "prewritten", "direct", "direct-aio"} {
				b.Run(fmt.Sprintf("files=%d/size=%dKiB/%s", files, size>>10, shape), func(b *testing.B) {
					benchSyncShape(b, shape, files, size)
				})
			}
		}
	}
}

func benchSyncShape(b *testing.B, shape string, files, size int) {
	total := int64(b.N) * int64(size)
	type target struct {
		f      *os.File
		direct *directWriter
	}
	var ts []target
	for i := 0; i < files; i++ {
		path := filepath.Join(b.TempDir(), "f")
		f, err := os.OpenFile(path, os.O_CREATE|os.O_RDWR, 0o644)
		if err != nil {
			b.Fatal(err)
		}
		b.Cleanup(func() { f.Close() })
		switch shape {
		case "fallocate":
			if err := unix.Fallocate(int(f.Fd()), 0, 0, total); err != nil {
				b.Skip("fallocate:", err)
			}
		case "prewritten", "direct", "direct-aio":
			zeros := make([]byte, 1<<20)
			for off := int64(0); off < total; off += int64(len(zeros)) {
				if _, err := f.WriteAt(zeros, off); err != nil {
					b.Fatal(err)
				}
			}
		}
		if err := f.Sync(); err != nil {
			b.Fatal(err)
		}
		t := target{f: f}
		if shape == "direct" || shape == "direct-aio" {
			w, err := openDirect(path, shape == "direct-aio")
			if errors.Is(err, unix.EINVAL) {
				b.Skip("no O_DIRECT here:", err)
			}
			if err != nil {
				b.Fatal(err)
			}
			b.Cleanup(func() { w.close() })
			t.direct = w
		}
		ts = append(ts, t)
	}
	buf := make([]byte, size)
	b.SetBytes(int64(size))
	b.ResetTimer()
	var wg sync.WaitGroup
	for _, t := range ts {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := 0; i < b.N; i++ {
				off := int64(i) * int64(size)
				if t.direct != nil {
					if err := t.direct.writeAt(buf, off); err != nil {
						b.Error(err)
						return
					}
					continue
				}
				if _, err := t.f.WriteAt(buf, off); err != nil {
					b.Error(err)
					return
				}
				if err := unix.Fdatasync(int(t.f.Fd())); err != nil {
					b.Error(err)
					return
				}
			}
		}()
	}
	wg.Wait()
}
