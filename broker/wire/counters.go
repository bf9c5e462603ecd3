package wire

// The counter requests (FeatureCounters) address a shard's counter log
// (record.LogCounter), not its data log.

// CounterAddRequest adds Delta to the counter Key of a shard. With
// Producer set the add is idempotent: the leader applies it only if Seq
// is the producer's next sequence on the shard's counter log (a sequence
// space of its own, apart from the data log's) and answers a retry of an
// add it applied with that add's original answer.
type CounterAddRequest struct {
	Shard    ShardRef
	Key      string
	Delta    int64
	Producer *Producer
}

// counterAddProducer is the flag bit of a CounterAdd that carries a
// producer id and sequence.
const counterAddProducer uint8 = 1 << 0

// CounterAddOK answers a CounterAdd: Value is the counter's value after
// the add, which sits at Offset in the shard's counter log.
type CounterAddOK struct {
	Value  int64
	Offset uint64
}

// CounterGetRequest reads the counter Key of a shard.
type CounterGetRequest struct {
	Shard ShardRef
	Key   string
}

// CounterGetOK answers a CounterGet: Value is the counter's value (0 for
// a counter never added to) folded from every committed counter-log entry
// below Through.
type CounterGetOK struct {
	Value   int64
	Through uint64
}

// CounterSnapshotRequest asks the leader to append a snapshot of every
// counter of a shard to its counter log; with Trim, the log is then
// trimmed below the snapshot with a conditional trim [TR-2].
type CounterSnapshotRequest struct {
	Shard ShardRef
	Trim  bool
}

// counterSnapshotTrim is the flag bit of a CounterSnapshot with Trim.
const counterSnapshotTrim uint8 = 1 << 0

// CounterSnapshotOK answers a CounterSnapshot: the snapshot sits at
// Offset and carries Keys counters; Floor is the counter log's readable
// start after the request (Offset when it trimmed).
type CounterSnapshotOK struct {
	Offset uint64
	Floor  uint64
	Keys   uint32
}

// EncodeCounterAdd returns the body of a CounterAdd frame.
func EncodeCounterAdd(r CounterAddRequest) ([]byte, error) {
	if err := checkShard(r.Shard); err != nil {
		return nil, err
	}
	if err := checkStr("counter key", r.Key); err != nil {
		return nil, err
	}
	if r.Producer != nil && r.Producer.ID == ([16]byte{}) {
		return nil, errZeroProducer
	}
	e := enc{b: make([]byte, 0, 48+len(r.Shard.Stream)+len(r.Key))}
	e.shard(r.Shard)
	e.str(r.Key)
	e.u64(uint64(r.Delta))
	if r.Producer == nil {
		e.u8(0)
		return e.b, nil
	}
	e.u8(counterAddProducer)
	e.b = append(e.b, r.Producer.ID[:]...)
	e.u64(r.Producer.Seq)
	return e.b, nil
}

// DecodeCounterAdd decodes a CounterAdd body. A flag bit other than the
// producer's, or a zero producer id, is malformed.
func DecodeCounterAdd(b []byte) (CounterAddRequest, error) {
	d := newDec(b)
	r := CounterAddRequest{Shard: d.shard(), Key: d.str("key")}
	r.Delta = int64(d.U64("delta"))
	flags := d.U8("flags")
	if d.Err == nil && flags&^counterAddProducer != 0 {
		d.Fail("counter add flags %#x", flags)
	}
	if flags&counterAddProducer != 0 && d.Err == nil {
		var p Producer
		copy(p.ID[:], d.Take(len(p.ID), "producer id"))
		p.Seq = d.U64("sequence")
		if d.Err == nil && p.ID == ([16]byte{}) {
			d.Fail("zero producer id")
		}
		r.Producer = &p
	}
	return r, d.end("counter add")
}

// EncodeCounterAddOK returns the body of a CounterAddOK frame.
func EncodeCounterAddOK(r CounterAddOK) []byte {
	e := enc{b: make([]byte, 0, 16)}
	e.u64(uint64(r.Value))
	e.u64(r.Offset)
	return e.b
}

// DecodeCounterAddOK decodes a CounterAddOK body.
func DecodeCounterAddOK(b []byte) (CounterAddOK, error) {
	d := newDec(b)
	r := CounterAddOK{Value: int64(d.U64("value")), Offset: d.U64("offset")}
	return r, d.end("counter add ok")
}

// EncodeCounterGet returns the body of a CounterGet frame.
func EncodeCounterGet(r CounterGetRequest) ([]byte, error) {
	if err := checkShard(r.Shard); err != nil {
		return nil, err
	}
	if err := checkStr("counter key", r.Key); err != nil {
		return nil, err
	}
	e := enc{b: make([]byte, 0, 16+len(r.Shard.Stream)+len(r.Key))}
	e.shard(r.Shard)
	e.str(r.Key)
	return e.b, nil
}

// DecodeCounterGet decodes a CounterGet body.
func DecodeCounterGet(b []byte) (CounterGetRequest, error) {
	d := newDec(b)
	r := CounterGetRequest{Shard: d.shard(), Key: d.str("key")}
	return r, d.end("counter get")
}

// EncodeCounterGetOK returns the body of a CounterGetOK frame.
func EncodeCounterGetOK(r CounterGetOK) []byte {
	e := enc{b: make([]byte, 0, 16)}
	e.u64(uint64(r.Value))
	e.u64(r.Through)
	return e.b
}

// DecodeCounterGetOK decodes a CounterGetOK body.
func DecodeCounterGetOK(b []byte) (CounterGetOK, error) {
	d := newDec(b)
	r := CounterGetOK{Value: int64(d.U64("value")), Through: d.U64("through")}
	return r, d.end("counter get ok")
}

// EncodeCounterSnapshot returns the body of a CounterSnapshot frame.
func EncodeCounterSnapshot(r CounterSnapshotRequest) ([]byte, error) {
	if err := checkShard(r.Shard); err != nil {
		return nil, err
	}
	e := enc{b: make([]byte, 0, 8+len(r.Shard.Stream))}
	e.shard(r.Shard)
	var flags uint8
	if r.Trim {
		flags |= counterSnapshotTrim
	}
	e.u8(flags)
	return e.b, nil
}

// DecodeCounterSnapshot decodes a CounterSnapshot body; an unknown flag
// bit is malformed.
func DecodeCounterSnapshot(b []byte) (CounterSnapshotRequest, error) {
	d := newDec(b)
	r := CounterSnapshotRequest{Shard: d.shard()}
	flags := d.U8("flags")
	if d.Err == nil && flags&^counterSnapshotTrim != 0 {
		d.Fail("counter snapshot flags %#x", flags)
	}
	r.Trim = flags&counterSnapshotTrim != 0
	return r, d.end("counter snapshot")
}

// EncodeCounterSnapshotOK returns the body of a CounterSnapshotOK frame.
func EncodeCounterSnapshotOK(r CounterSnapshotOK) []byte {
	e := enc{b: make([]byte, 0, 20)}
	e.u64(r.Offset)
	e.u64(r.Floor)
	e.u32(r.Keys)
	return e.b
}

// DecodeCounterSnapshotOK decodes a CounterSnapshotOK body.
func DecodeCounterSnapshotOK(b []byte) (CounterSnapshotOK, error) {
	d := newDec(b)
	r := CounterSnapshotOK{Offset: d.U64("offset"), Floor: d.U64("floor"), Keys: d.U32("keys")}
	return r, d.end("counter snapshot ok")
}
