package replica

import (
	"testing"

	"felix.dev/felix/broker/record"
)

func recsAt(from uint64, n int) []record.Record {
	out := make([]record.Record, n)
	for i := range out {
		out[i] = record.Record{Offset: from + uint64(i), Epoch: 1, Payload: make([]byte, 100)}
	}
	return out
}

func TestRecentServesOnlyWhatItHolds(t *testing.T) {
	one := recsBytes(recsAt(0, 1))
	c := recent{limit: 5 * one}
	c.add(recsAt(10, 3))
	c.add(recsAt(13, 4)) // 7 records: the oldest two are dropped
	for _, tc := range []struct {
		name       string
		from, to   uint64
		max        int
		ok         bool
		first, end uint64
	}{
		{"evicted", 10, 20, 100, false, 0, 0},
		{"oldest kept", 12, 20, 100, true, 12, 17},
		{"bounded by to", 13, 15, 100, true, 13, 15},
		{"bounded by max", 12, 20, 2, true, 12, 14},
		{"beyond", 17, 20, 100, false, 0, 0},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got, ok := c.get(tc.from, tc.to, tc.max)
			if ok != tc.ok {
				t.Fatalf("ok %v, want %v", ok, tc.ok)
			}
			if !ok {
				return
			}
			if len(got) == 0 || got[0].Offset != tc.first || got[len(got)-1].Offset+1 != tc.end {
				t.Fatalf("got %v, want [%d, %d)", offsets(got), tc.first, tc.end)
			}
		})
	}
	c.truncate(15)
	if _, ok := c.get(15, 20, 10); ok {
		t.Fatal("truncated records still served")
	}
	c.add(recsAt(30, 1)) // not contiguous: start over
	if _, ok := c.get(12, 20, 10); ok {
		t.Fatal("records before a gap still served")
	}
	if got, ok := c.get(30, 31, 10); !ok || len(got) != 1 {
		t.Fatalf("after the gap: %v %v", got, ok)
	}
}

func offsets(recs []record.Record) []uint64 {
	out := make([]uint64, len(recs))
	for i, r := range recs {
		out[i] = r.Offset
	}
	return out
}
