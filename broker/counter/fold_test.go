package counter

import (
	"errors"
	"fmt"
	"math"
	"strings"
	"testing"

	"felix.dev/felix/broker/logstore"
	"felix.dev/felix/broker/producer"
	"felix.dev/felix/broker/record"
)

func addRec(t *testing.T, off uint64, key string, delta, value int64, hs ...record.Header) record.Record {
	t.Helper()
	p, err := EncodeAdd(Add{Key: key, Delta: delta, Value: value})
	if err != nil {
		t.Fatal(err)
	}
	return record.Record{Offset: off, Kind: record.KindData, Payload: p, Headers: hs, Timestamp: int64(off)}
}

func snapRec(t *testing.T, off uint64, s Snapshot) record.Record {
	t.Helper()
	p, err := EncodeSnapshot(s)
	if err != nil {
		t.Fatal(err)
	}
	return record.Record{Offset: off, Kind: record.KindData, Payload: p}
}

var pid = producer.ID{1, 2, 3}

func TestFold(t *testing.T) {
	type want struct {
		values map[string]int64
		next   uint64
		since  uint64
		err    error
	}
	tests := []struct {
		name    string
		floor   uint64
		trimmed bool
		recs    func(t *testing.T) []record.Record
		want    want
	}{
		{name: "empty", want: want{values: map[string]int64{}, next: 0}},
		{name: "adds in order", recs: func(t *testing.T) []record.Record {
			return []record.Record{addRec(t, 0, "a", 5, 5), addRec(t, 1, "b", -2, -2), addRec(t, 2, "a", 3, 8)}
		}, want: want{values: map[string]int64{"a": 8, "b": -2}, next: 3, since: 3}},
		{name: "fence and trim records only move next", recs: func(t *testing.T) []record.Record {
			return []record.Record{{Offset: 0, Kind: record.KindFence}, addRec(t, 1, "a", 1, 1), {Offset: 2, Kind: record.KindTrim}}
		}, want: want{values: map[string]int64{"a": 1}, next: 3, since: 1}},
		{name: "snapshot replaces the state", recs: func(t *testing.T) []record.Record {
			return []record.Record{addRec(t, 0, "a", 1, 1), addRec(t, 1, "gone", 1, 1),
				snapRec(t, 2, Snapshot{Values: map[string]int64{"a": 1, "b": 40}}), addRec(t, 3, "b", 2, 42)}
		}, want: want{values: map[string]int64{"a": 1, "b": 42}, next: 4, since: 1}},
		{name: "trimmed log starts at its snapshot", floor: 10, trimmed: true, recs: func(t *testing.T) []record.Record {
			return []record.Record{snapRec(t, 10, Snapshot{Values: map[string]int64{"a": 7}}), {Offset: 11, Kind: record.KindTrim}, addRec(t, 12, "a", 1, 8)}
		}, want: want{values: map[string]int64{"a": 8}, next: 13, since: 1}},
		{name: "trimmed log without a snapshot at its floor is lost", floor: 10, trimmed: true, recs: func(t *testing.T) []record.Record {
			return []record.Record{addRec(t, 10, "a", 1, 1)}
		}, want: want{err: ErrNoSnapshot}},
		{name: "trimmed log whose snapshot is above the floor", floor: 10, trimmed: true, recs: func(t *testing.T) []record.Record {
			return []record.Record{snapRec(t, 11, Snapshot{Values: map[string]int64{"a": 7}})}
		}, want: want{err: ErrNoSnapshot}},
		{name: "malformed entry is loud", recs: func(t *testing.T) []record.Record {
			return []record.Record{addRec(t, 0, "a", 1, 1), {Offset: 1, Kind: record.KindData, Payload: []byte{9, 9}}}
		}, want: want{err: ErrMalformedEntry}},
		{name: "empty payload is loud", recs: func(t *testing.T) []record.Record {
			return []record.Record{{Offset: 0, Kind: record.KindData}}
		}, want: want{err: ErrMalformedEntry}},
		{name: "value that disagrees with the fold is loud", recs: func(t *testing.T) []record.Record {
			return []record.Record{addRec(t, 0, "a", 1, 1), addRec(t, 1, "a", 1, 5)}
		}, want: want{err: ErrDiverged}},
		{name: "overflow in the log is loud", recs: func(t *testing.T) []record.Record {
			return []record.Record{addRec(t, 0, "a", math.MaxInt64, math.MaxInt64), addRec(t, 1, "a", 1, math.MinInt64)}
		}, want: want{err: ErrDiverged}},
		{name: "records out of order are loud", recs: func(t *testing.T) []record.Record {
			return []record.Record{addRec(t, 1, "a", 1, 1), addRec(t, 1, "a", 1, 2)}
		}, want: want{err: ErrDiverged}},
		{name: "bad producer header is loud", recs: func(t *testing.T) []record.Record {
			return []record.Record{addRec(t, 0, "a", 1, 1, record.Header{Key: producer.HeaderKey, Value: []byte{1}})}
		}, want: want{err: producer.ErrBadHeader}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			s := NewState(Limits{}, tc.floor, tc.trimmed)
			var err error
			if tc.recs != nil {
				for _, r := range tc.recs(t) {
					if err = s.Apply(r); err != nil {
						break
					}
				}
			}
			if tc.want.err != nil {
				if !errors.Is(err, tc.want.err) {
					t.Fatalf("fold error %v, want %v", err, tc.want.err)
				}
				return
			}
			if err != nil {
				t.Fatalf("fold: %v", err)
			}
			if s.Next() != tc.want.next || s.SinceSnapshot() != tc.want.since || s.Len() != len(tc.want.values) {
				t.Fatalf("next %d since %d len %d, want %d %d %d", s.Next(), s.SinceSnapshot(), s.Len(), tc.want.next, tc.want.since, len(tc.want.values))
			}
			for k, v := range tc.want.values {
				if got := s.Value(k); got != v {
					t.Errorf("%s = %d, want %d", k, got, v)
				}
			}
		})
	}
}

// TestSnapshotRoundTrip: a snapshot of a state, folded on its own as a
// trimmed log's first entry, gives back the same counters and marks.
func TestSnapshotRoundTrip(t *testing.T) {
	s := NewState(Limits{}, 0, false)
	recs := []record.Record{addRec(t, 0, "a", 5, 5, producer.Header(pid, 0, 1)), addRec(t, 1, "b", 7, 7), addRec(t, 2, "a", -1, 4, producer.Header(pid, 1, 1))}
	for _, r := range recs {
		if err := s.Apply(r); err != nil {
			t.Fatal(err)
		}
	}
	snap := s.Snapshot()
	if err := s.Apply(snapRec(t, 3, snap)); err != nil {
		t.Fatal(err)
	}
	if at, ok := s.LastSnapshot(); !ok || at != 3 || s.SinceSnapshot() != 0 {
		t.Fatalf("last snapshot %d %v since %d", at, ok, s.SinceSnapshot())
	}
	re := NewState(Limits{}, 3, true)
	if err := re.Apply(snapRec(t, 3, snap)); err != nil {
		t.Fatal(err)
	}
	if re.Value("a") != 4 || re.Value("b") != 7 || re.Len() != 2 || re.Next() != 4 {
		t.Fatalf("after snapshot: a=%d b=%d len=%d next=%d", re.Value("a"), re.Value("b"), re.Len(), re.Next())
	}
	m, ok := re.Mark(pid)
	if !ok || m.Seq != 1 || m.Offset != 2 || m.Value != 4 {
		t.Fatalf("mark %+v %v, want seq 1 at 2 value 4", m, ok)
	}
}

func TestCheckLimits(t *testing.T) {
	s := NewState(Limits{MaxKeys: 2, MaxKeyBytes: 4}, 0, false)
	for i, r := range []record.Record{addRec(t, 0, "a", 1, 1), addRec(t, 1, "b", math.MaxInt64, math.MaxInt64)} {
		if err := s.Apply(r); err != nil {
			t.Fatal(i, err)
		}
	}
	tests := []struct {
		key   string
		delta int64
		value int64
		err   error
	}{
		{"a", 2, 3, nil},
		{"b", -1, math.MaxInt64 - 1, nil},
		{"c", 1, 0, ErrTooManyKeys},
		{"toolong", 1, 0, ErrKeyTooLong},
		{"", 1, 0, ErrEmptyKey},
		{"b", 1, 0, ErrOverflow},
	}
	for _, tc := range tests {
		v, err := s.Check(tc.key, tc.delta)
		if !errors.Is(err, tc.err) || (tc.err == nil && v != tc.value) {
			t.Errorf("Check(%q, %d) = %d, %v; want %d, %v", tc.key, tc.delta, v, err, tc.value, tc.err)
		}
	}
	if s.Value("a") != 1 {
		t.Fatalf("Check changed the state: a=%d", s.Value("a"))
	}
}

func TestMarksBounded(t *testing.T) {
	s := NewState(Limits{MaxProducers: 2}, 0, false)
	v := int64(0)
	for i := range 3 {
		v++
		if err := s.Apply(addRec(t, uint64(i), "a", 1, v, producer.Header(producer.ID{byte(i + 1)}, 0, 1))); err != nil {
			t.Fatal(err)
		}
	}
	if len(s.Marks()) != 2 {
		t.Fatalf("%d marks, want 2", len(s.Marks()))
	}
	if _, ok := s.Mark(producer.ID{1}); ok {
		t.Fatal("the oldest producer was kept")
	}
}

// A snapshot of a shard at every default bound (all keys, each as long as
// allowed, all producer marks) fits one record of the log store's
// default record limit (1 MiB), so a full shard can always snapshot.
func TestFullSnapshotFitsARecord(t *testing.T) {
	lim := Limits{}.WithDefaults()
	s := Snapshot{Values: map[string]int64{}}
	for i := range lim.MaxKeys {
		k := []byte(strings.Repeat("k", lim.MaxKeyBytes))
		copy(k, fmt.Sprint(i))
		s.Values[string(k)] = math.MinInt64
	}
	for i := range lim.MaxProducers {
		s.Marks = append(s.Marks, Mark{Producer: producer.ID{byte(i), byte(i >> 8), 1}})
	}
	p, err := EncodeSnapshot(s)
	if err != nil {
		t.Fatal(err)
	}
	const recordLimit = logstore.DefaultMaxRecordBytes
	if len(s.Values) != lim.MaxKeys || len(p) > recordLimit {
		t.Fatalf("full snapshot of %d keys is %d bytes, limit %d", len(s.Values), len(p), recordLimit)
	}
}

// TestPending: a Pending's values are those of adds applied one after
// another, its refusals count the pending new keys, and a run of adds it
// accepted folds to the same values when applied in order.
func TestPending(t *testing.T) {
	type add struct {
		key   string
		delta int64
		value int64
		err   error
	}
	cases := []struct {
		name    string
		initial map[string]int64
		lim     Limits
		adds    []add
	}{
		{name: "same key sums", adds: []add{{key: "a", delta: 1, value: 1}, {key: "a", delta: 2, value: 3}, {key: "a", delta: -5, value: -2}}},
		{name: "over state", initial: map[string]int64{"a": 10}, adds: []add{{key: "a", delta: 1, value: 11}, {key: "b", delta: 1, value: 1}, {key: "a", delta: 1, value: 12}}},
		{name: "new keys count against the cap", lim: Limits{MaxKeys: 2}, initial: map[string]int64{"a": 1},
			adds: []add{{key: "b", delta: 1, value: 1}, {key: "c", delta: 1, err: ErrTooManyKeys}, {key: "b", delta: 1, value: 2}, {key: "a", delta: 1, value: 2}}},
		{name: "a refused add leaves no trace", lim: Limits{MaxKeys: 2}, initial: map[string]int64{"a": math.MaxInt64 - 1},
			adds: []add{{key: "a", delta: 1, value: math.MaxInt64}, {key: "a", delta: 1, err: ErrOverflow}, {key: "a", delta: -1, value: math.MaxInt64 - 1}, {key: "b", delta: 1, value: 1}}},
		{name: "bad keys", lim: Limits{MaxKeyBytes: 3}, adds: []add{{key: "", delta: 1, err: ErrEmptyKey}, {key: "abcd", delta: 1, err: ErrKeyTooLong}, {key: "abc", delta: 1, value: 1}}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			st := NewState(tc.lim, 0, false)
			off := uint64(0)
			for k, v := range tc.initial {
				if err := st.Apply(addRec(t, off, k, v, v)); err != nil {
					t.Fatal(err)
				}
				off++
			}
			before := st.Snapshot().Values
			p := st.Pending()
			var recs []record.Record
			for i, a := range tc.adds {
				v, err := p.Check(a.key, a.delta)
				if a.err != nil {
					if !errors.Is(err, a.err) {
						t.Fatalf("add %d: err %v, want %v", i, err, a.err)
					}
					continue
				}
				if err != nil || v != a.value {
					t.Fatalf("add %d: %d, %v; want %d", i, v, err, a.value)
				}
				p.Put(a.key, v)
				recs = append(recs, addRec(t, off+uint64(len(recs)), a.key, a.delta, v))
			}
			if got := st.Snapshot().Values; fmt.Sprint(got) != fmt.Sprint(before) {
				t.Fatalf("Pending changed the state: %v, was %v", got, before)
			}
			for _, r := range recs {
				if err := st.Apply(r); err != nil {
					t.Fatalf("folding the pending adds: %v", err)
				}
			}
		})
	}
}
