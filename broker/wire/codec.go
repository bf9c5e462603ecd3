package wire

import (
	"encoding/binary"
	"errors"
	"fmt"
	"math"

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

// dec reads big-endian fields with a sticky error: after the first failure
// every read returns zero and err stays set.
type dec struct {
	b   []byte
	off int
	err error
}

func (d *dec) fail(format string, args ...any) {
	if d.err == nil {
		d.err = fmt.Errorf("%w: %s", ErrMalformed, fmt.Sprintf(format, args...))
	}
}

func (d *dec) take(n int, what string) []byte {
	if d.err != nil {
		return nil
	}
	if n < 0 || len(d.b)-d.off < n {
		d.fail("%s: need %d bytes, have %d", what, n, len(d.b)-d.off)
		return nil
	}
	p := d.b[d.off : d.off+n]
	d.off += n
	return p
}

func (d *dec) remaining() int { return len(d.b) - d.off }

func (d *dec) u8(what string) uint8 {
	if p := d.take(1, what); p != nil {
		return p[0]
	}
	return 0
}

func (d *dec) u16(what string) uint16 {
	if p := d.take(2, what); p != nil {
		return binary.BigEndian.Uint16(p)
	}
	return 0
}

func (d *dec) u32(what string) uint32 {
	if p := d.take(4, what); p != nil {
		return binary.BigEndian.Uint32(p)
	}
	return 0
}

func (d *dec) u64(what string) uint64 {
	if p := d.take(8, what); p != nil {
		return binary.BigEndian.Uint64(p)
	}
	return 0
}

func (d *dec) str(what string) string {
	n := d.u16(what)
	return string(d.take(int(n), what))
}

// bytes returns a sub-slice of the body (no copy): decoded messages alias
// the body they were decoded from. ReadFrame gives every frame its own body,
// so this is safe for bodies from ReadFrame and DecodeFrame. Empty values
// decode as nil.
func (d *dec) bytes(what string) []byte {
	n := d.u32(what)
	if n > math.MaxInt32 {
		d.fail("%s: length %d", what, n)
		return nil
	}
	p := d.take(int(n), what)
	if len(p) == 0 {
		return nil
	}
	return p[:len(p):len(p)]
}

// minHeaderSize is the encoded size of an empty-key, empty-value header.
const minHeaderSize = 2 + 4

func (d *dec) headers(what string) []record.Header {
	n := int(d.u16(what))
	if d.err != nil || n == 0 {
		return nil
	}
	if n*minHeaderSize > d.remaining() {
		d.fail("%s: %d headers cannot fit in %d bytes", what, n, d.remaining())
		return nil
	}
	hs := make([]record.Header, 0, n)
	for i := 0; i < n && d.err == nil; i++ {
		k := d.str(what)
		v := d.bytes(what)
		hs = append(hs, record.Header{Key: k, Value: v})
	}
	return hs
}

// end fails if bytes remain; every message is exactly its fields.
func (d *dec) end(what string) error {
	if d.err == nil && d.remaining() != 0 {
		d.fail("%s: %d trailing bytes", what, d.remaining())
	}
	return d.err
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
