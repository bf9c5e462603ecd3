package replication

import (
	"sort"

	"felix.dev/felix/broker/record"
)

// logView is the core's in-memory view of one local log: its offsets and
// the epoch of each (as epoch starts), how far it is persisted, and the
// records written but not yet persisted (kept to ship and to answer
// fetches without reading the store).
//
// Invariants: base <= stable <= tail; epochs cover [base, tail);
// unstable holds exactly the records [unstableFrom, tail) and
// unstableFrom <= stable only transiently inside advance.
type logView struct {
	base         uint64
	tail         uint64
	stable       uint64
	epochs       []EpochStart
	unstable     []record.Record
	unstableFrom uint64
	// readyTail is the tail as of the last Ready that carried writes of
	// this log; Advance makes it the stable position.
	readyTail uint64
}

func newLogView(s LogState) logView {
	v := logView{base: s.Base, tail: s.Tail, stable: s.Tail, unstableFrom: s.Tail, readyTail: s.Tail}
	for _, e := range s.Epochs {
		if e.Offset >= s.Base && e.Offset < s.Tail {
			v.epochs = append(v.epochs, e)
		}
	}
	return v
}

// epochAt returns the epoch of the record at o; ok is false outside
// [base, tail).
func (v *logView) epochAt(o uint64) (uint64, bool) {
	if o < v.base || o >= v.tail {
		return 0, false
	}
	return epochIn(v.epochs, o)
}

// epochIn looks o up in a list of epoch starts (o must be covered).
func epochIn(starts []EpochStart, o uint64) (uint64, bool) {
	i := sort.Search(len(starts), func(i int) bool { return starts[i].Offset > o })
	if i == 0 {
		return 0, false
	}
	return starts[i-1].Epoch, true
}

// position describes the persisted log (what may be claimed to a peer).
func (v *logView) position() LogPosition {
	return LogPosition{Base: v.base, Tail: v.stable, Epochs: clipEpochs(v.epochs, v.stable)}
}

func clipEpochs(starts []EpochStart, end uint64) []EpochStart {
	n := sort.Search(len(starts), func(i int) bool { return starts[i].Offset >= end })
	out := make([]EpochStart, n)
	copy(out, starts[:n])
	return out
}

// lastEpochOf is the epoch of the last record of a position.
func lastEpochOf(p LogPosition) uint64 {
	if p.Tail <= p.Base {
		return 0
	}
	e, _ := epochIn(p.Epochs, p.Tail-1)
	return e
}

// appendRecords adds records that continue the log exactly at tail.
func (v *logView) appendRecords(recs []record.Record) {
	for _, r := range recs {
		if len(v.epochs) == 0 || v.epochs[len(v.epochs)-1].Epoch != r.Epoch {
			v.epochs = append(v.epochs, EpochStart{Epoch: r.Epoch, Offset: r.Offset})
		}
		v.tail = r.Offset + 1
	}
	if len(v.unstable) == 0 {
		v.unstableFrom = recs[0].Offset
	}
	v.unstable = append(v.unstable, recs...)
}

// truncate drops every record at or above at (at >= base).
func (v *logView) truncate(at uint64) {
	if at >= v.tail {
		return
	}
	v.tail = at
	n := sort.Search(len(v.epochs), func(i int) bool { return v.epochs[i].Offset >= at })
	v.epochs = v.epochs[:n]
	if v.stable > at {
		v.stable = at
	}
	if v.readyTail > at {
		v.readyTail = at
	}
	if at <= v.unstableFrom {
		v.unstable = nil
		v.unstableFrom = at
	} else {
		v.unstable = v.unstable[:at-v.unstableFrom]
	}
}

// advance marks everything written up to the last Ready as persisted.
func (v *logView) advance() {
	if v.readyTail > v.stable {
		v.stable = v.readyTail
	}
	if v.stable > v.unstableFrom {
		drop := v.stable - v.unstableFrom
		if drop > uint64(len(v.unstable)) {
			drop = uint64(len(v.unstable))
		}
		v.unstable = v.unstable[drop:]
		v.unstableFrom += drop
	}
	if len(v.unstable) == 0 {
		v.unstable = nil
		v.unstableFrom = v.tail
	}
}

// read returns records [from, to) (at most max): the unpersisted part from
// memory, the persisted part from the reader.
func (v *logView) read(r LogReader, l record.LogKind, from, to uint64, max int) ([]record.Record, error) {
	if to > v.tail {
		to = v.tail
	}
	if from >= to {
		return nil, nil
	}
	if uint64(max) < to-from {
		to = from + uint64(max)
	}
	if from >= v.unstableFrom && len(v.unstable) > 0 {
		lo := from - v.unstableFrom
		hi := to - v.unstableFrom
		out := make([]record.Record, hi-lo)
		copy(out, v.unstable[lo:hi])
		return out, nil
	}
	end := to
	if len(v.unstable) > 0 && end > v.unstableFrom {
		end = v.unstableFrom
	}
	return r.Read(l, from, end, int(end-from))
}

// commonPrefix returns the largest c in [base, min(tails)] such that the
// local log and p hold the same epoch at every offset below c. By the log
// matching property (one leader per epoch, records of an epoch shipped in
// order) equal epochs at c-1 imply equal prefixes, so the predicate is
// prefix-closed and binary search finds c.
func (v *logView) commonPrefix(p LogPosition) uint64 {
	lo := v.base
	if p.Base > lo {
		lo = p.Base
	}
	hi := v.tail
	if p.Tail < hi {
		hi = p.Tail
	}
	if hi <= lo {
		return lo
	}
	same := func(o uint64) bool {
		a, ok1 := v.epochAt(o)
		b, ok2 := epochIn(p.Epochs, o)
		return ok1 && ok2 && a == b
	}
	// Largest n in [0, hi-lo] with same(lo+n-1) (n == 0 always holds).
	n := sort.Search(int(hi-lo), func(i int) bool { return !same(lo + uint64(i)) })
	return lo + uint64(n)
}
