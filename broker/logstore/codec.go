package logstore

import (
	"encoding/binary"
	"errors"
	"fmt"
	"hash/crc32"

	"felix.dev/felix/broker/record"
)

// Batch value layout:
//
//	[0]      format version (1)
//	[1:5]    crc32c (Castagnoli), little-endian, of bytes [5:]
//	[5:13]   first offset, big-endian
//	[13:17]  record count, big-endian
//	[17:]    records, each:
//	           uvarint epoch, varint timestamp, byte kind, uvarint floor,
//	           uvarint header count, per header (uvarint len, key,
//	           uvarint len, value), uvarint len, payload
//
// Offsets are implicit: first + index. The first offset must equal the one
// in the key; the count must equal the records decoded.
const (
	batchVersion   = 1
	batchHeaderLen = 17
)

var castagnoli = crc32.MakeTable(crc32.Castagnoli)

var errCorrupt = errors.New("corrupt")

// recordSize is what limits count for a record: payload plus header bytes.
func recordSize(r *record.Record) int {
	n := len(r.Payload)
	for _, h := range r.Headers {
		n += len(h.Key) + len(h.Value)
	}
	return n
}

// appendRecordBody appends one record's encoding (without its offset).
func appendRecordBody(b []byte, r *record.Record) []byte {
	b = binary.AppendUvarint(b, r.Epoch)
	b = binary.AppendVarint(b, r.Timestamp)
	b = append(b, byte(r.Kind))
	b = binary.AppendUvarint(b, r.Floor)
	b = binary.AppendUvarint(b, uint64(len(r.Headers)))
	for _, h := range r.Headers {
		b = binary.AppendUvarint(b, uint64(len(h.Key)))
		b = append(b, h.Key...)
		b = binary.AppendUvarint(b, uint64(len(h.Value)))
		b = append(b, h.Value...)
	}
	b = binary.AppendUvarint(b, uint64(len(r.Payload)))
	return append(b, r.Payload...)
}

// encodedBatch is an append's records encoded once, with room for a batch
// header in front, and the end of each record so the writer can cut the
// batch at segment boundaries.
type encodedBatch struct {
	buf  []byte // batchHeaderLen reserved bytes, then the records
	ends []int  // ends[i] is the end of record i in buf
}

func encodeRecords(recs []record.Record) encodedBatch {
	n := batchHeaderLen
	for i := range recs {
		n += 40 + recordSize(&recs[i]) + 2*len(recs[i].Headers)
	}
	e := encodedBatch{buf: make([]byte, batchHeaderLen, n), ends: make([]int, len(recs))}
	for i := range recs {
		e.buf = appendRecordBody(e.buf, &recs[i])
		e.ends[i] = len(e.buf)
	}
	return e
}

// value returns the stored value for records [i, j) starting at offset
// first. When the slice is the whole batch the reserved header is filled in
// place; otherwise a new buffer is made.
func (e *encodedBatch) value(i, j int, first uint64) []byte {
	start := batchHeaderLen
	if i > 0 {
		start = e.ends[i-1]
	}
	end := e.ends[j-1]
	var v []byte
	if i == 0 && j == len(e.ends) {
		v = e.buf[:end]
	} else {
		v = make([]byte, batchHeaderLen+end-start)
		copy(v[batchHeaderLen:], e.buf[start:end])
	}
	sealBatch(v, first, uint32(j-i))
	return v
}

func sealBatch(v []byte, first uint64, count uint32) {
	v[0] = batchVersion
	binary.BigEndian.PutUint64(v[5:13], first)
	binary.BigEndian.PutUint32(v[13:17], count)
	binary.LittleEndian.PutUint32(v[1:5], crc32.Checksum(v[5:], castagnoli))
}

// encodeBatch encodes records as one stored value starting at first.
func encodeBatch(first uint64, recs []record.Record) []byte {
	e := encodeRecords(recs)
	return e.value(0, len(recs), first)
}

// batchHeader checks a stored value's version and checksum and returns its
// first offset and record count.
func batchHeader(v []byte) (first uint64, count uint32, err error) {
	if len(v) < batchHeaderLen {
		return 0, 0, fmt.Errorf("%w: batch of %d bytes is shorter than its header", errCorrupt, len(v))
	}
	if v[0] != batchVersion {
		return 0, 0, fmt.Errorf("%w: unknown batch version %d", errCorrupt, v[0])
	}
	if got, want := crc32.Checksum(v[5:], castagnoli), binary.LittleEndian.Uint32(v[1:5]); got != want {
		return 0, 0, fmt.Errorf("%w: checksum %08x, stored %08x", errCorrupt, got, want)
	}
	first = binary.BigEndian.Uint64(v[5:13])
	count = binary.BigEndian.Uint32(v[13:17])
	if count == 0 {
		return 0, 0, fmt.Errorf("%w: empty batch", errCorrupt)
	}
	if first+uint64(count) < first {
		return 0, 0, fmt.Errorf("%w: offsets overflow", errCorrupt)
	}
	return first, count, nil
}

// decodeBatch verifies and decodes a stored value. The returned records
// alias v (headers' values and payloads point into it).
func decodeBatch(v []byte) (uint64, []record.Record, error) {
	first, count, err := batchHeader(v)
	if err != nil {
		return 0, nil, err
	}
	if uint64(count) > uint64(len(v)) { // every record takes at least 6 bytes
		return 0, nil, fmt.Errorf("%w: count %d exceeds the batch size", errCorrupt, count)
	}
	recs := make([]record.Record, 0, count)
	d := decoder{b: v[batchHeaderLen:]}
	for i := uint32(0); i < count; i++ {
		r := record.Record{Offset: first + uint64(i)}
		r.Epoch = d.uvarint()
		r.Timestamp = d.varint()
		r.Kind = record.Kind(d.byte())
		r.Floor = d.uvarint()
		nh := d.uvarint()
		if d.err == nil && nh > uint64(len(d.b)) {
			d.fail("header count")
		}
		if nh > 0 && d.err == nil {
			r.Headers = make([]record.Header, 0, nh)
			for h := uint64(0); h < nh && d.err == nil; h++ {
				k := d.bytes()
				val := d.bytes()
				r.Headers = append(r.Headers, record.Header{Key: string(k), Value: val})
			}
		}
		r.Payload = d.bytes()
		if d.err != nil {
			return 0, nil, fmt.Errorf("%w: record %d of the batch: %v", errCorrupt, i, d.err)
		}
		if r.Kind < record.KindData || r.Kind > record.KindFence {
			return 0, nil, fmt.Errorf("%w: record %d has unknown kind %d", errCorrupt, i, r.Kind)
		}
		recs = append(recs, r)
	}
	if len(d.b) != 0 {
		return 0, nil, fmt.Errorf("%w: %d trailing bytes", errCorrupt, len(d.b))
	}
	return first, recs, nil
}

// decoder reads varint-framed fields, remembering the first error.
type decoder struct {
	b   []byte
	err error
}

func (d *decoder) fail(what string) {
	if d.err == nil {
		d.err = fmt.Errorf("truncated or malformed %s", what)
	}
	d.b = nil
}

func (d *decoder) uvarint() uint64 {
	if d.err != nil {
		return 0
	}
	v, n := binary.Uvarint(d.b)
	if n <= 0 {
		d.fail("uvarint")
		return 0
	}
	d.b = d.b[n:]
	return v
}

func (d *decoder) varint() int64 {
	if d.err != nil {
		return 0
	}
	v, n := binary.Varint(d.b)
	if n <= 0 {
		d.fail("varint")
		return 0
	}
	d.b = d.b[n:]
	return v
}

func (d *decoder) byte() byte {
	if d.err != nil {
		return 0
	}
	if len(d.b) == 0 {
		d.fail("byte")
		return 0
	}
	c := d.b[0]
	d.b = d.b[1:]
	return c
}

func (d *decoder) bytes() []byte {
	n := d.uvarint()
	if d.err != nil {
		return nil
	}
	if n > uint64(len(d.b)) {
		d.fail("length-prefixed field")
		return nil
	}
	v := d.b[:n:n]
	d.b = d.b[n:]
	if n == 0 {
		return nil
	}
	return v
}
