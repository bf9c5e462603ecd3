// Package fields reads the big-endian fields of a protocol body with a sticky
// error, for the wire protocol's and the replication frames' decoders. After
// the first failure every read returns zero and Err stays set, so a decoder
// reads a whole message and checks once.
package fields

import (
	"encoding/binary"
	"fmt"
)

// Decoder reads fields from B starting at Off. Malformed is the sentinel
// every failure wraps (errors.Is), so each protocol keeps its own.
type Decoder struct {
	B         []byte
	Off       int
	Err       error
	Malformed error
}

// Fail records the first failure, wrapping Malformed.
func (d *Decoder) Fail(format string, args ...any) {
	if d.Err == nil {
		d.Err = fmt.Errorf("%w: %s", d.Malformed, fmt.Sprintf(format, args...))
	}
}

// Remaining is the number of unread bytes.
func (d *Decoder) Remaining() int { return len(d.B) - d.Off }

// Take returns the next n bytes as a sub-slice of B whose capacity ends at
// its length (appending to it never overwrites the body), or nil after a
// failure or when fewer than n bytes remain.
func (d *Decoder) Take(n int, what string) []byte {
	if d.Err != nil {
		return nil
	}
	if n < 0 || len(d.B)-d.Off < n {
		d.Fail("%s: need %d bytes, have %d", what, n, len(d.B)-d.Off)
		return nil
	}
	p := d.B[d.Off : d.Off+n : d.Off+n]
	d.Off += n
	return p
}

// U8 reads one byte.
func (d *Decoder) U8(what string) uint8 {
	if p := d.Take(1, what); p != nil {
		return p[0]
	}
	return 0
}

// U16 reads a big-endian uint16.
func (d *Decoder) U16(what string) uint16 {
	if p := d.Take(2, what); p != nil {
		return binary.BigEndian.Uint16(p)
	}
	return 0
}

// U32 reads a big-endian uint32.
func (d *Decoder) U32(what string) uint32 {
	if p := d.Take(4, what); p != nil {
		return binary.BigEndian.Uint32(p)
	}
	return 0
}

// U64 reads a big-endian uint64.
func (d *Decoder) U64(what string) uint64 {
	if p := d.Take(8, what); p != nil {
		return binary.BigEndian.Uint64(p)
	}
	return 0
}
