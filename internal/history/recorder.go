package history

import (
	"fmt"
	"sort"
	"strings"
	"sync"

	"github.com/anishathalye/porcupine"
)

// Kind is the kind of a client operation on a shard log.
type Kind uint8

const (
	// Append appends records without an expected tail.
	Append Kind = iota + 1
	// ConditionalAppend appends records only if the tail is ExpectTail [TR-1].
	ConditionalAppend
	// Trim is a conditional head trim to Floor at ExpectTail [TR-2] [TR-3].
	Trim
	// Read reads from offset From.
	Read
)

func (k Kind) String() string {
	switch k {
	case Append:
		return "append"
	case ConditionalAppend:
		return "cappend"
	case Trim:
		return "trim"
	case Read:
		return "read"
	}
	return "?"
}

// Input is what an operation asked for.
type Input struct {
	// Shard names the log; histories are checked per shard.
	Shard string
	Kind  Kind
	// IDs are the appended records' ids (unique over the history), in
	// batch order.
	IDs        []string
	ExpectTail uint64 // ConditionalAppend and Trim
	Floor      uint64 // Trim
	From       uint64 // Read
	// Earliest reads from the floor (From is then ignored) [TR-4].
	Earliest bool

	snap []State // the states a snapshot operation moves to
}

// Status is how an operation ended.
type Status uint8

const (
	// OK: acknowledged.
	OK Status = iota + 1
	// Refused: a definite refusal; nothing was written.
	Refused
	// Unknown: no answer (timeout, unknown outcome, connection lost); it
	// may have taken effect at any time after its invocation.
	Unknown
)

// Refusal is the code of a definite refusal.
type Refusal uint8

const (
	// OtherRefusal is any refusal defined to write nothing (NotLeader,
	// Fenced, BadRequest, ...).
	OtherRefusal Refusal = iota
	// OffsetMismatch: the expected tail was not the tail [TR-1].
	OffsetMismatch
	// CursorTooOld: the read started below the floor [TR-4].
	CursorTooOld
)

// Record is a record a read returned.
type Record struct {
	Offset uint64
	ID     string
}

// Output is how an operation ended and what it returned.
type Output struct {
	Status  Status
	Refusal Refusal // Refused
	// First is an acknowledged append's first offset.
	First uint64
	// Tail is the tail an OffsetMismatch named (not checked: it may count
	// uncommitted records).
	Tail uint64
	// Floor is an acknowledged trim's floor, or CursorTooOld's floor.
	Floor uint64
	// Records and Next are an acknowledged read's answer.
	Records []Record
	Next    uint64

	// landed and at resolve an unknown append from the history's reads.
	landed bool
	at     uint64
}

// Recorder records operations; it is safe for concurrent use.
type Recorder struct {
	now func() int64

	mu  sync.Mutex
	ops []*Call
}

// NewRecorder returns a Recorder timing operations with now, which must be
// monotonic (e.g. nanoseconds since a time.Time taken at the start).
func NewRecorder(now func() int64) *Recorder { return &Recorder{now: now} }

// Call is one recorded operation; Complete it once.
type Call struct {
	r      *Recorder
	client int
	in     Input
	call   int64
	ret    int64
	out    Output
	done   bool
}

// Invoke records the invocation of in by client (a small integer, one per
// sequential client) and returns the call to complete. On a nil Recorder
// it records nothing and returns a nil Call, whose Complete does nothing.
func (r *Recorder) Invoke(client int, in Input) *Call {
	if r == nil {
		return nil
	}
	in.IDs = append([]string(nil), in.IDs...)
	r.mu.Lock()
	defer r.mu.Unlock()
	c := &Call{r: r, client: client, in: in, call: r.now()}
	r.ops = append(r.ops, c)
	return c
}

// Complete records the operation's outcome. A call never completed counts
// as Unknown.
func (c *Call) Complete(out Output) {
	if c == nil {
		return
	}
	c.r.mu.Lock()
	defer c.r.mu.Unlock()
	if c.done {
		return
	}
	c.done, c.out, c.ret = true, out, c.r.now()
	c.out.Records = append([]Record(nil), out.Records...)
}

// Stats counts the recorded operations.
type Stats struct {
	Ops, OK, Refused, Unknown int
	// UnknownLanded are unknown appends some read showed landed.
	UnknownLanded int
	// Kinds counts the operations of each kind as "ok/refused/unknown".
	Kinds map[Kind][3]int
}

// String is the counts per kind, e.g. "append 10/0/1, read 5/2/0".
func (st Stats) String() string {
	var parts []string
	for k := Append; k <= Read; k++ {
		if c, ok := st.Kinds[k]; ok {
			parts = append(parts, fmt.Sprintf("%s %d/%d/%d", k, c[0], c[1], c[2]))
		}
	}
	return strings.Join(parts, ", ")
}

// Operations returns the history for porcupine: unknown operations (and
// calls never completed) complete at the end of the history, and unknown
// appends are resolved from the reads (see the package comment).
func (r *Recorder) Operations() ([]porcupine.Operation, Stats) {
	r.mu.Lock()
	defer r.mu.Unlock()
	end := r.now() + 1
	seen := map[string]uint64{}
	for _, c := range r.ops {
		if c.done && c.in.Kind == Read && c.out.Status == OK {
			for _, rec := range c.out.Records {
				seen[rec.ID] = rec.Offset
			}
		}
	}
	st := Stats{Kinds: map[Kind][3]int{}}
	ops := make([]porcupine.Operation, 0, len(r.ops))
	for _, c := range r.ops {
		out, ret := c.out, c.ret
		if !c.done || out.Status == Unknown {
			out, ret = Output{Status: Unknown}, end
		}
		if out.Status == Unknown && (c.in.Kind == Append || c.in.Kind == ConditionalAppend) {
			for i, id := range c.in.IDs {
				if off, ok := seen[id]; ok && off >= uint64(i) {
					out.landed, out.at = true, off-uint64(i)
					st.UnknownLanded++
					break
				}
			}
		}
		st.Ops++
		kc := st.Kinds[c.in.Kind]
		switch out.Status {
		case OK:
			st.OK++
			kc[0]++
		case Refused:
			st.Refused++
			kc[1]++
		default:
			st.Unknown++
			kc[2]++
		}
		st.Kinds[c.in.Kind] = kc
		ops = append(ops, porcupine.Operation{ClientId: c.client, Input: c.in, Call: c.call, Output: out, Return: ret})
	}
	sort.SliceStable(ops, func(i, j int) bool { return ops[i].Call < ops[j].Call })
	return ops, st
}
