package deadletter

import (
	"errors"
	"fmt"

	"felix.dev/felix/broker/record"
)

// ErrDiverged is the fold's loud error: the log says something no writer
// of it says (an entry out of offset order, a redrive of an entry that is
// not a dead-lettered record, two redrives of one entry, a record
// dead-lettered twice for one group).
var ErrDiverged = errors.New("deadletter: dead-letter log disagrees with its own fold")

// Meta is what the fold keeps of one dead-lettered record.
type Meta struct {
	Group  string
	Offset uint64
	// Intent is set when a redrive was started: the data-log offset it
	// appends at. Several intents may be written for one entry (each after
	// a conditional append that found the data log's tail moved); the
	// last one counts.
	Intent *uint64
	// Redriven says the record was appended to the data log, at
	// DataOffset.
	Redriven   bool
	DataOffset uint64
}

type key struct {
	group  string
	offset uint64
}

// State is the fold of a dead-letter log up to Next. Build one with
// NewState and feed it the log's records in offset order with Apply.
type State struct {
	next    uint64
	started bool
	floor   uint64
	entries map[uint64]*Meta
	byKey   map[key]uint64
	// superseded counts the intents above the floor written for an entry
	// that already had one (the earlier one's conditional append lost to
	// another append).
	superseded int
}

// NewState returns the empty fold of a log whose readable records start
// at floor.
func NewState(floor uint64) *State {
	return &State{floor: floor, next: floor, entries: map[uint64]*Meta{}, byKey: map[key]uint64{}}
}

// Next is the offset after the last record applied.
func (s *State) Next() uint64 { return s.next }

// AdvanceTo moves Next to off when off is above it.
func (s *State) AdvanceTo(off uint64) {
	if off > s.next {
		s.next = off
	}
}

// Len is the number of dead-lettered records in the fold.
func (s *State) Len() int { return len(s.entries) }

// Superseded is the number of intents in the fold written for an entry
// that already had an intent: each is a redrive attempt that lost its
// conditional append to another append of the data log and was started
// again at the new tail. They are the only entries whose number the
// dead-lettered records do not bound (each record has at most one
// dead-letter entry, one live intent and one redriven entry), so a writer
// caps them to keep the log bounded.
func (s *State) Superseded() int { return s.superseded }

// Find returns the offset of the entry that dead-lettered data-log offset
// off for group; ok is false when there is none.
func (s *State) Find(group string, off uint64) (entry uint64, ok bool) {
	entry, ok = s.byKey[key{group, off}]
	return entry, ok
}

// Entry returns a copy of what the fold keeps of the dead-lettered record
// at entry; ok is false when entry is not one (or is below the floor).
func (s *State) Entry(entry uint64) (Meta, bool) {
	m, ok := s.entries[entry]
	if !ok {
		return Meta{}, false
	}
	c := *m
	if m.Intent != nil {
		at := *m.Intent
		c.Intent = &at
	}
	return c, true
}

// Apply folds one record of the log, read in offset order. Bookkeeping
// records only move Next. After an error the state must not be used.
func (s *State) Apply(r record.Record) error {
	if s.started && r.Offset < s.next || r.Offset < s.floor {
		return fmt.Errorf("%w: record at %d after %d", ErrDiverged, r.Offset, s.next)
	}
	s.started = true
	if r.Kind.Bookkeeping() {
		s.next = r.Offset + 1
		return nil
	}
	e, err := DecodeEntry(r)
	if err != nil {
		return fmt.Errorf("dead-letter log offset %d: %w", r.Offset, err)
	}
	switch {
	case e.Record != nil:
		k := key{e.Record.Group, e.Record.Offset}
		if prev, dup := s.byKey[k]; dup {
			return fmt.Errorf("%w: offset %d: offset %d of group %q dead-lettered again (first at %d)", ErrDiverged, r.Offset, k.offset, k.group, prev)
		}
		s.byKey[k] = r.Offset
		s.entries[r.Offset] = &Meta{Group: k.group, Offset: k.offset}
	case e.Redriving != nil, e.Redriven != nil:
		rd, done := e.Redriving, false
		if rd == nil {
			rd, done = e.Redriven, true
		}
		if rd.Entry < s.floor {
			break // its entry was trimmed away
		}
		m, ok := s.entries[rd.Entry]
		switch {
		case !ok:
			return fmt.Errorf("%w: offset %d: a redrive of %d, which is no dead-lettered record", ErrDiverged, r.Offset, rd.Entry)
		case m.Redriven:
			return fmt.Errorf("%w: offset %d: entry %d redriven again (first to %d)", ErrDiverged, r.Offset, rd.Entry, m.DataOffset)
		case done && (m.Intent == nil || *m.Intent != rd.DataOffset):
			return fmt.Errorf("%w: offset %d: entry %d redriven to %d without an intent to", ErrDiverged, r.Offset, rd.Entry, rd.DataOffset)
		case done:
			m.Redriven, m.DataOffset = true, rd.DataOffset
		default:
			if m.Intent != nil {
				s.superseded++
			}
			at := rd.DataOffset
			m.Intent = &at
		}
	}
	s.next = r.Offset + 1
	return nil
}
