package history

import (
	"fmt"
	"testing"

	"github.com/anishathalye/porcupine"
)

// long is a sequential history of n appends with a read of the 20 records
// 50 behind every 100th, a trim to 10 at append 1000 and an unknown trim
// to 30 at 2000, then lastRead (from its first record's offset, or 11).
func long(n int, lastRead Output) []porcupine.Operation {
	var ops []porcupine.Operation
	t := int64(0)
	add := func(in Input, out Output, ret int64) {
		in.Shard = "s"
		ops = append(ops, porcupine.Operation{Input: in, Output: out, Call: t, Return: ret})
		t += 2
	}
	off := uint64(0)
	for i := 0; i < n; i++ {
		add(appendIn(fmt.Sprintf("a-%d", i)), ok(off), t+1)
		off++
		switch {
		case i == 1000:
			add(trimIn(10, off), trimOK(10), t+1)
			off++
		case i == 2000:
			add(trimIn(30, off), unknown(), -1)
			off++
		case i > 100 && i%100 == 0:
			var recs []Record
			for j := i - 50; j < i-30; j++ {
				o := uint64(j)
				if j > 1000 {
					o++
				}
				if j > 2000 {
					o++
				}
				recs = append(recs, rec(o, fmt.Sprintf("a-%d", j)))
			}
			add(readIn(recs[0].Offset), readOK(recs[len(recs)-1].Offset+1, recs...), t+1)
		}
	}
	from := uint64(11)
	if len(lastRead.Records) > 0 {
		from = lastRead.Records[0].Offset
	}
	add(readIn(from), lastRead, t+1)
	for i := range ops {
		if ops[i].Return < 0 {
			ops[i].Return = t + 1
		}
	}
	return ops
}

func TestSegmentedHistory(t *testing.T) {
	tests := []struct {
		name string
		last Output
		want porcupine.CheckResult
	}{
		{"a read below the floor an acknowledged trim set two segments earlier", readOK(6, rec(5, "a-5")), porcupine.Illegal},
		{"a read above it, below the unknown trim's (which did not take effect)", readOK(12, rec(11, "a-11")), porcupine.Ok},
		{"CursorTooOld naming that floor", tooOld(30), porcupine.Ok},
		{"CursorTooOld naming a floor no trim set", tooOld(40), porcupine.Illegal},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			ops := long(3*maxSegment, tt.last)
			segs := Model().Partition(ops)
			if len(segs) < 3 {
				t.Fatalf("%d segments, want at least 3", len(segs))
			}
			if v := CheckOperations(ops, Stats{}, 0).Verdict; v != tt.want {
				t.Fatalf("verdict %s, want %s", v, tt.want)
			}
		})
	}
}

func TestSegmentedHistoryLostRecord(t *testing.T) {
	ops := long(3*maxSegment, tooOld(30))
	// A read in the last segment of records from the first but one,
	// missing one: the snapshot carries the earlier records.
	var recs []Record
	for j := 1500; j < 1510; j++ {
		if j != 1505 {
			recs = append(recs, rec(uint64(j+1), fmt.Sprintf("a-%d", j)))
		}
	}
	last := ops[len(ops)-1]
	ops = append(ops, porcupine.Operation{Input: Input{Shard: "s", Kind: Read, From: 1501}, Output: readOK(1511, recs...), Call: last.Return + 1, Return: last.Return + 2})
	if v := CheckOperations(ops, Stats{}, 0).Verdict; v != porcupine.Illegal {
		t.Fatalf("verdict %s, want Illegal", v)
	}
	recs = append(recs[:5], append([]Record{rec(1506, "a-1505")}, recs[5:]...)...)
	ops[len(ops)-1].Output = readOK(1511, recs...)
	if v := CheckOperations(ops, Stats{}, 0).Verdict; v != porcupine.Ok {
		t.Fatalf("verdict %s with the record, want Ok", v)
	}
}
