package counter

import (
	"encoding/binary"
	"errors"
	"fmt"
	"math"
	"sort"

	"felix.dev/felix/broker/internal/fields"
	"felix.dev/felix/broker/producer"
)

// ErrMalformedEntry is matched by the error of a counter-log payload that
// does not decode: an unknown entry kind, a short or over-long body.
var ErrMalformedEntry = errors.New("counter: malformed counter-log entry")

// EntryKind is the first byte of a counter-log payload. Values are stable:
// they are stored in the replicated log.
type EntryKind uint8

const (
	// EntryAdd adds Delta to Key; Value is the counter after it.
	EntryAdd EntryKind = 1
	// EntrySnapshot carries every counter's value, and each idempotent
	// producer's last add, as of the entry's own offset.
	EntrySnapshot EntryKind = 2
)

// Add is an add entry.
type Add struct {
	Key   string
	Delta int64
	// Value is the counter's value after this add; the fold checks it.
	Value int64
}

// Mark is an idempotent producer's last add, as a snapshot keeps it so
// that a retry of that add is still answered once the add itself is
// trimmed away.
type Mark struct {
	Producer producer.ID
	Seq      uint64
	// Offset is the add's offset in the counter log.
	Offset uint64
	// Value is the counter's value after the add.
	Value int64
	// Timestamp is the add's record timestamp (Unix ns).
	Timestamp int64
}

// Snapshot is a snapshot entry. Values holds every counter (keys sorted
// on the wire); Marks the producers' last adds.
type Snapshot struct {
	Values map[string]int64
	Marks  []Mark
}

// Entry is one decoded counter-log payload: exactly one of Add and
// Snapshot is set.
type Entry struct {
	Add      *Add
	Snapshot *Snapshot
}

// markSize is the encoded size of a Mark.
const markSize = 16 + 8 + 8 + 8 + 8

// EncodeAdd returns the payload of an add entry.
func EncodeAdd(a Add) ([]byte, error) {
	if len(a.Key) > math.MaxUint16 {
		return nil, fmt.Errorf("%w: key of %d bytes", ErrMalformedEntry, len(a.Key))
	}
	b := make([]byte, 0, 1+2+len(a.Key)+16)
	b = append(b, byte(EntryAdd))
	b = binary.BigEndian.AppendUint16(b, uint16(len(a.Key)))
	b = append(b, a.Key...)
	b = binary.BigEndian.AppendUint64(b, uint64(a.Delta))
	b = binary.BigEndian.AppendUint64(b, uint64(a.Value))
	return b, nil
}

// EncodeSnapshot returns the payload of a snapshot entry: keys in sorted
// order and marks in producer order, so equal snapshots encode equally.
func EncodeSnapshot(s Snapshot) ([]byte, error) {
	keys := make([]string, 0, len(s.Values))
	size := 1 + 4 + 4 + len(s.Marks)*markSize
	for k := range s.Values {
		if len(k) > math.MaxUint16 {
			return nil, fmt.Errorf("%w: key of %d bytes", ErrMalformedEntry, len(k))
		}
		keys = append(keys, k)
		size += 2 + len(k) + 8
	}
	sort.Strings(keys)
	marks := append([]Mark(nil), s.Marks...)
	sort.Slice(marks, func(i, j int) bool {
		return string(marks[i].Producer[:]) < string(marks[j].Producer[:])
	})
	b := make([]byte, 0, size)
	b = append(b, byte(EntrySnapshot))
	b = binary.BigEndian.AppendUint32(b, uint32(len(keys)))
	for _, k := range keys {
		b = binary.BigEndian.AppendUint16(b, uint16(len(k)))
		b = append(b, k...)
		b = binary.BigEndian.AppendUint64(b, uint64(s.Values[k]))
	}
	b = binary.BigEndian.AppendUint32(b, uint32(len(marks)))
	for _, m := range marks {
		b = append(b, m.Producer[:]...)
		b = binary.BigEndian.AppendUint64(b, m.Seq)
		b = binary.BigEndian.AppendUint64(b, m.Offset)
		b = binary.BigEndian.AppendUint64(b, uint64(m.Value))
		b = binary.BigEndian.AppendUint64(b, uint64(m.Timestamp))
	}
	return b, nil
}

// DecodeEntry decodes a counter-log payload. Every failure matches
// ErrMalformedEntry: a snapshot with a key twice, a zero producer id or a
// producer twice is malformed too.
func DecodeEntry(p []byte) (Entry, error) {
	d := fields.Decoder{B: p, Malformed: ErrMalformedEntry}
	var e Entry
	switch k := EntryKind(d.U8("entry kind")); k {
	case EntryAdd:
		a := Add{Key: string(d.Take(int(d.U16("key length")), "key"))}
		a.Delta = int64(d.U64("delta"))
		a.Value = int64(d.U64("value"))
		e.Add = &a
	case EntrySnapshot:
		n := int(d.U32("counter count"))
		if d.Err == nil && n*(2+8) > d.Remaining() {
			d.Fail("%d counters cannot fit in %d bytes", n, d.Remaining())
		}
		s := Snapshot{Values: make(map[string]int64, min(n, 1<<16))}
		for i := 0; i < n && d.Err == nil; i++ {
			k := string(d.Take(int(d.U16("key length")), "key"))
			v := int64(d.U64("value"))
			if _, dup := s.Values[k]; dup && d.Err == nil {
				d.Fail("key %q twice", k)
			}
			s.Values[k] = v
		}
		m := int(d.U32("mark count"))
		if d.Err == nil && m*markSize > d.Remaining() {
			d.Fail("%d marks cannot fit in %d bytes", m, d.Remaining())
		}
		seen := map[producer.ID]bool{}
		for i := 0; i < m && d.Err == nil; i++ {
			var mk Mark
			copy(mk.Producer[:], d.Take(16, "producer"))
			mk.Seq = d.U64("seq")
			mk.Offset = d.U64("offset")
			mk.Value = int64(d.U64("value"))
			mk.Timestamp = int64(d.U64("timestamp"))
			if d.Err == nil && (mk.Producer.IsZero() || seen[mk.Producer]) {
				d.Fail("mark %d: zero or repeated producer", i)
			}
			seen[mk.Producer] = true
			s.Marks = append(s.Marks, mk)
		}
		e.Snapshot = &s
	default:
		if d.Err == nil {
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
