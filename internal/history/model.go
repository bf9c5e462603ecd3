package history

import (
	"fmt"
	"hash/fnv"
	"strings"

	"github.com/anishathalye/porcupine"
)

// node is one data record of a model log; nodes form a persistent list
// from the highest offset down, with skew-binary jump pointers so that
// finding an offset costs O(log n) and a step copies nothing.
type node struct {
	off   uint64
	id    string
	depth int
	prev  *node
	jump  *node
	hash  uint64
}

func jumpOf(n *node) *node {
	if n.jump == nil {
		return n
	}
	return n.jump
}

func push(prev *node, off uint64, id string) *node {
	n := &node{off: off, id: id, prev: prev, jump: prev}
	h := fnv.New64a()
	var b [8]byte
	for i := range b {
		b[i] = byte(off >> (8 * i))
	}
	_, _ = h.Write(b[:])
	_, _ = h.Write([]byte(id))
	n.hash = h.Sum64()
	if prev != nil {
		n.depth = prev.depth + 1
		n.hash ^= prev.hash*1099511628211 + 0x9e3779b97f4a7c15
		j := jumpOf(prev)
		if jj := jumpOf(j); prev.depth-j.depth == j.depth-jj.depth {
			n.jump = jj
		}
	}
	return n
}

// below is the highest node of the list at n with offset below x, or nil.
func below(n *node, x uint64) *node {
	for n != nil && n.off >= x {
		if j := jumpOf(n); j != n && j.off >= x {
			n = j
		} else {
			n = n.prev
		}
	}
	return n
}

// State is the model's state of one shard log: the next offset, the
// readable start and the data records. Offsets below Tail with no data
// record hold bookkeeping records (trims, fences).
type State struct {
	Tail, Floor uint64
	// Reserved says offset Tail is taken by a record that is not a
	// client's data (a fence, or a trim not yet acknowledged): an
	// OffsetMismatch at the tail showed it.
	Reserved bool
	head     *node
}

func (s State) hash() uint64 {
	h := s.Tail*0x100000001b3 ^ s.Floor*0x9e3779b97f4a7c15
	if s.Reserved {
		h ^= 0x5bd1e995
	}
	if s.head != nil {
		h ^= s.head.hash
	}
	return h
}

func (s State) records() int {
	if s.head == nil {
		return 0
	}
	return s.head.depth + 1
}

// equal compares two states by their positions and their records' chain
// hashes (64 bits over every offset and id): walking two long lists that
// share no nodes (two branches that appended the same records) would
// make every comparison cost the length of the log.
func equal(a, b State) bool {
	if a.Tail != b.Tail || a.Floor != b.Floor || a.Reserved != b.Reserved || a.records() != b.records() {
		return false
	}
	if a.head == b.head {
		return true
	}
	return a.head.hash == b.head.hash && a.head.off == b.head.off && a.head.id == b.head.id
}

// step is the sequential specification: the states s can move to by the
// operation in/out, none if the operation is illegal in s.
func step(s State, in Input, out Output) []State {
	switch in.Kind {
	case Append, ConditionalAppend:
		return stepAppend(s, in, out)
	case Trim:
		return stepTrim(s, in, out)
	case Read:
		return stepRead(s, in, out)
	case snapshot:
		return in.snap
	}
	return nil
}

// land puts ids at [first, ...) if first is at or above the tail.
func land(s State, ids []string, first uint64) (State, bool) {
	if first < s.Tail || (s.Reserved && first == s.Tail) {
		return s, false
	}
	s.Reserved = false
	for i, id := range ids {
		s.head = push(s.head, first+uint64(i), id)
	}
	s.Tail = first + uint64(len(ids))
	return s, true
}

// refusedMismatch: an OffsetMismatch is legal if the tail differed from
// expected, or if a record that is not a client's data takes the offset:
// a fence, or a trim the leader has written but not yet committed (its
// floor moves only when it commits [TR-2], so reads in between still see
// the old floor). The offset is then reserved: no data lands there.
func refusedMismatch(s State, expected uint64) []State {
	if expected == s.Tail {
		s.Reserved = true
	}
	return []State{s}
}

func stepAppend(s State, in Input, out Output) []State {
	switch out.Status {
	case OK:
		if in.Kind == ConditionalAppend && out.First != in.ExpectTail {
			return nil
		}
		if n, ok := land(s, in.IDs, out.First); ok {
			return []State{n}
		}
		return nil
	case Refused:
		if out.Refusal == OffsetMismatch {
			if in.Kind != ConditionalAppend {
				return nil
			}
			return refusedMismatch(s, in.ExpectTail)
		}
		return []State{s}
	default:
		if !out.landed {
			return []State{s}
		}
		if in.Kind == ConditionalAppend && out.at != in.ExpectTail {
			return nil
		}
		if n, ok := land(s, in.IDs, out.at); ok {
			return []State{n}
		}
		return nil
	}
}

// trimmed is s after a trim at expected tail e that takes effect: a no-op
// at or below the floor [TR-3], else a trim record at e setting the floor
// [TR-2]; ok is false if the trim cannot take effect in s.
func trimmed(s State, in Input) (State, bool) {
	if in.ExpectTail < s.Tail {
		return s, false
	}
	if in.ExpectTail > s.Tail {
		s.Reserved = false // the reserved offset held a fence
	}
	s.Tail = in.ExpectTail
	if in.Floor <= s.Floor {
		return s, true
	}
	if in.Floor > in.ExpectTail {
		return s, false // BadRequest: floor above the trim's own offset
	}
	s.Tail, s.Floor, s.Reserved = in.ExpectTail+1, in.Floor, false
	return s, true
}

func stepTrim(s State, in Input, out Output) []State {
	switch out.Status {
	case OK:
		n, ok := trimmed(s, in)
		if !ok || out.Floor != n.Floor {
			return nil
		}
		return []State{n}
	case Refused:
		if out.Refusal == OffsetMismatch {
			return refusedMismatch(s, in.ExpectTail)
		}
		return []State{s}
	default:
		if n, ok := trimmed(s, in); ok {
			return []State{s, n}
		}
		return []State{s}
	}
}

func stepRead(s State, in Input, out Output) []State {
	switch out.Status {
	case OK:
		if in.Earliest {
			in.From = s.Floor
		}
		if in.From < s.Floor || out.Next < in.From {
			return nil
		}
		// The data records of s in [From, Next) must be exactly out.Records.
		n := below(s.head, out.Next)
		for i := len(out.Records) - 1; i >= 0; i-- {
			r := out.Records[i]
			if n == nil || n.off != r.Offset || n.id != r.ID || r.Offset < in.From {
				return nil
			}
			n = n.prev
		}
		if n != nil && n.off >= in.From {
			return nil // a record of the log missing from the answer
		}
		if out.Next > s.Tail {
			s.Tail, s.Reserved = out.Next, false // bookkeeping records the read skipped
		}
		return []State{s}
	case Refused:
		// Below the floor it names, which no acknowledged trim has passed
		// yet (a broker whose view is behind may name an older floor).
		if out.Refusal == CursorTooOld && (in.Earliest || in.From >= out.Floor || out.Floor > s.Floor) {
			return nil
		}
		return []State{s}
	default:
		return []State{s}
	}
}

// Model is the porcupine model of shard logs, partitioned by shard.
func Model() porcupine.Model {
	nm := porcupine.NondeterministicModel{
		Partition: func(h []porcupine.Operation) [][]porcupine.Operation {
			idx := map[string]int{}
			var parts [][]porcupine.Operation
			for _, op := range h {
				sh := op.Input.(Input).Shard
				i, ok := idx[sh]
				if !ok {
					i = len(parts)
					idx[sh] = i
					parts = append(parts, nil)
				}
				parts[i] = append(parts[i], op)
			}
			var segs [][]porcupine.Operation
			for _, p := range parts {
				segs = append(segs, segments(p)...)
			}
			return segs
		},
		Init: func() []interface{} { return []interface{}{State{}} },
		Step: func(st, in, out interface{}) []interface{} {
			next := step(st.(State), in.(Input), out.(Output))
			res := make([]interface{}, len(next))
			for i, n := range next {
				res[i] = n
			}
			return res
		},
		Equal:             func(a, b interface{}) bool { return equal(a.(State), b.(State)) },
		Hash:              func(st interface{}) uint64 { return st.(State).hash() },
		DescribeOperation: func(in, out interface{}) string { return describe(in.(Input), out.(Output)) },
		DescribeState: func(st interface{}) string {
			s := st.(State)
			r := ""
			if s.Reserved {
				r = " (tail reserved)"
			}
			return fmt.Sprintf("tail %d%s, floor %d, %d records", s.Tail, r, s.Floor, s.records())
		},
	}
	return nm.ToModel()
}

func describe(in Input, out Output) string {
	var b strings.Builder
	switch in.Kind {
	case Append:
		fmt.Fprintf(&b, "append(%s)", strings.Join(in.IDs, ","))
	case ConditionalAppend:
		fmt.Fprintf(&b, "append(%s @%d)", strings.Join(in.IDs, ","), in.ExpectTail)
	case Trim:
		fmt.Fprintf(&b, "trim(floor %d @%d)", in.Floor, in.ExpectTail)
	case snapshot:
		return fmt.Sprintf("snapshot of the earlier segments (%d states)", len(in.snap))
	case Read:
		if in.Earliest {
			b.WriteString("read(earliest)")
		} else {
			fmt.Fprintf(&b, "read(%d)", in.From)
		}
	}
	switch out.Status {
	case OK:
		switch in.Kind {
		case Trim:
			fmt.Fprintf(&b, " -> floor %d", out.Floor)
		case Read:
			fmt.Fprintf(&b, " -> %d records, next %d", len(out.Records), out.Next)
			for i, r := range out.Records {
				if i == 3 {
					b.WriteString(" ...")
					break
				}
				fmt.Fprintf(&b, " %d:%s", r.Offset, r.ID)
			}
		default:
			fmt.Fprintf(&b, " -> %d", out.First)
		}
	case Refused:
		switch out.Refusal {
		case OffsetMismatch:
			fmt.Fprintf(&b, " -> OffsetMismatch (tail %d)", out.Tail)
		case CursorTooOld:
			fmt.Fprintf(&b, " -> CursorTooOld (floor %d)", out.Floor)
		default:
			b.WriteString(" -> refused")
		}
	default:
		if out.landed {
			fmt.Fprintf(&b, " -> unknown (read at %d)", out.at)
		} else {
			b.WriteString(" -> unknown")
		}
	}
	return b.String()
}
