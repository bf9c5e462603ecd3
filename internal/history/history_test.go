package history

import (
	"path/filepath"
	"testing"

	"github.com/anishathalye/porcupine"
)

// h builds a history by hand: each op gives its client, call and return
// times (return < 0: unknown, completes at the end).
type h struct {
	ops []porcupine.Operation
}

func (b *h) add(client int, call, ret int64, in Input, out Output) *h {
	if in.Shard == "" {
		in.Shard = "s"
	}
	b.ops = append(b.ops, porcupine.Operation{ClientId: client, Input: in, Call: call, Output: out, Return: ret})
	return b
}

func appendIn(ids ...string) Input { return Input{Kind: Append, IDs: ids} }
func condIn(e uint64, ids ...string) Input {
	return Input{Kind: ConditionalAppend, IDs: ids, ExpectTail: e}
}
func trimIn(floor, e uint64) Input { return Input{Kind: Trim, Floor: floor, ExpectTail: e} }
func readIn(from uint64) Input     { return Input{Kind: Read, From: from} }

func ok(first uint64) Output { return Output{Status: OK, First: first} }
func trimOK(floor uint64) Output {
	return Output{Status: OK, Floor: floor}
}
func readOK(next uint64, recs ...Record) Output { return Output{Status: OK, Records: recs, Next: next} }
func rec(off uint64, id string) Record          { return Record{Offset: off, ID: id} }
func mismatch(tail uint64) Output {
	return Output{Status: Refused, Refusal: OffsetMismatch, Tail: tail}
}
func tooOld(floor uint64) Output { return Output{Status: Refused, Refusal: CursorTooOld, Floor: floor} }
func unknown() Output            { return Output{Status: Unknown} }

func TestModelVerdicts(t *testing.T) {
	tests := []struct {
		name string
		h    *h
		want porcupine.CheckResult
	}{
		{"sequential appends and a read", new(h).
			add(0, 1, 2, appendIn("a"), ok(0)).
			add(0, 3, 4, appendIn("b", "c"), ok(1)).
			add(1, 5, 6, readIn(0), readOK(3, rec(0, "a"), rec(1, "b"), rec(2, "c"))), porcupine.Ok},
		{"a lost acknowledged append", new(h).
			add(0, 1, 2, appendIn("a"), ok(0)).
			add(0, 3, 4, appendIn("b"), ok(1)).
			add(1, 5, 6, readIn(0), readOK(2, rec(0, "a"))), porcupine.Illegal},
		{"an acknowledged append read at another offset", new(h).
			add(0, 1, 2, appendIn("a"), ok(0)).
			add(1, 5, 6, readIn(0), readOK(2, rec(1, "a"))), porcupine.Illegal},
		{"a record read twice (at two offsets)", new(h).
			add(0, 1, 2, appendIn("a"), ok(0)).
			add(1, 5, 6, readIn(0), readOK(2, rec(0, "a"), rec(1, "a"))), porcupine.Illegal},
		{"two acknowledged appends at one offset", new(h).
			add(0, 1, 2, appendIn("a"), ok(0)).
			add(1, 3, 4, appendIn("b"), ok(0)), porcupine.Illegal},
		{"concurrent appends in either order", new(h).
			add(0, 1, 10, appendIn("a"), ok(1)).
			add(1, 2, 9, appendIn("b"), ok(0)).
			add(2, 11, 12, readIn(0), readOK(2, rec(0, "b"), rec(1, "a"))), porcupine.Ok},
		{"a read of a record before its append was invoked", new(h).
			add(1, 1, 2, readIn(0), readOK(1, rec(0, "a"))).
			add(0, 3, 4, appendIn("a"), ok(0)), porcupine.Illegal},
		{"a read concurrent with the append sees it", new(h).
			add(0, 1, 4, appendIn("a"), ok(0)).
			add(1, 2, 3, readIn(0), readOK(1, rec(0, "a"))), porcupine.Ok},
		{"a fence (a gap) skipped by appends and reads", new(h).
			add(0, 1, 2, appendIn("a"), ok(0)).
			add(0, 3, 4, appendIn("b"), ok(2)).
			add(1, 5, 6, readIn(0), readOK(3, rec(0, "a"), rec(2, "b"))), porcupine.Ok},
		{"a read skipping past offsets an acknowledged append then uses", new(h).
			add(0, 1, 2, appendIn("a"), ok(0)).
			add(1, 3, 4, readIn(0), readOK(3, rec(0, "a"))).
			add(0, 5, 6, appendIn("b"), ok(1)), porcupine.Illegal},
		{"two conditional appends at the same expected tail both acknowledged", new(h).
			add(0, 1, 10, condIn(0, "a"), ok(0)).
			add(1, 2, 9, condIn(0, "b"), ok(0)), porcupine.Illegal},
		{"conditional appends: one wins, the other is refused", new(h).
			add(0, 1, 10, condIn(0, "a"), ok(0)).
			add(1, 2, 9, condIn(0, "b"), mismatch(1)).
			add(2, 11, 12, readIn(0), readOK(1, rec(0, "a"))), porcupine.Ok},
		{"a conditional append acknowledged at another offset than expected", new(h).
			add(0, 1, 2, condIn(0, "a"), ok(1)), porcupine.Illegal},
		{"a refused conditional append that was written", new(h).
			add(0, 1, 2, appendIn("a"), ok(0)).
			add(0, 3, 4, condIn(0, "b"), mismatch(1)).
			add(1, 5, 6, readIn(0), readOK(2, rec(0, "a"), rec(1, "b"))), porcupine.Illegal},
		{"an OffsetMismatch at the tail with a data record there later", new(h).
			add(0, 1, 2, appendIn("a"), ok(0)).
			add(0, 3, 4, condIn(1, "b"), mismatch(2)).
			add(0, 5, 6, appendIn("c"), ok(1)), porcupine.Illegal},
		{"a refusal at the offset of a trim not yet committed, reads below its floor meanwhile", new(h).
			add(0, 1, 2, appendIn("a", "b"), ok(0)).
			add(0, 3, 20, trimIn(1, 2), trimOK(1)).
			add(1, 4, 5, condIn(2, "c"), mismatch(3)).
			add(2, 6, 7, readIn(0), readOK(2, rec(0, "a"), rec(1, "b"))).
			add(1, 21, 22, condIn(3, "d"), ok(3)), porcupine.Ok},
		{"a refusal at the tail, then data at that offset", new(h).
			add(0, 1, 2, appendIn("a", "b"), ok(0)).
			add(1, 4, 5, condIn(2, "c"), mismatch(3)).
			add(0, 6, 7, appendIn("d"), ok(2)), porcupine.Illegal},
		{"a read below an acknowledged trim's floor", new(h).
			add(0, 1, 2, appendIn("a", "b"), ok(0)).
			add(0, 3, 4, trimIn(1, 2), trimOK(1)).
			add(1, 5, 6, readIn(0), readOK(3, rec(0, "a"), rec(1, "b"))), porcupine.Illegal},
		{"a read at the floor after a trim; below it CursorTooOld", new(h).
			add(0, 1, 2, appendIn("a", "b"), ok(0)).
			add(0, 3, 4, trimIn(1, 2), trimOK(1)).
			add(1, 5, 6, readIn(1), readOK(3, rec(1, "b"))).
			add(1, 7, 8, readIn(0), tooOld(1)).
			add(0, 9, 10, appendIn("c"), ok(3)), porcupine.Ok},
		{"earliest reads from the floor", new(h).
			add(0, 1, 2, appendIn("a", "b"), ok(0)).
			add(0, 3, 4, trimIn(1, 2), trimOK(1)).
			add(1, 5, 6, Input{Kind: Read, Earliest: true}, readOK(3, rec(1, "b"))), porcupine.Ok},
		{"earliest serving a record below the floor", new(h).
			add(0, 1, 2, appendIn("a", "b"), ok(0)).
			add(0, 3, 4, trimIn(1, 2), trimOK(1)).
			add(1, 5, 6, Input{Kind: Read, Earliest: true}, readOK(3, rec(0, "a"), rec(1, "b"))), porcupine.Illegal},
		{"CursorTooOld with no trim", new(h).
			add(0, 1, 2, appendIn("a"), ok(0)).
			add(1, 3, 4, readIn(0), tooOld(1)), porcupine.Illegal},
		{"CursorTooOld naming a floor no trim set", new(h).
			add(0, 1, 2, appendIn("a", "b", "c"), ok(0)).
			add(0, 3, 4, trimIn(1, 3), trimOK(1)).
			add(1, 5, 6, readIn(1), tooOld(2)), porcupine.Illegal},
		{"CursorTooOld at or above the floor it names", new(h).
			add(0, 1, 2, appendIn("a", "b"), ok(0)).
			add(0, 3, 4, trimIn(1, 2), trimOK(1)).
			add(1, 5, 6, readIn(1), tooOld(1)), porcupine.Illegal},
		{"a trim takes an offset", new(h).
			add(0, 1, 2, appendIn("a"), ok(0)).
			add(0, 3, 4, trimIn(1, 1), trimOK(1)).
			add(0, 5, 6, appendIn("b"), ok(1)), porcupine.Illegal},
		{"two trims at the same expected tail both acknowledged", new(h).
			add(0, 1, 2, appendIn("a", "b"), ok(0)).
			add(0, 3, 10, trimIn(1, 2), trimOK(1)).
			add(1, 4, 9, trimIn(2, 2), trimOK(2)), porcupine.Illegal},
		{"a no-op trim still needs its tail", new(h).
			add(0, 1, 2, appendIn("a", "b"), ok(0)).
			add(0, 3, 4, trimIn(1, 2), trimOK(1)).
			add(0, 5, 6, trimIn(1, 2), trimOK(1)), porcupine.Illegal},
		{"an unknown trim that took effect", new(h).
			add(0, 1, 2, appendIn("a", "b"), ok(0)).
			add(0, 3, -1, trimIn(1, 2), unknown()).
			add(1, 5, 6, readIn(0), tooOld(1)).
			add(2, 7, 8, appendIn("c"), ok(3)), porcupine.Ok},
		{"an unknown trim that did not", new(h).
			add(0, 1, 2, appendIn("a", "b"), ok(0)).
			add(0, 3, -1, trimIn(1, 2), unknown()).
			add(1, 5, 6, readIn(0), readOK(2, rec(0, "a"), rec(1, "b"))), porcupine.Ok},
		{"an unknown append read later", new(h).
			add(0, 1, -1, appendIn("a"), unknown()).
			add(0, 3, 4, appendIn("b"), ok(1)).
			add(1, 5, 6, readIn(0), readOK(2, rec(0, "a"), rec(1, "b"))), porcupine.Ok},
		{"an unknown append never read", new(h).
			add(0, 1, -1, appendIn("a"), unknown()).
			add(0, 3, 4, appendIn("b"), ok(0)).
			add(1, 5, 6, readIn(0), readOK(1, rec(0, "b"))), porcupine.Ok},
		{"an unknown append read at two offsets", new(h).
			add(0, 1, -1, appendIn("a"), unknown()).
			add(1, 5, 6, readIn(0), readOK(1, rec(0, "a"))).
			add(1, 7, 8, readIn(0), readOK(2, rec(1, "a"))), porcupine.Illegal},
		{"shards are checked apart", new(h).
			add(0, 1, 2, Input{Shard: "x", Kind: Append, IDs: []string{"a"}}, ok(0)).
			add(1, 1, 2, Input{Shard: "y", Kind: Append, IDs: []string{"b"}}, ok(0)).
			add(2, 3, 4, Input{Shard: "y", Kind: Read}, readOK(1, rec(0, "b"))), porcupine.Ok},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			ops, st := replay(tt.h.ops)
			res := CheckOperations(ops, st, 0)
			if res.Verdict != tt.want {
				t.Fatalf("verdict %s, want %s", res.Verdict, tt.want)
			}
			if res.Verdict == porcupine.Illegal {
				if err := res.Visualize(filepath.Join(t.TempDir(), "h.html")); err != nil {
					t.Fatal(err)
				}
			}
		})
	}
}

// clock is a fake monotonic clock the replay sets.
type fakeClock struct{ t int64 }

func clock(t int64) *fakeClock  { return &fakeClock{t} }
func (c *fakeClock) now() int64 { return c.t }

// replay records a hand-written history through a Recorder (so its
// resolution of unknown outcomes is what is checked).
func replay(hist []porcupine.Operation) ([]porcupine.Operation, Stats) {
	c := clock(0)
	r := NewRecorder(c.now)
	type ev struct {
		at   int64
		call bool
		i    int
	}
	var evs []ev
	for i, op := range hist {
		evs = append(evs, ev{op.Call, true, i})
		if op.Return >= 0 {
			evs = append(evs, ev{op.Return, false, i})
		}
	}
	calls := make([]*Call, len(hist))
	for at := int64(0); at <= 100; at++ {
		for _, e := range evs {
			if e.at != at {
				continue
			}
			c.t = at
			if e.call {
				calls[e.i] = r.Invoke(hist[e.i].ClientId, hist[e.i].Input.(Input))
			} else {
				calls[e.i].Complete(hist[e.i].Output.(Output))
			}
		}
	}
	c.t = 101
	return r.Operations()
}

func TestRecorderStats(t *testing.T) {
	c := clock(0)
	r := NewRecorder(c.now)
	r.Invoke(0, appendIn("a")).Complete(ok(0))
	c.t = 1
	r.Invoke(0, appendIn("b")) // never completed: unknown
	r.Invoke(1, readIn(0)).Complete(readOK(2, rec(0, "a"), rec(1, "b")))
	c.t = 5
	ops, st := r.Operations()
	if st.Ops != 3 || st.OK != 2 || st.Unknown != 1 || st.UnknownLanded != 1 {
		t.Fatalf("stats %+v, want 3 ops, 2 ok, 1 unknown, landed", st)
	}
	if got, want := st.String(), "append 1/0/1, read 1/0/0"; got != want {
		t.Fatalf("stats %q, want %q", got, want)
	}
	if got := ops[1].Return; got != 6 {
		t.Fatalf("unknown op returns at %d, want the end of the history (6)", got)
	}
	if v := CheckOperations(ops, st, 0).Verdict; v != porcupine.Ok {
		t.Fatalf("verdict %s", v)
	}
}
