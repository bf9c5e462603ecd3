package producer

import (
	"errors"
	"testing"
	"time"

	"felix.dev/felix/broker/record"
)

var (
	pA = ID{1}
	pB = ID{2}
	pC = ID{3}
)

// step is one call on a table: a Propose (with the expected decision), a
// Done, a Failed or an Observe.
type step struct {
	op          string // propose, done, failed, observe
	id          ID
	seq         uint64
	first, tail uint64
	now         int64
	want        Decision
}

func TestTableDecisions(t *testing.T) {
	min := int64(time.Minute)
	lim := Limits{MaxProducers: 2, Window: 2, MinAge: time.Minute}
	cases := []struct {
		name  string
		steps []step
	}{
		{"new producer starts at 0", []step{
			{op: "propose", id: pA, seq: 0, want: Decision{Verdict: Append}},
		}},
		{"new producer not at 0 is out of sequence, next 0", []step{
			{op: "propose", id: pA, seq: 3, want: Decision{Verdict: OutOfSequence, Next: 0}},
		}},
		{"retry of a written batch answers its offsets", []step{
			{op: "propose", id: pA, seq: 0, want: Decision{Verdict: Append}},
			{op: "done", id: pA, seq: 0, first: 10, tail: 12},
			{op: "propose", id: pA, seq: 0, want: Decision{Verdict: Duplicate, First: 10, Tail: 12}},
			{op: "propose", id: pA, seq: 1, want: Decision{Verdict: Append}},
		}},
		{"retry while in flight", []step{
			{op: "propose", id: pA, seq: 0, want: Decision{Verdict: Append}},
			{op: "propose", id: pA, seq: 0, want: Decision{Verdict: InFlight}},
		}},
		{"gap is out of sequence naming the next", []step{
			{op: "propose", id: pA, seq: 0, want: Decision{Verdict: Append}},
			{op: "done", id: pA, seq: 0, first: 0, tail: 1},
			{op: "propose", id: pA, seq: 2, want: Decision{Verdict: OutOfSequence, Next: 1}},
		}},
		{"retry older than the window is out of sequence", []step{
			{op: "propose", id: pA, seq: 0, want: Decision{Verdict: Append}},
			{op: "done", id: pA, seq: 0, first: 0, tail: 1},
			{op: "propose", id: pA, seq: 1, want: Decision{Verdict: Append}},
			{op: "done", id: pA, seq: 1, first: 1, tail: 2},
			{op: "propose", id: pA, seq: 2, want: Decision{Verdict: Append}},
			{op: "done", id: pA, seq: 2, first: 2, tail: 3},
			{op: "propose", id: pA, seq: 1, want: Decision{Verdict: Duplicate, First: 1, Tail: 2}},
			{op: "propose", id: pA, seq: 0, want: Decision{Verdict: OutOfSequence, Next: 3}},
		}},
		{"failure makes the producer uncertain, others unaffected", []step{
			{op: "propose", id: pA, seq: 0, want: Decision{Verdict: Append}},
			{op: "failed", id: pA, seq: 0},
			{op: "propose", id: pA, seq: 0, want: Decision{Verdict: Uncertain}},
			{op: "propose", id: pA, seq: 1, want: Decision{Verdict: Uncertain}},
			{op: "propose", id: pB, seq: 0, want: Decision{Verdict: Append}},
		}},
		{"an aborted batch may be sent again", []step{
			{op: "propose", id: pA, seq: 0, want: Decision{Verdict: Append}},
			{op: "abort", id: pA, seq: 0},
			{op: "propose", id: pA, seq: 1, want: Decision{Verdict: OutOfSequence, Next: 0}},
			{op: "propose", id: pA, seq: 0, want: Decision{Verdict: Append}},
		}},
		{"an aborted batch followed by another is out of sequence", []step{
			{op: "propose", id: pA, seq: 0, want: Decision{Verdict: Append}},
			{op: "propose", id: pA, seq: 1, want: Decision{Verdict: Append}},
			{op: "abort", id: pA, seq: 0},
			{op: "done", id: pA, seq: 1, first: 0, tail: 1},
			{op: "propose", id: pA, seq: 0, want: Decision{Verdict: OutOfSequence, Next: 2}},
			{op: "propose", id: pA, seq: 1, want: Decision{Verdict: Duplicate, First: 0, Tail: 1}},
		}},
		{"full of young producers refuses a new one", []step{
			{op: "propose", id: pA, seq: 0, now: 0, want: Decision{Verdict: Append}},
			{op: "propose", id: pB, seq: 0, now: 1, want: Decision{Verdict: Append}},
			{op: "propose", id: pC, seq: 0, now: min - 1, want: Decision{Verdict: Full}},
			// the known ones go on
			{op: "propose", id: pA, seq: 1, now: min - 1, want: Decision{Verdict: Append}},
		}},
		{"full evicts the least recently written once it is old", []step{
			{op: "propose", id: pA, seq: 0, now: 0, want: Decision{Verdict: Append}},
			{op: "propose", id: pB, seq: 0, now: 1, want: Decision{Verdict: Append}},
			{op: "propose", id: pA, seq: 1, now: 2, want: Decision{Verdict: Append}},
			{op: "propose", id: pC, seq: 0, now: min + 1, want: Decision{Verdict: Append}},
			// B was evicted: its next batch is out of sequence (never written twice)
			{op: "propose", id: pB, seq: 1, now: min + 1, want: Decision{Verdict: OutOfSequence, Next: 0}},
			{op: "propose", id: pA, seq: 2, now: min + 1, want: Decision{Verdict: Append}},
		}},
		{"rebuilt from the log answers the original offsets", []step{
			{op: "observe", id: pA, seq: 0, first: 5, tail: 7, now: 1},
			{op: "observe", id: pA, seq: 1, first: 9, tail: 10, now: 2},
			{op: "propose", id: pA, seq: 1, want: Decision{Verdict: Duplicate, First: 9, Tail: 10}},
			{op: "propose", id: pA, seq: 0, want: Decision{Verdict: Duplicate, First: 5, Tail: 7}},
			{op: "propose", id: pA, seq: 2, want: Decision{Verdict: Append}},
			{op: "propose", id: pA, seq: 4, want: Decision{Verdict: OutOfSequence, Next: 3}},
		}},
		{"rebuild past the bound keeps the latest producers", []step{
			{op: "observe", id: pA, seq: 0, first: 0, tail: 1, now: 1},
			{op: "observe", id: pB, seq: 0, first: 1, tail: 2, now: 2},
			{op: "observe", id: pC, seq: 0, first: 2, tail: 3, now: 3},
			{op: "propose", id: pA, seq: 1, want: Decision{Verdict: OutOfSequence, Next: 0}},
			{op: "propose", id: pC, seq: 0, want: Decision{Verdict: Duplicate, First: 2, Tail: 3}},
		}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			tb := NewTable(lim)
			for i, s := range tc.steps {
				switch s.op {
				case "propose":
					if got := tb.Propose(s.id, s.seq, s.now); got != s.want {
						t.Fatalf("step %d: Propose(%x, %d) = %+v, want %+v", i, s.id[:1], s.seq, got, s.want)
					}
				case "done":
					tb.Done(s.id, s.seq, s.first, s.tail)
				case "abort":
					tb.Abort(s.id, s.seq)
				case "failed":
					tb.Failed(s.id, s.seq)
				case "observe":
					tb.Observe(s.id, s.seq, s.first, s.tail, s.now)
				}
				if tb.Len() > lim.MaxProducers {
					t.Fatalf("step %d: table holds %d producers, limit %d", i, tb.Len(), lim.MaxProducers)
				}
			}
		})
	}
}

// TestTableStaysBounded: a client inventing producers, and one producer
// writing many batches, never grow the table past its limits.
func TestTableStaysBounded(t *testing.T) {
	lim := Limits{MaxProducers: 16, Window: 4, MinAge: time.Second}
	tb := NewTable(lim)
	now := int64(0)
	refused := 0
	for i := range 10000 {
		now += int64(time.Millisecond)
		var id ID
		id[0], id[1] = byte(i), byte(i>>8)
		if d := tb.Propose(id, 0, now); d.Verdict == Full {
			refused++
		}
	}
	if tb.Len() > lim.MaxProducers {
		t.Fatalf("table holds %d producers, limit %d", tb.Len(), lim.MaxProducers)
	}
	if refused == 0 {
		t.Fatal("a flood of new producers within MinAge was never refused")
	}
	tb = NewTable(lim)
	for seq := range uint64(1000) {
		if d := tb.Propose(pA, seq, now); d.Verdict != Append {
			t.Fatalf("seq %d: %v", seq, d.Verdict)
		}
		tb.Done(pA, seq, seq, seq+1)
	}
	for _, e := range tb.entries {
		if len(e.batches) > lim.Window {
			t.Fatalf("producer keeps %d batches, window %d", len(e.batches), lim.Window)
		}
	}
}

func TestHeaderRoundTripAndStrip(t *testing.T) {
	h := Header(pA, 7, 3)
	id, seq, n, err := ParseHeader(h.Value)
	if err != nil || id != pA || seq != 7 || n != 3 {
		t.Fatalf("ParseHeader = %x %d %d %v", id, seq, n, err)
	}
	for _, bad := range [][]byte{nil, make([]byte, headerSize), h.Value[:10]} {
		if _, _, _, err := ParseHeader(bad); !errors.Is(err, ErrBadHeader) {
			t.Fatalf("ParseHeader(%x) = %v, want ErrBadHeader", bad, err)
		}
	}
	hs := []record.Header{{Key: "a", Value: []byte("1")}, h}
	out := Strip(hs)
	if len(out) != 1 || out[0].Key != "a" || len(hs) != 2 {
		t.Fatalf("Strip = %v (input now %v)", out, hs)
	}
	tb := NewTable(Limits{})
	tb.ObserveRecords([]record.Record{
		{Offset: 4, Headers: []record.Header{h}},
		{Offset: 5},
		{Offset: 6},
		{Offset: 7, Headers: []record.Header{{Key: HeaderKey, Value: []byte("junk")}}},
	})
	if d := tb.Propose(pA, 7, 0); d != (Decision{Verdict: Duplicate, First: 4, Tail: 7}) {
		t.Fatalf("after ObserveRecords: %+v", d)
	}
}

// FuzzParseHeader: no input panics, and a value that parses re-encodes to
// the same bytes.
func FuzzParseHeader(f *testing.F) {
	f.Add(Header(pA, 0, 1).Value)
	f.Add(Header(ID{0xff}, 1<<63, 4096).Value)
	f.Add([]byte{})
	f.Fuzz(func(t *testing.T, v []byte) {
		id, seq, n, err := ParseHeader(v)
		if err != nil {
			return
		}
		if got := Header(id, seq, n).Value; string(got) != string(v) {
			t.Fatalf("re-encoded %x, want %x", got, v)
		}
	})
}

func TestScopedSeparatesPrincipals(t *testing.T) {
	first, again := Scoped("user/alice", pA), Scoped("user/alice", pA)
	if first != again {
		t.Fatal("Scoped is not stable")
	}
	if Scoped("user/alice", pA) == Scoped("user/mallory", pA) {
		t.Fatal("two principals share a producer")
	}
	if Scoped("user/alice", pA) == Scoped("user/alice", pB) {
		t.Fatal("two ids of one principal share a producer")
	}
}
