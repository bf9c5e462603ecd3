package logstore

import (
	"bytes"
	"encoding/binary"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	badger "github.com/dgraph-io/badger/v4"
	"github.com/go-logr/logr/testr"

	"felix.dev/felix/broker/record"
)

// tornImage writes a periodic store the way a power cut under periodic
// finds it: synced batches ("synced-<i>-"), the background sync, then
// three batches no sync covered ("unsynced-<i>-"), and a copy of the
// running store's directory (no Close: the crash). It returns the copy,
// the first offset of each unsynced batch, the first offset of the newest
// synced batch and the tail the run reached.
func tornImage(t *testing.T, o Options) (dir string, unsynced []uint64, lastSynced, tail uint64) {
	t.Helper()
	s := openTest(t, o)
	l := mustLog(t, s, testLog)
	for i := 0; i < 20; i++ {
		lastSynced = mustAppend(t, l, data(fmt.Sprintf("synced-%03d-%s", i, strings.Repeat("s", 200))), nil).First
	}
	// One tick of the periodic sync (FsyncInterval is too long to tick
	// by itself in the test).
	if err := s.sync(); err != nil {
		t.Fatal(err)
	}
	for i := 1; i <= 3; i++ {
		unsynced = append(unsynced, mustAppend(t, l, data(fmt.Sprintf("unsynced-%d-%s", i, strings.Repeat("u", 200))), nil).First)
	}
	tail = l.Describe().Tail
	dir = t.TempDir()
	copyDir(t, o.Dir, dir)
	return dir, unsynced, lastSynced, tail
}

// smallBadgerFiles keeps badger's preallocated files small, so that the
// test reads and damages them quickly.
func smallBadgerFiles(bo *badger.Options) {
	bo.ValueLogFileSize = 1 << 20
	bo.MemTableSize = 1 << 20
}

// zeroVlogEntry zeroes, in the value-log files under dir, the whole
// badger entry holding key (its header, key, value and checksum), as a
// write that never reached the disk reads after a power cut: badger then
// returns the value as empty.
func zeroVlogEntry(t *testing.T, dir string, key []byte) {
	t.Helper()
	found := 0
	err := filepath.WalkDir(dir, func(p string, d os.DirEntry, err error) error {
		if err != nil || d.IsDir() || !strings.HasSuffix(p, ".vlog") {
			return err
		}
		b, err := os.ReadFile(p)
		if err != nil {
			return err
		}
		ki := bytes.Index(b, key)
		if ki < 0 {
			return nil
		}
		found++
		// header: meta, user meta, uvarint key length (with the 8-byte
		// version), uvarint value length, uvarint expiry (0).
		klen := len(key) + 8
		for hlen := 5; hlen <= 8 && ki-hlen >= 0; hlen++ {
			h := b[ki-hlen:]
			if n, w := binary.Uvarint(h[2:]); w != 1 || n != uint64(klen) {
				continue
			}
			vlen, w := binary.Uvarint(h[3:])
			if w <= 0 || 3+w+1 != hlen || h[3+w] != 0 {
				continue
			}
			clear(b[ki-hlen : ki+klen+int(vlen)+4])
			return os.WriteFile(p, b, 0o644)
		}
		return fmt.Errorf("no badger entry header before the key in %s", p)
	})
	if err != nil || found != 1 {
		t.Fatalf("key found in %d value-log files (%v), want 1", found, err)
	}
}

// Issue 25, the periodic torn tail: a power cut under periodic may keep
// the newest unsynced value-log write and lose older unsynced ones (a
// disk's writeback, or powerfs's tearing, need not keep the order of the
// writes). The batches no sync covered are a torn tail after an unclean
// stop that may have lost writes (LastRunUnknown): open drops them from
// the oldest that does not read back, whatever the newer ones read as. A
// batch that a sync covered never is: it is damage and stays loud, as
// everything is after a clean stop (LastRunComplete).
func TestPeriodicTornTailBelowAnIntactNewerBatchIsDropped(t *testing.T) {
	for _, tc := range []struct {
		name    string
		lastRun LastRun
		damage  func(t *testing.T, dir string, unsynced []uint64, lastSynced uint64)
		// want: "torn" (tail back at the first unsynced batch, no
		// damage), "damage at unsynced", "damage at synced"
		want string
	}{
		{"older unsynced batch reads as zeros", LastRunUnknown, func(t *testing.T, dir string, u []uint64, _ uint64) {
			zeroVlogEntry(t, dir, dataKey(0, 0, u[0]))
		}, "torn"},
		{"older unsynced batch fails its checksum", LastRunUnknown, func(t *testing.T, dir string, _ []uint64, _ uint64) {
			flipInFiles(t, dir, []byte("unsynced-1-"))
		}, "torn"},
		{"middle unsynced batch reads as zeros", LastRunUnknown, func(t *testing.T, dir string, u []uint64, _ uint64) {
			zeroVlogEntry(t, dir, dataKey(0, 0, u[1]))
		}, "torn at 1"},
		{"synced batch damaged, unsynced intact", LastRunUnknown, func(t *testing.T, dir string, _ []uint64, _ uint64) {
			flipInFiles(t, dir, []byte("synced-019-"))
		}, "damage at synced"},
		{"synced batch zeroed, unsynced intact", LastRunUnknown, func(t *testing.T, dir string, _ []uint64, s uint64) {
			zeroVlogEntry(t, dir, dataKey(0, 0, s))
		}, "damage at synced"},
		{"clean stop: older batch damaged", LastRunComplete, func(t *testing.T, dir string, u []uint64, _ uint64) {
			zeroVlogEntry(t, dir, dataKey(0, 0, u[0]))
		}, "damage at unsynced"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			o := Options{Dir: t.TempDir(), Fsync: FsyncPeriodic, FsyncInterval: 1 << 40, ValueThreshold: 64, AutoCommit: true, Logger: testr.New(t),
				tune: smallBadgerFiles}
			dir, unsynced, lastSynced, tail := tornImage(t, o)
			tc.damage(t, dir, unsynced, lastSynced)

			o.Dir, o.LastRun = dir, tc.lastRun
			s := openTest(t, o)
			l := mustLog(t, s, testLog)
			info := l.Describe()
			switch tc.want {
			case "torn", "torn at 1":
				cut := unsynced[0]
				if tc.want == "torn at 1" {
					cut = unsynced[1]
				}
				if info.Damaged || info.Tail != cut {
					t.Fatalf("after the power cut: tail %d damaged %v, a read meets %v; want the torn tail dropped: tail %d, no damage (run reached %d)",
						info.Tail, info.Damaged, firstCorrupt(l), cut, tail)
				}
				got := readAll(t, l, 0, false)
				if len(got) != int(cut) {
					t.Fatalf("read back %d records, want %d", len(got), cut)
				}
				mustAppend(t, l, data("after-the-cut"), ptr(cut))
			case "damage at synced", "damage at unsynced":
				at := lastSynced
				if tc.want == "damage at unsynced" {
					at = unsynced[0]
				}
				if info.Tail != tail {
					t.Fatalf("tail %d after the restart, was %d: acknowledged batches dropped", info.Tail, tail)
				}
				// Loud: found on open, or by the first read that reaches it.
				if d := l.Damage(); d != nil && d.Offset != at {
					t.Fatalf("damage on open at %d, want at %d", d.Offset, at)
				}
				if got := firstCorrupt(l); got == nil || got.Offset != at {
					t.Fatalf("reading the log met damage %v, want at %d", got, at)
				}
			}
		})
	}
}

// firstCorrupt reads the log from its start and returns the first
// CorruptError a read answers with, or nil if every record reads back.
func firstCorrupt(l *Log) *record.CorruptError {
	for from, end := l.Describe().Start, l.Describe().Tail; from < end; {
		res, err := l.Read(from, ReadOptions{MaxRecords: 7})
		var ce *record.CorruptError
		if errors.As(err, &ce) {
			return ce
		}
		if err != nil || res.Next <= from {
			return &record.CorruptError{Log: l.id, Offset: from, Reason: fmt.Sprintf("read: %v", err)}
		}
		from = res.Next
	}
	return nil
}

// A sync mark that does not decode says nothing about what was synced:
// open takes no lost batch for a torn tail then (each stays, and a read
// that reaches it is refused as damage).
func TestDamagedSyncMarkTakesNothingForATornTail(t *testing.T) {
	o := Options{Dir: t.TempDir(), Fsync: FsyncPeriodic, FsyncInterval: 1 << 40, ValueThreshold: 64, AutoCommit: true, Logger: testr.New(t),
		tune: smallBadgerFiles}
	dir, unsynced, _, tail := tornImage(t, o)
	rawDB(t, dir, func(db *badger.DB) error {
		return db.Update(func(txn *badger.Txn) error {
			v := encodeSyncMark(1 << 40)
			v[len(v)-1] ^= 0x20
			return txn.Set(syncMarkKey(), v)
		})
	})
	zeroVlogEntry(t, dir, dataKey(0, 0, unsynced[0]))
	o.Dir, o.LastRun = dir, LastRunUnknown
	s := openTest(t, o)
	l := mustLog(t, s, testLog)
	if got := l.Describe().Tail; got != tail {
		t.Fatalf("tail %d, was %d: batches dropped under a damaged sync mark", got, tail)
	}
	if got := firstCorrupt(l); got == nil || got.Offset != unsynced[0] {
		t.Fatalf("reading the log met damage %v, want at %d", got, unsynced[0])
	}
}

// The sync mark follows the syncs that cover writes, and an idle store
// writes none: the periodic sync of a store that takes no appends leaves
// the mark where it was.
func TestSyncMarkFollowsWritesAndIdleStoreWritesNone(t *testing.T) {
	m := &countingMetrics{}
	o := Options{Dir: t.TempDir(), Fsync: FsyncPeriodic, FsyncInterval: 2 * time.Millisecond, ValueThreshold: 64, AutoCommit: true,
		Logger: testr.New(t), Metrics: m}
	s := openTest(t, o)
	l := mustLog(t, s, testLog)
	res := mustAppend(t, l, data(strings.Repeat("p", 200)), nil)
	var batchVersion uint64
	err := s.db.View(func(txn *badger.Txn) error {
		item, err := txn.Get(dataKey(l.num, 0, res.First))
		if err == nil {
			batchVersion = item.Version()
		}
		return err
	})
	if err != nil {
		t.Fatal(err)
	}
	syncs := func() int { m.mu.Lock(); defer m.mu.Unlock(); return m.syncs }
	markOf := func() (covered, at uint64) {
		s.syncMu.Lock()
		at = s.syncMarkAt
		s.syncMu.Unlock()
		covered, _, err := readSyncMark(s.db)
		if err != nil {
			t.Fatal(err)
		}
		return covered, at
	}
	deadline := time.Now().Add(10 * time.Second)
	for {
		if covered, _ := markOf(); covered >= batchVersion {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("the sync mark never covered the append (version %d)", batchVersion)
		}
		time.Sleep(time.Millisecond)
	}
	covered, at := markOf()
	for n := syncs() + 10; syncs() < n; {
		if time.Now().After(deadline) {
			t.Fatal("the periodic sync stopped")
		}
		time.Sleep(time.Millisecond)
	}
	// The mark written after the append's sync may be followed by one
	// more covering that mark's own transaction; no more after it.
	c2, at2 := markOf()
	for n := syncs() + 10; syncs() < n; {
		if time.Now().After(deadline) {
			t.Fatal("the periodic sync stopped")
		}
		time.Sleep(time.Millisecond)
	}
	if c3, at3 := markOf(); c3 != c2 || at3 != at2 {
		t.Fatalf("idle store: sync mark moved from %d (at %d) to %d (at %d); first covering mark %d (at %d)", c2, at2, c3, at3, covered, at)
	}
}

// forgetSyncs deletes the sync mark of the closed store in dir, so that
// its next open knows of no sync that covered its writes (as for a store
// written before the mark existed): tests that cut the files of a closed
// store to stand for writes a crash lost use it.
func forgetSyncs(t *testing.T, dir string) {
	t.Helper()
	rawDB(t, dir, func(db *badger.DB) error {
		return db.Update(func(txn *badger.Txn) error { return txn.Delete(syncMarkKey()) })
	})
}
