package group

import (
	"encoding/binary"
	"errors"
	"fmt"
	"math"
	"sort"

	"felix.dev/felix/broker/internal/fields"
)

// ErrMalformedEntry is matched by the error of a group-log payload that
// does not decode: an unknown entry kind, a short or over-long body.
var ErrMalformedEntry = errors.New("group: malformed group-log entry")

// EntryKind is the first byte of a group-log payload. Values are stable:
// they are stored in the replicated log.
type EntryKind uint8

const (
	// EntryClaim makes Member the owner of the shard for Group at
	// Generation, the group's previous generation plus one.
	EntryClaim EntryKind = 1
	// EntryCommit records Offset as the group's committed offset (the next
	// offset of the data log its members read), by the owner at the
	// current generation.
	EntryCommit EntryKind = 2
	// EntryRelease ends Member's ownership at the current generation: the
	// shard is free for the group.
	EntryRelease EntryKind = 3
	// EntrySnapshot carries every group's state as of its own offset.
	EntrySnapshot EntryKind = 4
)

// Claim is a claim entry.
type Claim struct {
	Group, Member string
	Generation    uint64
}

// Commit is a commit entry. Offset is the next data-log offset the group
// reads (the records below it are processed).
type Commit struct {
	Group, Member string
	Generation    uint64
	Offset        uint64
}

// Release is a release entry.
type Release struct {
	Group, Member string
	Generation    uint64
}

// Snapshot is a snapshot entry: every group's state (groups sorted on the
// wire).
type Snapshot struct {
	Groups map[string]Info
}

// Info is one group's state on a shard.
type Info struct {
	// Owner is the member that owns the shard; empty when it is free
	// (never claimed, or released).
	Owner string
	// Generation counts the claims of the shard for the group.
	Generation uint64
	// Committed is the next data-log offset the group reads: 0 before
	// any commit. For a group that acknowledges per record it is the
	// lowest outstanding offset (see AckState).
	Committed uint64
	// Ack is the group's per-record acknowledgement state; nil for a group
	// that commits cumulatively.
	Ack *AckState
}

// Entry is one decoded group-log payload: exactly one field is set.
type Entry struct {
	Claim    *Claim
	Commit   *Commit
	Release  *Release
	Snapshot *Snapshot
	// Configure is an ack-config entry.
	Configure *Configure
	// Offsets is a deliver, ack or dead-lettered entry.
	Offsets *Offsets
}

func appendStr(b []byte, s string) ([]byte, error) {
	if len(s) > math.MaxUint16 {
		return nil, fmt.Errorf("%w: name of %d bytes", ErrMalformedEntry, len(s))
	}
	b = binary.BigEndian.AppendUint16(b, uint16(len(s)))
	return append(b, s...), nil
}

func encode(kind EntryKind, group, member string, nums ...uint64) ([]byte, error) {
	b := make([]byte, 0, 1+4+len(group)+len(member)+8*len(nums))
	b = append(b, byte(kind))
	var err error
	if b, err = appendStr(b, group); err != nil {
		return nil, err
	}
	if b, err = appendStr(b, member); err != nil {
		return nil, err
	}
	for _, n := range nums {
		b = binary.BigEndian.AppendUint64(b, n)
	}
	return b, nil
}

// EncodeClaim returns the payload of a claim entry.
func EncodeClaim(c Claim) ([]byte, error) {
	return encode(EntryClaim, c.Group, c.Member, c.Generation)
}

// EncodeCommit returns the payload of a commit entry.
func EncodeCommit(c Commit) ([]byte, error) {
	return encode(EntryCommit, c.Group, c.Member, c.Generation, c.Offset)
}

// EncodeRelease returns the payload of a release entry.
func EncodeRelease(r Release) ([]byte, error) {
	return encode(EntryRelease, r.Group, r.Member, r.Generation)
}

// EncodeSnapshot returns the payload of a snapshot entry, groups in
// sorted order so equal snapshots encode equally. When some group
// acknowledges per record it is an EntryAckSnapshot, every group followed
// by its per-record state.
func EncodeSnapshot(s Snapshot) ([]byte, error) {
	names := make([]string, 0, len(s.Groups))
	kind := EntrySnapshot
	for g, in := range s.Groups {
		names = append(names, g)
		if in.Ack != nil {
			kind = EntryAckSnapshot
		}
	}
	sort.Strings(names)
	b := []byte{byte(kind)}
	b = binary.BigEndian.AppendUint32(b, uint32(len(names)))
	var err error
	for _, g := range names {
		in := s.Groups[g]
		if b, err = appendStr(b, g); err != nil {
			return nil, err
		}
		if b, err = appendStr(b, in.Owner); err != nil {
			return nil, err
		}
		b = binary.BigEndian.AppendUint64(b, in.Generation)
		b = binary.BigEndian.AppendUint64(b, in.Committed)
		if kind == EntryAckSnapshot {
			b = appendAckState(b, in.Ack)
		}
	}
	return b, nil
}

// DecodeEntry decodes a group-log payload. Every failure matches
// ErrMalformedEntry: a snapshot with a group twice or an empty group name
// is malformed too.
func DecodeEntry(p []byte) (Entry, error) {
	d := fields.Decoder{B: p, Malformed: ErrMalformedEntry}
	str := func(what string) string { return string(d.Take(int(d.U16(what+" length")), what)) }
	var e Entry
	switch k := EntryKind(d.U8("entry kind")); k {
	case EntryClaim:
		c := Claim{Group: str("group"), Member: str("member")}
		c.Generation = d.U64("generation")
		e.Claim = &c
	case EntryCommit:
		c := Commit{Group: str("group"), Member: str("member")}
		c.Generation = d.U64("generation")
		c.Offset = d.U64("offset")
		e.Commit = &c
	case EntryRelease:
		r := Release{Group: str("group"), Member: str("member")}
		r.Generation = d.U64("generation")
		e.Release = &r
	case EntrySnapshot, EntryAckSnapshot:
		n := int(d.U32("group count"))
		least := 2 + 2 + 8 + 8
		if k == EntryAckSnapshot {
			least++ // the ack flag
		}
		if d.Err == nil && n*least > d.Remaining() {
			d.Fail("%d groups cannot fit in %d bytes", n, d.Remaining())
		}
		s := Snapshot{Groups: make(map[string]Info, min(n, 1<<16))}
		for i := 0; i < n && d.Err == nil; i++ {
			g := str("group")
			in := Info{Owner: str("owner")}
			in.Generation = d.U64("generation")
			in.Committed = d.U64("committed")
			if k == EntryAckSnapshot {
				in.Ack = decodeAckState(&d, in.Committed)
			}
			if _, dup := s.Groups[g]; d.Err == nil && (dup || g == "") {
				d.Fail("group %q empty or twice", g)
			}
			s.Groups[g] = in
		}
		e.Snapshot = &s
	default:
		var ok bool
		if e, ok = decodeAckEntry(k, &d, str); !ok && d.Err == nil {
			d.Fail("entry kind %d", k)
		}
	}
	if d.Err == nil && d.Remaining() != 0 {
		d.Fail("%d trailing bytes", d.Remaining())
	}
	if d.Err != nil {
		return Entry{}, d.Err
	}
	return e, nil
}
