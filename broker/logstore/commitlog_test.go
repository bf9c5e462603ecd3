package logstore

import (
	"context"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	badger "github.com/dgraph-io/badger/v4"
	"github.com/go-logr/logr/testr"
	"github.com/google/go-cmp/cmp"
	"golang.org/x/sys/unix"

	"felix.dev/felix/broker/record"
)

// Under FsyncOnCommit the shared sync is an fdatasync of the commit log; a
// machine crash can lose badger's unsynced writes but not the commit log,
// and opening replays it. Simulated here by replaying one store's commit
// log into a store whose badger never saw the writes.
func TestOnCommitCommitLogReplaysAcknowledgedAppends(t *testing.T) {
	for _, tc := range []struct {
		name   string
		torn   bool
		legacy bool // the file as a version before checksums named their file wrote it
	}{{name: "whole"}, {name: "torn last frame", torn: true}, {name: "legacy file", legacy: true}} {
		torn := tc.torn
		t.Run(tc.name, func(t *testing.T) {
			lostDir := lostWritesDir(t)

			s := openTest(t, Options{Fsync: FsyncOnCommit, SegmentRecords: 2})
			l := mustLog(t, s, testLog)
			mustAppend(t, l, data("a", "b", "c"), nil)
			mustTrim(t, l, TrimRequest{Floor: 1, ExpectTail: 3, Headers: epochHeader("1")})
			mustAppend(t, l, data("d"), nil)
			seqs, err := listCommitLogs(filepath.Join(s.opts.Dir, commitLogDir))
			if err != nil || len(seqs) != 1 {
				t.Fatalf("commit logs %v %v", seqs, err)
			}
			b, err := os.ReadFile(filepath.Join(s.opts.Dir, commitLogDir, seqs[0].name()))
			if err != nil {
				t.Fatal(err)
			}
			if torn {
				b = b[:len(b)-3]
			}
			// Under the same name: frames check only in the file they were
			// written for.
			name := seqs[0].name()
			if tc.legacy {
				b, name = reseedFrames(t, b, seqs[0].seed(), 0), legacyCommitLogName(seqs[0].seq)
			}
			if err := os.WriteFile(filepath.Join(lostDir, commitLogDir, name), b, 0o644); err != nil {
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

// lostWritesDir returns the data directory of a closed on-commit store
// that holds testLog and nothing else: a replay of another store's commit
// log into it stands for a machine crash that lost badger's unsynced
// writes.
func lostWritesDir(t *testing.T) string {
	t.Helper()
	lost := openTest(t, Options{Fsync: FsyncOnCommit})
	mustLog(t, lost, testLog)
	if err := lost.Close(); err != nil {
		t.Fatal(err)
	}
	return lost.opts.Dir
}

// reseedFrames re-encodes the frames of b, checksummed from one seed, with
// another.
func reseedFrames(t *testing.T, b []byte, from, to uint32) []byte {
	t.Helper()
	var out []byte
	for {
		body, rest, ok := nextFrame(b, from)
		if !ok {
			return out
		}
		kvs, err := decodeFrame(body)
		if err != nil {
			t.Fatal(err)
		}
		out, b = appendFrame(out, to, kvs), rest
	}
}

// A recycled file still holds the frames of its earlier use after the new
// ones. They were written for another file, so their checksums fail and
// the replay ends at the new frames' end, even when an old frame starts
// exactly there.
func TestCommitLogFramesCheckOnlyInTheirFile(t *testing.T) {
	frame := func(seq uint64, key string) []byte {
		return appendFrame(nil, frameSeed(seq), []frameEntry{{op: opSet, k: []byte(key), v: []byte("value")}})
	}
	// File 3 reuses file 1: its first frame is new, the two after it (same
	// sizes, so they start right where the new one ends) are file 1's.
	b := append(frame(3, "new"), frame(1, "old2")...)
	b = append(b, frame(1, "old3")...)
	path := filepath.Join(t.TempDir(), commitLogName(3))
	if err := os.WriteFile(path, b, 0o644); err != nil {
		t.Fatal(err)
	}
	db, err := badger.Open(badger.DefaultOptions("").WithInMemory(true).WithLogger(nil))
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	n, _, err := replayCommitLogAt(db, path, clFile{seq: 3})
	if err != nil || n != 1 {
		t.Fatalf("replayed %d frames (%v), want only the new one", n, err)
	}
	if ok, err := hasKey(db, []byte("new")); err != nil || !ok {
		t.Fatalf("the new frame was not applied: %t %v", ok, err)
	}
	for _, k := range []string{"old2", "old3"} {
		if ok, err := hasKey(db, []byte(k)); err != nil || ok {
			t.Fatalf("frame %q of the file's earlier use was replayed (%v)", k, err)
		}
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

// With values in badger's value log (Options.ValueThreshold), a machine
// crash can leave badger's index pointing past the end of a value log that
// did not reach the disk. Simulated by cutting the end off the value log of
// a closed store whose sync mark is removed (no sync covered the writes):
// the store opens, drops the batches it cannot read (a suffix), and serves
// the dense prefix; appends continue after it.
func TestValueLogTailLostInACrashLeavesAPrefix(t *testing.T) {
	for i, mode := range []FsyncMode{FsyncOnCommit, FsyncPeriodic, FsyncNone, FsyncOnCommit, FsyncNone} {
		cut := int64([]int{1200, 700, 2000, 300, 1500}[i])
		t.Run(fmt.Sprintf("%s/cut=%d", mode, cut), func(t *testing.T) {
			dir := t.TempDir()
			o := Options{Dir: dir, Fsync: mode, ValueThreshold: 64, AutoCommit: true, SegmentRecords: 8, Logger: testr.New(t)}
			s := openTest(t, o)
			l := mustLog(t, s, testLog)
			var want []string
			for i := 0; i < 30; i++ {
				recs := data(fmt.Sprintf("%0200d", 2*i), fmt.Sprintf("%0200d", 2*i+1))
				want = append(want, payloads(recs)...)
				mustAppend(t, l, recs, nil)
				if i == 20 {
					mustTrim(t, l, TrimRequest{Floor: 3, ExpectTail: l.Describe().Tail, Headers: epochHeader("1")})
				}
			}
			mustTrim(t, l, TrimRequest{Floor: 50, ExpectTail: l.Describe().Tail, Headers: epochHeader("2")})
			if err := s.Close(); err != nil {
				t.Fatal(err)
			}
			forgetSyncs(t, dir) // a crash before any sync covered the writes
			var last string
			entries, err := os.ReadDir(dir)
			if err != nil {
				t.Fatal(err)
			}
			for _, e := range entries {
				if info, err := e.Info(); err == nil && strings.HasSuffix(e.Name(), ".vlog") && info.Size() > 1000 {
					last = filepath.Join(dir, e.Name())
				}
			}
			if last == "" {
				t.Fatal("no value log with data")
			}
			st, err := os.Stat(last)
			if err != nil {
				t.Fatal(err)
			}
			if err := os.Truncate(last, st.Size()-cut); err != nil {
				t.Fatal(err)
			}

			s = openTest(t, o)
			l = mustLog(t, s, testLog)
			info := l.Describe()
			if info.Tail >= 62 || info.Tail < 50 {
				t.Fatalf("after the lost tail: %+v", info)
			}
			if info.Floor != 3 {
				t.Fatalf("the floor of the lost trim survived: %+v", info)
			}
			var got []string
			for _, r := range readAll(t, l, info.Start, true) {
				if r.Kind == record.KindData {
					got = append(got, string(r.Payload))
				}
			}
			if diff := cmp.Diff(want[:len(got)], got); diff != "" || len(got) < 40 {
				t.Fatalf("%d records after the crash, not a prefix:\n%s", len(got), diff)
			}
			res := mustAppend(t, l, data("after"), ptr(info.Tail))
			s = reopen(t, s)
			l = mustLog(t, s, testLog)
			if got := readAll(t, l, res.First, false); len(got) != 1 || string(got[0].Payload) != "after" {
				t.Fatalf("append after the repair: %v", payloads(got))
			}
		})
	}
}

// Value-log garbage collection moves live values and deletes the old file.
// Simulated crash: a batch's value was moved (rewritten under a newer
// version) but the move never reached the disk, the old copy is still there,
// and the GC marker says collection was under way. Opening checks every
// batch and restores the moved one from its old copy.
func TestValueLogGCInterruptedByACrashRestoresMovedBatches(t *testing.T) {
	dir := t.TempDir()
	o := Options{Dir: dir, Fsync: FsyncPeriodic, ValueThreshold: 64, AutoCommit: true, SegmentRecords: 8}
	s := openTest(t, o)
	l := mustLog(t, s, testLog)
	var want []string
	for i := 0; i < 20; i++ {
		recs := data(fmt.Sprintf("%0200d", i))
		want = append(want, payloads(recs)...)
		mustAppend(t, l, recs, nil)
	}
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	moved := dataKey(l.num, 0, 5)
	db, err := badger.Open(badger.DefaultOptions(dir).WithLogger(nil).WithValueThreshold(64))
	if err != nil {
		t.Fatal(err)
	}
	err = db.Update(func(txn *badger.Txn) error {
		item, err := txn.Get(moved)
		if err != nil {
			return err
		}
		v, err := item.ValueCopy(nil)
		if err != nil {
			return err
		}
		if err := txn.Set(moved, v); err != nil { // the move: a new copy at the value log's head
			return err
		}
		return txn.Set(gcMarkKey(), sealFrame(nil))
	})
	if err == nil {
		err = db.Close()
	}
	if err != nil {
		t.Fatal(err)
	}
	// The new copy is the last value written: cut it off.
	var newest string
	entries, _ := os.ReadDir(dir)
	for _, e := range entries {
		if info, err := e.Info(); err == nil && strings.HasSuffix(e.Name(), ".vlog") && info.Size() > 100 {
			newest = filepath.Join(dir, e.Name())
		}
	}
	st, err := os.Stat(newest)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.Truncate(newest, st.Size()-100); err != nil {
		t.Fatal(err)
	}

	s = openTest(t, o)
	l = mustLog(t, s, testLog)
	if info := l.Describe(); info.Tail != 20 {
		t.Fatalf("after the interrupted GC: %+v", info)
	}
	if diff := cmp.Diff(want, payloads(readAll(t, l, 0, false))); diff != "" {
		t.Fatalf("after the interrupted GC:\n%s", diff)
	}
	if ok, err := hasKey(s.db, gcMarkKey()); err != nil || ok {
		t.Fatalf("GC marker left behind: %v %v", ok, err)
	}
}

// Maintain's value-log GC leaves no marker and keeps every record.
func TestValueLogGCKeepsRecordsAndClearsItsMarker(t *testing.T) {
	s := openTest(t, Options{Fsync: FsyncPeriodic, ValueThreshold: 64, AutoCommit: true, SegmentRecords: 4})
	l := mustLog(t, s, testLog)
	for i := 0; i < 40; i++ {
		mustAppend(t, l, data(fmt.Sprintf("%0200d", i)), nil)
	}
	mustTrim(t, l, TrimRequest{Floor: 30, ExpectTail: 40})
	if _, err := s.Maintain(context.Background()); err != nil {
		t.Fatal(err)
	}
	if ok, err := hasKey(s.db, gcMarkKey()); err != nil || ok {
		t.Fatalf("GC marker left behind: %v %v", ok, err)
	}
	got := readAll(t, l, FromEarliest, false)
	if len(got) != 10 || string(got[0].Payload) != fmt.Sprintf("%0200d", 30) {
		t.Fatalf("after GC: %v", payloads(got))
	}
}

// A busy commit log has its next file written ahead, and a rotation
// renames it into place: frames are written from the start of a file of
// zeros, directly where the file system allows it. Replay stops at the zeros after the
// last frame, or at a last frame torn into them, and a spare left by a
// crash is removed on open.
func TestCommitLogWrittenAheadReplaysToTheZeros(t *testing.T) {
	for _, torn := range []bool{false, true} {
		t.Run(fmt.Sprintf("torn=%t", torn), func(t *testing.T) {
			lostDir := lostWritesDir(t)

			s := openTest(t, Options{Fsync: FsyncOnCommit})
			l := mustLog(t, s, testLog)
			// A spare is written once the file holds spareAfterBytes.
			other := mustLog(t, s, record.LogID{ShardID: record.ShardID{Stream: "filler"}, Log: record.LogData})
			fillToSpare(t, s, other)
			checkpoint(t, s)
			mustAppend(t, l, data("a", "b"), nil)
			mustAppend(t, l, data("c"), nil)
			s.cl.mu.RLock()
			seq := s.cl.seq.Load()
			path, size, direct := filepath.Join(s.cl.dir, commitLogName(seq)), s.cl.size.Load(), s.cl.direct != nil
			s.cl.mu.RUnlock()
			if !direct && directSupported(s.cl.dir) {
				t.Fatal("the file written ahead does not take direct writes")
			}
			b, err := os.ReadFile(path)
			if err != nil {
				t.Fatal(err)
			}
			if len(b) < commitLogMaxBytes {
				t.Fatalf("current commit log is %d bytes: not the spare written ahead", len(b))
			}
			want := []string{"a", "b", "c"}
			if torn {
				for i := size - 3; i < size; i++ {
					b[i] = 0 // the last frame's end never reached the disk
				}
				want = want[:2]
			}
			clDir := filepath.Join(lostDir, commitLogDir)
			if err := os.WriteFile(filepath.Join(clDir, commitLogName(seq)), b, 0o644); err != nil {
				t.Fatal(err)
			}
			for _, spare := range []string{commitLogSpare, commitLogRecycled} {
				if err := os.WriteFile(filepath.Join(clDir, spare), make([]byte, 4096), 0o644); err != nil {
					t.Fatal(err)
				}
			}
			got := openTest(t, Options{Dir: lostDir, Fsync: FsyncPeriodic})
			gl := mustLog(t, got, testLog)
			if diff := cmp.Diff(want, payloads(readAll(t, gl, 0, true))); diff != "" {
				t.Fatalf("replayed log differs:\n%s", diff)
			}
			for _, spare := range []string{commitLogSpare, commitLogRecycled} {
				if _, err := os.Stat(filepath.Join(clDir, spare)); !os.IsNotExist(err) {
					t.Fatalf("the spare %s left by the crash is still there: %v", spare, err)
				}
			}
		})
	}
}

// A store's first commit-log file grows; once a spare written ahead is
// ready, the next commit moves the syncs to it (a checkpoint), instead of
// waiting for the growing file to fill.
func TestCommitLogMovesToTheSpareOnceReady(t *testing.T) {
	s := openTest(t, Options{Fsync: FsyncOnCommit})
	l := mustLog(t, s, testLog)
	appendPastSpareThreshold(t, l)
	s.cl.mu.RLock()
	first := s.cl.seq.Load()
	s.cl.mu.RUnlock()
	deadline := time.Now().Add(30 * time.Second)
	for {
		mustAppend(t, l, data("more"), nil)
		s.cl.mu.RLock()
		seq, ahead := s.cl.seq.Load(), s.cl.ahead.Load()
		s.cl.mu.RUnlock()
		if ahead {
			if seq == first {
				t.Fatalf("written-ahead file without a rotation (seq %d)", seq)
			}
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("still on the growing file %d (now %d) 30 s after it passed %d bytes", first, seq, spareAfterBytes)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// A rotation keeps a full-size file as the next spare instead of writing a
// new one with zeros: the file after next is the same file (same inode),
// written ahead, and a replay of it brings back only its own frames.
func TestCommitLogRecyclesFullFiles(t *testing.T) {
	lostDir := lostWritesDir(t)

	s := openTest(t, Options{Fsync: FsyncOnCommit})
	l := mustLog(t, s, testLog)
	other := mustLog(t, s, record.LogID{ShardID: record.ShardID{Stream: "filler"}, Log: record.LogData})
	fillToSpare(t, s, other)
	checkpoint(t, s) // onto the spare written with zeros
	s.cl.mu.RLock()
	fullSeq, ahead := s.cl.seq.Load(), s.cl.ahead.Load()
	s.cl.mu.RUnlock()
	if !ahead {
		t.Fatal("the checkpoint did not move to the spare written ahead")
	}
	fullIno := inode(t, filepath.Join(s.cl.dir, commitLogName(fullSeq)))
	mustAppend(t, other, data("before"), nil)
	checkpoint(t, s) // retires the full file: recycled
	s.cl.spareMu.Lock()
	spare := ""
	if s.cl.spare != nil {
		spare = s.cl.spare.Name()
	}
	s.cl.spareMu.Unlock()
	if want := filepath.Join(s.cl.dir, commitLogRecycled); spare != want {
		t.Fatalf("spare after retiring a full file is %q, want %q", spare, want)
	}
	checkpoint(t, s) // onto the recycled file
	s.cl.mu.RLock()
	seq, ahead, direct := s.cl.seq.Load(), s.cl.ahead.Load(), s.cl.direct != nil
	s.cl.mu.RUnlock()
	path := filepath.Join(s.cl.dir, commitLogName(seq))
	if got := inode(t, path); !ahead || got != fullIno {
		t.Fatalf("file %d: inode %d written ahead %t, want the recycled inode %d", seq, got, ahead, fullIno)
	}
	if !direct && directSupported(s.cl.dir) {
		t.Fatal("the recycled file does not take direct writes")
	}
	mustAppend(t, l, data("a", "b"), nil)
	mustAppend(t, l, data("c"), nil)
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(lostDir, commitLogDir, commitLogName(seq)), b, 0o644); err != nil {
		t.Fatal(err)
	}
	got := openTest(t, Options{Dir: lostDir, Fsync: FsyncPeriodic})
	gl := mustLog(t, got, testLog)
	if diff := cmp.Diff([]string{"a", "b", "c"}, payloads(readAll(t, gl, 0, true))); diff != "" {
		t.Fatalf("replayed log differs:\n%s", diff)
	}
}

// checkpoint runs a checkpoint of s as the writer does.
func checkpoint(t *testing.T, s *Store) {
	t.Helper()
	s.wmu.Lock()
	err := s.checkpointLocked()
	s.wmu.Unlock()
	if err != nil {
		t.Fatal(err)
	}
}

// appendPastSpareThreshold appends to l until its store's commit-log file
// holds more than spareAfterBytes (the next spare is then asked for).
func appendPastSpareThreshold(t *testing.T, l *Log) {
	t.Helper()
	big := strings.Repeat("x", 4096)
	batch := make([]string, 64)
	for i := range batch {
		batch[i] = big
	}
	for written := 0; written <= spareAfterBytes; written += 64 * len(big) {
		mustAppend(t, l, data(batch...), nil)
	}
}

// fillToSpare appends to l until its store's commit log has a spare
// written ahead ready.
func fillToSpare(t *testing.T, s *Store, l *Log) {
	t.Helper()
	appendPastSpareThreshold(t, l)
	deadline := time.Now().Add(30 * time.Second)
	for {
		s.cl.spareMu.Lock()
		ready := s.cl.spare != nil
		s.cl.spareMu.Unlock()
		if ready {
			return
		}
		if time.Now().After(deadline) {
			t.Fatal("no spare commit log written ahead")
		}
		time.Sleep(5 * time.Millisecond)
	}
}

func inode(t *testing.T, path string) uint64 {
	t.Helper()
	var st unix.Stat_t
	if err := unix.Stat(path, &st); err != nil {
		t.Fatal(err)
	}
	return st.Ino
}

// A rotation releases the retired file's direct writer, native AIO context
// included, and closing the store releases the current one: a broker that
// rotates for months must not run out of AIO contexts (fs.aio-max-nr) or
// leak the kernel memory each one holds.
func TestCommitLogRotationReleasesTheDirectWriter(t *testing.T) {
	s := openTest(t, Options{Fsync: FsyncOnCommit})
	other := mustLog(t, s, record.LogID{ShardID: record.ShardID{Stream: "filler"}, Log: record.LogData})
	fillToSpare(t, s, other)
	checkpoint(t, s) // onto the spare written ahead: direct writes
	s.cl.mu.RLock()
	first := s.cl.direct
	s.cl.mu.RUnlock()
	if first == nil {
		if directSupported(s.cl.dir) {
			t.Fatal("the file written ahead does not take direct writes")
		}
		t.Skip("no O_DIRECT on this file system")
	}
	mustAppend(t, other, data("on the direct file"), nil)
	checkpoint(t, s)
	if !first.closed {
		t.Fatal("the retired file's direct writer (and its AIO context) was not released")
	}
	s.cl.mu.RLock()
	current := s.cl.direct
	s.cl.mu.RUnlock()
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	if current != nil && !current.closed {
		t.Fatal("Close did not release the current file's direct writer")
	}
}
