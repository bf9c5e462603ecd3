package peer

import (
	"encoding/binary"
	"fmt"
	"slices"

	"felix.dev/felix/broker/record"
	"felix.dev/felix/broker/replication"
	"felix.dev/felix/broker/wire"
)

// bundleVersion is the first byte of a bundle body: several replication
// messages in one frame, each a version-1 body (wire.FeatureShipBundle).
const bundleVersion = 2

// MaxBundle bounds the messages of one bundle; a body declaring more is
// malformed.
const MaxBundle = 1024

// minBodyLen is the smallest version-1 body: version, an empty stream
// name, shard, type, empty from and to, epoch, pass, log. A bundle entry
// shorter than that is malformed, so a bundle's message count is bounded
// by its length as well as by MaxBundle.
const minBodyLen = 1 + 2 + 4 + 1 + 2 + 2 + 8 + 8 + 1

// Shipped is one replication message of a frame and the shard it is about.
type Shipped struct {
	Shard record.ShardID
	Msg   replication.Message
	// Size is the length of the message's version-1 body.
	Size int
}

// AppendBundleFrame appends to dst one frame carrying every message of ms,
// in order, as a bundle (body version 2): a u8 2, a u16 count (1 to
// MaxBundle), then count times a u32 length and the message's version-1
// body, exactly as Encode would give it. The messages must all be requests
// or all answers (one frame type) and may name different shards. Send a
// bundle only over a connection whose handshake accepted
// wire.FeatureShipBundle; a peer without it refuses the frame as
// malformed.
func AppendBundleFrame(dst []byte, ms []Shipped) ([]byte, error) {
	if len(ms) == 0 || len(ms) > MaxBundle {
		return nil, fmt.Errorf("%w: bundle of %d messages", ErrMalformed, len(ms))
	}
	ft := FrameType(ms[0].Msg.Type)
	for i := range ms[1:] {
		if FrameType(ms[1+i].Msg.Type) != ft {
			return nil, fmt.Errorf("%w: %s bundled with %s", ErrMalformed, ms[1+i].Msg.Type, ms[0].Msg.Type)
		}
	}
	start := len(dst)
	dst = slices.Grow(dst, 3+len(ms)*100)
	dst = wire.AppendFrame(dst, wire.Frame{Type: ft})
	dst = append(dst, bundleVersion)
	dst = binary.BigEndian.AppendUint16(dst, uint16(len(ms)))
	for i := range ms {
		at := len(dst)
		// appendBody leaves room for the entry's length where a frame
		// header would go; the entry's length is written over its first
		// four bytes and the rest of the header is cut.
		var err error
		dst, err = AppendFrame(dst, ms[i].Shard, ms[i].Msg)
		if err != nil {
			return nil, err
		}
		body := len(dst) - at - wire.FrameHeaderSize
		copy(dst[at+4:], dst[at+wire.FrameHeaderSize:])
		dst = dst[:at+4+body]
		binary.BigEndian.PutUint32(dst[at:], uint32(body))
	}
	binary.BigEndian.PutUint32(dst[start:], uint32(len(dst)-start-4))
	return dst, nil
}

// DecodeFrame decodes a replication frame of either layout, a version-1
// body (one message) or a bundle (version 2), and appends its messages to
// dst in order. Every entry of a bundle is decoded as Decode decodes a
// version-1 body of the frame's type (a bundle inside a bundle is
// malformed); a bundle with any malformed entry, a count of 0 or over
// MaxBundle, or bytes after its last entry is refused whole
// (ErrMalformed) and nothing is appended. Record payloads and header
// values alias f.Body; each message's Conn is zero.
func DecodeFrame(f wire.Frame, dst []Shipped) ([]Shipped, error) {
	return DecodeFrameNames(f, dst, nil)
}

// DecodeFrameNames is DecodeFrame taking the stream and node names of the
// messages from names (which keeps those it has not seen, see Names)
// instead of allocating them anew for every message; names may be nil.
func DecodeFrameNames(f wire.Frame, dst []Shipped, names *Names) ([]Shipped, error) {
	if len(f.Body) == 0 || f.Body[0] != bundleVersion {
		shard, m, err := decode(f, names)
		if err != nil {
			return dst, err
		}
		return append(dst, Shipped{Shard: shard, Msg: m, Size: len(f.Body)}), nil
	}
	keep := len(dst)
	d := newDec(f.Body)
	d.U8("version")
	n := int(d.U16("bundle count"))
	if d.Err == nil && (n == 0 || n > MaxBundle || n > (len(d.B)-d.Off)/(4+minBodyLen)) {
		d.Fail("bundle of %d messages in %d bytes", n, len(d.B)-d.Off)
	}
	for i := 0; i < n && d.Err == nil; i++ {
		size := int(d.U32("bundle entry length"))
		if d.Err == nil && size < minBodyLen {
			d.Fail("bundle entry of %d bytes", size)
		}
		body := d.Take(size, "bundle entry")
		if d.Err != nil {
			break
		}
		if body[0] != codecVersion {
			d.Fail("bundle entry of version %d", body[0])
			break
		}
		shard, m, err := decode(wire.Frame{Type: f.Type, Body: body}, names)
		if err != nil {
			d.Err = fmt.Errorf("bundle entry %d: %w", i, err)
			break
		}
		dst = append(dst, Shipped{Shard: shard, Msg: m, Size: size})
	}
	if d.Err == nil && d.Off != len(d.B) {
		d.Fail("%d trailing bytes after the bundle", len(d.B)-d.Off)
	}
	if d.Err != nil {
		clear(dst[keep:])
		return dst[:keep], d.Err
	}
	return dst, nil
}
