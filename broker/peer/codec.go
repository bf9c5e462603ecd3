package peer

import (
	"encoding/binary"
	"errors"
	"fmt"
	"math"
	"slices"

	"felix.dev/felix/broker/internal/fields"
	"felix.dev/felix/broker/record"
	"felix.dev/felix/broker/replication"
	"felix.dev/felix/broker/wire"
)

// codecVersion is the first byte of every replication frame body. A body
// with another version is refused (ErrMalformed), never guessed at.
const codecVersion = 1

// ErrMalformed is matched by every decoding error of a replication frame
// body: cut short, trailing bytes, impossible counts, unknown version or
// message type.
var ErrMalformed = errors.New("peer: malformed replication frame")

// Limits on what one replication frame body may declare; a body over them
// is malformed. They bound the allocation a hostile body can cause to a
// small multiple of its length.
const (
	maxNameLen   = 1 << 10 // node names, stream names
	maxHeaders   = 1 << 12
	minRecordLen = 8 + 8 + 8 + 1 + 8 + 2 + 4 // offset epoch ts kind floor nheaders payloadlen
	epochLen     = 16
)

// FrameType returns the frame type a message travels in: wire.MsgShip for
// requests (Append, Probe, Fetch), wire.MsgShipAnswer for answers.
func FrameType(t replication.MsgType) wire.MsgType {
	switch t {
	case replication.MsgAppend, replication.MsgProbe, replication.MsgFetch:
		return wire.MsgShip
	default:
		return wire.MsgShipAnswer
	}
}

// IsRequest reports whether t is sent by a (recovering) leader to a
// follower; answers go the other way over the same connection.
func IsRequest(t replication.MsgType) bool { return FrameType(t) == wire.MsgShip }

// Encode returns the frame carrying m for shard. An Append carries its
// Base (the leader's log start, set only when it equals Index) as an
// optional trailing u64, written only when non-zero: every other Append is
// the version-1 layout unchanged, so older brokers keep decoding it. An
// Append whose Base is neither 0 nor its Index is refused (ErrMalformed). m.Conn is not encoded: it
// names a connection of the receiving side, which sets it on arrival.
func Encode(shard record.ShardID, m replication.Message) (wire.Frame, error) {
	b, err := AppendFrame(nil, shard, m)
	if err != nil {
		return wire.Frame{}, err
	}
	return wire.Frame{Type: FrameType(m.Type), Body: b[wire.FrameHeaderSize:]}, nil
}

// AppendFrame appends the whole frame (header and body) carrying m for
// shard to dst, as wire.AppendFrame(dst, Encode(shard, m)) would, without
// the intermediate copy.
func AppendFrame(dst []byte, shard record.ShardID, m replication.Message) ([]byte, error) {
	if len(shard.Stream) > maxNameLen || len(m.From) > maxNameLen || len(m.To) > maxNameLen {
		return nil, fmt.Errorf("%w: name longer than %d bytes", ErrMalformed, maxNameLen)
	}
	if err := wire.CheckStreamName(shard.Stream); err != nil {
		return nil, fmt.Errorf("%w: %w", ErrMalformed, err)
	}
	if m.Type < replication.MsgAppend || m.Type > replication.MsgRefuse {
		return nil, fmt.Errorf("%w: message type %d", ErrMalformed, m.Type)
	}
	start := len(dst)
	dst = slices.Grow(dst, 96+encodedRecordsLen(m.Records))
	e := enc{b: wire.AppendFrame(dst, wire.Frame{Type: FrameType(m.Type)})}
	e.u8(codecVersion)
	e.str(shard.Stream)
	e.u32(shard.Shard)
	e.u8(uint8(m.Type))
	e.str(string(m.From))
	e.str(string(m.To))
	e.u64(m.Epoch)
	e.u64(m.Pass)
	e.u8(uint8(m.Log))
	switch m.Type {
	case replication.MsgAppend:
		if m.Base != 0 && m.Base != m.Index {
			return nil, fmt.Errorf("%w: append base %d is not its index %d", ErrMalformed, m.Base, m.Index)
		}
		e.u64(m.Index)
		e.u64(m.PrevEpoch)
		e.u64(m.Commit)
		if err := e.records(m.Records); err != nil {
			return nil, err
		}
		if m.Base != 0 {
			// Optional trailing field: the leader's log starts at Index.
			// Absent in every other Append, so those stay byte for byte
			// what older brokers send and accept.
			e.u64(m.Base)
		}
	case replication.MsgAppendResp:
		if m.Match {
			e.u8(1)
			e.u64(m.MatchEnd)
		} else {
			e.u8(0)
			e.u64(m.Base)
			e.u64(m.Tail)
			e.epochs(m.Epochs)
		}
	case replication.MsgProbe, replication.MsgRefuse:
	case replication.MsgProbeResp:
		for _, p := range m.Logs {
			e.u64(p.Base)
			e.u64(p.Tail)
			e.epochs(p.Epochs)
		}
	case replication.MsgFetch:
		max := m.Max
		if max < 0 {
			max = 0
		}
		e.u32(uint32(min(max, math.MaxUint32)))
		e.u64(m.Index)
	case replication.MsgFetchResp:
		e.u64(m.Index)
		e.u64(m.PrevEpoch)
		e.u64(m.Base)
		e.u64(m.Tail)
		if err := e.records(m.Records); err != nil {
			return nil, err
		}
	}
	binary.BigEndian.PutUint32(e.b[start:], uint32(len(e.b)-start-4))
	return e.b, nil
}

// Decode decodes a replication frame. The frame type must be the one
// FrameType gives for the message type inside. Record payloads and header
// values alias f.Body. The returned message's Conn is zero; the receiver
// sets it.
func Decode(f wire.Frame) (record.ShardID, replication.Message, error) {
	return decode(f, nil)
}

// decode is Decode, taking the stream and node names from names when it
// is not nil.
func decode(f wire.Frame, names *Names) (record.ShardID, replication.Message, error) {
	d := newDec(f.Body)
	d.names = names
	if v := d.U8("version"); d.Err == nil && v != codecVersion {
		d.Fail("version %d, want %d", v, codecVersion)
	}
	var shard record.ShardID
	var m replication.Message
	shard.Stream = d.name("stream")
	if d.Err == nil && wire.CheckStreamName(shard.Stream) != nil {
		d.Fail("stream name %q outside the protocol's set", shard.Stream)
	}
	shard.Shard = d.U32("shard")
	m.Type = replication.MsgType(d.U8("type"))
	if d.Err == nil && (m.Type < replication.MsgAppend || m.Type > replication.MsgRefuse) {
		d.Fail("message type %d", m.Type)
	}
	if d.Err == nil && FrameType(m.Type) != f.Type {
		d.Fail("%s in a %s frame", m.Type, f.Type)
	}
	m.From = replication.NodeID(d.name("from"))
	m.To = replication.NodeID(d.name("to"))
	m.Epoch = d.U64("epoch")
	m.Pass = d.U64("pass")
	m.Log = record.LogKind(d.U8("log"))
	if d.Err == nil && int(m.Log) >= len(record.LogKinds) {
		d.Fail("log %d", m.Log)
	}
	switch m.Type {
	case replication.MsgAppend:
		m.Index = d.U64("index")
		m.PrevEpoch = d.U64("prev epoch")
		m.Commit = d.U64("commit")
		m.Records = d.records()
		if d.Err == nil && d.Off < len(d.B) {
			m.Base = d.U64("base")
			if d.Err == nil && (m.Base == 0 || m.Base != m.Index) {
				d.Fail("append base %d with index %d", m.Base, m.Index)
			}
		}
	case replication.MsgAppendResp:
		switch d.U8("match") {
		case 1:
			m.Match = true
			m.MatchEnd = d.U64("match end")
		case 0:
			m.Base = d.U64("base")
			m.Tail = d.U64("tail")
			m.Epochs = d.epochs()
		default:
			d.Fail("match flag")
		}
	case replication.MsgProbeResp:
		for i := range m.Logs {
			m.Logs[i].Base = d.U64("base")
			m.Logs[i].Tail = d.U64("tail")
			m.Logs[i].Epochs = d.epochs()
		}
	case replication.MsgFetch:
		m.Max = int(d.U32("max"))
		m.Index = d.U64("index")
	case replication.MsgFetchResp:
		m.Index = d.U64("index")
		m.PrevEpoch = d.U64("prev epoch")
		m.Base = d.U64("base")
		m.Tail = d.U64("tail")
		m.Records = d.records()
	}
	if d.Err == nil && d.Off != len(d.B) {
		d.Fail("%d trailing bytes", len(d.B)-d.Off)
	}
	if d.Err != nil {
		return record.ShardID{}, replication.Message{}, d.Err
	}
	return shard, m, nil
}

func encodedRecordsLen(recs []record.Record) int {
	n := 4
	for i := range recs {
		n += minRecordLen + len(recs[i].Payload)
		for _, h := range recs[i].Headers {
			n += 6 + len(h.Key) + len(h.Value)
		}
	}
	return n
}

// enc appends big-endian fields.
type enc struct{ b []byte }

func (e *enc) u8(v uint8)   { e.b = append(e.b, v) }
func (e *enc) u16(v uint16) { e.b = binary.BigEndian.AppendUint16(e.b, v) }
func (e *enc) u32(v uint32) { e.b = binary.BigEndian.AppendUint32(e.b, v) }
func (e *enc) u64(v uint64) { e.b = binary.BigEndian.AppendUint64(e.b, v) }
func (e *enc) str(s string) {
	e.u16(uint16(len(s)))
	e.b = append(e.b, s...)
}

func (e *enc) epochs(es []replication.EpochStart) {
	e.u32(uint32(len(es)))
	for _, s := range es {
		e.u64(s.Epoch)
		e.u64(s.Offset)
	}
}

func (e *enc) records(recs []record.Record) error {
	e.u32(uint32(len(recs)))
	for i := range recs {
		r := &recs[i]
		if len(r.Headers) > maxHeaders {
			return fmt.Errorf("%w: %d headers", ErrMalformed, len(r.Headers))
		}
		e.u64(r.Offset)
		e.u64(r.Epoch)
		e.u64(uint64(r.Timestamp))
		e.u8(uint8(r.Kind))
		e.u64(r.Floor)
		e.u16(uint16(len(r.Headers)))
		for _, h := range r.Headers {
			if len(h.Key) > math.MaxUint16 {
				return fmt.Errorf("%w: header key of %d bytes", ErrMalformed, len(h.Key))
			}
			e.str(h.Key)
			e.u32(uint32(len(h.Value)))
			e.b = append(e.b, h.Value...)
		}
		e.u32(uint32(len(r.Payload)))
		e.b = append(e.b, r.Payload...)
	}
	return nil
}

// dec reads big-endian fields with a sticky error (fields.Decoder) plus
// the replication frames' compound fields.
type dec struct {
	fields.Decoder
	names *Names // nil: every name is a new string
}

func newDec(b []byte) dec { return dec{Decoder: fields.Decoder{B: b, Malformed: ErrMalformed}} }

func (d *dec) str(what string) string {
	n := int(d.U16(what))
	if d.Err == nil && n > maxNameLen && what != "header key" {
		d.Fail("%s of %d bytes", what, n)
		return ""
	}
	return string(d.Take(n, what))
}

// name reads a stream or node name (as str), from d.names when it holds
// it.
func (d *dec) name(what string) string {
	if d.names == nil {
		return d.str(what)
	}
	n := int(d.U16(what))
	if d.Err == nil && n > maxNameLen {
		d.Fail("%s of %d bytes", what, n)
		return ""
	}
	return d.names.get(d.Take(n, what))
}

// maxNames bounds the names one Names holds: a connection carries a
// cluster's node names and the streams of the shards it replicates;
// past the bound it starts over.
const maxNames = 256

// Names interns the stream and node names decoded from one connection's
// frames (DecodeFrameNames): a connection carries the same few names
// frame after frame, and each decoded message would otherwise hold new
// copies of them (issue 31: three allocations per idle message). The zero
// value is ready; it is not safe for concurrent use (one per reading
// goroutine).
type Names struct{ m map[string]string }

func (n *Names) get(b []byte) string {
	if s, ok := n.m[string(b)]; ok { // no allocation for the look-up
		return s
	}
	s := string(b)
	if n.m == nil {
		n.m = make(map[string]string)
	}
	if len(n.m) >= maxNames {
		// Full (names are interned before the message is validated, so
		// a peer sending junk could fill it): start over rather than
		// stop interning for the connection's life.
		clear(n.m)
	}
	n.m[s] = s
	return s
}

// count reads a u32 count of items of at least size bytes each and refuses
// one the rest of the body cannot hold.
func (d *dec) count(size int, what string) int {
	n := int(d.U32(what))
	if d.Err == nil && n > (len(d.B)-d.Off)/size {
		d.Fail("%d %s in %d bytes", n, what, len(d.B)-d.Off)
		return 0
	}
	return n
}

func (d *dec) epochs() []replication.EpochStart {
	n := d.count(epochLen, "epoch starts")
	if n == 0 {
		return nil
	}
	out := make([]replication.EpochStart, 0, n)
	for i := 0; i < n && d.Err == nil; i++ {
		out = append(out, replication.EpochStart{Epoch: d.U64("epoch"), Offset: d.U64("offset")})
	}
	return out
}

func (d *dec) records() []record.Record {
	n := d.count(minRecordLen, "records")
	if n == 0 {
		return nil
	}
	out := make([]record.Record, 0, n)
	for i := 0; i < n && d.Err == nil; i++ {
		r := record.Record{
			Offset:    d.U64("offset"),
			Epoch:     d.U64("epoch"),
			Timestamp: int64(d.U64("timestamp")),
			Kind:      record.Kind(d.U8("kind")),
			Floor:     d.U64("floor"),
		}
		nh := int(d.U16("header count"))
		if d.Err == nil && nh > (len(d.B)-d.Off)/6 {
			d.Fail("%d headers in %d bytes", nh, len(d.B)-d.Off)
		}
		if nh > 0 && d.Err == nil {
			r.Headers = make([]record.Header, 0, nh)
			for j := 0; j < nh && d.Err == nil; j++ {
				k := d.str("header key")
				v := d.Take(int(d.U32("header value length")), "header value")
				r.Headers = append(r.Headers, record.Header{Key: k, Value: v})
			}
		}
		r.Payload = d.Take(int(d.U32("payload length")), "payload")
		out = append(out, r)
	}
	return out
}
