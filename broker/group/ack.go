package group

import (
	"encoding/binary"
	"errors"
	"fmt"
	"sort"

	"felix.dev/felix/broker/internal/fields"
)

// The entries of per-record acknowledgement. Values are stable: they are
// stored in the replicated log.
const (
	// EntryAckConfig turns per-record acknowledgement on for Group (or
	// changes its settings), by the owner at the current generation.
	EntryAckConfig EntryKind = 5
	// EntryDeliver records one more delivery of each of Offsets to the
	// owner: an outstanding offset's count goes up by one, and an offset
	// at or above the group's Delivered mark becomes outstanding with a
	// count of one (and Delivered moves past it). It is written before the records are handed out, so the
	// counts in the log are never below the deliveries made.
	EntryDeliver EntryKind = 6
	// EntryAck settles each of Offsets: the owner processed it.
	EntryAck EntryKind = 7
	// EntryDeadLettered settles each of Offsets because it was given up
	// on: it was appended to the shard's dead-letter log before this entry
	// was written.
	EntryDeadLettered EntryKind = 8
	// EntryAckSnapshot is a snapshot that also carries the groups'
	// per-record state. EncodeSnapshot writes it only when some group
	// acknowledges per record, so a log without such a group keeps the
	// EntrySnapshot encoding.
	EntryAckSnapshot EntryKind = 9
)

// AckConfig is a group's per-record acknowledgement settings.
type AckConfig struct {
	// MaxDeliveries is how many times a record is delivered before it is
	// given up on (dead-lettered); at least 1.
	MaxDeliveries uint32
	// AckWaitMillis is how long the leader waits for an acknowledgement of
	// a delivery before it redelivers the record.
	AckWaitMillis uint32
	// MaxInFlight is the most outstanding (delivered, not settled) offsets
	// the group has on the shard; at least 1.
	MaxInFlight uint32
}

// AckState is a group's per-record state on a shard. Every offset in
// [Info.Committed, Delivered) is either outstanding (a key of Deliveries)
// or settled (acknowledged or dead-lettered); Info.Committed is the lowest
// outstanding offset, or Delivered when none is, so the committed offset
// advances over contiguous settled offsets.
type AckState struct {
	AckConfig
	// Delivered is the next offset never delivered.
	Delivered uint64
	// Deliveries maps each outstanding offset to its delivery count.
	Deliveries map[uint64]uint32
}

// clone returns a deep copy of a (nil for nil).
func (a *AckState) clone() *AckState {
	if a == nil {
		return nil
	}
	c := *a
	c.Deliveries = make(map[uint64]uint32, len(a.Deliveries))
	for o, n := range a.Deliveries {
		c.Deliveries[o] = n
	}
	return &c
}

// Outstanding returns the outstanding offsets, in increasing order.
func (a *AckState) Outstanding() []uint64 {
	out := make([]uint64, 0, len(a.Deliveries))
	for o := range a.Deliveries {
		out = append(out, o)
	}
	sort.Slice(out, func(i, j int) bool { return out[i] < out[j] })
	return out
}

// Configure is an ack-config entry.
type Configure struct {
	Group, Member string
	Generation    uint64
	AckConfig
}

// Offsets is a deliver, ack or dead-lettered entry: Kind says which.
type Offsets struct {
	Kind          EntryKind
	Group, Member string
	Generation    uint64
	Offsets       []uint64
}

// MaxOffsetsPerEntry bounds the offsets of one deliver, ack or
// dead-lettered entry.
const MaxOffsetsPerEntry = 4096

// EncodeConfigure returns the payload of an ack-config entry.
func EncodeConfigure(c Configure) ([]byte, error) {
	b, err := encode(EntryAckConfig, c.Group, c.Member, c.Generation)
	if err != nil {
		return nil, err
	}
	b = binary.BigEndian.AppendUint32(b, c.MaxDeliveries)
	b = binary.BigEndian.AppendUint32(b, c.AckWaitMillis)
	return binary.BigEndian.AppendUint32(b, c.MaxInFlight), nil
}

// EncodeOffsets returns the payload of a deliver, ack or dead-lettered
// entry.
func EncodeOffsets(o Offsets) ([]byte, error) {
	switch o.Kind {
	case EntryDeliver, EntryAck, EntryDeadLettered:
	default:
		return nil, fmt.Errorf("%w: entry kind %d carries no offsets", ErrMalformedEntry, o.Kind)
	}
	if len(o.Offsets) == 0 || len(o.Offsets) > MaxOffsetsPerEntry {
		return nil, fmt.Errorf("%w: %d offsets, want 1 to %d", ErrMalformedEntry, len(o.Offsets), MaxOffsetsPerEntry)
	}
	b, err := encode(o.Kind, o.Group, o.Member, o.Generation)
	if err != nil {
		return nil, err
	}
	b = binary.BigEndian.AppendUint32(b, uint32(len(o.Offsets)))
	for _, off := range o.Offsets {
		b = binary.BigEndian.AppendUint64(b, off)
	}
	return b, nil
}

// appendAckState appends a group's per-record state to a snapshot body:
// a flag byte, then the settings, the Delivered mark and the outstanding
// offsets in increasing order with their counts.
func appendAckState(b []byte, a *AckState) []byte {
	if a == nil {
		return append(b, 0)
	}
	b = append(b, 1)
	b = binary.BigEndian.AppendUint32(b, a.MaxDeliveries)
	b = binary.BigEndian.AppendUint32(b, a.AckWaitMillis)
	b = binary.BigEndian.AppendUint32(b, a.MaxInFlight)
	b = binary.BigEndian.AppendUint64(b, a.Delivered)
	out := a.Outstanding()
	b = binary.BigEndian.AppendUint32(b, uint32(len(out)))
	for _, o := range out {
		b = binary.BigEndian.AppendUint64(b, o)
		b = binary.BigEndian.AppendUint32(b, a.Deliveries[o])
	}
	return b
}

// decodeAckState reads what appendAckState wrote for a group whose
// committed offset is committed. The state must be one the fold can
// reach: outstanding offsets strictly increasing within
// [committed, Delivered), the lowest equal to committed (or none and
// committed equal to Delivered), every count at least one.
func decodeAckState(d *fields.Decoder, committed uint64) *AckState {
	switch flag := d.U8("ack flag"); {
	case d.Err != nil:
		return nil
	case flag == 0:
		return nil
	case flag != 1:
		d.Fail("ack flag %d", flag)
		return nil
	}
	a := &AckState{}
	a.MaxDeliveries = d.U32("max deliveries")
	a.AckWaitMillis = d.U32("ack wait")
	a.MaxInFlight = d.U32("max in flight")
	a.Delivered = d.U64("delivered")
	n := int(d.U32("outstanding count"))
	if d.Err == nil && n*12 > d.Remaining() {
		d.Fail("%d outstanding offsets cannot fit in %d bytes", n, d.Remaining())
	}
	a.Deliveries = make(map[uint64]uint32, min(n, 1<<16))
	prev, first := uint64(0), true
	for i := 0; i < n && d.Err == nil; i++ {
		o, c := d.U64("offset"), d.U32("deliveries")
		switch {
		case d.Err != nil:
		case first && o != committed, !first && o <= prev, o >= a.Delivered, c == 0:
			d.Fail("outstanding offset %d (count %d) out of place", o, c)
		}
		a.Deliveries[o], prev, first = c, o, false
	}
	if d.Err == nil && n == 0 && committed != a.Delivered {
		d.Fail("committed %d with nothing outstanding below delivered %d", committed, a.Delivered)
	}
	if d.Err == nil && (a.MaxDeliveries == 0 || a.MaxInFlight == 0) {
		d.Fail("max deliveries %d, max in flight %d", a.MaxDeliveries, a.MaxInFlight)
	}
	return a
}

// decodeAckEntry decodes the entries of per-record acknowledgement
// (kinds 5 to 8); ok is false for another kind.
func decodeAckEntry(k EntryKind, d *fields.Decoder, str func(string) string) (e Entry, ok bool) {
	switch k {
	case EntryAckConfig:
		c := Configure{Group: str("group"), Member: str("member")}
		c.Generation = d.U64("generation")
		c.MaxDeliveries = d.U32("max deliveries")
		c.AckWaitMillis = d.U32("ack wait")
		c.MaxInFlight = d.U32("max in flight")
		e.Configure = &c
	case EntryDeliver, EntryAck, EntryDeadLettered:
		o := Offsets{Kind: k, Group: str("group"), Member: str("member")}
		o.Generation = d.U64("generation")
		n := int(d.U32("offset count"))
		if d.Err == nil && (n == 0 || n > MaxOffsetsPerEntry || n*8 > d.Remaining()) {
			d.Fail("%d offsets in %d bytes", n, d.Remaining())
		}
		for i := 0; i < n && d.Err == nil; i++ {
			o.Offsets = append(o.Offsets, d.U64("offset"))
		}
		e.Offsets = &o
	default:
		return Entry{}, false
	}
	return e, true
}

// ErrNotAckMode: a per-record request for a group that commits
// cumulatively, or a cumulative commit for a group that acknowledges per
// record (a bad request).
var ErrNotAckMode = errors.New("group: the group's acknowledgement mode does not allow this")

// ErrInFlightLimit: settings whose MaxInFlight is above
// Limits.MaxInFlight, or a group whose window of MaxInFlight outstanding
// offsets is full (wire code GroupLimit).
var ErrInFlightLimit = errors.New("group: too many outstanding deliveries")

// ErrBadAckConfig: max deliveries or max in flight zero (a bad request).
var ErrBadAckConfig = errors.New("group: bad acknowledgement settings")

// CheckConfigure refuses settings the shard does not take:
// ErrBadAckConfig, ErrInFlightLimit. It changes nothing.
func (s *State) CheckConfigure(c AckConfig) error {
	if c.MaxDeliveries == 0 || c.MaxInFlight == 0 {
		return fmt.Errorf("%w: max deliveries %d, max in flight %d", ErrBadAckConfig, c.MaxDeliveries, c.MaxInFlight)
	}
	if int(c.MaxInFlight) > s.lim.MaxInFlight {
		return fmt.Errorf("%w: max in flight %d, limit %d", ErrInFlightLimit, c.MaxInFlight, s.lim.MaxInFlight)
	}
	return nil
}

// applyConfigure folds an ack-config entry. Switching a cumulative group
// starts its per-record state at its committed offset.
func (s *State) applyConfigure(c *Configure) error {
	if err := s.CheckOwner(c.Group, c.Member, c.Generation); err != nil {
		return err
	}
	if c.MaxDeliveries == 0 || c.MaxInFlight == 0 {
		return fmt.Errorf("max deliveries %d, max in flight %d", c.MaxDeliveries, c.MaxInFlight)
	}
	in := s.groups[c.Group]
	if in.Ack == nil {
		in.Ack = &AckState{Delivered: in.Committed, Deliveries: map[uint64]uint32{}}
	}
	in.Ack.AckConfig = c.AckConfig
	s.groups[c.Group] = in
	return nil
}

// applyOffsets folds a deliver, ack or dead-lettered entry.
func (s *State) applyOffsets(o *Offsets) error {
	if err := s.CheckOwner(o.Group, o.Member, o.Generation); err != nil {
		return err
	}
	in := s.groups[o.Group]
	a := in.Ack
	if a == nil {
		return fmt.Errorf("%w: group %q commits cumulatively", ErrNotAckMode, o.Group)
	}
	for _, off := range o.Offsets {
		n, out := a.Deliveries[off]
		switch {
		case o.Kind == EntryDeliver && off >= a.Delivered:
			// Offsets skipped on the way (bookkeeping records of the
			// data log, or records trimmed away) are never delivered.
			a.Deliveries[off] = 1
			a.Delivered = off + 1
		case !out:
			return fmt.Errorf("offset %d is not outstanding (delivered up to %d)", off, a.Delivered)
		case o.Kind == EntryDeliver:
			a.Deliveries[off] = n + 1
		default:
			delete(a.Deliveries, off)
		}
	}
	// The committed offset is the lowest outstanding one, or the end of
	// what was delivered: found over the outstanding offsets (at most the
	// in-flight cap), never by counting across the gap, which after a
	// head trim can be as long as the log.
	next := a.Delivered
	for off := range a.Deliveries {
		next = min(next, off)
	}
	in.Committed = max(in.Committed, next)
	s.groups[o.Group] = in
	return nil
}
