package logstore

import (
	"io"

	"golang.org/x/sys/unix"
	"os"
	"path/filepath"
	"testing"

	"github.com/google/go-cmp/cmp"
)

// Under FsyncOnCommit the shared sync is an fdatasync of the commit log; a
// machine crash can lose badger's unsynced writes but not the commit log,
// and opening replays it. Simulated here by replaying one store's commit
// log into a store whose badger never saw the writes.
func TestOnCommitCommitLogReplaysAcknowledgedAppends(t *testing.T) {
	for _, torn := range []bool{false, true} {
		name := "whole"
		if torn {
			name = "torn last frame"
		}
		t.Run(name, func(t *testing.T) {
			lost := openTest(t, Options{Fsync: FsyncOnCommit})
			mustLog(t, lost, testLog)
			lostDir := lost.opts.Dir
			if err := lost.Close(); err != nil {
				t.Fatal(err)
			}

			s := openTest(t, Options{Fsync: FsyncOnCommit, SegmentRecords: 2})
			l := mustLog(t, s, testLog)
			mustAppend(t, l, data("a", "b", "c"), nil)
			mustTrim(t, l, TrimRequest{Floor: 1, ExpectTail: 3, Headers: epochHeader("1")})
			mustAppend(t, l, data("d"), nil)
			seqs, err := listCommitLogs(filepath.Join(s.opts.Dir, commitLogDir))
			if err != nil || len(seqs) != 1 {
				t.Fatalf("commit logs %v %v", seqs, err)
			}
			b, err := os.ReadFile(filepath.Join(s.opts.Dir, commitLogDir, commitLogName(seqs[0])))
			if err != nil {
				t.Fatal(err)
			}
			if torn {
				b = b[:len(b)-3]
			}
			if err := os.WriteFile(filepath.Join(lostDir, commitLogDir, commitLogName(7)), b, 0o644); err != nil {
				t.Fatal(err)
			}
			want := []string{"a", "b", "c", "", "d"}
			if torn {
				want = want[:4]
			}
			got := openTest(t, Options{Dir: lostDir, Fsync: FsyncPeriodic})
			gl := mustLog(t, got, testLog)
			if diff := cmp.Diff(want, payloads(readAll(t, gl, 0, true))); diff != "" {
				t.Fatalf("replayed log differs:\n%s", diff)
			}
			if info := gl.Describe(); info.Tail != uint64(len(want)) || len(gl.trims) != 1 {
				t.Fatalf("after replay %+v, %d trims", info, len(gl.trims))
			}
			if seqs, _ := listCommitLogs(filepath.Join(lostDir, commitLogDir)); len(seqs) != 0 {
				t.Fatalf("replayed commit logs left behind: %v", seqs)
			}
		})
	}
}

// badger v4.9.6 refuses to open a directory holding an empty .mem file, as
// a crash can leave (dgraph-io/badger#2207); Open removes such files.
func TestOpenSurvivesEmptyWALFileLeftByCrash(t *testing.T) {
	s := openTest(t, Options{})
	mustAppend(t, mustLog(t, s, testLog), data("a"), nil)
	dir := s.opts.Dir
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	for _, name := range []string{"00099.mem", "000099.vlog"} {
		if err := os.WriteFile(filepath.Join(dir, name), nil, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	s = openTest(t, Options{Dir: dir})
	if got := payloads(readAll(t, mustLog(t, s, testLog), 0, false)); !cmp.Equal(got, []string{"a"}) {
		t.Fatalf("after reopen %v", got)
	}
}

// copyDir copies a directory tree (a running store's: a crash-consistent
// snapshot as far as this store is concerned, since everything acknowledged
// reached the kernel).
func copyDir(t *testing.T, from, to string) {
	t.Helper()
	err := filepath.WalkDir(from, func(p string, d os.DirEntry, err error) error {
		if err != nil {
			return err
		}
		rel, _ := filepath.Rel(from, p)
		if d.IsDir() {
			return os.MkdirAll(filepath.Join(to, rel), 0o755)
		}
		if d.Name() == "LOCK" {
			return nil
		}
		return copySparse(p, filepath.Join(to, rel))
	})
	if err != nil {
		t.Fatal(err)
	}
}

// A truncation checkpoints the commit log first, so replaying it after a
// crash cannot bring the truncated records back.
func TestOnCommitReplayNeverUndoesTruncation(t *testing.T) {
	s := openTest(t, Options{Fsync: FsyncOnCommit})
	l := mustLog(t, s, testLog)
	mustAppend(t, l, data("a", "b", "c", "d"), nil)
	if err := l.TruncateFrom(2); err != nil {
		t.Fatal(err)
	}
	mustAppend(t, l, data("x"), nil)
	snap := t.TempDir()
	copyDir(t, s.opts.Dir, snap) // the store is still running: no Close
	got := openTest(t, Options{Dir: snap, Fsync: FsyncOnCommit})
	if diff := cmp.Diff([]string{"a", "b", "x"}, payloads(readAll(t, mustLog(t, got, testLog), 0, true))); diff != "" {
		t.Fatalf("after replay:\n%s", diff)
	}
}

// copySparse copies only the data regions of a file (badger's log files are
// large and mostly holes).
func copySparse(from, to string) error {
	src, err := os.Open(from)
	if err != nil {
		return err
	}
	defer src.Close()
	st, err := src.Stat()
	if err != nil {
		return err
	}
	dst, err := os.Create(to)
	if err != nil {
		return err
	}
	defer dst.Close()
	fd := int(src.Fd())
	for off := int64(0); off < st.Size(); {
		data, err := unix.Seek(fd, off, unix.SEEK_DATA)
		if err != nil {
			break // ENXIO: no data after off
		}
		hole, err := unix.Seek(fd, data, unix.SEEK_HOLE)
		if err != nil {
			return err
		}
		if _, err := io.Copy(io.NewOffsetWriter(dst, data), io.NewSectionReader(src, data, hole-data)); err != nil {
			return err
		}
		off = hole
	}
	return dst.Truncate(st.Size())
}
