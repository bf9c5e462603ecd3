package history

import (
	"sort"

	"github.com/anishathalye/porcupine"
)

// maxSegment is the number of operations after which a shard's history is
// cut at the next quiescent point: porcupine keeps a bitset of the whole
// partition per cached state, so memory grows with the square of a
// partition's length.
const maxSegment = 10000

// snapshot is the kind of the synthetic first operation of a segment: it
// moves the model to the states the earlier segments can end in.
const snapshot Kind = 100

// noOp reports whether op is legal in every state and changes none, so
// dropping it changes no verdict.
func noOp(in Input, out Output) bool {
	switch {
	case out.Status == Unknown:
		return in.Kind == Read || ((in.Kind == Append || in.Kind == ConditionalAppend) && !out.landed)
	case out.Status == Refused:
		return out.Refusal == OtherRefusal || (in.Kind == Read && out.Refusal != CursorTooOld)
	}
	return false
}

// passes is the position op o proves the tail passed once it is
// linearized (ok reports whether it proves any).
func passes(in Input, out Output) (pos uint64, ok bool) {
	if out.Status != OK {
		return 0, false
	}
	switch in.Kind {
	case Append, ConditionalAppend:
		return out.First, true
	case Trim:
		return in.ExpectTail, true
	case Read:
		return out.Next, true
	}
	return 0, false
}

// segments splits one shard's history (sorted by Call) into histories
// each of which is checked from a snapshot of the earlier ones. An
// operation pending at the end of the history (an unknown outcome) whose
// effect is bound to an offset (an unknown append some read returned, an
// unknown trim) must have been linearized by the time an operation proves
// the tail passed that offset, so its completion is brought forward to
// that operation's; cuts are made only where no kept operation spans
// them. The snapshot's states are the records acknowledged (or read)
// before the cut, the least tail the earlier operations prove, and each
// floor the earlier trims may have left: a lower tail admits every
// continuation a higher one does, and the true floor is among those, so a
// segment is never refused that the whole history would accept.
func segments(h []porcupine.Operation) [][]porcupine.Operation {
	ops := make([]porcupine.Operation, 0, len(h))
	for _, op := range h {
		if !noOp(op.Input.(Input), op.Output.(Output)) {
			ops = append(ops, op)
		}
	}
	if len(ops) <= maxSegment {
		return [][]porcupine.Operation{ops}
	}
	sort.SliceStable(ops, func(i, j int) bool { return ops[i].Call < ops[j].Call })
	for i := range ops {
		in, out := ops[i].Input.(Input), ops[i].Output.(Output)
		var bound uint64
		switch {
		case out.Status == Unknown && out.landed:
			bound = out.at
		case out.Status == Unknown && in.Kind == Trim:
			bound = in.ExpectTail
		default:
			continue
		}
		for _, o := range ops {
			if p, ok := passes(o.Input.(Input), o.Output.(Output)); ok && p > bound && o.Return < ops[i].Return {
				ops[i].Return = max(o.Return, ops[i].Call)
			}
		}
	}

	var out [][]porcupine.Operation
	var cur []porcupine.Operation
	var maxRet int64
	var b snapshotBuilder
	for _, op := range ops {
		if len(cur) >= maxSegment && maxRet < op.Call {
			out = append(out, cur)
			in := Input{Shard: op.Input.(Input).Shard, Kind: snapshot, snap: b.states()}
			cur = []porcupine.Operation{{ClientId: op.ClientId, Input: in, Output: Output{}, Call: op.Call - 1, Return: op.Call - 1}}
		}
		b.add(op.Input.(Input), op.Output.(Output))
		cur = append(cur, op)
		maxRet = max(maxRet, op.Return)
	}
	return append(out, cur)
}

// snapshotBuilder accumulates what the operations before a cut leave.
type snapshotBuilder struct {
	recs     []Record // not yet in head
	head     *node
	tail     uint64
	floor    uint64
	unknowns map[uint64]bool // floors of unknown trims
}

func (b *snapshotBuilder) add(in Input, out Output) {
	switch in.Kind {
	case Append, ConditionalAppend:
		first, ok := out.First, out.Status == OK
		if out.Status == Unknown && out.landed {
			first, ok = out.at, true
		}
		if ok {
			for i, id := range in.IDs {
				b.recs = append(b.recs, Record{Offset: first + uint64(i), ID: id})
			}
			b.tail = max(b.tail, first+uint64(len(in.IDs)))
		}
	case Trim:
		switch out.Status {
		case OK:
			b.tail, b.floor = max(b.tail, in.ExpectTail), max(b.floor, out.Floor)
		case Unknown:
			if b.unknowns == nil {
				b.unknowns = map[uint64]bool{}
			}
			b.unknowns[in.Floor] = true
		}
	case Read:
		if out.Status == OK {
			b.tail = max(b.tail, out.Next)
		}
	}
}

// states are the snapshot's states (see segments).
func (b *snapshotBuilder) states() []State {
	sort.Slice(b.recs, func(i, j int) bool { return b.recs[i].Offset < b.recs[j].Offset })
	if len(b.recs) > 0 && b.head != nil && b.recs[0].Offset <= b.head.off {
		// Out of order (the earlier segment is then illegal anyway):
		// rebuild from every record.
		for n := b.head; n != nil; n = n.prev {
			b.recs = append(b.recs, Record{Offset: n.off, ID: n.id})
		}
		sort.Slice(b.recs, func(i, j int) bool { return b.recs[i].Offset < b.recs[j].Offset })
		b.head = nil
	}
	for _, r := range b.recs {
		b.head = push(b.head, r.Offset, r.ID)
	}
	b.recs = b.recs[:0]
	res := []State{{Tail: b.tail, Floor: b.floor, head: b.head}}
	for f := range b.unknowns {
		if f > b.floor {
			res = append(res, State{Tail: b.tail, Floor: f, head: b.head})
		}
	}
	sort.Slice(res, func(i, j int) bool { return res[i].Floor < res[j].Floor })
	return res
}
