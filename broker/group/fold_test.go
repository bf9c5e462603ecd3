package group

import (
	"errors"
	"fmt"
	"reflect"
	"strings"
	"testing"

	"felix.dev/felix/broker/logstore"
	"felix.dev/felix/broker/record"
)

func rec(t *testing.T, off uint64, p []byte, err error) record.Record {
	t.Helper()
	if err != nil {
		t.Fatal(err)
	}
	return record.Record{Offset: off, Kind: record.KindData, Payload: p}
}

func claim(t *testing.T, off uint64, g, m string, gen uint64) record.Record {
	p, err := EncodeClaim(Claim{Group: g, Member: m, Generation: gen})
	return rec(t, off, p, err)
}

func commit(t *testing.T, off uint64, g, m string, gen, at uint64) record.Record {
	p, err := EncodeCommit(Commit{Group: g, Member: m, Generation: gen, Offset: at})
	return rec(t, off, p, err)
}

func release(t *testing.T, off uint64, g, m string, gen uint64) record.Record {
	p, err := EncodeRelease(Release{Group: g, Member: m, Generation: gen})
	return rec(t, off, p, err)
}

func snap(t *testing.T, off uint64, gs map[string]Info) record.Record {
	p, err := EncodeSnapshot(Snapshot{Groups: gs})
	return rec(t, off, p, err)
}

func TestFold(t *testing.T) {
	tests := []struct {
		name    string
		floor   uint64
		trimmed bool
		recs    func(t *testing.T) []record.Record
		want    map[string]Info
		next    uint64
		err     error
	}{
		{name: "empty", want: map[string]Info{}},
		{name: "claim and commits", recs: func(t *testing.T) []record.Record {
			return []record.Record{claim(t, 0, "g", "m1", 1), commit(t, 1, "g", "m1", 1, 10), commit(t, 2, "g", "m1", 1, 25)}
		}, want: map[string]Info{"g": {Owner: "m1", Generation: 1, Committed: 25}}, next: 3},
		{name: "a takeover keeps the committed offset", recs: func(t *testing.T) []record.Record {
			return []record.Record{claim(t, 0, "g", "m1", 1), commit(t, 1, "g", "m1", 1, 10), claim(t, 2, "g", "m2", 2), commit(t, 3, "g", "m2", 2, 12)}
		}, want: map[string]Info{"g": {Owner: "m2", Generation: 2, Committed: 12}}, next: 4},
		{name: "release frees the shard, the next claim is the next generation", recs: func(t *testing.T) []record.Record {
			return []record.Record{claim(t, 0, "g", "m1", 1), release(t, 1, "g", "m1", 1), {Offset: 2, Kind: record.KindFence}, claim(t, 3, "g", "m1", 2)}
		}, want: map[string]Info{"g": {Owner: "m1", Generation: 2}}, next: 4},
		{name: "groups are apart", recs: func(t *testing.T) []record.Record {
			return []record.Record{claim(t, 0, "a", "m", 1), claim(t, 1, "b", "m", 1), commit(t, 2, "b", "m", 1, 3)}
		}, want: map[string]Info{"a": {Owner: "m", Generation: 1}, "b": {Owner: "m", Generation: 1, Committed: 3}}, next: 3},
		{name: "snapshot replaces the state", recs: func(t *testing.T) []record.Record {
			return []record.Record{claim(t, 0, "gone", "m", 1), snap(t, 1, map[string]Info{"g": {Owner: "m", Generation: 4, Committed: 9}}), commit(t, 2, "g", "m", 4, 11)}
		}, want: map[string]Info{"g": {Owner: "m", Generation: 4, Committed: 11}}, next: 3},
		{name: "trimmed log starts at its snapshot", floor: 5, trimmed: true, recs: func(t *testing.T) []record.Record {
			return []record.Record{snap(t, 5, map[string]Info{"g": {Generation: 2, Committed: 7}}), claim(t, 6, "g", "m", 3)}
		}, want: map[string]Info{"g": {Owner: "m", Generation: 3, Committed: 7}}, next: 7},
		{name: "trimmed log without a snapshot at its floor is lost", floor: 5, trimmed: true, recs: func(t *testing.T) []record.Record {
			return []record.Record{claim(t, 5, "g", "m", 1)}
		}, err: ErrNoSnapshot},
		{name: "a commit of a superseded generation is loud", recs: func(t *testing.T) []record.Record {
			return []record.Record{claim(t, 0, "g", "m1", 1), claim(t, 1, "g", "m2", 2), commit(t, 2, "g", "m1", 1, 5)}
		}, err: ErrDiverged},
		{name: "a commit by another member at the current generation is loud", recs: func(t *testing.T) []record.Record {
			return []record.Record{claim(t, 0, "g", "m1", 1), commit(t, 1, "g", "m2", 1, 5)}
		}, err: ErrDiverged},
		{name: "a commit of an unclaimed group is loud", recs: func(t *testing.T) []record.Record {
			return []record.Record{commit(t, 0, "g", "m1", 0, 5)}
		}, err: ErrDiverged},
		{name: "a commit after a release is loud", recs: func(t *testing.T) []record.Record {
			return []record.Record{claim(t, 0, "g", "m1", 1), release(t, 1, "g", "m1", 1), commit(t, 2, "g", "m1", 1, 5)}
		}, err: ErrDiverged},
		{name: "a claim that skips a generation is loud", recs: func(t *testing.T) []record.Record {
			return []record.Record{claim(t, 0, "g", "m1", 2)}
		}, err: ErrDiverged},
		{name: "a claim that repeats a generation is loud", recs: func(t *testing.T) []record.Record {
			return []record.Record{claim(t, 0, "g", "m1", 1), claim(t, 1, "g", "m2", 1)}
		}, err: ErrDiverged},
		{name: "an empty member is loud", recs: func(t *testing.T) []record.Record {
			return []record.Record{claim(t, 0, "g", "", 1)}
		}, err: ErrDiverged},
		{name: "a release by another member is loud", recs: func(t *testing.T) []record.Record {
			return []record.Record{claim(t, 0, "g", "m1", 1), release(t, 1, "g", "m2", 1)}
		}, err: ErrDiverged},
		{name: "records out of order are loud", recs: func(t *testing.T) []record.Record {
			return []record.Record{claim(t, 1, "g", "m1", 1), claim(t, 1, "g", "m2", 2)}
		}, err: ErrDiverged},
		{name: "malformed entry is loud", recs: func(t *testing.T) []record.Record {
			return []record.Record{{Offset: 0, Kind: record.KindData, Payload: []byte{9}}}
		}, err: ErrMalformedEntry},
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
			if tc.err != nil {
				if !errors.Is(err, tc.err) {
					t.Fatalf("fold error %v, want %v", err, tc.err)
				}
				return
			}
			if err != nil {
				t.Fatalf("fold: %v", err)
			}
			if s.Next() != tc.next || len(s.Groups()) != len(tc.want) {
				t.Fatalf("next %d groups %v, want %d %v", s.Next(), s.Groups(), tc.next, tc.want)
			}
			for g, in := range tc.want {
				if got, ok := s.Group(g); !ok || !reflect.DeepEqual(got, in) {
					t.Errorf("%s = %+v %v, want %+v", g, got, ok, in)
				}
			}
		})
	}
}

func TestChecks(t *testing.T) {
	s := NewState(Limits{MaxGroups: 2, MaxNameBytes: 4}, 0, false)
	for _, r := range []record.Record{claim(t, 0, "a", "m1", 1), claim(t, 1, "b", "m1", 1), release(t, 2, "b", "m1", 1)} {
		if err := s.Apply(r); err != nil {
			t.Fatal(err)
		}
	}
	claims := []struct {
		group, member string
		want          Claim
		held          bool
		err           error
	}{
		{"a", "m1", Claim{"a", "m1", 2}, false, nil},
		{"a", "m2", Claim{"a", "m2", 2}, true, nil},
		{"b", "m2", Claim{"b", "m2", 2}, false, nil},
		{"c", "m1", Claim{}, false, ErrTooManyGroups},
		{"a", "toolong", Claim{}, false, ErrNameTooLong},
		{"", "m1", Claim{}, false, ErrEmptyName},
		{"a", "", Claim{}, false, ErrEmptyName},
	}
	for _, tc := range claims {
		c, held, err := s.CheckClaim(tc.group, tc.member)
		if !errors.Is(err, tc.err) || c != tc.want || held != tc.held {
			t.Errorf("CheckClaim(%q, %q) = %+v %v %v; want %+v %v %v", tc.group, tc.member, c, held, err, tc.want, tc.held, tc.err)
		}
	}
	owners := []struct {
		group, member string
		gen           uint64
		fenced        bool
	}{
		{"a", "m1", 1, false}, {"a", "m1", 2, true}, {"a", "m2", 1, true}, {"b", "m1", 1, true}, {"x", "m1", 0, true},
	}
	for _, tc := range owners {
		err := s.CheckOwner(tc.group, tc.member, tc.gen)
		var fe *FencedError
		if tc.fenced != errors.Is(err, ErrFenced) || tc.fenced != errors.As(err, &fe) {
			t.Errorf("CheckOwner(%q, %q, %d) = %v, fenced %v", tc.group, tc.member, tc.gen, err, tc.fenced)
		}
	}
}

// TestSnapshotRoundTrip: a snapshot folded on its own as a trimmed log's
// first entry gives back the same groups.
func TestSnapshotRoundTrip(t *testing.T) {
	s := NewState(Limits{}, 0, false)
	for _, r := range []record.Record{claim(t, 0, "a", "m1", 1), commit(t, 1, "a", "m1", 1, 7), claim(t, 2, "b", "m2", 1), release(t, 3, "b", "m2", 1)} {
		if err := s.Apply(r); err != nil {
			t.Fatal(err)
		}
	}
	re := NewState(Limits{}, 4, true)
	if err := re.Apply(snap(t, 4, s.Snapshot().Groups)); err != nil {
		t.Fatal(err)
	}
	for _, g := range s.Groups() {
		a, _ := s.Group(g)
		b, ok := re.Group(g)
		if !ok || !reflect.DeepEqual(a, b) {
			t.Fatalf("%s: %+v after the snapshot, want %+v", g, b, a)
		}
	}
	if re.Next() != 5 || re.SinceSnapshot() != 0 {
		t.Fatalf("next %d since %d", re.Next(), re.SinceSnapshot())
	}
}

// A snapshot of a shard at every default bound fits one record of the log
// store's default record limit, so a full shard can always snapshot.
func TestFullSnapshotFitsARecord(t *testing.T) {
	lim := Limits{}.WithDefaults()
	gs := map[string]Info{}
	for i := range lim.MaxGroups {
		g := []byte(strings.Repeat("g", lim.MaxNameBytes))
		copy(g, fmt.Sprint(i))
		gs[string(g)] = Info{Owner: strings.Repeat("m", lim.MaxNameBytes), Generation: ^uint64(0), Committed: ^uint64(0)}
	}
	p, err := EncodeSnapshot(Snapshot{Groups: gs})
	if err != nil || len(p) > logstore.DefaultMaxRecordBytes {
		t.Fatalf("full snapshot: %d bytes, %v", len(p), err)
	}
}
