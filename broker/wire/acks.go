package wire

import (
	"fmt"

	"felix.dev/felix/broker/record"
)

// The per-record acknowledgement requests (FeatureAcks) address a shard's
// group log, like the group requests, for a group configured to
// acknowledge each record (broker/group: AckConfig); the dead-letter
// requests address the shard's dead-letter log (record.LogDeadLetter,
// broker/deadletter).

// GroupAckConfigRequest switches the group to per-record acknowledgement
// on the shard (or changes its settings), by the owner at Generation.
// MaxDeliveries is how many times a record is delivered before it is
// dead-lettered, AckWaitMillis how long the leader waits for an
// acknowledgement before it redelivers, MaxInFlight the most outstanding
// records (at most the broker's --group-max-in-flight).
type GroupAckConfigRequest struct {
	Shard         ShardRef
	Group, Member string
	Generation    uint64
	MaxDeliveries uint32
	AckWaitMillis uint32
	MaxInFlight   uint32
}

// GroupAckConfigOK answers a GroupAckConfig: the entry sits at Entry in
// the shard's group log.
type GroupAckConfigOK struct {
	Entry uint64
}

// GroupFetchRequest asks the leader for at most MaxRecords records to
// process, for the owner at Generation: first the outstanding records due
// again (their ack wait ran out, or they were nak'd), then records never
// delivered, while the group has fewer than MaxInFlight outstanding. A
// record due again that was delivered MaxDeliveries times is not
// delivered: it is dead-lettered. The leader records the deliveries in
// the group log before it answers. A fetch that finds the window full and
// nothing due is refused with GroupLimit (the member acknowledges first).
type GroupFetchRequest struct {
	Shard         ShardRef
	Group, Member string
	Generation    uint64
	MaxRecords    uint32
}

// Delivery is one record handed to a member, and how many times it has
// been delivered (this delivery included).
type Delivery struct {
	Record     record.Record
	Deliveries uint32
}

// GroupFetchOK answers a GroupFetch. DeadLettered is how many records
// the fetch dead-lettered; Committed is the group's committed offset
// after the fetch.
type GroupFetchOK struct {
	Deliveries   []Delivery
	DeadLettered uint32
	Committed    uint64
}

// GroupAckRequest acknowledges Offsets (processed), by the owner at
// Generation. An offset settled already is ignored (a resend is
// harmless); an offset never delivered is BadRequest.
type GroupAckRequest struct {
	Shard         ShardRef
	Group, Member string
	Generation    uint64
	Offsets       []uint64
}

// GroupAckOK answers a GroupAck with the group's committed offset after
// it (the lowest offset still outstanding).
type GroupAckOK struct {
	Committed uint64
}

// GroupNakRequest asks for Offsets to be redelivered at the member's next
// fetch, without waiting for their ack wait. It writes nothing: the
// delivery that follows is counted.
type GroupNakRequest struct {
	Shard         ShardRef
	Group, Member string
	Generation    uint64
	Offsets       []uint64
}

// GroupNakOK answers a GroupNak.
type GroupNakOK struct{}

// DeadLetterReadRequest reads the shard's dead-letter log from From, at
// most MaxRecords entries.
type DeadLetterReadRequest struct {
	Shard      ShardRef
	From       uint64
	MaxRecords uint32
}

// DeadLetter is one dead-lettered record: Entry is its offset in the
// dead-letter log; Offset, Epoch, Timestamp, Headers and Payload are the
// original record's; Redriven says it was appended to the data log again,
// at DataOffset.
type DeadLetter struct {
	Entry      uint64
	Group      string
	Offset     uint64
	Epoch      uint64
	Timestamp  int64
	Deliveries uint32
	Reason     uint8
	Headers    []record.Header
	Payload    []byte
	Redriven   bool
	DataOffset uint64
}

// DeadLetterReadOK answers a DeadLetterRead: the entries found and the
// offset to read from next.
type DeadLetterReadOK struct {
	Entries []DeadLetter
	Next    uint64
}

// DeadLetterRedriveRequest appends the record dead-lettered at Entry to
// the shard's data log, exactly once: a redrive of an entry redriven
// before is answered with the data-log offset of the first redrive
// (Already set), nothing written.
type DeadLetterRedriveRequest struct {
	Shard ShardRef
	Entry uint64
}

// DeadLetterRedriveOK answers a DeadLetterRedrive.
type DeadLetterRedriveOK struct {
	DataOffset uint64
	Already    bool
}

// offsetsMax bounds the offsets of one GroupAck or GroupNak (the most one
// group-log entry holds).
const offsetsMax = 4096

// EncodeGroupAckConfig returns the body of a GroupAckConfig frame.
func EncodeGroupAckConfig(r GroupAckConfigRequest) ([]byte, error) {
	e := enc{b: make([]byte, 0, 36+len(r.Shard.Stream)+len(r.Group)+len(r.Member))}
	if err := groupMember(&e, r.Shard, r.Group, r.Member); err != nil {
		return nil, err
	}
	e.u64(r.Generation)
	e.u32(r.MaxDeliveries)
	e.u32(r.AckWaitMillis)
	e.u32(r.MaxInFlight)
	return e.b, nil
}

// DecodeGroupAckConfig decodes a GroupAckConfig body.
func DecodeGroupAckConfig(b []byte) (GroupAckConfigRequest, error) {
	d := newDec(b)
	r := GroupAckConfigRequest{Shard: d.shard(), Group: d.str("group"), Member: d.str("member")}
	r.Generation = d.U64("generation")
	r.MaxDeliveries = d.U32("max deliveries")
	r.AckWaitMillis = d.U32("ack wait")
	r.MaxInFlight = d.U32("max in flight")
	return r, d.end("group ack config")
}

// EncodeGroupAckConfigOK returns the body of a GroupAckConfigOK frame.
func EncodeGroupAckConfigOK(r GroupAckConfigOK) []byte {
	e := enc{b: make([]byte, 0, 8)}
	e.u64(r.Entry)
	return e.b
}

// DecodeGroupAckConfigOK decodes a GroupAckConfigOK body.
func DecodeGroupAckConfigOK(b []byte) (GroupAckConfigOK, error) {
	d := newDec(b)
	r := GroupAckConfigOK{Entry: d.U64("entry")}
	return r, d.end("group ack config ok")
}

// EncodeGroupFetch returns the body of a GroupFetch frame.
func EncodeGroupFetch(r GroupFetchRequest) ([]byte, error) {
	e := enc{b: make([]byte, 0, 28+len(r.Shard.Stream)+len(r.Group)+len(r.Member))}
	if err := groupMember(&e, r.Shard, r.Group, r.Member); err != nil {
		return nil, err
	}
	e.u64(r.Generation)
	e.u32(r.MaxRecords)
	return e.b, nil
}

// DecodeGroupFetch decodes a GroupFetch body.
func DecodeGroupFetch(b []byte) (GroupFetchRequest, error) {
	d := newDec(b)
	r := GroupFetchRequest{Shard: d.shard(), Group: d.str("group"), Member: d.str("member")}
	r.Generation = d.U64("generation")
	r.MaxRecords = d.U32("max records")
	return r, d.end("group fetch")
}

// EncodeGroupFetchOK returns the body of a GroupFetchOK frame: each
// delivery is a record as ReadOK encodes it followed by its delivery
// count.
func EncodeGroupFetchOK(r GroupFetchOK) ([]byte, error) {
	size := 16
	for _, dl := range r.Deliveries {
		if err := checkHeaders(dl.Record.Headers); err != nil {
			return nil, err
		}
		size += readRecordFixed + minRecordSize + 4 + len(dl.Record.Payload)
		for _, h := range dl.Record.Headers {
			size += minHeaderSize + len(h.Key) + len(h.Value)
		}
	}
	e := enc{b: make([]byte, 0, size)}
	e.u64(r.Committed)
	e.u32(r.DeadLettered)
	e.u32(uint32(len(r.Deliveries)))
	for _, dl := range r.Deliveries {
		e.u64(dl.Record.Offset)
		e.u64(dl.Record.Epoch)
		e.u64(uint64(dl.Record.Timestamp))
		e.headers(dl.Record.Headers)
		e.bytes(dl.Record.Payload)
		e.u32(dl.Deliveries)
	}
	return e.b, nil
}

// DecodeGroupFetchOK decodes a GroupFetchOK body.
func DecodeGroupFetchOK(b []byte) (GroupFetchOK, error) {
	d := newDec(b)
	r := GroupFetchOK{Committed: d.U64("committed"), DeadLettered: d.U32("dead-lettered")}
	n := int(d.U32("delivery count"))
	if d.Err == nil && n*(readRecordFixed+minRecordSize+4) > d.Remaining() {
		d.Fail("%d deliveries cannot fit in %d bytes", n, d.Remaining())
	}
	for i := 0; i < n && d.Err == nil; i++ {
		rec := record.Record{Kind: record.KindData}
		rec.Offset = d.U64("offset")
		rec.Epoch = d.U64("epoch")
		rec.Timestamp = int64(d.U64("timestamp"))
		rec.Headers = d.headers("headers")
		rec.Payload = d.bytes("payload")
		r.Deliveries = append(r.Deliveries, Delivery{Record: rec, Deliveries: d.U32("deliveries")})
	}
	return r, d.end("group fetch ok")
}

func encodeOffsets(what string, s ShardRef, group, member string, gen uint64, offs []uint64) ([]byte, error) {
	if len(offs) > offsetsMax {
		return nil, fmt.Errorf("%w: %s of %d offsets, limit %d", ErrMalformed, what, len(offs), offsetsMax)
	}
	e := enc{b: make([]byte, 0, 28+len(s.Stream)+len(group)+len(member)+8*len(offs))}
	if err := groupMember(&e, s, group, member); err != nil {
		return nil, err
	}
	e.u64(gen)
	e.u32(uint32(len(offs)))
	for _, o := range offs {
		e.u64(o)
	}
	return e.b, nil
}

func decodeOffsets(d *dec) []uint64 {
	n := int(d.U32("offset count"))
	if d.Err == nil && (n > offsetsMax || n*8 > d.Remaining()) {
		d.Fail("%d offsets in %d bytes, limit %d", n, d.Remaining(), offsetsMax)
	}
	var out []uint64
	for i := 0; i < n && d.Err == nil; i++ {
		out = append(out, d.U64("offset"))
	}
	return out
}

// EncodeGroupAck returns the body of a GroupAck frame.
func EncodeGroupAck(r GroupAckRequest) ([]byte, error) {
	return encodeOffsets("group ack", r.Shard, r.Group, r.Member, r.Generation, r.Offsets)
}

// DecodeGroupAck decodes a GroupAck body.
func DecodeGroupAck(b []byte) (GroupAckRequest, error) {
	d := newDec(b)
	r := GroupAckRequest{Shard: d.shard(), Group: d.str("group"), Member: d.str("member")}
	r.Generation = d.U64("generation")
	r.Offsets = decodeOffsets(&d)
	return r, d.end("group ack")
}

// EncodeGroupAckOK returns the body of a GroupAckOK frame.
func EncodeGroupAckOK(r GroupAckOK) []byte {
	e := enc{b: make([]byte, 0, 8)}
	e.u64(r.Committed)
	return e.b
}

// DecodeGroupAckOK decodes a GroupAckOK body.
func DecodeGroupAckOK(b []byte) (GroupAckOK, error) {
	d := newDec(b)
	r := GroupAckOK{Committed: d.U64("committed")}
	return r, d.end("group ack ok")
}

// EncodeGroupNak returns the body of a GroupNak frame.
func EncodeGroupNak(r GroupNakRequest) ([]byte, error) {
	return encodeOffsets("group nak", r.Shard, r.Group, r.Member, r.Generation, r.Offsets)
}

// DecodeGroupNak decodes a GroupNak body.
func DecodeGroupNak(b []byte) (GroupNakRequest, error) {
	d := newDec(b)
	r := GroupNakRequest{Shard: d.shard(), Group: d.str("group"), Member: d.str("member")}
	r.Generation = d.U64("generation")
	r.Offsets = decodeOffsets(&d)
	return r, d.end("group nak")
}

// EncodeGroupNakOK returns the (empty) body of a GroupNakOK frame.
func EncodeGroupNakOK(GroupNakOK) []byte { return []byte{} }

// DecodeGroupNakOK decodes a GroupNakOK body.
func DecodeGroupNakOK(b []byte) (GroupNakOK, error) {
	d := newDec(b)
	return GroupNakOK{}, d.end("group nak ok")
}

// EncodeDeadLetterRead returns the body of a DeadLetterRead frame.
func EncodeDeadLetterRead(r DeadLetterReadRequest) ([]byte, error) {
	if err := checkShard(r.Shard); err != nil {
		return nil, err
	}
	e := enc{b: make([]byte, 0, 16+len(r.Shard.Stream))}
	e.shard(r.Shard)
	e.u64(r.From)
	e.u32(r.MaxRecords)
	return e.b, nil
}

// DecodeDeadLetterRead decodes a DeadLetterRead body.
func DecodeDeadLetterRead(b []byte) (DeadLetterReadRequest, error) {
	d := newDec(b)
	r := DeadLetterReadRequest{Shard: d.shard(), From: d.U64("from"), MaxRecords: d.U32("max records")}
	return r, d.end("dead-letter read")
}

// deadLetterMin is the smallest encoded DeadLetter.
const deadLetterMin = 8 + 2 + 8 + 8 + 8 + 4 + 1 + 2 + 4 + 1 + 8

// EncodeDeadLetterReadOK returns the body of a DeadLetterReadOK frame.
func EncodeDeadLetterReadOK(r DeadLetterReadOK) ([]byte, error) {
	size := 12
	for _, dl := range r.Entries {
		if err := checkStr("group", dl.Group); err != nil {
			return nil, err
		}
		if err := checkHeaders(dl.Headers); err != nil {
			return nil, err
		}
		size += deadLetterMin + len(dl.Group) + len(dl.Payload)
		for _, h := range dl.Headers {
			size += minHeaderSize + len(h.Key) + len(h.Value)
		}
	}
	e := enc{b: make([]byte, 0, size)}
	e.u64(r.Next)
	e.u32(uint32(len(r.Entries)))
	for _, dl := range r.Entries {
		e.u64(dl.Entry)
		e.str(dl.Group)
		e.u64(dl.Offset)
		e.u64(dl.Epoch)
		e.u64(uint64(dl.Timestamp))
		e.u32(dl.Deliveries)
		e.u8(dl.Reason)
		e.headers(dl.Headers)
		e.bytes(dl.Payload)
		if dl.Redriven {
			e.u8(1)
		} else {
			e.u8(0)
		}
		e.u64(dl.DataOffset)
	}
	return e.b, nil
}

// DecodeDeadLetterReadOK decodes a DeadLetterReadOK body.
func DecodeDeadLetterReadOK(b []byte) (DeadLetterReadOK, error) {
	d := newDec(b)
	r := DeadLetterReadOK{Next: d.U64("next")}
	n := int(d.U32("entry count"))
	if d.Err == nil && n*deadLetterMin > d.Remaining() {
		d.Fail("%d entries cannot fit in %d bytes", n, d.Remaining())
	}
	for i := 0; i < n && d.Err == nil; i++ {
		dl := DeadLetter{Entry: d.U64("entry"), Group: d.str("group")}
		dl.Offset = d.U64("offset")
		dl.Epoch = d.U64("epoch")
		dl.Timestamp = int64(d.U64("timestamp"))
		dl.Deliveries = d.U32("deliveries")
		dl.Reason = d.U8("reason")
		dl.Headers = d.headers("headers")
		dl.Payload = d.bytes("payload")
		switch f := d.U8("redriven"); {
		case d.Err != nil:
		case f > 1:
			d.Fail("redriven flag %d", f)
		default:
			dl.Redriven = f == 1
		}
		dl.DataOffset = d.U64("data offset")
		r.Entries = append(r.Entries, dl)
	}
	return r, d.end("dead-letter read ok")
}

// EncodeDeadLetterRedrive returns the body of a DeadLetterRedrive frame.
func EncodeDeadLetterRedrive(r DeadLetterRedriveRequest) ([]byte, error) {
	if err := checkShard(r.Shard); err != nil {
		return nil, err
	}
	e := enc{b: make([]byte, 0, 12+len(r.Shard.Stream))}
	e.shard(r.Shard)
	e.u64(r.Entry)
	return e.b, nil
}

// DecodeDeadLetterRedrive decodes a DeadLetterRedrive body.
func DecodeDeadLetterRedrive(b []byte) (DeadLetterRedriveRequest, error) {
	d := newDec(b)
	r := DeadLetterRedriveRequest{Shard: d.shard(), Entry: d.U64("entry")}
	return r, d.end("dead-letter redrive")
}

// EncodeDeadLetterRedriveOK returns the body of a DeadLetterRedriveOK
// frame.
func EncodeDeadLetterRedriveOK(r DeadLetterRedriveOK) []byte {
	e := enc{b: make([]byte, 0, 9)}
	e.u64(r.DataOffset)
	if r.Already {
		e.u8(1)
	} else {
		e.u8(0)
	}
	return e.b
}

// DecodeDeadLetterRedriveOK decodes a DeadLetterRedriveOK body.
func DecodeDeadLetterRedriveOK(b []byte) (DeadLetterRedriveOK, error) {
	d := newDec(b)
	r := DeadLetterRedriveOK{DataOffset: d.U64("data offset")}
	switch f := d.U8("already"); {
	case d.Err != nil:
	case f > 1:
		d.Fail("already flag %d", f)
	default:
		r.Already = f == 1
	}
	return r, d.end("dead-letter redrive ok")
}

// DeadLetterTrimRequest drops the entries of the shard's dead-letter log
// below Floor (a conditional trim of the log, as a Trim of the data log).
// A Floor at or below the log's floor is a no-op; one above its tail is
// BadRequest.
type DeadLetterTrimRequest struct {
	Shard ShardRef
	Floor uint64
}

// DeadLetterTrimOK answers a DeadLetterTrim with the log's floor after it.
type DeadLetterTrimOK struct {
	Floor uint64
}

// EncodeDeadLetterTrim returns the body of a DeadLetterTrim frame.
func EncodeDeadLetterTrim(r DeadLetterTrimRequest) ([]byte, error) {
	if err := checkShard(r.Shard); err != nil {
		return nil, err
	}
	e := enc{b: make([]byte, 0, 12+len(r.Shard.Stream))}
	e.shard(r.Shard)
	e.u64(r.Floor)
	return e.b, nil
}

// DecodeDeadLetterTrim decodes a DeadLetterTrim body.
func DecodeDeadLetterTrim(b []byte) (DeadLetterTrimRequest, error) {
	d := newDec(b)
	r := DeadLetterTrimRequest{Shard: d.shard(), Floor: d.U64("floor")}
	return r, d.end("dead-letter trim")
}

// EncodeDeadLetterTrimOK returns the body of a DeadLetterTrimOK frame.
func EncodeDeadLetterTrimOK(r DeadLetterTrimOK) []byte {
	e := enc{b: make([]byte, 0, 8)}
	e.u64(r.Floor)
	return e.b
}

// DecodeDeadLetterTrimOK decodes a DeadLetterTrimOK body.
func DecodeDeadLetterTrimOK(b []byte) (DeadLetterTrimOK, error) {
	d := newDec(b)
	r := DeadLetterTrimOK{Floor: d.U64("floor")}
	return r, d.end("dead-letter trim ok")
}
