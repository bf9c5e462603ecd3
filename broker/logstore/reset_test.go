package logstore

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	badger "github.com/dgraph-io/badger/v4"
	"github.com/google/go-cmp/cmp"

	"felix.dev/felix/broker/record"
)

// storedKeys counts the log's data and trim index keys in the raw badger
// directory (store closed) and returns the lowest stored data offset.
func storedKeys(t *testing.T, dir string, num uint32) (data, trims int, lowest uint64) {
	t.Helper()
	lowest = FromLatest
	rawDB(t, dir, func(db *badger.DB) error {
		return db.View(func(txn *badger.Txn) error {
			it := txn.NewIterator(badger.IteratorOptions{Prefix: logPrefix(prefixData, num)})
			for it.Rewind(); it.Valid(); it.Next() {
				_, first, err := parseDataKey(it.Item().Key())
				if err != nil {
					it.Close()
					return err
				}
				data++
				lowest = min(lowest, first)
			}
			it.Close()
			it = txn.NewIterator(badger.IteratorOptions{Prefix: logPrefix(prefixTrim, num)})
			for it.Rewind(); it.Valid(); it.Next() {
				trims++
			}
			it.Close()
			return nil
		})
	})
	return data, trims, lowest
}

func TestResetAtDropsEveryRecordAndStartsAt(t *testing.T) {
	for _, tc := range []struct {
		name string
		base uint64
		// setup builds the log; it returns nothing, the table reads Describe.
		setup         func(t *testing.T, l *Log)
		off           uint64
		wantCommitted uint64
		// wantFloor is the floor ResetAt keeps (the base when 0) [TR-5];
		// wantTag the epoch header a refusal below it carries ("": none,
		// the floor-setting trim lies below off).
		wantFloor uint64
		wantTag   string
	}{
		{
			name: "above the tail, as a follower behind a leader's start",
			setup: func(t *testing.T, l *Log) {
				fill(t, l, 10, "r")
				mustTrim(t, l, TrimRequest{Floor: 3, ExpectTail: 10, Headers: epochHeader("1")})
				if err := l.SetCommitted(11); err != nil {
					t.Fatal(err)
				}
			},
			off: 100, wantCommitted: 100, wantFloor: 3,
		},
		{
			name: "inside the stored range, uncommitted suffix",
			setup: func(t *testing.T, l *Log) {
				mustAppend(t, l, data("a", "b", "c", "d", "e", "f"), nil) // one batch
				fill(t, l, 6, "g")                                        // 6..11
				if err := l.SetCommitted(2); err != nil {
					t.Fatal(err)
				}
			},
			off: 4, wantCommitted: 4,
		},
		{
			name: "below the committed mark: every record still goes, the mark stays",
			setup: func(t *testing.T, l *Log) {
				fill(t, l, 12, "r")
				mustTrim(t, l, TrimRequest{Floor: 5, ExpectTail: 12, Headers: epochHeader("1")})
				if err := l.SetCommitted(13); err != nil {
					t.Fatal(err)
				}
			},
			off: 2, wantCommitted: 13, wantFloor: 5, wantTag: "1",
		},
		{
			name: "below the start after segment deletion, above the base",
			base: 5,
			setup: func(t *testing.T, l *Log) {
				fill(t, l, 20, "r") // 5..24
				mustTrim(t, l, TrimRequest{Floor: 18, ExpectTail: 25, Headers: epochHeader("1")})
				if err := l.SetCommitted(26); err != nil {
					t.Fatal(err)
				}
				if _, err := l.DeleteBelowFloor(context.Background()); err != nil {
					t.Fatal(err)
				}
				if l.Describe().Start != 17 {
					t.Fatalf("setup: start %d", l.Describe().Start)
				}
			},
			off: 9, wantCommitted: 26, wantFloor: 18, wantTag: "1",
		},
		{
			name:  "at the base of an empty log",
			base:  7,
			setup: func(*testing.T, *Log) {},
			off:   7, wantCommitted: 7,
		},
		{
			name: "at the tail of a log many batches long",
			setup: func(t *testing.T, l *Log) {
				fill(t, l, 40, "r")
			},
			off: 40, wantCommitted: 40,
		},
	} {
		for _, mode := range []FsyncMode{FsyncOnCommit, FsyncPeriodic, FsyncNone} {
			t.Run(tc.name+"/"+mode.String(), func(t *testing.T) {
				s := openTest(t, Options{Fsync: mode, SegmentRecords: 4})
				l, err := s.CreateLog(testLog, LogOptions{Base: tc.base})
				if err != nil {
					t.Fatal(err)
				}
				tc.setup(t, l)
				if err := l.ResetAt(tc.off); err != nil {
					t.Fatal(err)
				}
				floor := max(tc.wantFloor, tc.base)
				want := Info{
					ID: testLog, Base: tc.base, Start: tc.off, Floor: floor, Tail: tc.off,
					Durable: tc.off, Committed: tc.wantCommitted, SegmentRecords: 4,
				}
				if diff := cmp.Diff(want, l.Describe()); diff != "" {
					t.Fatalf("after ResetAt(%d):\n%s", tc.off, diff)
				}
				checkResetReads(t, l, tc.off, floor, tc.wantTag)

				// A reopen derives the same state from what is stored
				// (a committed mark above the tail is lowered to the tail
				// on open, as for any mark above the tail).
				dir := s.opts.Dir
				s = reopen(t, s)
				l = mustLog(t, s, testLog)
				if want.Committed > want.Tail {
					want.Committed = want.Tail
				}
				if diff := cmp.Diff(want, l.Describe()); diff != "" {
					t.Fatalf("after reopen:\n%s", diff)
				}
				checkResetReads(t, l, tc.off, floor, tc.wantTag)
				if _, ok, why := l.readTrimIndex(); !ok {
					t.Fatalf("trim index left inconsistent: %s", why)
				}
				if err := s.Close(); err != nil {
					t.Fatal(err)
				}
				if n, trims, _ := storedKeys(t, dir, l.num); n != 0 || trims != 0 {
					t.Fatalf("%d data keys and %d trim entries still stored", n, trims)
				}
				s = openTest(t, Options{Dir: dir, Fsync: mode})
				l = mustLog(t, s, testLog)

				// Appends continue at off; replicated trims copied after
				// the reset move the floor once committed.
				res := mustAppend(t, l, data("new0", "new1"), ptr(tc.off))
				if res.First != tc.off || res.Tail != tc.off+2 {
					t.Fatalf("append after reset %+v", res)
				}
				trim := []record.Record{{Offset: tc.off + 2, Kind: record.KindTrim, Floor: tc.off + 1, Epoch: 3, Headers: epochHeader("3")}}
				if err := l.AppendReplicated(context.Background(), trim); err != nil {
					t.Fatal(err)
				}
				if err := l.SetCommitted(tc.off + 3); err != nil {
					t.Fatal(err)
				}
				if floor >= tc.off+1 {
					// The kept floor is higher: the copied trim leaves it.
					if got := l.Describe(); got.Floor != floor {
						t.Fatalf("floor after a lower trim copied past the reset: %+v", got)
					}
					return
				}
				if got := l.Describe(); got.Floor != tc.off+1 {
					t.Fatalf("floor after a committed trim copied past the reset: %+v", got)
				}
				_, err = l.Read(tc.off, ReadOptions{WithTrimTag: true})
				if too := wantTooOld(t, err); headerValue(too.TrimHeaders, "epoch") != "3" {
					t.Fatalf("refusal below the new floor %+v", too)
				}
				if got := payloads(readAll(t, l, FromEarliest, false)); !cmp.Equal(got, []string{"new1"}) {
					t.Fatalf("read from earliest after reset and trim: %v", got)
				}
				if e, err := l.LastEpochAt(tc.off); err != nil || e != 1 {
					t.Fatalf("LastEpochAt(%d) = %d, %v", tc.off, e, err)
				}
			})
		}
	}
}

// checkResetReads checks that an empty log reset at off, keeping floor,
// refuses reads below off as too old (with the kept trim's epoch header
// tag, if any), serves nothing from earliest, and refuses LastEpochAt.
func checkResetReads(t *testing.T, l *Log, off, floor uint64, tag string) {
	t.Helper()
	start := max(off, floor)
	if off > l.Describe().Base {
		_, err := l.Read(off-1, ReadOptions{WithTrimTag: true})
		if too := wantTooOld(t, err); too.Floor != start || headerValue(too.TrimHeaders, "epoch") != tag {
			t.Fatalf("read below the reset: %+v, want the readable start %d and tag %q", too, start, tag)
		}
		if _, err := l.ReadRaw(off-1, ReadOptions{}); !errors.Is(err, record.ErrCursorTooOld) {
			t.Fatalf("raw read below the reset: %v", err)
		}
		if _, err := l.LastEpochAt(off - 1); !errors.Is(err, record.ErrCursorTooOld) {
			t.Fatalf("LastEpochAt below the reset: %v", err)
		}
	}
	res, err := l.Read(FromEarliest, ReadOptions{})
	if err != nil || len(res.Records) != 0 || res.Next != start {
		t.Fatalf("read from earliest: %+v %v", res, err)
	}
	if _, err := l.Read(start+1, ReadOptions{}); !errors.Is(err, ErrBeyondTail) {
		t.Fatalf("read above the tail: %v", err)
	}
}

// A reset below the committed mark keeps the mark; a trim copied below it
// afterwards is committed as it lands and moves the floor.
func TestResetAtBelowCommittedCommitsTrimsBelowTheMark(t *testing.T) {
	s := openTest(t, Options{})
	l := mustLog(t, s, testLog)
	fill(t, l, 12, "r")
	if err := l.SetCommitted(12); err != nil {
		t.Fatal(err)
	}
	if err := l.ResetAt(2); err != nil {
		t.Fatal(err)
	}
	recs := []record.Record{
		{Offset: 2, Epoch: 2, Payload: []byte("x")},
		{Offset: 3, Kind: record.KindTrim, Floor: 3, Epoch: 2, Headers: epochHeader("2")},
	}
	if err := l.AppendReplicated(context.Background(), recs); err != nil {
		t.Fatal(err)
	}
	if info := l.Describe(); info.Floor != 3 || info.Committed != 12 || info.Tail != 4 {
		t.Fatalf("%+v", info)
	}
	_, err := l.Read(2, ReadOptions{WithTrimTag: true})
	if too := wantTooOld(t, err); too.Floor != 3 || headerValue(too.TrimHeaders, "epoch") != "2" {
		t.Fatalf("%+v", too)
	}
}

func TestResetAtRefusesBelowTheBase(t *testing.T) {
	s := openTest(t, Options{})
	l, err := s.CreateLog(testLog, LogOptions{Base: 10})
	if err != nil {
		t.Fatal(err)
	}
	fill(t, l, 3, "r")
	for _, off := range []uint64{0, 9, FromEarliest, FromLatest} {
		if err := l.ResetAt(off); !errors.Is(err, ErrBadRecord) {
			t.Fatalf("ResetAt(%d): %v", off, err)
		}
	}
	if info := l.Describe(); info.Start != 10 || info.Tail != 13 {
		t.Fatalf("refused reset changed the log: %+v", info)
	}
}

func TestResetAtWakesWaiters(t *testing.T) {
	s := openTest(t, Options{})
	l := mustLog(t, s, testLog)
	fill(t, l, 3, "r")
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	woken := make(chan error, 2)
	go func() { woken <- l.Wait(ctx, 10) }()
	go func() { woken <- l.WaitCommitted(ctx, 10) }()
	if err := l.ResetAt(50); err != nil {
		t.Fatal(err)
	}
	for i := 0; i < 2; i++ {
		if err := <-woken; err != nil {
			t.Fatalf("waiter: %v", err)
		}
	}
}

// Under on-commit, a replay of the commit log after a crash must not bring
// back what ResetAt dropped (it checkpoints first), while appends made
// after the reset come back.
func TestOnCommitReplayNeverUndoesResetAt(t *testing.T) {
	s := openTest(t, Options{Fsync: FsyncOnCommit})
	l := mustLog(t, s, testLog)
	mustAppend(t, l, data("a", "b", "c", "d"), nil)
	if err := l.ResetAt(20); err != nil {
		t.Fatal(err)
	}
	mustAppend(t, l, data("x"), nil)
	snap := t.TempDir()
	copyDir(t, s.opts.Dir, snap) // the store is still running: no Close
	got := mustLog(t, openTest(t, Options{Dir: snap, Fsync: FsyncOnCommit}), testLog)
	if info := got.Describe(); info.Start != 20 || info.Tail != 21 {
		t.Fatalf("after replay: %+v", info)
	}
	if diff := cmp.Diff([]string{"x"}, payloads(readAll(t, got, FromEarliest, true))); diff != "" {
		t.Fatalf("after replay:\n%s", diff)
	}
}

const envResetChild = "FELIX_LOGSTORE_RESET_CHILD"

// TestResetCrashChild appends to two logs, resets one, appends to it again
// and SIGKILLs itself right after; it does nothing in a normal run.
func TestResetCrashChild(t *testing.T) {
	if os.Getenv(envResetChild) != "1" {
		t.Skip("reset crash child: runs only under the reset crash test")
	}
	mode, err := ParseFsyncMode(os.Getenv(envCrashMode))
	if err != nil {
		fmt.Printf("bad mode %v\n", err)
		os.Exit(3)
	}
	s, err := Open(Options{Dir: os.Getenv(envCrashDir), Fsync: mode, FsyncInterval: 5 * time.Millisecond, SegmentRecords: 8})
	if err != nil {
		fmt.Printf("bad open %v\n", err)
		os.Exit(3)
	}
	other := record.LogID{ShardID: testLog.ShardID, Log: record.LogGroup}
	l, err1 := s.Log(testLog)
	o, err2 := s.Log(other)
	if err := errors.Join(err1, err2); err != nil {
		fmt.Printf("bad log %v\n", err)
		os.Exit(3)
	}
	// The other log keeps appending through the reset (commit log frames
	// written around the checkpoint).
	go func() {
		for i := 0; ; i++ {
			if _, err := o.Append(context.Background(), data(fmt.Sprint("o", i)), nil); err != nil {
				return
			}
		}
	}()
	for i := 0; i < 50; i++ {
		mustAppendChild(l, data(fmt.Sprint("old", i), fmt.Sprint("old", i, "b")))
	}
	off := l.Describe().Tail + 1000
	if err := l.ResetAt(off); err != nil {
		fmt.Printf("bad reset %v\n", err)
		os.Exit(3)
	}
	mustAppendChild(l, data("new0"))
	fmt.Printf("reset %d\n", off)
	_ = syscall.Kill(os.Getpid(), syscall.SIGKILL)
	time.Sleep(time.Minute)
}

func mustAppendChild(l *Log, recs []record.Record) {
	if _, err := l.Append(context.Background(), recs, nil); err != nil {
		fmt.Printf("bad append %v\n", err)
		os.Exit(3)
	}
}

// A SIGKILL right after ResetAt returns (and one append after it) never
// brings back a dropped record, in any fsync mode.
func TestCrash_ResetAtSurvivesSIGKILL(t *testing.T) {
	if os.Getenv(envCrashChild) == "1" || os.Getenv(envResetChild) == "1" {
		t.Skip("in a child")
	}
	for _, mode := range []FsyncMode{FsyncOnCommit, FsyncPeriodic, FsyncNone} {
		t.Run(mode.String(), func(t *testing.T) {
			dir := t.TempDir()
			cmd := exec.Command(os.Args[0], "-test.run=^TestResetCrashChild$", "-test.count=1")
			cmd.Env = append(os.Environ(), envResetChild+"=1", envCrashDir+"="+dir, envCrashMode+"="+mode.String())
			out, _ := cmd.Output() // killed: the error is expected
			var off uint64
			for _, line := range strings.Split(string(out), "\n") {
				if f := strings.Fields(line); len(f) == 2 && f[0] == "reset" {
					off, _ = strconv.ParseUint(f[1], 10, 64)
				} else if len(f) > 0 && f[0] == "bad" {
					t.Fatalf("child: %s", line)
				}
			}
			if off == 0 {
				t.Fatalf("child never reset: %q", out)
			}
			s := openTest(t, Options{Dir: dir, Fsync: mode})
			l := mustLog(t, s, testLog)
			info := l.Describe()
			if info.Start != off || info.Tail != off+1 {
				t.Fatalf("after the crash %+v, want start %d tail %d", info, off, off+1)
			}
			if got := payloads(readAll(t, l, info.Start, true)); !cmp.Equal(got, []string{"new0"}) {
				t.Fatalf("records after the crash: %v", got)
			}
			if err := s.Close(); err != nil {
				t.Fatal(err)
			}
			if n, _, lowest := storedKeys(t, dir, l.num); n != 1 || lowest != off {
				t.Fatalf("%d data keys stored, lowest %d, want 1 at %d", n, lowest, off)
			}
		})
	}
}

// [TR-5] ResetAt empties the trim index with the records, but losing the
// index must not lose the floor or its tag: the floor was set by a
// committed trim, so it holds for the shard whatever this copy holds.
// After the reset, and after a reopen (a crash before the floor-setting
// trim is copied and committed again), the floor has not moved back and a
// refusal below the readable start still carries the trim's headers. A
// trim copied later moves the floor only up.
func TestTR5_ResetAtKeepsTheFloorAndItsTag(t *testing.T) {
	for _, mode := range []FsyncMode{FsyncOnCommit, FsyncPeriodic} {
		t.Run(mode.String(), func(t *testing.T) {
			s := openTest(t, Options{Fsync: mode, SegmentRecords: 4})
			l := mustLog(t, s, testLog)
			fill(t, l, 10, "r") // 0..9
			mustTrim(t, l, TrimRequest{Floor: 7, ExpectTail: 10, Headers: epochHeader("2")})
			if err := l.SetCommitted(11); err != nil {
				t.Fatal(err)
			}
			// Reset at 6, below the committed mark: the trim at 10 is at
			// or above the new start, so its tag still has a source.
			if err := l.ResetAt(6); err != nil {
				t.Fatal(err)
			}
			check := func(when string) {
				t.Helper()
				if info := l.Describe(); info.Floor != 7 || info.ReadableStart() != 7 {
					t.Fatalf("%s: floor moved back: %+v", when, info)
				}
				_, err := l.Read(2, ReadOptions{WithTrimTag: true})
				if too := wantTooOld(t, err); too.Floor != 7 || headerValue(too.TrimHeaders, "epoch") != "2" {
					t.Fatalf("%s: refusal below the floor %+v, want floor 7 tagged with epoch 2", when, too)
				}
			}
			check("after ResetAt")
			s = reopen(t, s)
			l = mustLog(t, s, testLog)
			check("after reopen")

			// The leader's copy from 6 on: data, the same trim again, a
			// lower trim; the floor stays at 7 with the same tag.
			recs := []record.Record{
				{Offset: 6, Epoch: 1, Payload: []byte("r6")},
				{Offset: 7, Epoch: 1, Payload: []byte("r7")},
				{Offset: 8, Epoch: 1, Kind: record.KindTrim, Floor: 5, Headers: epochHeader("1")},
			}
			if err := l.AppendReplicated(context.Background(), recs); err != nil {
				t.Fatal(err)
			}
			if err := l.SetCommitted(9); err != nil {
				t.Fatal(err)
			}
			check("after a lower trim copied")
			if got := payloads(readAll(t, l, FromEarliest, false)); !cmp.Equal(got, []string{"r7"}) {
				t.Fatalf("read from earliest: %v", got)
			}
		})
	}
}
