package logstore

import (
	"os"
	"path/filepath"
	"testing"

	"golang.org/x/sys/unix"
)

// BenchmarkSyncFileShapes measures one 4 KiB write plus fdatasync on the
// three shapes a commit-log file can have: appended (the file grows, so
// every sync also writes its size; what the commit log does today),
// extended with fallocate first (unwritten extents), and written with
// zeros first (every block already written). It measures the file system,
// not our code: it is the evidence for writing commit-log files ahead
// (docs/performance.md, "Commit-log files written ahead").
func BenchmarkSyncFileShapes(b *testing.B) {
	buf := make([]byte, 4096)
	for _, shape := range []string{"append", "fallocate", "prewritten"} {
		b.Run(shape, func(b *testing.B) {
			f, err := os.OpenFile(filepath.Join(b.TempDir(), "f"), os.O_CREATE|os.O_RDWR, 0o644)
			if err != nil {
				b.Fatal(err)
			}
			defer f.Close()
			size := int64(b.N) * int64(len(buf))
			switch shape {
			case "fallocate":
				if err := unix.Fallocate(int(f.Fd()), 0, 0, size); err != nil {
					b.Skip("fallocate:", err)
				}
			case "prewritten":
				zeros := make([]byte, 1<<20)
				for off := int64(0); off < size; off += int64(len(zeros)) {
					if _, err := f.WriteAt(zeros, off); err != nil {
						b.Fatal(err)
					}
				}
			}
			if err := f.Sync(); err != nil {
				b.Fatal(err)
			}
			b.SetBytes(int64(len(buf)))
			b.ResetTimer()
			for i := 0; i < b.N; i++ {
				if _, err := f.WriteAt(buf, int64(i)*int64(len(buf))); err != nil {
					b.Fatal(err)
				}
				if err := unix.Fdatasync(int(f.Fd())); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}
