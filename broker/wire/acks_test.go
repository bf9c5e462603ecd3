package wire

import (
	"bytes"
	"path/filepath"
	"testing"

	"felix.dev/felix/broker/record"
)

// ackGoldenCases pins the per-record acknowledgement and dead-letter
// messages (FeatureAcks).
func ackGoldenCases(shard ShardRef) []goldenCase {
	cfg := GroupAckConfigRequest{Shard: shard, Group: "billing", Member: "worker-1", Generation: 3, MaxDeliveries: 5, AckWaitMillis: 30000, MaxInFlight: 100}
	cfgOK := GroupAckConfigOK{Entry: 44}
	fetch := GroupFetchRequest{Shard: shard, Group: "billing", Member: "worker-1", Generation: 3, MaxRecords: 10}
	fetchOK := GroupFetchOK{Committed: 120, DeadLettered: 1, Deliveries: []Delivery{
		{Record: record.Record{Kind: record.KindData, Offset: 121, Epoch: 2, Timestamp: 1700000000000000000,
			Headers: []record.Header{{Key: "trace", Value: []byte("t1")}}, Payload: []byte("order-121")}, Deliveries: 2},
		{Record: record.Record{Kind: record.KindData, Offset: 130, Epoch: 2, Timestamp: 1700000000000000001, Payload: []byte("order-130")}, Deliveries: 1},
	}}
	ack := GroupAckRequest{Shard: shard, Group: "billing", Member: "worker-1", Generation: 3, Offsets: []uint64{121, 130}}
	ackOK := GroupAckOK{Committed: 131}
	nak := GroupNakRequest{Shard: shard, Group: "billing", Member: "worker-1", Generation: 3, Offsets: []uint64{122}}
	nakOK := GroupNakOK{}
	read := DeadLetterReadRequest{Shard: shard, From: 0, MaxRecords: 100}
	readOK := DeadLetterReadOK{Next: 3, Entries: []DeadLetter{
		{Entry: 0, Group: "billing", Offset: 120, Epoch: 2, Timestamp: 1700000000000000000, Deliveries: 5, Reason: 1,
			Headers: []record.Header{{Key: "trace", Value: []byte("t0")}}, Payload: []byte("order-120"), Redriven: true, DataOffset: 140},
		{Entry: 2, Group: "audit", Offset: 125, Epoch: 2, Timestamp: 1700000000000000005, Deliveries: 3, Reason: 1, Payload: []byte("order-125")},
	}}
	redrive := DeadLetterRedriveRequest{Shard: shard, Entry: 0}
	redriveOK := DeadLetterRedriveOK{DataOffset: 140, Already: true}
	trim := DeadLetterTrimRequest{Shard: shard, Floor: 2}
	trimOK := DeadLetterTrimOK{Floor: 2}
	req := func(name string, t MsgType, id uint32, enc func() ([]byte, error), dec func([]byte) (any, error), v any) goldenCase {
		return goldenCase{name: name, feats: FeatureGroups | FeatureAcks, frame: func() (Frame, error) { b, err := enc(); return msg(t, id, b, err) },
			decode: func(b []byte, _ Features) (any, error) { return dec(b) }, value: v}
	}
	ok := func(b []byte) func() ([]byte, error) { return func() ([]byte, error) { return b, nil } }
	return []goldenCase{
		req("group_ack_config", MsgGroupAckConfig, 30, func() ([]byte, error) { return EncodeGroupAckConfig(cfg) },
			func(b []byte) (any, error) { return DecodeGroupAckConfig(b) }, cfg),
		req("group_ack_config_ok", MsgGroupAckConfigOK, 30, ok(EncodeGroupAckConfigOK(cfgOK)),
			func(b []byte) (any, error) { return DecodeGroupAckConfigOK(b) }, cfgOK),
		req("group_fetch", MsgGroupFetch, 31, func() ([]byte, error) { return EncodeGroupFetch(fetch) },
			func(b []byte) (any, error) { return DecodeGroupFetch(b) }, fetch),
		req("group_fetch_ok", MsgGroupFetchOK, 31, func() ([]byte, error) { return EncodeGroupFetchOK(fetchOK) },
			func(b []byte) (any, error) { return DecodeGroupFetchOK(b) }, fetchOK),
		req("group_ack", MsgGroupAck, 32, func() ([]byte, error) { return EncodeGroupAck(ack) },
			func(b []byte) (any, error) { return DecodeGroupAck(b) }, ack),
		req("group_ack_ok", MsgGroupAckOK, 32, ok(EncodeGroupAckOK(ackOK)),
			func(b []byte) (any, error) { return DecodeGroupAckOK(b) }, ackOK),
		req("group_nak", MsgGroupNak, 33, func() ([]byte, error) { return EncodeGroupNak(nak) },
			func(b []byte) (any, error) { return DecodeGroupNak(b) }, nak),
		req("group_nak_ok", MsgGroupNakOK, 33, ok(EncodeGroupNakOK(nakOK)),
			func(b []byte) (any, error) { return DecodeGroupNakOK(b) }, nakOK),
		req("dead_letter_read", MsgDeadLetterRead, 34, func() ([]byte, error) { return EncodeDeadLetterRead(read) },
			func(b []byte) (any, error) { return DecodeDeadLetterRead(b) }, read),
		req("dead_letter_read_ok", MsgDeadLetterReadOK, 34, func() ([]byte, error) { return EncodeDeadLetterReadOK(readOK) },
			func(b []byte) (any, error) { return DecodeDeadLetterReadOK(b) }, readOK),
		req("dead_letter_redrive", MsgDeadLetterRedrive, 35, func() ([]byte, error) { return EncodeDeadLetterRedrive(redrive) },
			func(b []byte) (any, error) { return DecodeDeadLetterRedrive(b) }, redrive),
		req("dead_letter_redrive_ok", MsgDeadLetterRedriveOK, 35, ok(EncodeDeadLetterRedriveOK(redriveOK)),
			func(b []byte) (any, error) { return DecodeDeadLetterRedriveOK(b) }, redriveOK),
		req("dead_letter_trim", MsgDeadLetterTrim, 36, func() ([]byte, error) { return EncodeDeadLetterTrim(trim) },
			func(b []byte) (any, error) { return DecodeDeadLetterTrim(b) }, trim),
		req("dead_letter_trim_ok", MsgDeadLetterTrimOK, 36, ok(EncodeDeadLetterTrimOK(trimOK)),
			func(b []byte) (any, error) { return DecodeDeadLetterTrimOK(b) }, trimOK),
	}
}

// ackBody decodes an ack or dead-letter message body of type t and
// re-encodes it; ok is false when it does not decode.
func ackBody(t MsgType, b []byte) (re []byte, ok bool) {
	var err error
	switch t {
	case MsgGroupAckConfig:
		var r GroupAckConfigRequest
		if r, err = DecodeGroupAckConfig(b); err == nil {
			re, err = EncodeGroupAckConfig(r)
		}
	case MsgGroupAckConfigOK:
		var r GroupAckConfigOK
		if r, err = DecodeGroupAckConfigOK(b); err == nil {
			re = EncodeGroupAckConfigOK(r)
		}
	case MsgGroupFetch:
		var r GroupFetchRequest
		if r, err = DecodeGroupFetch(b); err == nil {
			re, err = EncodeGroupFetch(r)
		}
	case MsgGroupFetchOK:
		var r GroupFetchOK
		if r, err = DecodeGroupFetchOK(b); err == nil {
			re, err = EncodeGroupFetchOK(r)
		}
	case MsgGroupAck:
		var r GroupAckRequest
		if r, err = DecodeGroupAck(b); err == nil {
			re, err = EncodeGroupAck(r)
		}
	case MsgGroupAckOK:
		var r GroupAckOK
		if r, err = DecodeGroupAckOK(b); err == nil {
			re = EncodeGroupAckOK(r)
		}
	case MsgGroupNak:
		var r GroupNakRequest
		if r, err = DecodeGroupNak(b); err == nil {
			re, err = EncodeGroupNak(r)
		}
	case MsgGroupNakOK:
		var r GroupNakOK
		if r, err = DecodeGroupNakOK(b); err == nil {
			re = EncodeGroupNakOK(r)
		}
	case MsgDeadLetterRead:
		var r DeadLetterReadRequest
		if r, err = DecodeDeadLetterRead(b); err == nil {
			re, err = EncodeDeadLetterRead(r)
		}
	case MsgDeadLetterReadOK:
		var r DeadLetterReadOK
		if r, err = DecodeDeadLetterReadOK(b); err == nil {
			re, err = EncodeDeadLetterReadOK(r)
		}
	case MsgDeadLetterRedrive:
		var r DeadLetterRedriveRequest
		if r, err = DecodeDeadLetterRedrive(b); err == nil {
			re, err = EncodeDeadLetterRedrive(r)
		}
	case MsgDeadLetterRedriveOK:
		var r DeadLetterRedriveOK
		if r, err = DecodeDeadLetterRedriveOK(b); err == nil {
			re = EncodeDeadLetterRedriveOK(r)
		}
	case MsgDeadLetterTrim:
		var r DeadLetterTrimRequest
		if r, err = DecodeDeadLetterTrim(b); err == nil {
			re, err = EncodeDeadLetterTrim(r)
		}
	case MsgDeadLetterTrimOK:
		var r DeadLetterTrimOK
		if r, err = DecodeDeadLetterTrimOK(b); err == nil {
			re = EncodeDeadLetterTrimOK(r)
		}
	default:
		return nil, false
	}
	return re, err == nil
}

// ackTypes are the ack and dead-letter message types, indexed by the fuzz
// input's selector byte.
var ackTypes = []MsgType{MsgGroupAckConfig, MsgGroupAckConfigOK, MsgGroupFetch, MsgGroupFetchOK, MsgGroupAck, MsgGroupAckOK,
	MsgGroupNak, MsgGroupNakOK, MsgDeadLetterRead, MsgDeadLetterReadOK, MsgDeadLetterRedrive, MsgDeadLetterRedriveOK,
	MsgDeadLetterTrim, MsgDeadLetterTrimOK}

// FuzzDecodeAcks feeds outside bytes to every ack and dead-letter body
// decoder (the selector picks one): nothing may panic, and a body that
// decodes re-encodes to the same bytes.
func FuzzDecodeAcks(f *testing.F) {
	for _, s := range ackSeeds(f) {
		f.Add(s.body, s.sel)
	}
	f.Fuzz(func(t *testing.T, body []byte, sel uint8) {
		typ := ackTypes[int(sel)%len(ackTypes)]
		re, ok := ackBody(typ, body)
		if ok && !bytes.Equal(re, body) {
			t.Fatalf("%v body is not canonical:\n in %x\nout %x", typ, body, re)
		}
	})
}

// ackSeeds are the golden ack and dead-letter bodies plus malformed ones.
func ackSeeds(tb testing.TB) map[string]counterSeed {
	tb.Helper()
	seeds := map[string]counterSeed{
		"ack_huge_count":          {[]byte{0, 1, 'x', 0, 0, 0, 0, 0, 1, 'g', 0, 1, 'm', 0, 0, 0, 0, 0, 0, 0, 1, 0xff, 0xff, 0xff, 0xff}, 4},
		"fetch_ok_huge_count":     {append(make([]byte, 12), 0xff, 0xff, 0xff, 0xff), 3},
		"read_ok_bad_flag":        {append(append(make([]byte, 8), 0, 0, 0, 1), append(make([]byte, 8+2+8+8+8+4+1+2+4), 2, 0, 0, 0, 0, 0, 0, 0, 0)...), 9},
		"redrive_ok_bad_flag":     {append(make([]byte, 8), 2), 11},
		"nak_ok_trailer":          {[]byte{0}, 7},
		"trim_ok_short":           {[]byte{0, 0, 0}, 13},
		"ack_config_missing_wait": {[]byte{0, 1, 'x', 0, 0, 0, 0, 0, 1, 'g', 0, 1, 'm', 0, 0, 0, 0, 0, 0, 0, 1, 0, 0, 0, 5}, 0},
	}
	return withGoldenSeeds(tb, seeds, ackTypes)
}

// TestWriteAckFuzzSeeds keeps testdata/fuzz/FuzzDecodeAcks in step with
// the golden vectors; it writes only with -update.
func TestWriteAckFuzzSeeds(t *testing.T) {
	checkOrWriteSeeds(t, filepath.Join("testdata", "fuzz", "FuzzDecodeAcks"), ackSeeds(t))
}
