package wire

import (
	"encoding/binary"
	"fmt"
	"math"

	"felix.dev/felix/broker/record"
)

// ShardRef names the shard a request addresses: stream name (CheckStreamName:
// 1 to 255 bytes of A-Z a-z 0-9 . _ -) and shard number. Requests address
// the shard's data log.
type ShardRef = record.ShardID

// AppendRequest appends Records to a shard as one batch: all land at
// consecutive offsets or none do. When ExpectTail is set the batch lands only
// if the shard's next offset equals it [TR-1]. Only Headers and Payload of
// each record are sent; the broker assigns offsets, epoch and timestamp.
type AppendRequest struct {
	Shard      ShardRef
	ExpectTail *uint64
	Records    []record.Record
	// Producer, when set, makes the append idempotent: the leader writes
	// the batch only if Seq is the producer's next sequence on the shard
	// and answers a retry of a batch it wrote with the original offsets
	// (FeatureIdempotent; flag bit 1 on the wire).
	Producer *Producer
}

// Producer names an idempotent append: the producer's 16-byte id (not
// all zero) and the batch's sequence number on the shard, counting from 0
// by one per append.
type Producer struct {
	ID  [16]byte
	Seq uint64
}

// errZeroProducer refuses to encode a producer whose id is all zero.
var errZeroProducer = fmt.Errorf("%w: zero producer id", ErrMalformed)

// Append flag bits.
const (
	appendConditional uint8 = 1 << 0
	appendProducer    uint8 = 1 << 1
)

// AppendOK answers an append: the batch occupies [First, Tail).
type AppendOK struct {
	First uint64
	Tail  uint64
}

// FromKind says where a read starts.
type FromKind uint8

const (
	// FromOffset starts at ReadRequest.Offset; below the floor it fails
	// with CursorTooOld [TR-4].
	FromOffset FromKind = 0
	// FromEarliest starts at the floor (the readable start) [TR-4].
	FromEarliest FromKind = 1
	// FromLatest starts at the tail: only records appended later are read.
	FromLatest FromKind = 2
)

// ReadRequest asks for data records of a shard from a start position,
// bounded by MaxRecords and MaxBytes (payload plus header bytes; at least
// one record is returned when any is available, however large). With
// WaitMillis > 0 and nothing to return, the broker waits up to that long for
// new records before answering (follow mode).
type ReadRequest struct {
	Shard      ShardRef
	From       FromKind
	Offset     uint64
	MaxRecords uint32
	MaxBytes   uint32
	WaitMillis uint32
}

// ReadOK answers a read. Records are data records in offset order
// (bookkeeping records such as trims are skipped). Next is where the
// following read should start; it moves past skipped records too.
type ReadOK struct {
	Next    uint64
	Records []record.Record
}

// TrimRequest asks for a conditional head trim: a trim record carrying
// Headers and Floor is appended only if the tail equals ExpectTail, and a
// trim at or below the current floor writes nothing but still checks the
// tail [TR-2] [TR-3].
type TrimRequest struct {
	Shard      ShardRef
	Floor      uint64
	ExpectTail uint64
	Headers    []record.Header
}

// TrimOK answers a trim with the shard's tail and floor after it.
type TrimOK struct {
	Tail  uint64
	Floor uint64
}

// DescribeRequest asks for a shard's positions.
type DescribeRequest struct {
	Shard ShardRef
}

// DescribeOK answers a describe: Base is the shard's first offset, Floor the
// readable start, Tail the next offset, Committed the acknowledged position
// (records below it are durable under the shard's ack mode). With
// FeatureLogPolicy it also says whether the data log is Fenced and whether
// its Retention is on [FD-4]; without it both read false and mean nothing.
type DescribeOK struct {
	Base      uint64
	Floor     uint64
	Tail      uint64
	Committed uint64
	Fenced    bool
	Retention bool
}

// The bits of DescribeOK's policy byte (FeatureLogPolicy).
const (
	policyFenced    uint8 = 1 << 0
	policyRetention uint8 = 1 << 1
	policyKnown           = policyFenced | policyRetention
)

func (e *enc) shard(s ShardRef) {
	e.str(s.Stream)
	e.u32(s.Shard)
}

func (d *dec) shard() ShardRef {
	s := ShardRef{Stream: d.str("stream"), Shard: d.U32("shard")}
	if d.Err == nil {
		if err := CheckStreamName(s.Stream); err != nil {
			d.Err = err
		}
	}
	return s
}

func checkShard(s ShardRef) error { return CheckStreamName(s.Stream) }

// minRecordSize is the encoded size of a record without headers or payload.
const minRecordSize = 2 + 4

// EncodeAppend returns the body of an Append frame.
func EncodeAppend(r AppendRequest) ([]byte, error) {
	return appendAppendBody(nil, r)
}

// AppendAppendFrame appends a whole Append frame (prefix and body) with
// request id reqID to dst, encoding the records once, in place.
func AppendAppendFrame(dst []byte, reqID uint32, r AppendRequest) ([]byte, error) {
	start := len(dst)
	dst = append(dst, make([]byte, FrameHeaderSize)...)
	out, err := appendAppendBody(dst, r)
	if err != nil {
		return dst[:start], err
	}
	binary.BigEndian.PutUint32(out[start:], uint32(len(out)-start-4))
	out[start+4] = byte(MsgAppend)
	binary.BigEndian.PutUint32(out[start+5:], reqID)
	return out, nil
}

func appendAppendBody(dst []byte, r AppendRequest) ([]byte, error) {
	if err := checkShard(r.Shard); err != nil {
		return nil, err
	}
	size := 32 + len(r.Shard.Stream)
	for _, rec := range r.Records {
		if err := checkHeaders(rec.Headers); err != nil {
			return nil, err
		}
		if len(rec.Payload) > math.MaxUint32 {
			return nil, fmt.Errorf("%w: payload of %d bytes", ErrMalformed, len(rec.Payload))
		}
		size += minRecordSize + len(rec.Payload)
		for _, h := range rec.Headers {
			size += minHeaderSize + len(h.Key) + len(h.Value)
		}
	}
	if cap(dst)-len(dst) < size {
		dst = append(make([]byte, 0, len(dst)+size), dst...)
	}
	if r.Producer != nil && r.Producer.ID == ([16]byte{}) {
		return nil, errZeroProducer
	}
	e := enc{b: dst}
	e.shard(r.Shard)
	var flags uint8
	if r.ExpectTail != nil {
		flags |= appendConditional
	}
	if r.Producer != nil {
		flags |= appendProducer
	}
	e.u8(flags)
	if r.ExpectTail != nil {
		e.u64(*r.ExpectTail)
	}
	if r.Producer != nil {
		e.b = append(e.b, r.Producer.ID[:]...)
		e.u64(r.Producer.Seq)
	}
	e.u32(uint32(len(r.Records)))
	for _, rec := range r.Records {
		e.headers(rec.Headers)
		e.bytes(rec.Payload)
	}
	return e.b, nil
}

// DecodeAppend decodes an Append body of a connection without features:
// DecodeAppendFor(b, 0).
func DecodeAppend(b []byte) (AppendRequest, error) { return DecodeAppendFor(b, 0) }

// DecodeAppendFor decodes an Append body under the connection's features.
// Records carry Kind data and their Headers and Payload. Flag bit 1 (a
// producer id and sequence follow) is malformed unless FeatureIdempotent
// was negotiated, and so is a zero producer id.
func DecodeAppendFor(b []byte, feats Features) (AppendRequest, error) {
	d := newDec(b)
	r := AppendRequest{Shard: d.shard()}
	flags := d.U8("flags")
	allowed := appendConditional
	if feats.Has(FeatureIdempotent) {
		allowed |= appendProducer
	}
	if d.Err == nil && flags&^allowed != 0 {
		d.Fail("append flags %#x: only %#x allowed on this connection", flags, allowed)
	}
	if flags&appendConditional != 0 {
		t := d.U64("expect tail")
		r.ExpectTail = &t
	}
	if flags&appendProducer != 0 && d.Err == nil {
		var p Producer
		copy(p.ID[:], d.Take(len(p.ID), "producer id"))
		p.Seq = d.U64("sequence")
		if d.Err == nil && p.ID == ([16]byte{}) {
			d.Fail("zero producer id")
		}
		r.Producer = &p
	}
	n := int(d.U32("record count"))
	if d.Err == nil && n*minRecordSize > d.Remaining() {
		d.Fail("%d records cannot fit in %d bytes", n, d.Remaining())
	}
	if d.Err == nil && n > 0 {
		r.Records = make([]record.Record, 0, n)
		for i := 0; i < n && d.Err == nil; i++ {
			hs := d.headers("headers")
			p := d.bytes("payload")
			r.Records = append(r.Records, record.Record{Kind: record.KindData, Headers: hs, Payload: p})
		}
	}
	return r, d.end("append")
}

// EncodeAppendOK returns the body of an AppendOK frame.
func EncodeAppendOK(r AppendOK) []byte {
	e := enc{b: make([]byte, 0, 16)}
	e.u64(r.First)
	e.u64(r.Tail)
	return e.b
}

// DecodeAppendOK decodes an AppendOK body.
func DecodeAppendOK(b []byte) (AppendOK, error) {
	d := newDec(b)
	r := AppendOK{First: d.U64("first"), Tail: d.U64("tail")}
	return r, d.end("append ok")
}

// EncodeRead returns the body of a Read frame.
func EncodeRead(r ReadRequest) ([]byte, error) {
	if err := checkShard(r.Shard); err != nil {
		return nil, err
	}
	if r.From > FromLatest {
		return nil, fmt.Errorf("%w: from kind %d", ErrMalformed, r.From)
	}
	e := enc{b: make([]byte, 0, 32+len(r.Shard.Stream))}
	e.shard(r.Shard)
	e.u8(uint8(r.From))
	e.u64(r.Offset)
	e.u32(r.MaxRecords)
	e.u32(r.MaxBytes)
	e.u32(r.WaitMillis)
	return e.b, nil
}

// DecodeRead decodes a Read body.
func DecodeRead(b []byte) (ReadRequest, error) {
	d := newDec(b)
	r := ReadRequest{Shard: d.shard(), From: FromKind(d.U8("from"))}
	if d.Err == nil && r.From > FromLatest {
		d.Fail("from kind %d", r.From)
	}
	r.Offset = d.U64("offset")
	r.MaxRecords = d.U32("max records")
	r.MaxBytes = d.U32("max bytes")
	r.WaitMillis = d.U32("wait millis")
	return r, d.end("read")
}

// readRecordFixed is offset, epoch and timestamp.
const readRecordFixed = 8 + 8 + 8

// EncodeReadOK returns the body of a ReadOK frame.
func EncodeReadOK(r ReadOK) ([]byte, error) {
	size := 12
	for _, rec := range r.Records {
		if err := checkHeaders(rec.Headers); err != nil {
			return nil, err
		}
		size += readRecordFixed + minRecordSize + len(rec.Payload)
		for _, h := range rec.Headers {
			size += minHeaderSize + len(h.Key) + len(h.Value)
		}
	}
	e := enc{b: make([]byte, 0, size)}
	e.u64(r.Next)
	e.u32(uint32(len(r.Records)))
	for _, rec := range r.Records {
		e.u64(rec.Offset)
		e.u64(rec.Epoch)
		e.u64(uint64(rec.Timestamp))
		e.headers(rec.Headers)
		e.bytes(rec.Payload)
	}
	return e.b, nil
}

// DecodeReadOK decodes a ReadOK body.
func DecodeReadOK(b []byte) (ReadOK, error) {
	d := newDec(b)
	r := ReadOK{Next: d.U64("next")}
	n := int(d.U32("record count"))
	if d.Err == nil && n*(readRecordFixed+minRecordSize) > d.Remaining() {
		d.Fail("%d records cannot fit in %d bytes", n, d.Remaining())
	}
	if d.Err == nil && n > 0 {
		r.Records = make([]record.Record, 0, n)
		for i := 0; i < n && d.Err == nil; i++ {
			rec := record.Record{Kind: record.KindData}
			rec.Offset = d.U64("offset")
			rec.Epoch = d.U64("epoch")
			rec.Timestamp = int64(d.U64("timestamp"))
			rec.Headers = d.headers("headers")
			rec.Payload = d.bytes("payload")
			r.Records = append(r.Records, rec)
		}
	}
	return r, d.end("read ok")
}

// EncodeTrim returns the body of a Trim frame.
func EncodeTrim(r TrimRequest) ([]byte, error) {
	if err := checkShard(r.Shard); err != nil {
		return nil, err
	}
	if err := checkHeaders(r.Headers); err != nil {
		return nil, err
	}
	e := enc{b: make([]byte, 0, 64+len(r.Shard.Stream))}
	e.shard(r.Shard)
	e.u64(r.Floor)
	e.u64(r.ExpectTail)
	e.headers(r.Headers)
	return e.b, nil
}

// DecodeTrim decodes a Trim body.
func DecodeTrim(b []byte) (TrimRequest, error) {
	d := newDec(b)
	r := TrimRequest{Shard: d.shard(), Floor: d.U64("floor"), ExpectTail: d.U64("expect tail")}
	r.Headers = d.headers("headers")
	return r, d.end("trim")
}

// EncodeTrimOK returns the body of a TrimOK frame.
func EncodeTrimOK(r TrimOK) []byte {
	e := enc{b: make([]byte, 0, 16)}
	e.u64(r.Tail)
	e.u64(r.Floor)
	return e.b
}

// DecodeTrimOK decodes a TrimOK body.
func DecodeTrimOK(b []byte) (TrimOK, error) {
	d := newDec(b)
	r := TrimOK{Tail: d.U64("tail"), Floor: d.U64("floor")}
	return r, d.end("trim ok")
}

// EncodeDescribe returns the body of a Describe frame.
func EncodeDescribe(r DescribeRequest) ([]byte, error) {
	if err := checkShard(r.Shard); err != nil {
		return nil, err
	}
	e := enc{b: make([]byte, 0, 8+len(r.Shard.Stream))}
	e.shard(r.Shard)
	return e.b, nil
}

// DecodeDescribe decodes a Describe body.
func DecodeDescribe(b []byte) (DescribeRequest, error) {
	d := newDec(b)
	r := DescribeRequest{Shard: d.shard()}
	return r, d.end("describe")
}

// EncodeDescribeOK returns the body of a DescribeOK frame on a connection
// without FeatureLogPolicy.
func EncodeDescribeOK(r DescribeOK) []byte { return EncodeDescribeOKFor(r, 0) }

// EncodeDescribeOKFor returns the body of a DescribeOK frame under the
// connection's features: the policy byte follows only with
// FeatureLogPolicy.
func EncodeDescribeOKFor(r DescribeOK, feats Features) []byte {
	e := enc{b: make([]byte, 0, 33)}
	e.u64(r.Base)
	e.u64(r.Floor)
	e.u64(r.Tail)
	e.u64(r.Committed)
	if feats.Has(FeatureLogPolicy) {
		var p uint8
		if r.Fenced {
			p |= policyFenced
		}
		if r.Retention {
			p |= policyRetention
		}
		e.u8(p)
	}
	return e.b
}

// DecodeDescribeOK decodes a DescribeOK body of a connection without
// FeatureLogPolicy.
func DecodeDescribeOK(b []byte) (DescribeOK, error) { return DecodeDescribeOKFor(b, 0) }

// DecodeDescribeOKFor decodes a DescribeOK body under the connection's
// features. A policy byte with a bit this implementation does not know is
// malformed.
func DecodeDescribeOKFor(b []byte, feats Features) (DescribeOK, error) {
	d := newDec(b)
	r := DescribeOK{Base: d.U64("base"), Floor: d.U64("floor"), Tail: d.U64("tail"), Committed: d.U64("committed")}
	if feats.Has(FeatureLogPolicy) {
		p := d.U8("policy")
		if p&^policyKnown != 0 {
			d.Fail("policy has unknown bits")
		}
		r.Fenced, r.Retention = p&policyFenced != 0, p&policyRetention != 0
	}
	return r, d.end("describe ok")
}
