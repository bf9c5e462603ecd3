package deadletter

import (
	"encoding/binary"
	"errors"
	"fmt"
	"math"

	"felix.dev/felix/broker/internal/fields"
	"felix.dev/felix/broker/record"
)

// ErrMalformedEntry is matched by the error of a dead-letter-log record
// that does not decode: no MetaHeader last, an unknown entry kind or
// reason, a short or over-long meta value.
var ErrMalformedEntry = errors.New("deadletter: malformed dead-letter-log entry")

// MetaHeader is the key of the header that carries an entry's meta data.
// It is always a record's last header: a dead-lettered record keeps its
// original headers before it and its original payload as its payload, so
// it is only MetaOverhead bytes (plus the group name) larger than the
// original record.
const MetaHeader = "felix.dead-letter"

// RedriveHeader is the key of the header a redriven record carries last in
// the data log: its value is the decimal offset of the dead-letter entry
// it came from.
const RedriveHeader = "felix.redriven-from"

// MetaOverhead is the bytes a dead-lettered record adds to its original
// record besides the group name: the meta header's key and fixed fields.
const MetaOverhead = len(MetaHeader) + 1 + 2 + 8 + 8 + 8 + 4 + 1

// EntryKind is the first byte of an entry's meta value. Values are stable:
// they are stored in the replicated log.
type EntryKind uint8

const (
	// EntryRecord is a dead-lettered record.
	EntryRecord EntryKind = 1
	// EntryRedriving is the intent to redrive entry Entry into the data
	// log at DataOffset.
	EntryRedriving EntryKind = 2
	// EntryRedriven records that entry Entry was appended to the data log
	// at DataOffset.
	EntryRedriven EntryKind = 3
)

// Reason says why a record was given up on. Values are stable.
type Reason uint8

const (
	// ReasonMaxDeliveries: the group delivered it its maximum number of
	// times without an acknowledgement.
	ReasonMaxDeliveries Reason = 1
)

// String returns the reason's name, as the CLI and the docs print it.
func (r Reason) String() string {
	switch r {
	case ReasonMaxDeliveries:
		return "max-deliveries"
	default:
		return fmt.Sprintf("reason(%d)", uint8(r))
	}
}

// Record is a dead-lettered record: the original record's offset, epoch,
// timestamp, headers and payload, and why the group gave up on it.
type Record struct {
	Group      string
	Offset     uint64
	Epoch      uint64
	Timestamp  int64
	Deliveries uint32
	Reason     Reason
	Headers    []record.Header
	Payload    []byte
}

// Redrive is a redriving or redriven entry: Entry is the offset of the
// dead-letter entry, DataOffset the data-log offset of its redriven copy.
type Redrive struct {
	Entry      uint64
	DataOffset uint64
}

// Entry is one decoded dead-letter-log record: exactly one field is set.
type Entry struct {
	Record    *Record
	Redriving *Redrive
	Redriven  *Redrive
}

// EncodeRecord returns the dead-letter-log record (headers and payload;
// the log assigns the rest) of a dead-lettered record.
func EncodeRecord(r Record) (record.Record, error) {
	if r.Group == "" || len(r.Group) > math.MaxUint16 {
		return record.Record{}, fmt.Errorf("%w: group name of %d bytes", ErrMalformedEntry, len(r.Group))
	}
	if r.Reason != ReasonMaxDeliveries {
		return record.Record{}, fmt.Errorf("%w: reason %d", ErrMalformedEntry, r.Reason)
	}
	m := []byte{byte(EntryRecord)}
	m = binary.BigEndian.AppendUint16(m, uint16(len(r.Group)))
	m = append(m, r.Group...)
	m = binary.BigEndian.AppendUint64(m, r.Offset)
	m = binary.BigEndian.AppendUint64(m, r.Epoch)
	m = binary.BigEndian.AppendUint64(m, uint64(r.Timestamp))
	m = binary.BigEndian.AppendUint32(m, r.Deliveries)
	m = append(m, byte(r.Reason))
	hs := make([]record.Header, 0, len(r.Headers)+1)
	hs = append(append(hs, r.Headers...), record.Header{Key: MetaHeader, Value: m})
	return record.Record{Kind: record.KindData, Headers: hs, Payload: r.Payload}, nil
}

// EncodeRedrive returns the dead-letter-log record of a redriving
// (EntryRedriving) or redriven (EntryRedriven) entry.
func EncodeRedrive(k EntryKind, r Redrive) (record.Record, error) {
	if k != EntryRedriving && k != EntryRedriven {
		return record.Record{}, fmt.Errorf("%w: entry kind %d is not a redrive", ErrMalformedEntry, k)
	}
	m := []byte{byte(k)}
	m = binary.BigEndian.AppendUint64(m, r.Entry)
	m = binary.BigEndian.AppendUint64(m, r.DataOffset)
	return record.Record{Kind: record.KindData, Headers: []record.Header{{Key: MetaHeader, Value: m}}}, nil
}

// DecodeEntry decodes a dead-letter-log data record. Every failure matches
// ErrMalformedEntry. The Record's headers and payload alias r's.
func DecodeEntry(r record.Record) (Entry, error) {
	n := len(r.Headers)
	if n == 0 || r.Headers[n-1].Key != MetaHeader {
		return Entry{}, fmt.Errorf("%w: no %s header last", ErrMalformedEntry, MetaHeader)
	}
	d := fields.Decoder{B: r.Headers[n-1].Value, Malformed: ErrMalformedEntry}
	var e Entry
	switch k := EntryKind(d.U8("entry kind")); k {
	case EntryRecord:
		rec := Record{Group: string(d.Take(int(d.U16("group length")), "group"))}
		rec.Offset = d.U64("offset")
		rec.Epoch = d.U64("epoch")
		rec.Timestamp = int64(d.U64("timestamp"))
		rec.Deliveries = d.U32("deliveries")
		rec.Reason = Reason(d.U8("reason"))
		if d.Err == nil && (rec.Group == "" || rec.Reason != ReasonMaxDeliveries) {
			d.Fail("group %q, reason %d", rec.Group, rec.Reason)
		}
		if n > 1 {
			rec.Headers = r.Headers[: n-1 : n-1]
		}
		rec.Payload = r.Payload
		e.Record = &rec
	case EntryRedriving, EntryRedriven:
		rd := Redrive{Entry: d.U64("entry"), DataOffset: d.U64("data offset")}
		if k == EntryRedriving {
			e.Redriving = &rd
		} else {
			e.Redriven = &rd
		}
		if d.Err == nil && (n != 1 || len(r.Payload) != 0) {
			d.Fail("a redrive with %d headers and %d payload bytes", n, len(r.Payload))
		}
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
