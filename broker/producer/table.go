package producer

import (
	"container/list"
	"crypto/sha256"
	"encoding/binary"
	"errors"
	"fmt"
	"time"

	"felix.dev/felix/broker/record"
)

// ID names an idempotent producer: 16 random bytes chosen by the client.
// The zero ID is not a producer.
type ID [16]byte

// IsZero reports whether id is the zero ID.
func (id ID) IsZero() bool { return id == ID{} }

// String is the ID in hex.
func (id ID) String() string { return fmt.Sprintf("%x", id[:]) }

// Scoped returns the ID the broker keys and stores the producer id of a
// client under: the first 16 bytes of SHA-256 of owner (the connection's
// principal), a zero byte and id. A client that learns another
// principal's producer id cannot use it to make that producer's batches
// look like retries: under its own principal the same id is another
// producer.
func Scoped(owner string, id ID) ID {
	h := sha256.New()
	h.Write([]byte(owner))
	h.Write([]byte{0})
	h.Write(id[:])
	var out ID
	copy(out[:], h.Sum(nil))
	if out.IsZero() {
		out[0] = 1
	}
	return out
}

// Defaults of Limits.
const (
	// DefaultMaxProducers bounds the producers one shard's table holds.
	DefaultMaxProducers = 1024
	// DefaultWindow is how many of a producer's last batches a table
	// can answer a retry of with their original offsets.
	DefaultWindow = 8
	// DefaultMinAge is how long a producer is kept at least after its
	// last write before another producer may evict it.
	DefaultMinAge = 15 * time.Minute
)

// Limits bound a Table. Zero fields take the defaults.
type Limits struct {
	// MaxProducers is the most producers the table holds.
	MaxProducers int
	// Window is the number of a producer's last batches whose offsets
	// are kept; a retry of an older batch is OutOfSequence.
	Window int
	// MinAge: a producer that wrote within MinAge is never evicted.
	MinAge time.Duration
}

func (l Limits) withDefaults() Limits {
	if l.MaxProducers <= 0 {
		l.MaxProducers = DefaultMaxProducers
	}
	if l.Window <= 0 {
		l.Window = DefaultWindow
	}
	if l.MinAge <= 0 {
		l.MinAge = DefaultMinAge
	}
	return l
}

// Verdict is the outcome of Table.Propose.
type Verdict uint8

const (
	// Append: the batch is new; write it, then call Done or Failed.
	Append Verdict = iota + 1
	// Duplicate: the batch was written; Decision.First and Tail are its
	// original offsets. Write nothing.
	Duplicate
	// InFlight: the batch was accepted and its outcome is not known yet.
	// Write nothing; the client asks again later.
	InFlight
	// OutOfSequence: the sequence is neither the next one nor a batch the
	// table remembers; Decision.Next is the sequence expected next (0 for
	// a producer the table does not know). Write nothing.
	OutOfSequence
	// Uncertain: an earlier batch of this producer failed after it was
	// proposed, so this leader cannot tell what landed until it rebuilds
	// its table. Write nothing; the client asks again later.
	Uncertain
	// Full: the table holds MaxProducers producers that all wrote within
	// MinAge; a new producer is refused. Write nothing.
	Full
)

func (v Verdict) String() string {
	switch v {
	case Append:
		return "append"
	case Duplicate:
		return "duplicate"
	case InFlight:
		return "in-flight"
	case OutOfSequence:
		return "out-of-sequence"
	case Uncertain:
		return "uncertain"
	case Full:
		return "full"
	}
	return fmt.Sprintf("Verdict(%d)", uint8(v))
}

// Decision is what Propose decided about one batch.
type Decision struct {
	Verdict Verdict
	// First and Tail: the original offsets of a Duplicate.
	First, Tail uint64
	// Next: the sequence expected next, for OutOfSequence.
	Next uint64
}

// batch is one remembered batch of a producer.
type batch struct {
	seq         uint64
	first, tail uint64
	done        bool
}

type entry struct {
	id        ID
	next      uint64  // the sequence expected next
	batches   []batch // oldest first, at most Window
	uncertain bool
	last      int64 // Unix ns of the producer's last write
	elem      *list.Element
}

// Table is one shard's de-duplication state: the producers that appended
// to it lately and where their last batches landed. Not safe for
// concurrent use; the zero value is not usable, use NewTable.
type Table struct {
	lim     Limits
	entries map[ID]*entry
	lru     *list.List // of *entry, least recently written first
}

// NewTable returns an empty table bounded by lim.
func NewTable(lim Limits) *Table {
	return &Table{lim: lim.withDefaults(), entries: map[ID]*entry{}, lru: list.New()}
}

// Len is the number of producers held.
func (t *Table) Len() int { return len(t.entries) }

// Reset forgets every producer (before a rebuild from the log).
func (t *Table) Reset() {
	t.entries = map[ID]*entry{}
	t.lru.Init()
}

// Propose decides about batch seq of producer id at time now (Unix ns).
// On Append it remembers the batch as in flight: the caller writes it and
// then calls Done with its offsets, or Failed.
func (t *Table) Propose(id ID, seq uint64, now int64) Decision {
	e := t.entries[id]
	if e == nil {
		if seq != 0 {
			return Decision{Verdict: OutOfSequence, Next: 0}
		}
		if !t.makeRoom(now, false) {
			return Decision{Verdict: Full}
		}
		e = t.add(id)
	}
	if e.uncertain {
		return Decision{Verdict: Uncertain}
	}
	switch {
	case seq == e.next:
		t.push(e, batch{seq: seq})
		e.next++
		t.touch(e, now)
		return Decision{Verdict: Append}
	case seq > e.next:
		return Decision{Verdict: OutOfSequence, Next: e.next}
	}
	for _, b := range e.batches {
		if b.seq != seq {
			continue
		}
		if !b.done {
			return Decision{Verdict: InFlight}
		}
		return Decision{Verdict: Duplicate, First: b.first, Tail: b.tail}
	}
	return Decision{Verdict: OutOfSequence, Next: e.next}
}

// Done records that batch seq of id, accepted by Propose, was written at
// [first, tail).
func (t *Table) Done(id ID, seq, first, tail uint64) {
	e := t.entries[id]
	if e == nil {
		return
	}
	for i := range e.batches {
		if e.batches[i].seq == seq {
			e.batches[i] = batch{seq: seq, first: first, tail: tail, done: true}
		}
	}
}

// Abort forgets batch seq of id, accepted by Propose, that was certainly
// not written (refused before it was proposed or by the tail check). If
// it is the producer's last batch the producer may send it again as its
// next; otherwise (batches after it were accepted) a retry of it is
// OutOfSequence.
func (t *Table) Abort(id ID, seq uint64) {
	e := t.entries[id]
	if e == nil {
		return
	}
	for i := len(e.batches) - 1; i >= 0; i-- {
		if e.batches[i].seq == seq && !e.batches[i].done {
			e.batches = append(e.batches[:i], e.batches[i+1:]...)
			if e.next == seq+1 {
				e.next = seq
			}
			return
		}
	}
}

// Failed records that batch seq of id, accepted by Propose, ended without
// a known outcome (it may or may not be in the log). Every later batch of
// id is Uncertain until the table is rebuilt from the log.
func (t *Table) Failed(id ID, seq uint64) {
	if e := t.entries[id]; e != nil {
		e.uncertain = true
	}
}

// Observe feeds one batch found in the log while rebuilding: producer id
// wrote batch seq at [first, tail) at time ts. Batches are observed in
// log order. A table that is full evicts its least recently written
// producer, whatever its age: the log is the only truth, and a producer
// evicted here is one that wrote before every producer kept.
func (t *Table) Observe(id ID, seq, first, tail uint64, ts int64) {
	e := t.entries[id]
	if e == nil {
		t.makeRoom(ts, true)
		e = t.add(id)
	}
	t.push(e, batch{seq: seq, first: first, tail: tail, done: true})
	e.next = seq + 1
	t.touch(e, ts)
}

func (t *Table) add(id ID) *entry {
	e := &entry{id: id}
	e.elem = t.lru.PushBack(e)
	t.entries[id] = e
	return e
}

func (t *Table) push(e *entry, b batch) {
	if len(e.batches) >= t.lim.Window {
		e.batches = append(e.batches[:0], e.batches[len(e.batches)-t.lim.Window+1:]...)
	}
	e.batches = append(e.batches, b)
}

func (t *Table) touch(e *entry, now int64) {
	if now > e.last {
		e.last = now
	}
	t.lru.MoveToBack(e.elem)
}

// makeRoom evicts the least recently written producer when the table is
// full and that producer is at least MinAge old (or always, with force).
// It reports whether there is room for one more.
func (t *Table) makeRoom(now int64, force bool) bool {
	if len(t.entries) < t.lim.MaxProducers {
		return true
	}
	front := t.lru.Front()
	if front == nil {
		return false
	}
	old := front.Value.(*entry)
	if !force && now-old.last < int64(t.lim.MinAge) {
		return false
	}
	t.lru.Remove(front)
	delete(t.entries, old.id)
	return true
}

// HeaderKey is the reserved record header in which the leader stores an
// idempotent batch's producer, sequence and record count, on the batch's
// first record. Clients may not send it; readers are not shown it.
const HeaderKey = "felix.producer"

// HeaderValueSize is the size of a HeaderKey value: id, sequence u64,
// count u32.
const HeaderValueSize = 16 + 8 + 4

const headerSize = HeaderValueSize

// ErrBadHeader is returned for a HeaderKey value that does not decode.
var ErrBadHeader = errors.New("producer: malformed producer header")

// Header returns the reserved header of a batch of count records.
func Header(id ID, seq uint64, count uint32) record.Header {
	v := make([]byte, headerSize)
	copy(v, id[:])
	binary.BigEndian.PutUint64(v[16:], seq)
	binary.BigEndian.PutUint32(v[24:], count)
	return record.Header{Key: HeaderKey, Value: v}
}

// ParseHeader decodes a HeaderKey value.
func ParseHeader(v []byte) (id ID, seq uint64, count uint32, err error) {
	if len(v) != headerSize {
		return id, 0, 0, fmt.Errorf("%w: %d bytes, want %d", ErrBadHeader, len(v), headerSize)
	}
	copy(id[:], v)
	seq = binary.BigEndian.Uint64(v[16:])
	count = binary.BigEndian.Uint32(v[24:])
	if id.IsZero() || count == 0 {
		return id, 0, 0, fmt.Errorf("%w: zero id or count", ErrBadHeader)
	}
	return id, seq, count, nil
}

// Find returns the value of the reserved header among hs.
func Find(hs []record.Header) ([]byte, bool) {
	for _, h := range hs {
		if h.Key == HeaderKey {
			return h.Value, true
		}
	}
	return nil, false
}

// Strip returns hs without the reserved header; hs itself is not changed
// (it may be shared with a cache).
func Strip(hs []record.Header) []record.Header {
	if _, ok := Find(hs); !ok {
		return hs
	}
	out := make([]record.Header, 0, len(hs)-1)
	for _, h := range hs {
		if h.Key != HeaderKey {
			out = append(out, h)
		}
	}
	return out
}

// ObserveRecords feeds the batches of recs (data records in log order,
// read from the log) to t: a record carrying a valid reserved header
// starts a batch of its count records. Malformed headers are skipped.
func (t *Table) ObserveRecords(recs []record.Record) {
	for _, r := range recs {
		v, ok := Find(r.Headers)
		if !ok {
			continue
		}
		id, seq, n, err := ParseHeader(v)
		if err != nil {
			continue
		}
		t.Observe(id, seq, r.Offset, r.Offset+uint64(n), r.Timestamp)
	}
}
