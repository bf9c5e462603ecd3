package logstore

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"testing"

	badger "github.com/dgraph-io/badger/v4"
	"github.com/google/go-cmp/cmp"

	"felix.dev/felix/broker/record"
)

func TestParseFsyncMode(t *testing.T) {
	for _, tc := range []struct {
		in   string
		want FsyncMode
		err  bool
	}{
		{"on-commit", FsyncOnCommit, false},
		{"periodic", FsyncPeriodic, false},
		{"none", FsyncNone, false},
		{"OnCommit", FsyncOnCommit, false},
		{"always", 0, true},
	} {
		got, err := ParseFsyncMode(tc.in)
		if (err != nil) != tc.err || (!tc.err && got != tc.want) {
			t.Errorf("ParseFsyncMode(%q) = %v, %v", tc.in, got, err)
		}
		if !tc.err && got.String() != strings.ToLower(tc.in) && tc.in[0] >= 'a' {
			t.Errorf("%v.String() = %q, want %q", got, got.String(), tc.in)
		}
		if tc.err && !errors.Is(err, ErrBadFsyncMode) {
			t.Errorf("ParseFsyncMode(%q) error %v is not ErrBadFsyncMode", tc.in, err)
		}
	}
}

func TestAppendDenseOffsetsFromBase(t *testing.T) {
	for _, mode := range []FsyncMode{FsyncOnCommit, FsyncPeriodic, FsyncNone} {
		t.Run(mode.String(), func(t *testing.T) {
			s := openTest(t, Options{Fsync: mode, SegmentRecords: 4})
			l, err := s.CreateLog(testLog, LogOptions{Base: 100})
			if err != nil {
				t.Fatal(err)
			}
			r1 := mustAppend(t, l, data("a", "b", "c"), nil)
			r2 := mustAppend(t, l, data("d", "e", "f", "g", "h", "i"), nil) // straddles two segment boundaries
			if r1 != (AppendResult{First: 100, Last: 102, Tail: 103}) || r2 != (AppendResult{First: 103, Last: 108, Tail: 109}) {
				t.Fatalf("results %+v %+v", r1, r2)
			}
			got := readAll(t, l, FromEarliest, false)
			if diff := cmp.Diff([]string{"a", "b", "c", "d", "e", "f", "g", "h", "i"}, payloads(got)); diff != "" {
				t.Fatal(diff)
			}
			if diff := cmp.Diff([]uint64{100, 101, 102, 103, 104, 105, 106, 107, 108}, offsets(got)); diff != "" {
				t.Fatal(diff)
			}
			// Reading from the middle of a batch.
			res, err := l.Read(105, ReadOptions{MaxRecords: 2})
			if err != nil || len(res.Records) != 2 || res.Records[0].Offset != 105 || res.Next != 107 {
				t.Fatalf("read from 105: %+v %v", res, err)
			}
			s = reopen(t, s)
			l = mustLog(t, s, record.LogID{})
			_ = l
			l, err = s.CreateLog(testLog, LogOptions{Base: 100})
			if err != nil {
				t.Fatal(err)
			}
			if info := l.Describe(); info.Tail != 109 || info.Base != 100 || info.Durable != 109 {
				t.Fatalf("after reopen: %+v", info)
			}
			if _, err := s.CreateLog(testLog, LogOptions{Base: 7}); !errors.Is(err, ErrBaseMismatch) {
				t.Fatalf("CreateLog with another base: %v", err)
			}
			if diff := cmp.Diff([]record.LogID{{}, testLog}, s.Logs()); diff != "" {
				t.Fatalf("Logs: %s", diff)
			}
		})
	}
}

func TestAppendKeepsRecordFields(t *testing.T) {
	s := openTest(t, Options{Fsync: FsyncNone})
	l := mustLog(t, s, testLog)
	in := []record.Record{
		{Epoch: 7, Timestamp: 12345, Headers: []record.Header{{Key: "k", Value: []byte("v")}, {Key: "e", Value: nil}}, Payload: []byte("p")},
		{Epoch: 8, Kind: record.KindFence, Payload: nil},
		{Epoch: 9, Timestamp: -5, Payload: []byte("q")},
	}
	mustAppend(t, l, in, nil)
	got := readAll(t, l, 0, true)
	if len(got) != 3 {
		t.Fatalf("got %d records", len(got))
	}
	want0 := record.Record{Offset: 0, Epoch: 7, Timestamp: 12345, Kind: record.KindData, Headers: in[0].Headers, Payload: []byte("p")}
	if diff := cmp.Diff(want0, got[0]); diff != "" {
		t.Fatal(diff)
	}
	if got[1].Kind != record.KindFence || got[1].Epoch != 8 || got[1].Timestamp == 0 {
		t.Fatalf("fence record %+v", got[1])
	}
	if got[2].Timestamp != -5 {
		t.Fatalf("timestamp %d", got[2].Timestamp)
	}
	// A reader skips the fence but Next covers it.
	res, err := l.Read(0, ReadOptions{})
	if err != nil || len(res.Records) != 2 || res.Next != 3 {
		t.Fatalf("read %+v %v", res, err)
	}
}

func TestTR1_ConditionalAppendNamesTail(t *testing.T) {
	s := openTest(t, Options{})
	l := mustLog(t, s, testLog)
	mustAppend(t, l, data("a", "b"), ptr(0))
	for _, expect := range []uint64{0, 1, 3, 99} {
		_, err := l.Append(context.Background(), data("x", "y"), ptr(expect))
		wantMismatch(t, err, 2)
		if !errors.Is(err, record.ErrOffsetMismatch) {
			t.Fatalf("not ErrOffsetMismatch: %v", err)
		}
	}
	if got := l.Describe().Tail; got != 2 {
		t.Fatalf("refused appends wrote something: tail %d", got)
	}
	if r := mustAppend(t, l, data("c"), ptr(2)); r.First != 2 {
		t.Fatalf("append at 2: %+v", r)
	}
}

// Concurrent conditional appends at the same tail: exactly one lands.
func TestTR1_ConcurrentConditionalExactlyOne(t *testing.T) {
	s := openTest(t, Options{})
	l := mustLog(t, s, testLog)
	mustAppend(t, l, data("a"), nil)
	var wg sync.WaitGroup
	var mu sync.Mutex
	wins := 0
	for i := 0; i < 16; i++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			_, err := l.Append(context.Background(), data(fmt.Sprint(i)), ptr(1))
			if err == nil {
				mu.Lock()
				wins++
				mu.Unlock()
			} else if !errors.Is(err, record.ErrOffsetMismatch) {
				t.Errorf("append: %v", err)
			}
		}()
	}
	wg.Wait()
	if wins != 1 || l.Describe().Tail != 2 {
		t.Fatalf("wins %d tail %d", wins, l.Describe().Tail)
	}
}

func TestAppendLimitsRefuseWholeBatch(t *testing.T) {
	s := openTest(t, Options{MaxRecordBytes: 100, MaxBatchRecords: 3, MaxBatchBytes: 200})
	l := mustLog(t, s, testLog)
	big := func(n int) []byte { return make([]byte, n) }
	for _, tc := range []struct {
		name string
		recs []record.Record
	}{
		{"record too large", []record.Record{{Payload: big(5)}, {Payload: big(101)}}},
		{"headers count toward the record", []record.Record{{Payload: big(60), Headers: []record.Header{{Key: "k", Value: big(40)}}}}},
		{"too many records", data("a", "b", "c", "d")},
		{"batch too large", []record.Record{{Payload: big(90)}, {Payload: big(90)}, {Payload: big(90)}}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := l.Append(context.Background(), tc.recs, nil)
			if !errors.Is(err, record.ErrRecordTooLarge) {
				t.Fatalf("got %v, want ErrRecordTooLarge", err)
			}
			if tail := l.Describe().Tail; tail != 0 {
				t.Fatalf("refused batch wrote records: tail %d", tail)
			}
		})
	}
	if _, err := l.Append(context.Background(), []record.Record{{Kind: record.KindTrim}}, nil); !errors.Is(err, ErrBadRecord) {
		t.Fatalf("trim through Append: %v", err)
	}
	if _, err := l.Append(context.Background(), nil, nil); !errors.Is(err, ErrBadRecord) {
		t.Fatalf("empty append: %v", err)
	}
	if r := mustAppend(t, l, []record.Record{{Payload: big(100)}}, nil); r.Tail != 1 {
		t.Fatalf("a record at the limit: %+v", r)
	}
}

func TestReadBounds(t *testing.T) {
	s := openTest(t, Options{Fsync: FsyncNone})
	l := mustLog(t, s, testLog)
	mustAppend(t, l, data("aaaa", "bbbb", "cccc", "dddd", "eeee"), nil)
	for _, tc := range []struct {
		name string
		from uint64
		o    ReadOptions
		want []string
		next uint64
	}{
		{"max records", 0, ReadOptions{MaxRecords: 2}, []string{"aaaa", "bbbb"}, 2},
		{"max bytes", 1, ReadOptions{MaxBytes: 9}, []string{"bbbb", "cccc"}, 3},
		{"max bytes below one record still returns one", 0, ReadOptions{MaxBytes: 1}, []string{"aaaa"}, 1},
		{"up to", 0, ReadOptions{UpTo: 3}, []string{"aaaa", "bbbb", "cccc"}, 3},
		{"latest", FromLatest, ReadOptions{}, nil, 5},
		{"at tail", 5, ReadOptions{}, nil, 5},
	} {
		t.Run(tc.name, func(t *testing.T) {
			res, err := l.Read(tc.from, tc.o)
			if err != nil {
				t.Fatal(err)
			}
			if diff := cmp.Diff(tc.want, payloads(res.Records), cmp.Comparer(func(a, b []string) bool { return strings.Join(a, ",") == strings.Join(b, ",") })); diff != "" || res.Next != tc.next {
				t.Fatalf("next %d (want %d) %s", res.Next, tc.next, diff)
			}
		})
	}
	if _, err := l.Read(6, ReadOptions{}); !errors.Is(err, ErrBeyondTail) {
		t.Fatalf("read above tail: %v", err)
	}
}

func TestCorruptBatchIsAnErrorNamingLogAndOffset(t *testing.T) {
	s := openTest(t, Options{})
	l := mustLog(t, s, testLog)
	mustAppend(t, l, data("a", "b"), nil)
	mustAppend(t, l, data("c", "d"), nil)
	mustAppend(t, l, data("e"), nil)
	dir := s.opts.Dir
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	rawDB(t, dir, func(db *badger.DB) error {
		return db.Update(func(txn *badger.Txn) error {
			k := dataKey(l.num, 0, 2)
			item, err := txn.Get(k)
			if err != nil {
				return err
			}
			v, _ := item.ValueCopy(nil)
			v[len(v)-1] ^= 0x40 // flip a payload bit
			return txn.Set(k, v)
		})
	})
	s = openTest(t, Options{Dir: dir})
	l = mustLog(t, s, testLog)
	res, err := l.Read(0, ReadOptions{})
	var ce *record.CorruptError
	if !errors.As(err, &ce) || ce.Offset != 2 || ce.Log != testLog {
		t.Fatalf("read over corrupt batch: %+v, %v", res, err)
	}
	if !errors.Is(err, record.ErrCorrupt) {
		t.Fatalf("not ErrCorrupt: %v", err)
	}
	// Records before the corrupt batch are still served; the corrupt one is never skipped.
	res, err = l.Read(0, ReadOptions{MaxRecords: 2})
	if err != nil || len(res.Records) != 2 {
		t.Fatalf("read before corruption: %+v %v", res, err)
	}
	if _, err := l.Read(4, ReadOptions{}); err != nil {
		t.Fatalf("read after corruption: %v", err)
	}
}

func TestOnCommitSharesSyncs(t *testing.T) {
	m := &countingMetrics{}
	s := openTest(t, Options{Fsync: FsyncOnCommit, Metrics: m})
	l := mustLog(t, s, testLog)
	const writers, each = 16, 20
	var wg sync.WaitGroup
	for w := 0; w < writers; w++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := 0; i < each; i++ {
				if _, err := l.Append(context.Background(), data("x"), nil); err != nil {
					t.Error(err)
					return
				}
			}
		}()
	}
	wg.Wait()
	m.mu.Lock()
	defer m.mu.Unlock()
	total, maxFan := 0, 0
	for _, n := range m.fanIns {
		total += n
		maxFan = max(maxFan, n)
	}
	if total != writers*each || m.appends != writers*each {
		t.Fatalf("fan-in total %d, appends %d, want %d", total, m.appends, writers*each)
	}
	if len(m.fanIns) >= writers*each || maxFan < 2 {
		t.Fatalf("no sync was shared: %d syncs for %d appends (max fan-in %d)", len(m.fanIns), total, maxFan)
	}
	if got := l.Describe(); got.Tail != writers*each || got.Durable != got.Tail {
		t.Fatalf("info %+v", got)
	}
}

func TestWaitWakesOnAppend(t *testing.T) {
	s := openTest(t, Options{})
	l := mustLog(t, s, testLog)
	mustAppend(t, l, data("a"), nil)
	if err := l.Wait(context.Background(), 0); err != nil {
		t.Fatalf("wait for an existing record: %v", err)
	}
	done := make(chan error, 1)
	go func() { done <- l.Wait(context.Background(), 1) }()
	select {
	case err := <-done:
		t.Fatalf("Wait returned before an append: %v", err)
	default:
	}
	mustAppend(t, l, data("b"), nil)
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	if err := l.Wait(ctx, 5); !errors.Is(err, context.Canceled) {
		t.Fatalf("cancelled wait: %v", err)
	}
	go func() { done <- l.Wait(context.Background(), 9) }()
	_ = s.Close()
	if err := <-done; !errors.Is(err, record.ErrClosed) {
		t.Fatalf("wait across close: %v", err)
	}
	if _, err := l.Append(context.Background(), data("c"), nil); !errors.Is(err, record.ErrClosed) {
		t.Fatalf("append after close: %v", err)
	}
}
