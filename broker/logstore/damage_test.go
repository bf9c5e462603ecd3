package logstore

import (
	"bytes"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/go-logr/logr/testr"

	"felix.dev/felix/broker/record"
	"felix.dev/felix/internal/diskfault"
)

var otherLog = record.LogID{ShardID: record.ShardID{Stream: "payments", Shard: 1}, Log: record.LogData}

// flipInFiles flips one byte in the middle of the only occurrence of
// marker in the files under dir (recursively) and returns the file's name.
func flipInFiles(t *testing.T, dir string, marker []byte) string {
	t.Helper()
	f, err := diskfault.FlipMarker(dir, marker)
	if err != nil || len(f) != 1 {
		t.Fatalf("marker found %d times (%v), want once", len(f), err)
	}
	return filepath.Base(f[0].Path)
}

// damageCases: where the newest batch of a log is kept, per mode.
var damageCases = []struct {
	name string
	o    Options
	file string // suffix of the file holding the batch
}{
	{"on-commit/commit-log", Options{Fsync: FsyncOnCommit, CommitLogValues: true, ValueThreshold: 64}, ".clog"},
	{"on-commit/value-log", Options{Fsync: FsyncOnCommit, ValueThreshold: 64}, ".vlog"},
	{"periodic/value-log", Options{Fsync: FsyncPeriodic, ValueThreshold: 64}, ".vlog"},
	{"none/value-log", Options{Fsync: FsyncNone, ValueThreshold: 64}, ".vlog"},
}

// writeTwoLogs appends n batches alternately to testLog and otherLog, the
// last of testLog's marked "newest-of-orders", then one more to otherLog
// (a later, intact batch of another log), closes the store cleanly, and
// returns testLog's newest batch offset and both tails.
func writeTwoLogs(t *testing.T, o Options, n int) (newest, tailA, tailB uint64) {
	t.Helper()
	s := openTest(t, o)
	a, b := mustLog(t, s, testLog), mustLog(t, s, otherLog)
	for i := 0; i < n; i++ {
		p := fmt.Sprintf("%0200d", i)
		if i == n-1 {
			p = "newest-of-orders-" + p
		}
		res := mustAppend(t, a, data(p), nil)
		newest = res.First
		mustAppend(t, b, data(fmt.Sprintf("other-%0200d", i)), nil)
	}
	mustAppend(t, b, data("later-intact-batch-of-payments-"+strings.Repeat("y", 200)), nil)
	tailA, tailB = a.Describe().Tail, b.Describe().Tail
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	return newest, tailA, tailB
}

// Issue 25: a clean stop under on-commit (or any mode) leaves every
// acknowledged batch on disk, so a newest batch that does not read back
// is damage, never a torn tail: open keeps it (the tail does not move
// back), marks the log damaged, refuses appends and reads of it with
// record.ErrCorrupt, and leaves every other log whole, including a
// later batch of another log in the same value-log file (badger cuts its
// newest value-log file at the first entry that fails its check).
func TestCorruptNewestBatchAfterCleanStopIsDamageNotATornTail(t *testing.T) {
	for _, tc := range damageCases {
		t.Run(tc.name, func(t *testing.T) {
			o := tc.o
			o.Dir, o.AutoCommit, o.Logger = t.TempDir(), true, testr.New(t)
			newest, tailA, tailB := writeTwoLogs(t, o, 200)
			if f := flipInFiles(t, o.Dir, []byte("newest-of-orders-")); !strings.HasSuffix(f, tc.file) {
				t.Fatalf("newest batch found in %s, want a %s file", f, tc.file)
			}

			o.LastRun = LastRunComplete
			s := openTest(t, o)
			a, b := mustLog(t, s, testLog), mustLog(t, s, otherLog)
			if got := a.Describe().Tail; got < newest {
				t.Fatalf("acknowledged batches dropped: tail %d after the clean stop, was %d", got, tailA)
			}
			if got := b.Describe(); got.Tail != tailB || got.Damaged {
				t.Fatalf("the other log lost data: %+v, tail was %d", got, tailB)
			}
			if got := readAll(t, b, 0, false); len(got) != int(tailB) || !strings.HasPrefix(string(got[len(got)-1].Payload), "later-intact-batch") {
				t.Fatalf("the other log's later batch: %d records", len(got))
			}
			d := a.Damage()
			if d == nil || d.Offset != newest || !a.Describe().Damaged {
				t.Fatalf("damage = %v, want at %d", d, newest)
			}
			if got := s.Damaged(); len(got) != 1 || got[0].Log != testLog {
				t.Fatalf("Store.Damaged = %v", got)
			}
			if _, err := a.Read(0, ReadOptions{}); !errors.Is(err, record.ErrCorrupt) {
				t.Fatalf("read of a damaged log: %v, want ErrCorrupt", err)
			}
			if _, err := a.Append(t.Context(), data("x"), nil); !errors.Is(err, record.ErrCorrupt) {
				t.Fatalf("append to a damaged log: %v, want ErrCorrupt", err)
			}
			if _, err := a.Trim(t.Context(), TrimRequest{Floor: 1, ExpectTail: tailA}); !errors.Is(err, record.ErrCorrupt) {
				t.Fatalf("trim of a damaged log: %v, want ErrCorrupt", err)
			}
			// Damage is kept across opens until repaired.
			s = reopen(t, s)
			a = mustLog(t, s, testLog)
			if d := a.Damage(); d == nil || d.Offset != newest {
				t.Fatalf("after reopening: damage = %v", d)
			}

			// The explicit repair truncates at the damage; the log serves
			// again, and the next open finds nothing.
			if err := a.Repair(newest+1, RepairOptions{}); !errors.Is(err, ErrBadRecord) {
				t.Fatalf("repair above the damage: %v", err)
			}
			if err := a.Repair(newest, RepairOptions{}); err != nil {
				t.Fatal(err)
			}
			if got := a.Describe(); got.Tail != newest || got.Damaged {
				t.Fatalf("after repair: %+v", got)
			}
			if got := readAll(t, a, 0, false); len(got) != int(newest) {
				t.Fatalf("after repair %d records, want %d", len(got), newest)
			}
			mustAppend(t, a, data("after-repair"), ptr(newest))
			s = reopen(t, s)
			a = mustLog(t, s, testLog)
			if got := a.Describe(); got.Tail != newest+1 || got.Damaged {
				t.Fatalf("after repair and reopen: %+v", got)
			}
		})
	}
}

// A torn tail is still dropped when the previous run may have lost
// acknowledged writes (LastRunUnknown: the storage id rotated, so the
// directory claims nothing it lost), per log: the other log keeps all.
func TestLostNewestBatchWithLastRunUnknownIsATornTail(t *testing.T) {
	o := Options{Dir: t.TempDir(), Fsync: FsyncPeriodic, ValueThreshold: 64, AutoCommit: true, Logger: testr.New(t)}
	newest, _, tailB := writeTwoLogs(t, o, 50)
	forgetSyncs(t, o.Dir) // no sync covered the writes: all may be torn
	flipInFiles(t, o.Dir, []byte("newest-of-orders-"))
	s := openTest(t, o)
	a, b := mustLog(t, s, testLog), mustLog(t, s, otherLog)
	if got := a.Describe(); got.Damaged || got.Tail > newest {
		t.Fatalf("torn tail not dropped: %+v", got)
	}
	if got := b.Describe(); got.Damaged || got.Tail+1 < tailB {
		t.Fatalf("the other log: %+v, tail was %d", got, tailB)
	}
}

// zeroFrom zeroes every byte of the file under dir holding marker from
// marker on: frames that never reached the disk before a crash.
func zeroFrom(t *testing.T, dir string, marker []byte) {
	t.Helper()
	found := false
	err := filepath.WalkDir(dir, func(path string, d os.DirEntry, err error) error {
		if err != nil || d.IsDir() || !strings.HasSuffix(path, ".clog") {
			return err
		}
		b, err := os.ReadFile(path)
		if err != nil {
			return err
		}
		if i := bytes.Index(b, marker); i >= 0 {
			found = true
			clear(b[i:])
			return os.WriteFile(path, b, 0o644)
		}
		return nil
	})
	if err != nil || !found {
		t.Fatalf("marker not found (%v)", err)
	}
}

// After an unclean stop under on-commit, badger may hold refs into frames
// the syncer never wrote (never acknowledged): those are a torn tail and
// dropped (LastRunAcknowledgedDurable). The same bytes after a clean stop
// (LastRunComplete) are damage.
func TestOnCommitUncleanStopTornRefsAreDroppedButDamageAfterCleanStop(t *testing.T) {
	o := Options{Dir: t.TempDir(), Fsync: FsyncOnCommit, CommitLogValues: true, ValueThreshold: 64, AutoCommit: true, Logger: testr.New(t)}
	s := openTest(t, o)
	a := mustLog(t, s, testLog)
	for i := 0; i < 20; i++ {
		mustAppend(t, a, data(fmt.Sprintf("%0200d", i)), nil)
	}
	mustAppend(t, a, data("never-written-"+strings.Repeat("z", 200)), nil)
	crashed := t.TempDir()
	copyDir(t, o.Dir, crashed) // no Close: a crash
	zeroFrom(t, crashed, []byte("never-written-"))
	clean := t.TempDir()
	copyDir(t, crashed, clean)

	o.Dir, o.LastRun = crashed, LastRunAcknowledgedDurable
	s1 := openTest(t, o)
	if got := mustLog(t, s1, testLog).Describe(); got.Damaged || got.Tail != 20 {
		t.Fatalf("acknowledged-durable: %+v, want the torn batch dropped and tail 20", got)
	}
	o.Dir, o.LastRun = clean, LastRunComplete
	s2 := openTest(t, o)
	if d := mustLog(t, s2, testLog).Damage(); d == nil || d.Offset != 20 {
		t.Fatalf("complete: damage %v, want at 20", d)
	}
}

// A repair keeps the floor of the committed trims below the cut [TR-2],
// and the trim index matches what is left [TR-5].
func TestRepairKeepsTheFloorBelowTheCut(t *testing.T) {
	o := Options{Dir: t.TempDir(), Fsync: FsyncOnCommit, CommitLogValues: true, ValueThreshold: 64, AutoCommit: true, Logger: testr.New(t)}
	s := openTest(t, o)
	a := mustLog(t, s, testLog)
	for i := 0; i < 10; i++ {
		mustAppend(t, a, data(fmt.Sprintf("%0200d", i)), nil)
	}
	mustTrim(t, a, TrimRequest{Floor: 5, ExpectTail: 10, Headers: epochHeader("1")})
	mustAppend(t, a, data("newest-of-orders-"+strings.Repeat("w", 200)), nil)
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	flipInFiles(t, o.Dir, []byte("newest-of-orders-"))
	o.LastRun = LastRunComplete
	s = openTest(t, o)
	a = mustLog(t, s, testLog)
	if d := a.Damage(); d == nil || d.Offset != 11 {
		t.Fatalf("damage %v, want at 11", d)
	}
	if err := a.Repair(11, RepairOptions{}); err != nil {
		t.Fatal(err)
	}
	if got := a.Describe(); got.Floor != 5 || got.Tail != 11 {
		t.Fatalf("after repair: %+v", got)
	}
	s = reopen(t, s)
	a = mustLog(t, s, testLog)
	if got := a.Describe(); got.Floor != 5 || got.Tail != 11 || got.Damaged {
		t.Fatalf("after repair and reopen: %+v", got)
	}
	if err := wantTooOld(t, readErr(a, 4)); headerValue(err.TrimHeaders, "epoch") != "1" {
		t.Fatalf("the floor-setting trim's tag: %+v", err)
	}
}

func readErr(l *Log, from uint64) error {
	_, err := l.Read(from, ReadOptions{WithTrimTag: true})
	return err
}

// A repair never lowers the floor nor drops its tag [TR-2]: a cut at or
// below the trim record that set the floor is refused, and a log without
// damage is repaired only when forced.
func TestTR2_RepairNeverLowersTheFloor(t *testing.T) {
	o := Options{Dir: t.TempDir(), Fsync: FsyncOnCommit, CommitLogValues: true, ValueThreshold: 64, AutoCommit: true, Logger: testr.New(t)}
	s := openTest(t, o)
	a := mustLog(t, s, testLog)
	for i := 0; i < 10; i++ {
		mustAppend(t, a, data(fmt.Sprintf("%0200d", i)), nil)
	}
	mustTrim(t, a, TrimRequest{Floor: 8, ExpectTail: 10, Headers: epochHeader("2")}) // trim record at 10
	mustAppend(t, a, data("x"), nil)
	mustAppend(t, a, data("newest-of-orders-"+strings.Repeat("w", 200)), nil) // 12

	if err := a.Repair(11, RepairOptions{}); !errors.Is(err, ErrNotDamaged) {
		t.Fatalf("repair of an undamaged log: %v, want ErrNotDamaged", err)
	}
	for _, at := range []uint64{8, 10} {
		if err := a.Repair(at, RepairOptions{Force: true}); !errors.Is(err, ErrRepairLowersFloor) {
			t.Fatalf("forced repair at %d, at or below the trim at 10: %v, want ErrRepairLowersFloor", at, err)
		}
	}
	if got := a.Describe(); got.Floor != 8 || got.Tail != 13 {
		t.Fatalf("after refused repairs: %+v", got)
	}
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}

	// Damage at 12: the cut may go to 11, never to 10 or below.
	flipInFiles(t, o.Dir, []byte("newest-of-orders-"))
	o.LastRun = LastRunComplete
	s = openTest(t, o)
	a = mustLog(t, s, testLog)
	if d := a.Damage(); d == nil || d.Offset != 12 {
		t.Fatalf("damage %v, want at 12", d)
	}
	if err := a.Repair(10, RepairOptions{}); !errors.Is(err, ErrRepairLowersFloor) {
		t.Fatalf("repair at the trim record: %v, want ErrRepairLowersFloor", err)
	}
	if err := a.Repair(11, RepairOptions{}); err != nil {
		t.Fatal(err)
	}
	s = reopen(t, s)
	a = mustLog(t, s, testLog)
	if got := a.Describe(); got.Floor != 8 || got.Tail != 11 || got.Damaged {
		t.Fatalf("after repair and reopen: %+v", got)
	}
	if err := wantTooOld(t, readErr(a, 2)); headerValue(err.TrimHeaders, "epoch") != "2" {
		t.Fatalf("a read below the trim: %+v", err)
	}
}
