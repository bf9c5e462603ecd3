package peer

import (
	"encoding/binary"
	"errors"
	"testing"

	"github.com/google/go-cmp/cmp"
	"github.com/google/go-cmp/cmp/cmpopts"

	"felix.dev/felix/broker/record"
	"felix.dev/felix/broker/replication"
	"felix.dev/felix/broker/wire"
)

var codecShard = record.ShardID{Stream: "orders", Shard: 7}

// sampleMessages has one message of every type, with every field its type
// carries set to a distinct value.
func sampleMessages() []replication.Message {
	recs := []record.Record{
		{Offset: 10, Epoch: 2, Timestamp: -5, Kind: record.KindData, Headers: []record.Header{{Key: "k", Value: []byte("v")}}, Payload: []byte("hello")},
		{Offset: 11, Epoch: 2, Timestamp: 1700000000, Kind: record.KindTrim, Floor: 9, Headers: []record.Header{{Key: "epoch", Value: []byte("3")}}},
		{Offset: 12, Epoch: 3, Kind: record.KindFence},
	}
	epochs := []replication.EpochStart{{Epoch: 1, Offset: 0}, {Epoch: 3, Offset: 12}}
	base := replication.Message{From: "broker-a", To: "broker-b", Epoch: 3, Pass: 44, Log: record.LogGroup}
	with := func(f func(*replication.Message)) replication.Message {
		m := base
		f(&m)
		return m
	}
	return []replication.Message{
		with(func(m *replication.Message) {
			m.Type, m.Index, m.PrevEpoch, m.Commit, m.Records = replication.MsgAppend, 10, 1, 9, recs
		}),
		with(func(m *replication.Message) { m.Type, m.Index, m.PrevEpoch = replication.MsgAppend, 13, 3 }), // a probe of the position [RP-4]
		with(func(m *replication.Message) { m.Type, m.Match, m.MatchEnd = replication.MsgAppendResp, true, 13 }),
		with(func(m *replication.Message) {
			m.Type, m.Base, m.Tail, m.Epochs = replication.MsgAppendResp, 2, 17, epochs
		}),
		with(func(m *replication.Message) { m.Type, m.Log = replication.MsgProbe, 0 }),
		with(func(m *replication.Message) {
			m.Type, m.Log = replication.MsgProbeResp, 0
			for i := range m.Logs {
				m.Logs[i] = replication.LogPosition{Base: uint64(i), Tail: uint64(10 + i), Epochs: epochs[:i%3]}
			}
		}),
		with(func(m *replication.Message) { m.Type, m.Index, m.Max = replication.MsgFetch, 5, 256 }),
		with(func(m *replication.Message) {
			m.Type, m.Index, m.PrevEpoch, m.Base, m.Tail, m.Records = replication.MsgFetchResp, 10, 1, 0, 13, recs
		}),
		with(func(m *replication.Message) { m.Type = replication.MsgRefuse }),
		// An Append at the leader's log start (catch-up from the leader's
		// start): the only Append that carries Base.
		with(func(m *replication.Message) {
			m.Type, m.Index, m.Base, m.Commit, m.Records = replication.MsgAppend, 10, 10, 12, recs
		}),
	}
}

func TestCodecRoundTripsEveryMessageType(t *testing.T) {
	for _, m := range sampleMessages() {
		t.Run(m.Type.String(), func(t *testing.T) {
			f, err := Encode(codecShard, m)
			if err != nil {
				t.Fatal(err)
			}
			wantType := wire.MsgShipAnswer
			if m.Type == replication.MsgAppend || m.Type == replication.MsgProbe || m.Type == replication.MsgFetch {
				wantType = wire.MsgShip
			}
			if f.Type != wantType {
				t.Fatalf("frame type %s, want %s", f.Type, wantType)
			}
			// The whole-frame encoder gives the same bytes as framing Encode's body.
			whole, err := AppendFrame(nil, codecShard, m)
			if err != nil {
				t.Fatal(err)
			}
			if d := cmp.Diff(wire.AppendFrame(nil, f), whole); d != "" {
				t.Fatalf("AppendFrame differs (-framed +whole):\n%s", d)
			}
			shard, got, err := Decode(f)
			if err != nil {
				t.Fatal(err)
			}
			if shard != codecShard {
				t.Fatalf("shard %v", shard)
			}
			if d := cmp.Diff(m, got, cmpopts.EquateEmpty()); d != "" {
				t.Fatalf("round trip (-sent +decoded):\n%s", d)
			}
		})
	}
}

// Conn names a connection of the receiving side: it is never carried.
func TestCodecDoesNotCarryConn(t *testing.T) {
	m := sampleMessages()[0]
	m.Conn = 99
	f, err := Encode(codecShard, m)
	if err != nil {
		t.Fatal(err)
	}
	_, got, err := Decode(f)
	if err != nil || got.Conn != 0 {
		t.Fatalf("conn %d, err %v", got.Conn, err)
	}
}

func TestCodecRefusesMalformedBodies(t *testing.T) {
	good, err := Encode(codecShard, sampleMessages()[0])
	if err != nil {
		t.Fatal(err)
	}
	mutate := func(f func(b []byte) []byte) wire.Frame {
		b := append([]byte(nil), good.Body...)
		return wire.Frame{Type: good.Type, Body: f(b)}
	}
	cases := []struct {
		name string
		f    wire.Frame
	}{
		{"empty", wire.Frame{Type: wire.MsgShip}},
		{"cut short", mutate(func(b []byte) []byte { return b[:len(b)-1] })},
		{"trailing byte", mutate(func(b []byte) []byte { return append(b, 0) })},
		{"unknown version", mutate(func(b []byte) []byte { b[0] = 9; return b })},
		{"answer type in a request frame", wire.Frame{Type: wire.MsgShip, Body: mustBody(t, sampleMessages()[2])}},
		{"request type in an answer frame", wire.Frame{Type: wire.MsgShipAnswer, Body: good.Body}},
		{"record count beyond the body", mutate(func(b []byte) []byte {
			// The record count follows index, prev epoch and commit.
			off := len(b) - (encodedRecordsLen(sampleMessages()[0].Records))
			b[off], b[off+1], b[off+2], b[off+3] = 0x7f, 0xff, 0xff, 0xff
			return b
		})},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			if _, _, err := Decode(tc.f); !errors.Is(err, ErrMalformed) {
				t.Fatalf("err %v, want ErrMalformed", err)
			}
		})
	}
}

func mustBody(t *testing.T, m replication.Message) []byte {
	t.Helper()
	f, err := Encode(codecShard, m)
	if err != nil {
		t.Fatal(err)
	}
	return f.Body
}

// An Append without Base is byte for byte the version-1 layout older
// brokers send and accept; Base travels as an optional trailing field only
// when the Append starts at the leader's log start.
func TestCodecAppendBaseIsOptionalTrailingField(t *testing.T) {
	withBase := sampleMessages()[9]
	without := withBase
	without.Base = 0
	a, b := mustBody(t, without), mustBody(t, withBase)
	if len(b) != len(a)+8 || string(b[:len(a)]) != string(a) {
		t.Fatalf("base is not a trailing u64: %d vs %d bytes", len(a), len(b))
	}
	_, got, err := Decode(wire.Frame{Type: wire.MsgShip, Body: a})
	if err != nil || got.Base != 0 {
		t.Fatalf("frame without base: base %d, err %v", got.Base, err)
	}
	// The encoder refuses a Base that is not the Index (the core never
	// sets one), so every encodable Append round-trips.
	bad := withBase
	bad.Base = 3
	if _, err := Encode(codecShard, bad); !errors.Is(err, ErrMalformed) {
		t.Fatalf("encode base != index: err %v, want ErrMalformed", err)
	}
	for name, base := range map[string]uint64{"zero": 0, "not the index": 11} {
		t.Run(name, func(t *testing.T) {
			body := binary.BigEndian.AppendUint64(append([]byte(nil), a...), base)
			if _, _, err := Decode(wire.Frame{Type: wire.MsgShip, Body: body}); !errors.Is(err, ErrMalformed) {
				t.Fatalf("trailing base %d: err %v, want ErrMalformed", base, err)
			}
		})
	}
}

// TestStreamNamesChecked: a replication frame naming a stream outside the
// protocol's set is neither encoded nor decoded.
func TestStreamNamesChecked(t *testing.T) {
	m := sampleMessages()[4] // a probe
	bad := record.ShardID{Stream: "not utf-8 \xff", Shard: 1}
	if _, err := Encode(bad, m); !errors.Is(err, ErrMalformed) {
		t.Fatalf("Encode with a bad stream name: %v, want ErrMalformed", err)
	}
	f, err := Encode(record.ShardID{Stream: "not-utf-8-x", Shard: 1}, m)
	if err != nil {
		t.Fatal(err)
	}
	f.Body[1+2+10] = 0xff // the name's last byte
	if _, _, err := Decode(f); !errors.Is(err, ErrMalformed) {
		t.Fatalf("Decode with a bad stream name: %v, want ErrMalformed", err)
	}
}
