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
// Invariants: base <= stable <= tail; epochs cover [base, tail) and,
// when the log is not empty, the first epoch start is at base (records
// below base are gone, so is what the index knew of them);
// unstable holds exactly the records [unstableFrom, tail) and
// unstableFrom <= stable only transiently inside advance.
type logView struct {
	base         uint64
	tail         uint64
	stable       uint64
	epochs       []EpochStart
	unstable     []record.Record
	unstableFrom uint64
	// issued holds, oldest first, the tail as of each Ready not yet
	// advanced, lowered to every later truncation or reset point: the
	// Advance of that Ready makes it the stable position.
	issued []uint64
	// issuedHead is how many of issued were advanced already: the live
	// ones are issued[issuedHead:]. The array is reused once they all
	// are (no allocation per Ready, and no shifting: Readies can pile up
	// while the disk is full).
	issuedHead int
	// baseEpoch is the epoch of the record just below base, when known
	// (learned by compacting or from the leader at a reset; 0 otherwise,
	// e.g. after a restart). It lets an Append at the base still offer a
	// previous record to check.
	baseEpoch uint64
}

func newLogView(s LogState) logView {
	v := logView{base: s.Base, tail: s.Tail, stable: s.Tail, unstableFrom: s.Tail}
	for _, e := range s.Epochs {
		if e.Offset >= s.Tail {
			break
		}
		if e.Offset <= s.Base {
			// The epoch covering base starts, for this log, at base.
			v.epochs = append(v.epochs[:0], EpochStart{Epoch: e.Epoch, Offset: s.Base})
			continue
		}
		v.epochs = append(v.epochs, e)
	}
	return v
}

// compact raises base to start (base < start <= stable): the records below
// start are gone from the store. The epoch covering start is kept, starting
// at start, so epochAt keeps working for every stored offset.
func (v *logView) compact(start uint64) {
	v.baseEpoch, _ = v.epochAt(start - 1)
	e, ok := v.epochAt(start)
	n := sort.Search(len(v.epochs), func(i int) bool { return v.epochs[i].Offset > start })
	rest := v.epochs[n:]
	v.epochs = nil
	if ok {
		v.epochs = append(v.epochs, EpochStart{Epoch: e, Offset: start})
	}
	v.epochs = append(v.epochs, rest...)
	v.base = start
}

// reset makes the log empty at at (at >= base): base, tail and the
// persisted position all at, no records in memory. prev is the epoch of
// the record below at, if known (else 0).
func (v *logView) reset(at, prev uint64) {
	v.base, v.tail, v.stable, v.unstableFrom = at, at, at, at
	v.epochs, v.unstable = nil, nil
	v.lowerIssued(at)
	v.baseEpoch = prev
}

// prevEpoch returns the epoch of the record below o (base <= o <= tail):
// from the epoch starts, or baseEpoch at the base (0 when unknown, or
// when o is 0).
func (v *logView) prevEpoch(o uint64) uint64 {
	if o == v.base {
		return v.baseEpoch
	}
	e, _ := v.epochAt(o - 1)
	return e
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
// An empty one whose last epoch is known (baseEpoch) lists that epoch as
// starting at its base, so a recovering leader ranks it by that epoch.
func (v *logView) position() LogPosition {
	p := LogPosition{Base: v.base, Tail: v.stable, Epochs: clipEpochs(v.epochs, v.stable)}
	if p.Tail == p.Base && v.baseEpoch != 0 {
		p.Epochs = []EpochStart{{Epoch: v.baseEpoch, Offset: v.base}}
	}
	return p
}

// full describes the whole log, persisted or not (a recovering leader's
// own candidate log), with the same convention for an empty log.
func (v *logView) full() LogPosition {
	p := LogPosition{Base: v.base, Tail: v.tail, Epochs: v.epochs}
	if p.Tail == p.Base && v.baseEpoch != 0 {
		p.Epochs = []EpochStart{{Epoch: v.baseEpoch, Offset: v.base}}
	}
	return p
}

func clipEpochs(starts []EpochStart, end uint64) []EpochStart {
	n := sort.Search(len(starts), func(i int) bool { return starts[i].Offset >= end })
	out := make([]EpochStart, n)
	copy(out, starts[:n])
	return out
}

// lastEpochOf is the epoch of the last record of a position. For an empty
// log it is the epoch listed at its base, if any (the epoch of the last
// record it held before its base rose; 0 when unknown).
func lastEpochOf(p LogPosition) uint64 {
	if p.Tail <= p.Base {
		if n := len(p.Epochs); n > 0 && p.Epochs[n-1].Offset == p.Base {
			return p.Epochs[n-1].Epoch
		}
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
	v.lowerIssued(at)
	if at <= v.unstableFrom {
		v.unstable = nil
		v.unstableFrom = at
	} else {
		v.unstable = v.unstable[:at-v.unstableFrom]
	}
}

// lowerIssued lowers the tail of every Ready not yet advanced to at most
// at: the records at or above at that those Readies wrote are no longer
// the view's, so their persistence proves nothing about the view.
func (v *logView) lowerIssued(at uint64) {
	for i := v.issuedHead; i < len(v.issued); i++ {
		v.issued[i] = min(v.issued[i], at)
	}
}

// ready records the tail as of a new Ready.
func (v *logView) ready() {
	if v.issuedHead > 0 && 2*v.issuedHead >= len(v.issued) {
		// Readies always in flight never empty the list: drop the
		// advanced half (amortized constant, bounded memory).
		n := copy(v.issued, v.issued[v.issuedHead:])
		v.issued, v.issuedHead = v.issued[:n], 0
	}
	v.issued = append(v.issued, v.tail)
}

// advance marks everything written up to the oldest Ready not yet advanced
// as persisted (nothing if there is none).
func (v *logView) advance() {
	if v.issuedHead == len(v.issued) {
		return
	}
	t := v.issued[v.issuedHead]
	v.issuedHead++
	if v.issuedHead == len(v.issued) {
		v.issued, v.issuedHead = v.issued[:0], 0
	}
	if t = min(t, v.tail); t > v.stable {
		v.stable = t
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

// commonPrefix returns the largest c in [lo, max(lo, min(tails))], where
// lo is the higher of the two bases, such that the local log and p hold
// the same epoch at every offset in [lo, c). Offsets below lo are stored by
// at most one side and cannot be compared: they are below a committed
// floor (a base rises only over committed records), so c == lo means "no
// common record known", and a result above p.Tail (p's log ends below our
// base) means p holds nothing of ours at all. By the log
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
