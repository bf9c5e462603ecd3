package logstore

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"

	badger "github.com/dgraph-io/badger/v4"
	"github.com/google/go-cmp/cmp"

	"felix.dev/felix/broker/record"
)

// refOptions keeps every batch of the tests' records in the commit log.
func refOptions() Options {
	return Options{Fsync: FsyncOnCommit, CommitLogValues: true, ValueThreshold: 64, SegmentRecords: 4}
}

// storedValue returns what badger holds for the batch starting at first.
func storedValue(t *testing.T, l *Log, first uint64) []byte {
	t.Helper()
	var v []byte
	err := l.s.db.View(func(txn *badger.Txn) error {
		item, err := txn.Get(dataKey(l.num, l.segment(first), first))
		if err != nil {
			return err
		}
		v, err = item.ValueCopy(nil)
		return err
	})
	if err != nil {
		t.Fatalf("batch at %d: %v", first, err)
	}
	return v
}

func bigData(prefix string, n int) []record.Record {
	out := make([]record.Record, n)
	for i := range out {
		out[i] = record.Record{Epoch: 1, Payload: []byte(fmt.Sprintf("%s-%d-%s", prefix, i, strings.Repeat("x", 100)))}
	}
	return out
}

// With CommitLogValues a batch is written once, in its commit-log frame:
// badger holds a ref to it, reads resolve the ref, and the file holding it
// outlives checkpoints, a clean close and a reopen.
func TestCommitLogValuesKeepBatchesOnlyInTheCommitLog(t *testing.T) {
	s := openTest(t, refOptions())
	l := mustLog(t, s, testLog)
	want := bigData("a", 3)
	mustAppend(t, l, want, nil)
	if v := storedValue(t, l, 0); !isRef(v) {
		t.Fatalf("badger holds %d bytes for the batch, not a ref", len(v))
	}
	checkpoint(t, s) // the file stays: a ref points into it
	more := bigData("b", 2)
	mustAppend(t, l, more, nil)
	want = append(want, more...)
	if diff := cmp.Diff(payloads(want), payloads(readAll(t, l, 0, false))); diff != "" {
		t.Fatalf("read back differs:\n%s", diff)
	}
	s = reopen(t, s)
	l = mustLog(t, s, testLog)
	if diff := cmp.Diff(payloads(want), payloads(readAll(t, l, 0, false))); diff != "" {
		t.Fatalf("read back after reopen differs:\n%s", diff)
	}
	files, err := listCommitLogs(filepath.Join(s.opts.Dir, commitLogDir))
	if err != nil || len(files) < 2 {
		t.Fatalf("commit-log files after reopen: %v %v, want the two that hold batches", files, err)
	}
}

// A replay after a crash that lost badger's unsynced writes stores refs to
// the frames where they lie, so the acknowledged batches read back from
// the file the replay read, which stays.
func TestCommitLogValuesReplayIntoLostWrites(t *testing.T) {
	lost := openTest(t, refOptions())
	mustLog(t, lost, testLog)
	if err := lost.Close(); err != nil {
		t.Fatal(err)
	}
	s := openTest(t, refOptions())
	l := mustLog(t, s, testLog)
	want := bigData("r", 5)
	mustAppend(t, l, want[:2], nil)
	mustAppend(t, l, want[2:], nil)
	files, err := listCommitLogs(filepath.Join(s.opts.Dir, commitLogDir))
	if err != nil || len(files) != 1 {
		t.Fatalf("commit logs %v %v", files, err)
	}
	b, err := os.ReadFile(filepath.Join(s.opts.Dir, commitLogDir, files[0].name()))
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(lost.opts.Dir, commitLogDir, files[0].name()), b, 0o644); err != nil {
		t.Fatal(err)
	}
	o := refOptions()
	o.Dir = lost.opts.Dir
	got := openTest(t, o)
	gl := mustLog(t, got, testLog)
	if diff := cmp.Diff(payloads(want), payloads(readAll(t, gl, 0, false))); diff != "" {
		t.Fatalf("replayed log differs:\n%s", diff)
	}
	if !isRef(storedValue(t, gl, 0)) {
		t.Fatal("the replay stored the batch in badger instead of a ref to its frame")
	}
	if _, err := os.Stat(filepath.Join(lost.opts.Dir, commitLogDir, files[0].name())); err != nil {
		t.Fatalf("the replayed file holding the batches is gone: %v", err)
	}
}

// A file holding batches goes once every log with batches in it has
// deleted the segments holding them, and not before.
func TestCommitLogFilesRetireWithTheirSegments(t *testing.T) {
	s := openTest(t, refOptions())
	l := mustLog(t, s, testLog)
	other := mustLog(t, s, record.LogID{ShardID: record.ShardID{Stream: "other"}, Log: record.LogData})
	mustAppend(t, l, bigData("old", 4), nil)      // segment 0 of l, file A
	mustAppend(t, other, bigData("keep", 1), nil) // file A too
	s.wmu.Lock()
	fileA := s.cl.current()
	s.wmu.Unlock()
	checkpoint(t, s)
	mustAppend(t, l, bigData("new", 4), nil) // segment 1, file B
	checkpoint(t, s)
	path := filepath.Join(s.opts.Dir, commitLogDir, commitLogName(fileA))

	mustTrim(t, l, TrimRequest{Floor: 4, ExpectTail: 8, Headers: epochHeader("1")})
	if err := l.SetCommitted(9); err != nil {
		t.Fatal(err)
	}
	if _, err := l.DeleteBelowFloor(context.Background()); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(path); err != nil {
		t.Fatalf("file %d went while another log still has a batch in it: %v", fileA, err)
	}
	mustAppend(t, other, bigData("pad", 3), nil)
	mustTrim(t, other, TrimRequest{Floor: 4, ExpectTail: 4, Headers: epochHeader("1")})
	if err := other.SetCommitted(5); err != nil {
		t.Fatal(err)
	}
	if _, err := other.DeleteBelowFloor(context.Background()); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(path); !errors.Is(err, os.ErrNotExist) {
		t.Fatalf("file %d is still there after every batch in it was deleted: %v", fileA, err)
	}
	s.wmu.Lock()
	pinned := s.pins[fileA] != nil
	s.wmu.Unlock()
	if pinned {
		t.Fatalf("file %d is still pinned", fileA)
	}
	if got := payloads(readAll(t, l, 4, false)); len(got) != 4 || !strings.HasPrefix(got[0], "new-0") {
		t.Fatalf("remaining records of the log: %q", got)
	}
	s = reopen(t, s)
	if got := payloads(readAll(t, mustLog(t, s, testLog), 4, false)); len(got) != 4 {
		t.Fatalf("remaining records after reopen: %q", got)
	}
}

// Past CommitLogFiles kept files, batches go to badger's value log again,
// decided per file, until files are released.
func TestCommitLogValuesStopAtTheFileBound(t *testing.T) {
	o := refOptions()
	o.CommitLogFiles = 2
	s := openTest(t, o)
	l := mustLog(t, s, testLog)
	for i := range 3 {
		mustAppend(t, l, bigData(fmt.Sprint(i), 4), nil)
		if v := storedValue(t, l, uint64(4*i)); isRef(v) != (i < 2) {
			t.Fatalf("file %d: batch kept as a ref %t, want %t", i, isRef(v), i < 2)
		}
		checkpoint(t, s)
	}
	if got := len(readAll(t, l, 0, false)); got != 12 {
		t.Fatalf("read %d records, want 12", got)
	}
}

// Truncating inside a batch kept in the commit log keeps its prefix.
func TestTruncateInsideABatchKeptInTheCommitLog(t *testing.T) {
	s := openTest(t, refOptions())
	l := mustLog(t, s, testLog)
	want := bigData("t", 3)
	mustAppend(t, l, want, nil)
	if err := l.TruncateFrom(2); err != nil {
		t.Fatal(err)
	}
	if diff := cmp.Diff(payloads(want[:2]), payloads(readAll(t, l, 0, false))); diff != "" {
		t.Fatalf("after truncation:\n%s", diff)
	}
	mustAppend(t, l, bigData("u", 1), nil)
	s = reopen(t, s)
	if got := payloads(readAll(t, mustLog(t, s, testLog), 0, false)); len(got) != 3 || !strings.HasPrefix(got[2], "u-0") {
		t.Fatalf("after reopen: %q", got)
	}
}

// A store that keeps batches in its commit log writes its log metas in a
// version brokers from before refs refuse, so they do not open it (they
// would neither read the refs nor keep the files holding the batches).
func TestStoreKeepingRefsIsRefusedByOlderBrokers(t *testing.T) {
	plain := openTest(t, Options{Fsync: FsyncOnCommit})
	mustLog(t, plain, testLog)
	if err := plain.Close(); err != nil {
		t.Fatal(err)
	}
	if v := catalogValue(t, plain.opts.Dir); v[0] != metaVersion {
		t.Fatalf("a store without refs writes meta version %d, want %d", v[0], metaVersion)
	}
	o := refOptions()
	o.Dir = plain.opts.Dir
	s := openTest(t, o)
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	v := catalogValue(t, plain.opts.Dir)
	if _, err := openFrame(v); err == nil { // what brokers before refs decode metas with
		t.Fatal("an older broker would decode the log meta of a store keeping refs")
	}
	if _, err := decodeMeta(v); err != nil {
		t.Fatalf("the meta does not decode: %v", err)
	}
}

// catalogValue returns testLog's stored meta in the closed store at dir.
func catalogValue(t *testing.T, dir string) []byte {
	t.Helper()
	db, err := badger.Open(badger.DefaultOptions(dir).WithLogger(nil))
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	var v []byte
	err = db.View(func(txn *badger.Txn) error {
		item, err := txn.Get(catalogKey(testLog))
		if err != nil {
			return err
		}
		v, err = item.ValueCopy(nil)
		return err
	})
	if err != nil {
		t.Fatal(err)
	}
	return v
}

// A damaged ref is reported as corruption, and a length no batch can have
// is refused before anything is allocated for it.
func TestDamagedRefIsCorruption(t *testing.T) {
	dir := t.TempDir()
	batch := encodeBatch(7, bigData("d", 2))
	frame := appendFrame(nil, frameSeed(1), []frameEntry{{op: opSetRef, k: dataKey(1, 0, 7), v: batch}})
	if err := os.WriteFile(filepath.Join(dir, commitLogName(1)), frame, 0o644); err != nil {
		t.Fatal(err)
	}
	f := newRefFiles(dir)
	defer f.close()
	at := int64(len(frame) - len(batch))
	good := refTo(1, at, batch)
	if got, err := f.read(good); err != nil || string(got) != string(batch) {
		t.Fatalf("reading the batch back: %v", err)
	}
	for name, r := range map[string]batchRef{
		"length beyond any batch": {seq: 1, off: at, n: 1 << 31, crc: good.crc},
		"another checksum":        {seq: 1, off: at, n: good.n, crc: good.crc + 1},
		"shifted":                 {seq: 1, off: at - 1, n: good.n, crc: good.crc},
		"past the end":            {seq: 1, off: at + 64, n: good.n, crc: good.crc},
		"missing file":            {seq: 2, off: at, n: good.n, crc: good.crc},
	} {
		if _, err := f.read(r); !errors.Is(err, errCorrupt) {
			t.Errorf("%s: got %v, want errCorrupt", name, err)
		}
	}
}
