package logstore

import (
	"encoding/binary"
	"fmt"
	"hash/crc32"
	"time"

	"felix.dev/felix/broker/record"
)

// Small checksummed values: log meta, trim index entries and the trim index
// marker share one frame: version byte, crc32c (little-endian) of the body,
// body.
const metaVersion = 1

func sealFrame(body []byte) []byte {
	v := make([]byte, 5, 5+len(body))
	v[0] = metaVersion
	binary.LittleEndian.PutUint32(v[1:5], crc32.Checksum(body, castagnoli))
	return append(v, body...)
}

func openFrame(v []byte) ([]byte, error) {
	if len(v) < 5 {
		return nil, fmt.Errorf("%w: frame of %d bytes", errCorrupt, len(v))
	}
	if v[0] != metaVersion {
		return nil, fmt.Errorf("%w: unknown frame version %d", errCorrupt, v[0])
	}
	if crc32.Checksum(v[5:], castagnoli) != binary.LittleEndian.Uint32(v[1:5]) {
		return nil, fmt.Errorf("%w: frame checksum", errCorrupt)
	}
	return v[5:], nil
}

// logMeta is what the catalog stores per log. Tail, trims and the floor are
// derived from the data on open; committed is persisted (see SetCommitted).
type logMeta struct {
	num       uint32
	base      uint64
	segRecs   uint64
	start     uint64
	committed uint64
	fenced    bool
	retention RetentionPolicy
}

// metaRefsVersion is the version of log metas in a store that keeps
// batches in its commit log (ref.go). Brokers from before refs know only
// metaVersion, so they refuse to open such a store (the log meta does not
// decode) instead of misreading refs as corrupt batches or replaying and
// removing the commit-log files that hold the batches.
const metaRefsVersion = 2

// encodeMeta encodes m; refs selects metaRefsVersion.
func encodeMeta(m logMeta, refs bool) []byte {
	b := binary.AppendUvarint(nil, uint64(m.num))
	b = binary.AppendUvarint(b, m.base)
	b = binary.AppendUvarint(b, m.segRecs)
	b = binary.AppendUvarint(b, m.start)
	b = binary.AppendUvarint(b, m.committed)
	var f byte
	if m.fenced {
		f = 1
	}
	b = append(b, f)
	b = binary.AppendVarint(b, int64(m.retention.MaxAge))
	b = binary.AppendVarint(b, m.retention.MaxBytes)
	v := sealFrame(b)
	if refs {
		v[0] = metaRefsVersion
	}
	return v
}

// decodeMeta decodes a log meta of either version.
func decodeMeta(v []byte) (logMeta, error) {
	if len(v) > 0 && v[0] == metaRefsVersion {
		v = append([]byte{metaVersion}, v[1:]...)
	}
	body, err := openFrame(v)
	if err != nil {
		return logMeta{}, err
	}
	d := decoder{b: body}
	var m logMeta
	num := d.uvarint()
	m.base = d.uvarint()
	m.segRecs = d.uvarint()
	m.start = d.uvarint()
	m.committed = d.uvarint()
	f := d.byte()
	m.retention.MaxAge = time.Duration(d.varint())
	m.retention.MaxBytes = d.varint()
	switch {
	case d.err != nil:
		return logMeta{}, fmt.Errorf("%w: log meta: %v", errCorrupt, d.err)
	case len(d.b) != 0:
		return logMeta{}, fmt.Errorf("%w: log meta has trailing bytes", errCorrupt)
	case num > 1<<32-1 || f > 1 || m.segRecs == 0 || m.start < m.base:
		return logMeta{}, fmt.Errorf("%w: log meta out of range", errCorrupt)
	}
	m.num = uint32(num)
	m.fenced = f == 1
	return m, nil
}

// trimEntry is one trim index entry [TR-5]: a trim record's offset, the
// floor it asked for, its epoch and headers.
type trimEntry struct {
	Offset  uint64
	Floor   uint64
	Epoch   uint64
	Headers []record.Header
}

func trimEntryOf(r *record.Record) trimEntry {
	return trimEntry{Offset: r.Offset, Floor: r.Floor, Epoch: r.Epoch, Headers: cloneHeaders(r.Headers)}
}

func encodeTrimEntry(t trimEntry) []byte {
	b := binary.AppendUvarint(nil, t.Offset)
	b = binary.AppendUvarint(b, t.Floor)
	b = binary.AppendUvarint(b, t.Epoch)
	b = binary.AppendUvarint(b, uint64(len(t.Headers)))
	for _, h := range t.Headers {
		b = binary.AppendUvarint(b, uint64(len(h.Key)))
		b = append(b, h.Key...)
		b = binary.AppendUvarint(b, uint64(len(h.Value)))
		b = append(b, h.Value...)
	}
	return sealFrame(b)
}

func decodeTrimEntry(v []byte) (trimEntry, error) {
	body, err := openFrame(v)
	if err != nil {
		return trimEntry{}, err
	}
	d := decoder{b: body}
	var t trimEntry
	t.Offset = d.uvarint()
	t.Floor = d.uvarint()
	t.Epoch = d.uvarint()
	nh := d.uvarint()
	if d.err == nil && nh > uint64(len(d.b)) {
		d.fail("header count")
	}
	for i := uint64(0); i < nh && d.err == nil; i++ {
		k := d.bytes()
		val := d.bytes()
		t.Headers = append(t.Headers, record.Header{Key: string(k), Value: cloneBytes(val)})
	}
	switch {
	case d.err != nil:
		return trimEntry{}, fmt.Errorf("%w: trim index entry: %v", errCorrupt, d.err)
	case len(d.b) != 0:
		return trimEntry{}, fmt.Errorf("%w: trim index entry has trailing bytes", errCorrupt)
	case t.Floor > t.Offset:
		return trimEntry{}, fmt.Errorf("%w: trim index entry floor %d above its offset %d", errCorrupt, t.Floor, t.Offset)
	}
	return t, nil
}

// The trim index marker records how many entries the index holds; a
// missing marker or a different count means the index is incomplete.
func encodeTrimMark(count uint64) []byte { return sealFrame(binary.AppendUvarint(nil, count)) }

// The value-log marker holds one offset, framed like the trim index marker.
func encodeVlogMark(off uint64) []byte { return encodeTrimMark(off) }

func decodeVlogMark(v []byte) (uint64, error) { return decodeTrimMark(v) }

func decodeTrimMark(v []byte) (uint64, error) {
	body, err := openFrame(v)
	if err != nil {
		return 0, err
	}
	n, w := binary.Uvarint(body)
	if w <= 0 || w != len(body) {
		return 0, fmt.Errorf("%w: trim index marker", errCorrupt)
	}
	return n, nil
}

func cloneBytes(b []byte) []byte {
	if b == nil {
		return nil
	}
	return append([]byte(nil), b...)
}

func cloneHeaders(hs []record.Header) []record.Header {
	if hs == nil {
		return nil
	}
	out := make([]record.Header, len(hs))
	for i, h := range hs {
		out[i] = record.Header{Key: h.Key, Value: cloneBytes(h.Value)}
	}
	return out
}
