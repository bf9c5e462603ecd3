package wire

import (
	"encoding/binary"
	"errors"
	"fmt"
	"math"

	"felix.dev/felix/broker/internal/fields"
	"felix.dev/felix/broker/record"
)

// ErrMalformed is matched by every body decoding error: a body that is cut
// short, carries trailing bytes, or declares impossible lengths.
var ErrMalformed = errors.New("wire: malformed message")

// enc appends big-endian fields to a byte slice.
type enc struct{ b []byte }

func (e *enc) u8(v uint8)   { e.b = append(e.b, v) }
func (e *enc) u16(v uint16) { e.b = binary.BigEndian.AppendUint16(e.b, v) }
func (e *enc) u32(v uint32) { e.b = binary.BigEndian.AppendUint32(e.b, v) }
func (e *enc) u64(v uint64) { e.b = binary.BigEndian.AppendUint64(e.b, v) }

// str writes a u16-length-prefixed string; callers validate the length.
func (e *enc) str(s string) {
	e.u16(uint16(len(s)))
	e.b = append(e.b, s...)
}

// bytes writes a u32-length-prefixed byte string.
func (e *enc) bytes(p []byte) {
	e.u32(uint32(len(p)))
	e.b = append(e.b, p...)
}

func (e *enc) headers(hs []record.Header) {
	e.u16(uint16(len(hs)))
	for _, h := range hs {
		e.str(h.Key)
		e.bytes(h.Value)
	}
}

// dec reads big-endian fields with a sticky error (fields.Decoder) plus
// the protocol's own compound fields.
type dec struct{ fields.Decoder }

func newDec(b []byte) dec { return dec{fields.Decoder{B: b, Malformed: ErrMalformed}} }

func (d *dec) str(what string) string {
	n := d.U16(what)
	return string(d.Take(int(n), what))
}

// bytes returns a sub-slice of the body (no copy): decoded messages alias
// the body they were decoded from. ReadFrame gives every frame its own body,
// so this is safe for bodies from ReadFrame and DecodeFrame. Empty values
// decode as nil.
func (d *dec) bytes(what string) []byte {
	n := d.U32(what)
	if n > math.MaxInt32 {
		d.Fail("%s: length %d", what, n)
		return nil
	}
	p := d.Take(int(n), what)
	if len(p) == 0 {
		return nil
	}
	return p[:len(p):len(p)]
}

// minHeaderSize is the encoded size of an empty-key, empty-value header.
const minHeaderSize = 2 + 4

func (d *dec) headers(what string) []record.Header {
	n := int(d.U16(what))
	if d.Err != nil || n == 0 {
		return nil
	}
	if n*minHeaderSize > d.Remaining() {
		d.Fail("%s: %d headers cannot fit in %d bytes", what, n, d.Remaining())
		return nil
	}
	hs := make([]record.Header, 0, n)
	for i := 0; i < n && d.Err == nil; i++ {
		k := d.str(what)
		v := d.bytes(what)
		hs = append(hs, record.Header{Key: k, Value: v})
	}
	return hs
}

// end fails if bytes remain; every message is exactly its fields.
func (d *dec) end(what string) error {
	if d.Err == nil && d.Remaining() != 0 {
		d.Fail("%s: %d trailing bytes", what, d.Remaining())
	}
	return d.Err
}

// checkStr reports a string too long for its u16 length prefix.
func checkStr(what, s string) error {
	if len(s) > math.MaxUint16 {
		return fmt.Errorf("%w: %s of %d bytes exceeds 65535", ErrMalformed, what, len(s))
	}
	return nil
}

func checkHeaders(hs []record.Header) error {
	if len(hs) > math.MaxUint16 {
		return fmt.Errorf("%w: %d headers exceed 65535", ErrMalformed, len(hs))
	}
	for _, h := range hs {
		if err := checkStr("header key", h.Key); err != nil {
			return err
		}
	}
	return nil
}
