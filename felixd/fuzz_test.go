package felixd

import (
	"strconv"
	"testing"

	"felix.dev/felix/broker/record"
)

// FuzzEpochOf decodes the felixd-epoch header of records read from the
// stream (bytes from outside): it never panics, and accepts exactly the
// decimal encodings headersFor writes.
func FuzzEpochOf(f *testing.F) {
	f.Fuzz(func(t *testing.T, v []byte) {
		e, ok := EpochOf([]record.Header{{Key: HeaderEpoch, Value: v}})
		if !ok {
			return
		}
		back, ok2 := EpochOf(headersFor(e, KindOutput))
		if !ok2 || back != e {
			t.Fatalf("epoch %d does not round-trip", e)
		}
		if _, err := strconv.ParseUint(string(v), 10, 64); err != nil {
			t.Fatalf("accepted %q", v)
		}
	})
}

// FuzzCounter feeds the example workload snapshot and output payloads read
// from the stream: it never panics, a restored snapshot round-trips, and an
// accepted output is the next value.
func FuzzCounter(f *testing.F) {
	f.Fuzz(func(t *testing.T, snap, out []byte) {
		var c Counter
		if err := c.Restore(snap); err != nil {
			return
		}
		got, _ := c.Snapshot()
		var d Counter
		if err := d.Restore(got); err != nil || d.Value() != c.Value() {
			t.Fatalf("snapshot %q does not round-trip: %v", got, err)
		}
		before := c.Value()
		if err := c.Apply(out); err == nil && c.Value() != before+1 {
			t.Fatalf("output %q moved the counter from %d to %d", out, before, c.Value())
		}
	})
}
