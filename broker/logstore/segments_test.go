package logstore

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"testing"
	"time"

	"felix.dev/felix/broker/record"
)

func TestTR6_DeletesOnlyWholeSegmentsBelowTheFloor(t *testing.T) {
	m := &countingMetrics{}
	s := openTest(t, Options{AutoCommit: true, SegmentRecords: 10, Metrics: m})
	l := mustLog(t, s, testLog)
	fill(t, l, 25, "r")                                                               // 0..24
	mustTrim(t, l, TrimRequest{Floor: 23, ExpectTail: 25, Headers: epochHeader("2")}) // trim at 25, segment 2 is active
	res, err := l.DeleteBelowFloor(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	if res.Segments != 2 || res.Records != 20 || res.Start != 20 || res.Bytes <= 0 {
		t.Fatalf("delete result %+v", res)
	}
	if m.deleted != 20 || m.delBytes != res.Bytes {
		t.Fatalf("metrics %d records %d bytes", m.deleted, m.delBytes)
	}
	info := l.Describe()
	if info.Start != 20 || info.Floor != 23 {
		t.Fatalf("info %+v", info)
	}
	// 20..22 are below the floor but still stored: readers are refused, raw readers served.
	if _, err := l.Read(21, ReadOptions{}); err == nil {
		t.Fatal("read below the floor served")
	}
	if raw, err := l.ReadRaw(20, ReadOptions{}); err != nil || len(raw.Records) != 6 {
		t.Fatalf("raw read from start: %d records, %v", len(raw.Records), err)
	}
	if _, err := l.ReadRaw(19, ReadOptions{}); !errors.Is(err, record.ErrCursorTooOld) {
		t.Fatalf("raw read below start: %v", err)
	}
	// Nothing more to delete; and it survives a reopen.
	if res, err := l.DeleteBelowFloor(context.Background()); err != nil || res.Segments != 0 {
		t.Fatalf("second delete %+v %v", res, err)
	}
	s = reopen(t, s)
	l = mustLog(t, s, testLog)
	if got := l.Describe(); got.Start != 20 || got.Floor != 23 || got.Tail != 26 {
		t.Fatalf("after reopen %+v", got)
	}
	_, err = l.Read(0, ReadOptions{WithTrimTag: true})
	if too := wantTooOld(t, err); too.Floor != 23 || headerValue(too.TrimHeaders, "epoch") != "2" {
		t.Fatalf("refusal after delete %+v", too)
	}
}

func TestTR6_NeverDeletesTheActiveSegment(t *testing.T) {
	s := openTest(t, Options{AutoCommit: true, SegmentRecords: 10})
	l := mustLog(t, s, testLog)
	fill(t, l, 9, "r")
	mustTrim(t, l, TrimRequest{Floor: 9, ExpectTail: 9}) // trim at 9: floor 9, tail 10 (segment 1 active, empty)
	res, err := l.DeleteBelowFloor(context.Background())
	if err != nil || res.Segments != 0 {
		t.Fatalf("deleted the segment holding the floor-setting trim: %+v %v", res, err)
	}
	if raw, err := l.ReadRaw(9, ReadOptions{}); err != nil || len(raw.Records) != 1 || raw.Records[0].Kind != record.KindTrim {
		t.Fatalf("floor-setting trim: %+v %v", raw, err)
	}
}

// Property: over random appends, trims, commits, deletions, reopens and
// segment sizes, with retention off, the floor-setting trim record always
// survives, the refusal below the floor carries its headers, and every
// stored offset from Start to the tail is dense and readable [TR-6].
func TestTR6_FloorSettingTrimAlwaysSurvives(t *testing.T) {
	seeds := envInt(t, "FELIX_PROPERTY_SEEDS", 16)
	for seed := 0; seed < seeds; seed++ {
		t.Run(fmt.Sprint("seed", seed), func(t *testing.T) {
			rng := rand.New(rand.NewPCG(uint64(seed), 4))
			segRecs := uint64(1 + rng.IntN(12))
			s := openTest(t, Options{AutoCommit: true, SegmentRecords: segRecs, Fsync: FsyncNone})
			base := uint64(rng.IntN(5))
			l, err := s.CreateLog(testLog, LogOptions{Base: base})
			if err != nil {
				t.Fatal(err)
			}
			for step := 0; step < 60; step++ {
				info := l.Describe()
				switch op := rng.IntN(40); {
				case op < 20:
					n := 1 + rng.IntN(2*int(segRecs))
					recs := make([]record.Record, n)
					for i := range recs {
						recs[i] = record.Record{Epoch: 1, Payload: []byte(fmt.Sprint(step, "/", i))}
					}
					mustAppend(t, l, recs, ptr(info.Tail))
				case op < 32:
					floor := info.Floor + uint64(rng.IntN(int(info.Tail-info.Floor)+1))
					mustTrim(t, l, TrimRequest{Floor: floor, ExpectTail: info.Tail, Headers: epochHeader(fmt.Sprint(step))})
				case op < 38:
					if _, err := l.DeleteBelowFloor(context.Background()); err != nil {
						t.Fatal(err)
					}
				default:
					s = reopen(t, s)
					if l, err = s.CreateLog(testLog, LogOptions{Base: base}); err != nil {
						t.Fatal(err)
					}
				}
				checkFloorInvariant(t, l)
			}
		})
	}
}

func checkFloorInvariant(t *testing.T, l *Log) {
	t.Helper()
	info := l.Describe()
	if info.Start > info.Floor && info.Floor > info.Base {
		t.Fatalf("deleted above the floor: %+v", info)
	}
	if l.segment(info.Start) > l.segment(info.Tail) {
		t.Fatalf("active segment deleted: %+v", info)
	}
	all := readAll(t, l, info.Start, true)
	for i, r := range all {
		if r.Offset != info.Start+uint64(i) {
			t.Fatalf("offsets not dense at %d: %d", i, r.Offset)
		}
	}
	if uint64(len(all)) != info.Tail-info.Start {
		t.Fatalf("%d records stored for [%d, %d)", len(all), info.Start, info.Tail)
	}
	if info.Floor == info.Base {
		return
	}
	// The trim that set the floor is still stored, and is what the refusal carries.
	var setter *record.Record
	for i := range all {
		if all[i].Kind == record.KindTrim && all[i].Floor == info.Floor {
			setter = &all[i]
			break
		}
	}
	if setter == nil {
		t.Fatalf("floor-setting trim for floor %d deleted: %+v", info.Floor, info)
	}
	if info.Floor > info.Start || info.Floor > info.Base {
		_, err := l.Read(info.Floor-1, ReadOptions{WithTrimTag: true})
		too := wantTooOld(t, err)
		if headerValue(too.TrimHeaders, "epoch") != headerValue(setter.Headers, "epoch") {
			t.Fatalf("tag %v, floor-setting trim %v", too.TrimHeaders, setter.Headers)
		}
	}
}

func TestTR7_RetentionOffByDefault(t *testing.T) {
	s := openTest(t, Options{AutoCommit: true, SegmentRecords: 4})
	l := mustLog(t, s, testLog)
	fill(t, l, 20, "r")
	if info := l.Describe(); info.Retention.Enabled() {
		t.Fatalf("retention on by default: %+v", info.Retention)
	}
	if res, err := l.ApplyRetention(context.Background()); err != nil || res.Segments != 0 {
		t.Fatalf("retention off deleted %+v %v", res, err)
	}
}

func TestTR7_FencedLogRefusesRetention(t *testing.T) {
	s := openTest(t, Options{})
	l := mustLog(t, s, testLog)
	if err := l.SetFenced(true); err != nil {
		t.Fatal(err)
	}
	if err := l.SetRetention(RetentionPolicy{MaxAge: time.Hour}); !errors.Is(err, ErrRetentionOnFencedStream) {
		t.Fatalf("retention on fenced log: %v", err)
	}
	if err := l.SetRetention(RetentionPolicy{}); err != nil {
		t.Fatalf("retention off on fenced log: %v", err)
	}
	s = reopen(t, s)
	l = mustLog(t, s, testLog)
	if !l.Describe().Fenced {
		t.Fatal("fenced flag lost on reopen")
	}
	if err := l.SetRetention(RetentionPolicy{MaxBytes: 1}); !errors.Is(err, ErrRetentionOnFencedStream) {
		t.Fatalf("after reopen: %v", err)
	}
	// And the other way round: a log with retention cannot be fenced.
	if err := l.SetFenced(false); err != nil {
		t.Fatal(err)
	}
	if err := l.SetRetention(RetentionPolicy{MaxBytes: 1}); err != nil {
		t.Fatal(err)
	}
	if err := l.SetFenced(true); !errors.Is(err, ErrRetentionOnFencedStream) {
		t.Fatalf("fencing a log with retention: %v", err)
	}
}

func TestTR7_RetentionByAgeAndSize(t *testing.T) {
	now := time.Unix(1_000_000, 0)
	clock := func() time.Time { return now }
	for _, tc := range []struct {
		name      string
		p         RetentionPolicy
		wantStart uint64
	}{
		// Segments of 4: [0..3] written at t=0, [4..7] at t=10s, [8..11] at t=20s, [12..13] active.
		{"age keeps segments newer than max age", RetentionPolicy{MaxAge: 25 * time.Second}, 8},
		{"age never deletes the active segment", RetentionPolicy{MaxAge: time.Nanosecond}, 12},
		{"size deletes oldest until under", RetentionPolicy{MaxBytes: 1}, 12},
	} {
		t.Run(tc.name, func(t *testing.T) {
			s := openTest(t, Options{AutoCommit: true, SegmentRecords: 4, Now: clock})
			l := mustLog(t, s, testLog)
			for i := 0; i < 14; i++ {
				ts := time.Unix(1_000_000, 0).Add(time.Duration(i/4) * 10 * time.Second).UnixNano()
				mustAppend(t, l, []record.Record{{Timestamp: ts, Payload: []byte("0123456789")}}, nil)
			}
			now = time.Unix(1_000_000, 0).Add(40 * time.Second)
			if err := l.SetRetention(tc.p); err != nil {
				t.Fatal(err)
			}
			res, err := l.ApplyRetention(context.Background())
			if err != nil {
				t.Fatal(err)
			}
			if res.Start != tc.wantStart || l.Describe().Start != tc.wantStart {
				t.Fatalf("start %d (%+v), want %d", l.Describe().Start, res, tc.wantStart)
			}
			_, err = l.Read(0, ReadOptions{WithTrimTag: true})
			if too := wantTooOld(t, err); too.Floor != tc.wantStart || too.TrimHeaders != nil {
				t.Fatalf("refusal after retention %+v", too)
			}
		})
	}
	t.Run("size keeps the newest under the limit", func(t *testing.T) {
		s := openTest(t, Options{AutoCommit: true, SegmentRecords: 4})
		l := mustLog(t, s, testLog)
		fill(t, l, 16, "0123456789-")
		segs, err := l.segmentStats()
		if err != nil {
			t.Fatal(err)
		}
		if err := l.SetRetention(RetentionPolicy{MaxBytes: segs[2].bytes + segs[3].bytes}); err != nil {
			t.Fatal(err)
		}
		if _, err := l.ApplyRetention(context.Background()); err != nil {
			t.Fatal(err)
		}
		if got := l.Describe().Start; got != 8 {
			t.Fatalf("start %d, want 8", got)
		}
	})
}

// With a low ValueThreshold batches live in badger's value log; the log
// behaves the same, and Maintain also runs value-log GC without error.
func TestValueThresholdKeepsTheLogContract(t *testing.T) {
	s := openTest(t, Options{AutoCommit: true, SegmentRecords: 4, ValueThreshold: 64})
	l := mustLog(t, s, testLog)
	for i := 0; i < 5; i++ {
		mustAppend(t, l, data(fmt.Sprintf("%080d", i), fmt.Sprintf("%080d", i+100)), nil)
	}
	mustTrim(t, l, TrimRequest{Floor: 9, ExpectTail: 10, Headers: epochHeader("2")})
	if _, err := s.Maintain(context.Background()); err != nil {
		t.Fatal(err)
	}
	s = reopen(t, s)
	l = mustLog(t, s, testLog)
	if info := l.Describe(); info.Start != 8 || info.Floor != 9 || info.Tail != 11 {
		t.Fatalf("%+v", info)
	}
	got := readAll(t, l, FromEarliest, false)
	if len(got) != 1 || string(got[0].Payload) != fmt.Sprintf("%080d", 104) {
		t.Fatalf("read from the floor: %v", payloads(got))
	}
}

// Retention deletes only segments entirely below the committed mark, however
// old or large the log is [TR-7].
func TestTR7_RetentionNeverDeletesUncommittedRecords(t *testing.T) {
	for _, tc := range []struct {
		committed uint64
		wantStart uint64
	}{
		{0, 0},   // nothing committed
		{3, 0},   // segment 0 only partly committed
		{4, 4},   // segment 0 exactly committed
		{9, 8},   // segments 0 and 1
		{14, 12}, // all committed: the active segment still stays
	} {
		for _, p := range []RetentionPolicy{{MaxBytes: 1}, {MaxAge: time.Nanosecond}} {
			t.Run(fmt.Sprintf("committed=%d/%+v", tc.committed, p), func(t *testing.T) {
				now := time.Unix(1_000_000, 0)
				s := openTest(t, Options{SegmentRecords: 4, Now: func() time.Time { return now }})
				l := mustLog(t, s, testLog)
				fill(t, l, 14, "0123456789-")
				if err := l.SetCommitted(tc.committed); err != nil {
					t.Fatal(err)
				}
				if err := l.SetRetention(p); err != nil {
					t.Fatal(err)
				}
				now = now.Add(time.Hour)
				res, err := l.ApplyRetention(context.Background())
				if err != nil {
					t.Fatal(err)
				}
				if res.Start != tc.wantStart || l.Describe().Start != tc.wantStart {
					t.Fatalf("start %d (%+v), want %d", l.Describe().Start, res, tc.wantStart)
				}
				if got := readAll(t, l, FromEarliest, true); uint64(len(got)) != 14-tc.wantStart {
					t.Fatalf("%d records left", len(got))
				}
			})
		}
	}
}
