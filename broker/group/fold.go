package group

import (
	"errors"
	"fmt"
	"sort"

	"felix.dev/felix/broker/record"
)

// The refusals of the checks, each a stable condition the server maps to a
// wire code. Nothing is written for a refused request.
var (
	// ErrTooManyGroups: a claim would add a group beyond Limits.MaxGroups
	// (wire code GroupLimit).
	ErrTooManyGroups = errors.New("group: too many groups on this shard")
	// ErrNameTooLong: a group or member name is longer than
	// Limits.MaxNameBytes (wire code GroupLimit).
	ErrNameTooLong = errors.New("group: group or member name too long")
	// ErrEmptyName: an empty group or member name (a bad request).
	ErrEmptyName = errors.New("group: empty group or member name")
	// ErrFenced is matched by a *FencedError: the member does not own the
	// shard for the group at the generation it names (wire code
	// GroupFenced).
	ErrFenced = errors.New("group: member does not own the shard at this generation")
)

// FencedError refuses a commit, heartbeat or release of a member that is
// not the owner at the current generation, or a claim of a shard another
// member owns. Owner and Generation are the group's current ones.
type FencedError struct {
	Group      string
	Member     string
	Owner      string
	Generation uint64
}

func (e *FencedError) Error() string {
	owner := e.Owner
	if owner == "" {
		owner = "no member"
	}
	return fmt.Sprintf("group %q: member %q is fenced: the shard is owned by %s at generation %d", e.Group, e.Member, owner, e.Generation)
}

// Is matches ErrFenced.
func (e *FencedError) Is(target error) bool { return target == ErrFenced }

// The fold's loud errors: the log says something no writer of it says, so
// no group state is served from it.
var (
	// ErrDiverged: a claim that is not the next generation, a commit or
	// release that is not the current owner's at the current generation,
	// an empty name, or an entry out of offset order.
	ErrDiverged = errors.New("group: group log disagrees with its own fold")
	// ErrNoSnapshot: the log was trimmed, and the first entry at its floor
	// is not a snapshot, so the groups below the floor are lost.
	ErrNoSnapshot = errors.New("group: group log trimmed without a snapshot at its floor")
)

// Defaults of Limits.
const (
	DefaultMaxGroups    = 100
	DefaultMaxNameBytes = 256
	DefaultMaxInFlight  = 256
)

// Limits bound one shard's groups. Zero fields take the defaults.
type Limits struct {
	// MaxGroups is the most groups a shard records.
	MaxGroups int
	// MaxNameBytes is the longest group or member name.
	MaxNameBytes int
	// MaxInFlight is the highest AckConfig.MaxInFlight a group may set:
	// the most outstanding offsets of one group on the shard.
	MaxInFlight int
}

// WithDefaults returns l with zero fields set to the defaults.
func (l Limits) WithDefaults() Limits {
	if l.MaxGroups <= 0 {
		l.MaxGroups = DefaultMaxGroups
	}
	if l.MaxNameBytes <= 0 {
		l.MaxNameBytes = DefaultMaxNameBytes
	}
	if l.MaxInFlight <= 0 {
		l.MaxInFlight = DefaultMaxInFlight
	}
	return l
}

// State is the fold of a group log up to Next. Build one with NewState and
// feed it the log's records in offset order with Apply.
type State struct {
	lim    Limits
	groups map[string]Info
	// next is the offset after the last record applied.
	next         uint64
	started      bool
	needSnapshot bool
	floor        uint64
	// sinceSnapshot counts the entries applied after the last snapshot.
	sinceSnapshot uint64
}

// NewState returns the empty fold of a log whose readable records start
// at floor. trimmed says the log was trimmed to floor: then the first data
// record applied must be a snapshot at floor, or Apply fails with
// ErrNoSnapshot.
func NewState(lim Limits, floor uint64, trimmed bool) *State {
	return &State{lim: lim.WithDefaults(), groups: map[string]Info{}, needSnapshot: trimmed, floor: floor, next: floor}
}

// Next is the offset after the last record applied.
func (s *State) Next() uint64 { return s.next }

// AdvanceTo moves Next to off when off is above it: the log holds no
// entry between (its reader skipped bookkeeping records up to off).
func (s *State) AdvanceTo(off uint64) {
	if off > s.next {
		s.next = off
	}
}

// Group returns the group's state (a copy: changing it changes nothing in
// s); ok is false for a group never claimed.
func (s *State) Group(g string) (Info, bool) {
	in, ok := s.groups[g]
	in.Ack = in.Ack.clone()
	return in, ok
}

// Groups returns the names of the groups, sorted.
func (s *State) Groups() []string {
	out := make([]string, 0, len(s.groups))
	for g := range s.groups {
		out = append(out, g)
	}
	sort.Strings(out)
	return out
}

// SinceSnapshot is the number of entries applied after the last snapshot
// (or since the start of the log).
func (s *State) SinceSnapshot() uint64 { return s.sinceSnapshot }

// Snapshot returns the snapshot entry of the current state.
func (s *State) Snapshot() Snapshot {
	gs := make(map[string]Info, len(s.groups))
	for g, in := range s.groups {
		in.Ack = in.Ack.clone()
		gs[g] = in
	}
	return Snapshot{Groups: gs}
}

// CheckNames refuses an empty name (ErrEmptyName) and one longer than the
// limit (ErrNameTooLong).
func (s *State) CheckNames(group, member string) error {
	if group == "" || member == "" {
		return ErrEmptyName
	}
	if n := max(len(group), len(member)); n > s.lim.MaxNameBytes {
		return fmt.Errorf("%w: %d bytes, limit %d", ErrNameTooLong, n, s.lim.MaxNameBytes)
	}
	return nil
}

// CheckClaim returns the claim entry member would append to take the shard
// for group, or the refusal: a bad name, ErrTooManyGroups (a new group
// beyond the cap). held says another member owns the shard; the caller
// decides (by its lease) whether that owner may be taken over, so
// CheckClaim refuses nothing for it. It changes nothing.
func (s *State) CheckClaim(group, member string) (c Claim, held bool, err error) {
	if err := s.CheckNames(group, member); err != nil {
		return Claim{}, false, err
	}
	in, exists := s.groups[group]
	if !exists && len(s.groups) >= s.lim.MaxGroups {
		return Claim{}, false, fmt.Errorf("%w: %d groups, limit %d", ErrTooManyGroups, len(s.groups), s.lim.MaxGroups)
	}
	return Claim{Group: group, Member: member, Generation: in.Generation + 1}, in.Owner != "" && in.Owner != member, nil
}

// CheckOwner returns nil if member owns the shard for group at generation,
// else a *FencedError with the group's current owner and generation.
func (s *State) CheckOwner(group, member string, generation uint64) error {
	in := s.groups[group]
	if member == "" || in.Owner != member || in.Generation != generation {
		return &FencedError{Group: group, Member: member, Owner: in.Owner, Generation: in.Generation}
	}
	return nil
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
		return fmt.Errorf("group log offset %d: %w", r.Offset, err)
	}
	if s.needSnapshot && (e.Snapshot == nil || r.Offset != s.floor) {
		return fmt.Errorf("%w: first entry at %d (floor %d) is not a snapshot", ErrNoSnapshot, r.Offset, s.floor)
	}
	s.needSnapshot = false
	s.started = true
	diverged := func(format string, args ...any) error {
		return fmt.Errorf("%w: offset %d: %s", ErrDiverged, r.Offset, fmt.Sprintf(format, args...))
	}
	// The caps are not checked here: a cap lowered after groups were made
	// does not make the log unreadable.
	switch {
	case e.Snapshot != nil:
		s.groups = make(map[string]Info, len(e.Snapshot.Groups))
		for g, in := range e.Snapshot.Groups {
			in.Ack = in.Ack.clone()
			s.groups[g] = in
		}
		s.sinceSnapshot = 0
	case e.Claim != nil:
		c := e.Claim
		in := s.groups[c.Group]
		if c.Group == "" || c.Member == "" || c.Generation != in.Generation+1 {
			return diverged("claim of %q by %q at generation %d, the group is at %d", c.Group, c.Member, c.Generation, in.Generation)
		}
		in.Owner, in.Generation = c.Member, c.Generation
		s.groups[c.Group] = in
		s.sinceSnapshot++
	case e.Commit != nil:
		c := e.Commit
		if err := s.CheckOwner(c.Group, c.Member, c.Generation); err != nil {
			return diverged("commit of %q at %d: %v", c.Group, c.Offset, err)
		}
		in := s.groups[c.Group]
		if in.Ack != nil {
			return diverged("commit of %q at %d: the group acknowledges per record", c.Group, c.Offset)
		}
		in.Committed = c.Offset
		s.groups[c.Group] = in
		s.sinceSnapshot++
	case e.Release != nil:
		rl := e.Release
		if err := s.CheckOwner(rl.Group, rl.Member, rl.Generation); err != nil {
			return diverged("release of %q: %v", rl.Group, err)
		}
		in := s.groups[rl.Group]
		in.Owner = ""
		s.groups[rl.Group] = in
		s.sinceSnapshot++
	case e.Configure != nil:
		if err := s.applyConfigure(e.Configure); err != nil {
			return diverged("ack config of %q: %v", e.Configure.Group, err)
		}
		s.sinceSnapshot++
	case e.Offsets != nil:
		if err := s.applyOffsets(e.Offsets); err != nil {
			return diverged("entry kind %d of %q: %v", e.Offsets.Kind, e.Offsets.Group, err)
		}
		s.sinceSnapshot++
	}
	s.next = r.Offset + 1
	return nil
}
