package deadletter

import (
	"errors"
	"reflect"
	"testing"

	"felix.dev/felix/broker/record"
)

func dead(t *testing.T, off uint64, group string, orig uint64) record.Record {
	t.Helper()
	r, err := EncodeRecord(Record{Group: group, Offset: orig, Epoch: 3, Timestamp: 77, Deliveries: 5, Reason: ReasonMaxDeliveries,
		Headers: []record.Header{{Key: "k", Value: []byte("v")}}, Payload: []byte("payload")})
	if err != nil {
		t.Fatal(err)
	}
	r.Offset = off
	return r
}

func redrive(t *testing.T, off uint64, k EntryKind, entry, at uint64) record.Record {
	t.Helper()
	r, err := EncodeRedrive(k, Redrive{Entry: entry, DataOffset: at})
	if err != nil {
		t.Fatal(err)
	}
	r.Offset = off
	return r
}

// TestRecordRoundTrip: a dead-lettered record decodes to every field it
// was given: offset, epoch, timestamp, headers, payload, group, delivery
// count and reason.
func TestRecordRoundTrip(t *testing.T) {
	want := Record{Group: "g", Offset: 12, Epoch: 4, Timestamp: -5, Deliveries: 3, Reason: ReasonMaxDeliveries,
		Headers: []record.Header{{Key: "a", Value: []byte("1")}, {Key: "b", Value: nil}}, Payload: []byte("hello")}
	r, err := EncodeRecord(want)
	if err != nil {
		t.Fatal(err)
	}
	e, err := DecodeEntry(r)
	if err != nil || e.Record == nil {
		t.Fatalf("decode: %+v %v", e, err)
	}
	if !reflect.DeepEqual(*e.Record, want) {
		t.Fatalf("decoded %+v, want %+v", *e.Record, want)
	}
	if got, limit := len(r.Headers[len(r.Headers)-1].Value)+len(MetaHeader), MetaOverhead+len(want.Group); got != limit {
		t.Fatalf("meta of %d bytes, MetaOverhead says %d", got, limit)
	}
}

func TestEncodeRefuses(t *testing.T) {
	for _, r := range []Record{{Reason: ReasonMaxDeliveries}, {Group: "g"}, {Group: "g", Reason: 9}} {
		if _, err := EncodeRecord(r); !errors.Is(err, ErrMalformedEntry) {
			t.Errorf("EncodeRecord(%+v) = %v", r, err)
		}
	}
	if _, err := EncodeRedrive(EntryRecord, Redrive{}); !errors.Is(err, ErrMalformedEntry) {
		t.Errorf("EncodeRedrive(EntryRecord) = %v", err)
	}
}

func TestFold(t *testing.T) {
	intent := func(at uint64) *uint64 { return &at }
	tests := []struct {
		name  string
		floor uint64
		recs  func(t *testing.T) []record.Record
		want  map[uint64]Meta
		// superseded is State.Superseded after the fold.
		superseded int
		err        error
	}{
		{name: "records of groups", recs: func(t *testing.T) []record.Record {
			return []record.Record{dead(t, 0, "a", 5), {Offset: 1, Kind: record.KindFence}, dead(t, 2, "b", 5)}
		}, want: map[uint64]Meta{0: {Group: "a", Offset: 5}, 2: {Group: "b", Offset: 5}}},
		{name: "an intent, then the redrive", recs: func(t *testing.T) []record.Record {
			return []record.Record{dead(t, 0, "a", 5), redrive(t, 1, EntryRedriving, 0, 40), redrive(t, 2, EntryRedriving, 0, 42), redrive(t, 3, EntryRedriven, 0, 42)}
		}, want: map[uint64]Meta{0: {Group: "a", Offset: 5, Intent: intent(42), Redriven: true, DataOffset: 42}}, superseded: 1},
		{name: "intents lost to other appends are counted per shard", recs: func(t *testing.T) []record.Record {
			return []record.Record{dead(t, 0, "a", 5), dead(t, 1, "a", 6), redrive(t, 2, EntryRedriving, 0, 40), redrive(t, 3, EntryRedriving, 1, 41),
				redrive(t, 4, EntryRedriving, 0, 43), redrive(t, 5, EntryRedriving, 0, 45), redrive(t, 6, EntryRedriving, 1, 46)}
		}, want: map[uint64]Meta{0: {Group: "a", Offset: 5, Intent: intent(45)}, 1: {Group: "a", Offset: 6, Intent: intent(46)}}, superseded: 3},
		{name: "intents of an entry below the floor are not counted", floor: 1, recs: func(t *testing.T) []record.Record {
			return []record.Record{dead(t, 1, "a", 6), redrive(t, 2, EntryRedriving, 0, 40), redrive(t, 3, EntryRedriving, 0, 41)}
		}, want: map[uint64]Meta{1: {Group: "a", Offset: 6}}},
		{name: "a redrive of an entry below the floor is skipped", floor: 3, recs: func(t *testing.T) []record.Record {
			return []record.Record{redrive(t, 3, EntryRedriven, 1, 42), dead(t, 4, "a", 5)}
		}, want: map[uint64]Meta{4: {Group: "a", Offset: 5}}},
		{name: "a record dead-lettered twice for a group is loud", recs: func(t *testing.T) []record.Record {
			return []record.Record{dead(t, 0, "a", 5), dead(t, 1, "a", 5)}
		}, err: ErrDiverged},
		{name: "a redrive without an intent is loud", recs: func(t *testing.T) []record.Record {
			return []record.Record{dead(t, 0, "a", 5), redrive(t, 1, EntryRedriven, 0, 42)}
		}, err: ErrDiverged},
		{name: "a redrive elsewhere than the last intent is loud", recs: func(t *testing.T) []record.Record {
			return []record.Record{dead(t, 0, "a", 5), redrive(t, 1, EntryRedriving, 0, 40), redrive(t, 2, EntryRedriving, 0, 42), redrive(t, 3, EntryRedriven, 0, 40)}
		}, err: ErrDiverged},
		{name: "a second redrive is loud", recs: func(t *testing.T) []record.Record {
			return []record.Record{dead(t, 0, "a", 5), redrive(t, 1, EntryRedriving, 0, 40), redrive(t, 2, EntryRedriven, 0, 40), redrive(t, 3, EntryRedriving, 0, 41)}
		}, err: ErrDiverged},
		{name: "a redrive of no dead-lettered record is loud", recs: func(t *testing.T) []record.Record {
			return []record.Record{dead(t, 0, "a", 5), redrive(t, 1, EntryRedriving, 1, 40)}
		}, err: ErrDiverged},
		{name: "records out of order are loud", recs: func(t *testing.T) []record.Record {
			return []record.Record{dead(t, 1, "a", 5), dead(t, 0, "a", 6)}
		}, err: ErrDiverged},
		{name: "a record without the meta header is loud", recs: func(t *testing.T) []record.Record {
			return []record.Record{{Offset: 0, Kind: record.KindData, Payload: []byte("x")}}
		}, err: ErrMalformedEntry},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			s := NewState(tc.floor)
			var err error
			for _, r := range tc.recs(t) {
				if err = s.Apply(r); err != nil {
					break
				}
			}
			if tc.err != nil {
				if !errors.Is(err, tc.err) {
					t.Fatalf("fold error %v, want %v", err, tc.err)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if got := s.Superseded(); got != tc.superseded {
				t.Errorf("Superseded() = %d, want %d", got, tc.superseded)
			}
			if s.Len() != len(tc.want) {
				t.Fatalf("%d entries, want %d", s.Len(), len(tc.want))
			}
			for off, want := range tc.want {
				got, ok := s.Entry(off)
				if !ok || !reflect.DeepEqual(got, want) {
					t.Errorf("entry %d = %+v %v, want %+v", off, got, ok, want)
				}
				if at, ok := s.Find(want.Group, want.Offset); !ok || at != off {
					t.Errorf("Find(%q, %d) = %d %v, want %d", want.Group, want.Offset, at, ok, off)
				}
			}
		})
	}
}
