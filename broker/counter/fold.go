package counter

import (
	"errors"
	"fmt"

	"felix.dev/felix/broker/producer"
	"felix.dev/felix/broker/record"
)

// The refusals of Check, each a stable condition the server maps to the
// wire code CounterLimit. Nothing is written for a refused add.
var (
	// ErrTooManyKeys: the add would create a key beyond Limits.MaxKeys.
	ErrTooManyKeys = errors.New("counter: too many counters on this shard")
	// ErrKeyTooLong: the key is longer than Limits.MaxKeyBytes.
	ErrKeyTooLong = errors.New("counter: key too long")
	// ErrOverflow: the value would leave the int64 range.
	ErrOverflow = errors.New("counter: value would overflow")
)

// ErrEmptyKey is returned by Check for an empty key (a bad request).
var ErrEmptyKey = errors.New("counter: empty key")

// The fold's loud errors: the log says something no writer of it says, so
// no value is served from it.
var (
	// ErrDiverged: an add entry's value is not the counter's value before
	// it plus its delta, or an entry comes out of offset order.
	ErrDiverged = errors.New("counter: counter log disagrees with its own fold")
	// ErrNoSnapshot: the log was trimmed, and the first entry at its floor
	// is not a snapshot, so the counters below the floor are lost.
	ErrNoSnapshot = errors.New("counter: counter log trimmed without a snapshot at its floor")
)

// Defaults of Limits.
const (
	DefaultMaxKeys      = 1000
	DefaultMaxKeyBytes  = 256
	DefaultMaxProducers = producer.DefaultMaxProducers
)

// Limits bound one shard's counters. Zero fields take the defaults.
type Limits struct {
	// MaxKeys is the most counters a shard holds.
	MaxKeys int
	// MaxKeyBytes is the longest key.
	MaxKeyBytes int
	// MaxProducers is the most producer marks a State keeps (and a
	// snapshot carries); the least recently written is dropped beyond it.
	MaxProducers int
}

// WithDefaults returns l with zero fields set to the defaults.
func (l Limits) WithDefaults() Limits {
	if l.MaxKeys <= 0 {
		l.MaxKeys = DefaultMaxKeys
	}
	if l.MaxKeyBytes <= 0 {
		l.MaxKeyBytes = DefaultMaxKeyBytes
	}
	if l.MaxProducers <= 0 {
		l.MaxProducers = DefaultMaxProducers
	}
	return l
}

// State is the fold of a counter log up to Next. Build one with NewState
// and feed it the log's records in offset order with Apply.
type State struct {
	lim    Limits
	values map[string]int64
	marks  map[producer.ID]Mark
	// next is the offset after the last record applied; 0 before any.
	next    uint64
	started bool
	// needSnapshot: the log was trimmed at floor; the first data record
	// must be a snapshot there.
	needSnapshot bool
	floor        uint64
	// snapshotAt is the offset of the last snapshot applied; hasSnapshot
	// says there is one. sinceSnapshot counts the adds applied after it.
	snapshotAt    uint64
	hasSnapshot   bool
	sinceSnapshot uint64
}

// NewState returns the empty fold of a log whose readable records start
// at floor. trimmed says the log was trimmed to floor (its floor is above
// its base): then the first data record applied must be a snapshot at
// floor, or Apply fails with ErrNoSnapshot.
func NewState(lim Limits, floor uint64, trimmed bool) *State {
	return &State{lim: lim.WithDefaults(), values: map[string]int64{}, marks: map[producer.ID]Mark{},
		needSnapshot: trimmed, floor: floor, next: floor}
}

// Next is the offset after the last record applied: the value of every
// counter reflects every counter-log entry below it.
func (s *State) Next() uint64 { return s.next }

// AdvanceTo moves Next to off when off is above it: the log holds no
// entry between (its reader skipped bookkeeping records up to off).
func (s *State) AdvanceTo(off uint64) {
	if off > s.next {
		s.next = off
	}
}

// Len is the number of counters.
func (s *State) Len() int { return len(s.values) }

// Value returns key's value (0 for a counter never added to).
func (s *State) Value(key string) int64 { return s.values[key] }

// SinceSnapshot is the number of adds applied after the last snapshot
// (or since the start of the log).
func (s *State) SinceSnapshot() uint64 { return s.sinceSnapshot }

// LastSnapshot returns the offset of the last snapshot applied.
func (s *State) LastSnapshot() (uint64, bool) { return s.snapshotAt, s.hasSnapshot }

// Mark returns the last add of producer id that the state knows of.
func (s *State) Mark(id producer.ID) (Mark, bool) {
	m, ok := s.marks[id]
	return m, ok
}

// Marks returns the producers' last adds, in no order.
func (s *State) Marks() []Mark {
	out := make([]Mark, 0, len(s.marks))
	for _, m := range s.marks {
		out = append(out, m)
	}
	return out
}

// Check returns the value key would have after adding delta, or the
// refusal of that add: ErrEmptyKey, ErrKeyTooLong, ErrTooManyKeys (a new
// key beyond the cap), ErrOverflow. It changes nothing.
func (s *State) Check(key string, delta int64) (int64, error) {
	old, exists := s.values[key]
	return s.check(key, delta, old, exists, len(s.values))
}

// check is Check of an add to a counter whose value is old (exists says
// it is a counter already) on a shard holding keys counters.
func (s *State) check(key string, delta, old int64, exists bool, keys int) (int64, error) {
	switch {
	case key == "":
		return 0, ErrEmptyKey
	case len(key) > s.lim.MaxKeyBytes:
		return 0, fmt.Errorf("%w: %d bytes, limit %d", ErrKeyTooLong, len(key), s.lim.MaxKeyBytes)
	}
	if !exists && keys >= s.lim.MaxKeys {
		return 0, fmt.Errorf("%w: %d counters, limit %d", ErrTooManyKeys, keys, s.lim.MaxKeys)
	}
	v, ok := addInt64(old, delta)
	if !ok {
		return 0, fmt.Errorf("%w: %d + %d", ErrOverflow, old, delta)
	}
	return v, nil
}

// Pending is a run of adds to be appended together after a State's Next,
// not yet in the log: an overlay of their values over the State's. Its
// Check gives the value an add would write right after the adds already
// Put, so a batch of adds appended at Next, Next+1, ... carries the values
// Apply will fold them to, in that order. The State must not change while
// a Pending over it is in use.
type Pending struct {
	s      *State
	values map[string]int64 // the pending adds' keys and values after them
	added  int              // keys in values that the State does not hold
}

// Pending returns an empty overlay over s.
func (s *State) Pending() *Pending { return &Pending{s: s, values: map[string]int64{}} }

// Check is State.Check of an add made after every add Put so far. It
// changes nothing.
func (p *Pending) Check(key string, delta int64) (int64, error) {
	old, exists := p.values[key]
	if !exists {
		old, exists = p.s.values[key]
	}
	return p.s.check(key, delta, old, exists, len(p.s.values)+p.added)
}

// Put records a pending add that Check accepted with value v: later
// Checks see key at v.
func (p *Pending) Put(key string, v int64) {
	if _, ok := p.values[key]; !ok {
		if _, ok := p.s.values[key]; !ok {
			p.added++
		}
	}
	p.values[key] = v
}

// Snapshot returns the snapshot entry of the current state.
func (s *State) Snapshot() Snapshot {
	vals := make(map[string]int64, len(s.values))
	for k, v := range s.values {
		vals[k] = v
	}
	return Snapshot{Values: vals, Marks: s.Marks()}
}

// Apply folds one record of the log, read in offset order. Bookkeeping
// records (trims, fences) only move Next. A data record must decode as an
// entry (ErrMalformedEntry) and agree with the fold (ErrDiverged); after
// an error the state must not be used.
func (s *State) Apply(r record.Record) error {
	if s.started && r.Offset < s.next || r.Offset < s.floor {
		return fmt.Errorf("%w: record at %d after %d", ErrDiverged, r.Offset, s.next)
	}
	if r.Kind.Bookkeeping() {
		s.next = r.Offset + 1
		return nil
	}
	e, err := DecodeEntry(r.Payload)
	if err != nil {
		return fmt.Errorf("counter log offset %d: %w", r.Offset, err)
	}
	if s.needSnapshot && (e.Snapshot == nil || r.Offset != s.floor) {
		return fmt.Errorf("%w: first entry at %d (floor %d) is not a snapshot", ErrNoSnapshot, r.Offset, s.floor)
	}
	s.needSnapshot = false
	s.started = true
	switch {
	case e.Snapshot != nil:
		s.values = e.Snapshot.Values
		s.marks = make(map[producer.ID]Mark, len(e.Snapshot.Marks))
		for _, m := range e.Snapshot.Marks {
			s.marks[m.Producer] = m
		}
		s.snapshotAt, s.hasSnapshot, s.sinceSnapshot = r.Offset, true, 0
	case e.Add != nil:
		a := e.Add
		old := s.values[a.Key]
		v, ok := addInt64(old, a.Delta)
		if a.Key == "" || !ok || v != a.Value {
			return fmt.Errorf("%w: offset %d adds %d to %q (%d) and says %d", ErrDiverged, r.Offset, a.Delta, a.Key, old, a.Value)
		}
		// The caps are not checked here: a cap lowered after keys were
		// made does not make the log unreadable.
		s.values[a.Key] = v
		s.sinceSnapshot++
		if hv, ok := producer.Find(r.Headers); ok {
			id, seq, _, err := producer.ParseHeader(hv)
			if err != nil {
				return fmt.Errorf("counter log offset %d: %w", r.Offset, err)
			}
			s.mark(Mark{Producer: id, Seq: seq, Offset: r.Offset, Value: v, Timestamp: r.Timestamp})
		}
	}
	s.next = r.Offset + 1
	return nil
}

// mark records a producer's last add, dropping the least recently written
// producer beyond MaxProducers.
func (s *State) mark(m Mark) {
	if _, ok := s.marks[m.Producer]; !ok && len(s.marks) >= s.lim.MaxProducers {
		var oldest producer.ID
		first := true
		for id, o := range s.marks {
			if first || o.Timestamp < s.marks[oldest].Timestamp {
				oldest, first = id, false
			}
		}
		delete(s.marks, oldest)
	}
	s.marks[m.Producer] = m
}

// addInt64 adds with overflow detection.
func addInt64(a, b int64) (int64, bool) {
	c := a + b
	if (b > 0 && c < a) || (b < 0 && c > a) {
		return 0, false
	}
	return c, true
}
