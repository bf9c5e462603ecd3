package logstore

import (
	"bytes"
	"context"
	"errors"
	"os"
	"sync/atomic"
	"syscall"
	"testing"

	"felix.dev/felix/broker/record"
)

// fakeFree is a FreeSpace whose answer the test sets.
type fakeFree struct{ free atomic.Uint64 }

func (f *fakeFree) get(string) (uint64, error) { return f.free.Load(), nil }

// TestStorageFullFloorRefusesAppendsAndResumes: below the floor appends are
// refused with ErrStorageFull and nothing is written, trims and reads are
// served, and appends resume once the free space is back above the floor
// plus the margin (not at the floor itself).
func TestStorageFullFloorRefusesAppendsAndResumes(t *testing.T) {
	const floor = 64 << 20
	ff := &fakeFree{}
	ff.free.Store(1 << 30)
	s := openTest(t, Options{MinFreeBytes: floor, SpaceCheckInterval: -1, FreeSpace: ff.get, AutoCommit: true})
	l := mustLog(t, s, testLog)
	mustAppend(t, l, data("a", "b"), nil)

	ff.free.Store(floor - 1)
	if err := s.CheckSpace(); err != nil {
		t.Fatal(err)
	}
	if st := s.Space(); !st.Full || st.RollbackPending {
		t.Fatalf("below the floor: space state %+v, want full without rollback", st)
	}
	_, err := l.Append(context.Background(), data("c"), nil)
	var fe *StorageFullError
	if !errors.Is(err, ErrStorageFull) || !errors.As(err, &fe) || fe.Floor != floor {
		t.Fatalf("append below the floor: %v, want StorageFullError", err)
	}
	if info := l.Describe(); info.Tail != 2 || info.Committed != 2 {
		t.Fatalf("refused append moved the log: %+v", info)
	}
	// Reads are served; a trim frees space and is taken.
	if got := readAll(t, l, 0, false); len(got) != 2 {
		t.Fatalf("read while full: %d records, want 2", len(got))
	}
	mustTrim(t, l, TrimRequest{Floor: 1, ExpectTail: 2})

	// At the floor, and just under the resume mark, still full.
	ff.free.Store(ResumeFreeBytes(floor) - 1)
	if err := s.CheckSpace(); err != nil {
		t.Fatal(err)
	}
	if _, err := l.Append(context.Background(), data("c"), nil); !errors.Is(err, ErrStorageFull) {
		t.Fatalf("append under the resume mark: %v, want ErrStorageFull", err)
	}
	ff.free.Store(ResumeFreeBytes(floor))
	if err := s.CheckSpace(); err != nil {
		t.Fatal(err)
	}
	if st := s.Space(); st.Full {
		t.Fatalf("at the resume mark: still full %+v", st)
	}
	if res := mustAppend(t, l, data("c"), ptr(3)); res.Tail != 4 {
		t.Fatalf("append after resume: %+v", res)
	}
}

// TestStorageFullWriterRemeasures: the writer measures again after a
// quarter of the floor is written, without waiting for the monitor.
func TestStorageFullWriterRemeasures(t *testing.T) {
	const floor = 4 << 20
	ff := &fakeFree{}
	ff.free.Store(1 << 30)
	s := openTest(t, Options{MinFreeBytes: floor, SpaceCheckInterval: -1, FreeSpace: ff.get})
	l := mustLog(t, s, testLog)
	ff.free.Store(0)
	big := []record.Record{{Payload: bytes.Repeat([]byte{'x'}, 512<<10)}}
	var err error
	for i := 0; i < 8 && err == nil; i++ {
		_, err = l.Append(context.Background(), big, nil)
	}
	if !errors.Is(err, ErrStorageFull) {
		t.Fatalf("after 4 MiB written with no free space: %v, want ErrStorageFull", err)
	}
}

// injectedWrite makes the commit log's page-cache writes fail, after
// writing half of what they were given, with the errno set in fail (0:
// they succeed).
type injectedWrite struct{ errno atomic.Int64 }

func (w *injectedWrite) writeAt(f *os.File, b []byte, off int64) (int, error) {
	errno := syscall.Errno(w.errno.Load())
	if errno == 0 {
		return f.WriteAt(b, off)
	}
	n, _ := f.WriteAt(b[:len(b)/2], off)
	return n, &os.PathError{Op: "write", Path: f.Name(), Err: errno}
}

// TestStorageFullENOSPCRollsBackAndResumes: a commit-log write that hits
// ENOSPC must not fail the store for good. Appends are refused with
// ErrStorageFull, Describe reports the acknowledged tail (not the tail of
// the writes that failed), and once space returns the store rolls back to
// its last durable state and takes appends again at the acknowledged
// tail; a reopen finds every acknowledged record and none of the failed.
func TestStorageFullENOSPCRollsBackAndResumes(t *testing.T) {
	ff := &fakeFree{}
	ff.free.Store(1 << 30)
	iw := &injectedWrite{}
	dir := t.TempDir()
	o := Options{Dir: dir, SpaceCheckInterval: -1, FreeSpace: ff.get, AutoCommit: true,
		ValueThreshold: BrokerValueThreshold, CommitLogValues: true, clWrite: iw.writeAt}
	s, err := Open(o)
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = s.Close() }()
	l := mustLog(t, s, testLog)
	payload := bytes.Repeat([]byte{'p'}, 4<<10)
	batch := func(tag byte, n int) []record.Record {
		recs := make([]record.Record, n)
		for i := range recs {
			recs[i] = record.Record{Payload: append([]byte{tag}, payload...), Epoch: 1}
		}
		return recs
	}
	acked := mustAppend(t, l, batch('a', 10), nil).Tail

	iw.errno.Store(int64(syscall.ENOSPC))
	ff.free.Store(0)
	for i := 0; i < 3; i++ {
		_, err := l.Append(context.Background(), batch('x', 5), nil)
		if !errors.Is(err, ErrStorageFull) {
			t.Fatalf("append %d after ENOSPC: %v, want ErrStorageFull", i, err)
		}
	}
	if st := s.Space(); !st.Full || !st.RollbackPending {
		t.Fatalf("after ENOSPC: space state %+v", st)
	}
	if info := l.Describe(); info.Tail != acked || info.Committed != acked {
		t.Fatalf("after ENOSPC Describe says tail %d committed %d, acknowledged %d", info.Tail, info.Committed, acked)
	}
	if got := readAll(t, l, 0, false); uint64(len(got)) != acked {
		t.Fatalf("read while full: %d records, want %d", len(got), acked)
	}
	// No room yet: no rollback, still refused.
	if err := s.CheckSpace(); err != nil {
		t.Fatal(err)
	}
	if st := s.Space(); !st.RollbackPending {
		t.Fatalf("rolled back with no free space: %+v", st)
	}

	iw.errno.Store(0)
	ff.free.Store(1 << 30)
	if err := s.CheckSpace(); err != nil {
		t.Fatalf("CheckSpace after space returned: %v", err)
	}
	if st := s.Space(); st.Full {
		t.Fatalf("space back, still full: %+v", st)
	}
	res, err := l.Append(context.Background(), batch('b', 3), ptr(acked))
	if err != nil {
		t.Fatalf("append at the acknowledged tail after space returned: %v", err)
	}
	acked = res.Tail
	check := func(l *Log) {
		t.Helper()
		if info := l.Describe(); info.Tail != acked {
			t.Fatalf("tail %d, acknowledged %d", info.Tail, acked)
		}
		got := readAll(t, l, 0, false)
		if uint64(len(got)) != acked {
			t.Fatalf("%d records, want %d", len(got), acked)
		}
		for i, r := range got {
			want := byte('a')
			if i >= 10 {
				want = 'b'
			}
			if r.Offset != uint64(i) || r.Payload[0] != want {
				t.Fatalf("record %d: offset %d, tag %q, want %q", i, r.Offset, r.Payload[0], want)
			}
		}
	}
	check(l)
	if err := s.Close(); err != nil {
		t.Fatalf("Close: %v", err)
	}
	// A crash-like reopen: replay from the commit log as it stands.
	s2, err := Open(o)
	if err != nil {
		t.Fatalf("reopen: %v", err)
	}
	defer func() { _ = s2.Close() }()
	check(mustLog(t, s2, testLog))
}

// TestStorageFullEIOStaysFailed is the twin: any other write error (EIO)
// fails the store for good, loudly, and no free-space check revives it.
func TestStorageFullEIOStaysFailed(t *testing.T) {
	ff := &fakeFree{}
	ff.free.Store(1 << 30)
	iw := &injectedWrite{}
	s := openTest(t, Options{SpaceCheckInterval: -1, FreeSpace: ff.get, AutoCommit: true, clWrite: iw.writeAt})
	l := mustLog(t, s, testLog)
	mustAppend(t, l, data("a"), nil)
	iw.errno.Store(int64(syscall.EIO))
	if _, err := l.Append(context.Background(), data("b"), nil); err == nil || errors.Is(err, ErrStorageFull) {
		t.Fatalf("append on EIO: %v, want an I/O failure, not StorageFull", err)
	}
	iw.errno.Store(0)
	if err := s.CheckSpace(); err != nil {
		t.Fatal(err)
	}
	_, err := l.Append(context.Background(), data("c"), nil)
	if err == nil || errors.Is(err, ErrStorageFull) || !errors.Is(err, syscall.EIO) {
		t.Fatalf("append after EIO: %v, want the store failed for good with EIO", err)
	}
}
