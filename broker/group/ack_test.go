package group

import (
	"errors"
	"reflect"
	"strings"
	"testing"

	"felix.dev/felix/broker/logstore"
	"felix.dev/felix/broker/record"
)

func configure(t *testing.T, off uint64, g, m string, gen uint64, maxDel, maxIn uint32) record.Record {
	p, err := EncodeConfigure(Configure{Group: g, Member: m, Generation: gen, AckConfig: AckConfig{MaxDeliveries: maxDel, AckWaitMillis: 1000, MaxInFlight: maxIn}})
	return rec(t, off, p, err)
}

func offsets(t *testing.T, off uint64, k EntryKind, g, m string, gen uint64, offs ...uint64) record.Record {
	p, err := EncodeOffsets(Offsets{Kind: k, Group: g, Member: m, Generation: gen, Offsets: offs})
	return rec(t, off, p, err)
}

func ackInfo(owner string, gen, committed, delivered uint64, maxDel, maxIn uint32, out map[uint64]uint32) Info {
	if out == nil {
		out = map[uint64]uint32{}
	}
	return Info{Owner: owner, Generation: gen, Committed: committed, Ack: &AckState{
		AckConfig: AckConfig{MaxDeliveries: maxDel, AckWaitMillis: 1000, MaxInFlight: maxIn}, Delivered: delivered, Deliveries: out}}
}

// TestFoldAck: the fold of per-record acknowledgement: deliveries count,
// acks and dead-letters settle, the committed offset advances over
// contiguous settled offsets, and what no writer says is loud.
func TestFoldAck(t *testing.T) {
	base := func(t *testing.T) []record.Record {
		return []record.Record{claim(t, 0, "g", "m", 1), commit(t, 1, "g", "m", 1, 10), configure(t, 2, "g", "m", 1, 3, 8)}
	}
	tests := []struct {
		name string
		more func(t *testing.T) []record.Record
		want Info
		err  error
	}{
		{name: "configure starts at the committed offset", want: ackInfo("m", 1, 10, 10, 3, 8, nil)},
		{name: "deliveries make offsets outstanding, skipping what is never delivered", more: func(t *testing.T) []record.Record {
			return []record.Record{offsets(t, 3, EntryDeliver, "g", "m", 1, 10, 11, 13)}
		}, want: ackInfo("m", 1, 10, 14, 3, 8, map[uint64]uint32{10: 1, 11: 1, 13: 1})},
		{name: "redelivery counts", more: func(t *testing.T) []record.Record {
			return []record.Record{offsets(t, 3, EntryDeliver, "g", "m", 1, 10, 11), offsets(t, 4, EntryDeliver, "g", "m", 1, 11, 12), offsets(t, 5, EntryDeliver, "g", "m", 1, 11)}
		}, want: ackInfo("m", 1, 10, 13, 3, 8, map[uint64]uint32{10: 1, 11: 3, 12: 1})},
		{name: "an ack above a gap does not move the committed offset", more: func(t *testing.T) []record.Record {
			return []record.Record{offsets(t, 3, EntryDeliver, "g", "m", 1, 10, 11, 12), offsets(t, 4, EntryAck, "g", "m", 1, 11)}
		}, want: ackInfo("m", 1, 10, 13, 3, 8, map[uint64]uint32{10: 1, 12: 1})},
		{name: "settling the gap moves the committed offset over contiguous settled offsets", more: func(t *testing.T) []record.Record {
			return []record.Record{offsets(t, 3, EntryDeliver, "g", "m", 1, 10, 11, 12, 14), offsets(t, 4, EntryAck, "g", "m", 1, 11),
				offsets(t, 5, EntryDeadLettered, "g", "m", 1, 10)}
		}, want: ackInfo("m", 1, 12, 15, 3, 8, map[uint64]uint32{12: 1, 14: 1})},
		{name: "a delivery far past a head trim moves the committed offset at once", more: func(t *testing.T) []record.Record {
			return []record.Record{offsets(t, 3, EntryDeliver, "g", "m", 1, 1<<50), offsets(t, 4, EntryAck, "g", "m", 1, 1<<50)}
		}, want: ackInfo("m", 1, 1<<50+1, 1<<50+1, 3, 8, nil)},
		{name: "everything settled: committed reaches delivered", more: func(t *testing.T) []record.Record {
			return []record.Record{offsets(t, 3, EntryDeliver, "g", "m", 1, 10, 12), offsets(t, 4, EntryAck, "g", "m", 1, 12, 10)}
		}, want: ackInfo("m", 1, 13, 13, 3, 8, nil)},
		{name: "a takeover keeps the outstanding offsets and their counts", more: func(t *testing.T) []record.Record {
			return []record.Record{offsets(t, 3, EntryDeliver, "g", "m", 1, 10), claim(t, 4, "g", "m2", 2), offsets(t, 5, EntryDeliver, "g", "m2", 2, 10)}
		}, want: ackInfo("m2", 2, 10, 11, 3, 8, map[uint64]uint32{10: 2})},
		{name: "reconfiguring keeps the state", more: func(t *testing.T) []record.Record {
			return []record.Record{offsets(t, 3, EntryDeliver, "g", "m", 1, 10), configure(t, 4, "g", "m", 1, 5, 2)}
		}, want: ackInfo("m", 1, 10, 11, 5, 2, map[uint64]uint32{10: 1})},
		{name: "an ack of an offset not outstanding is loud", more: func(t *testing.T) []record.Record {
			return []record.Record{offsets(t, 3, EntryDeliver, "g", "m", 1, 10), offsets(t, 4, EntryAck, "g", "m", 1, 11)}
		}, err: ErrDiverged},
		{name: "an ack twice is loud", more: func(t *testing.T) []record.Record {
			return []record.Record{offsets(t, 3, EntryDeliver, "g", "m", 1, 10, 11), offsets(t, 4, EntryAck, "g", "m", 1, 11), offsets(t, 5, EntryAck, "g", "m", 1, 11)}
		}, err: ErrDiverged},
		{name: "a redelivery of a settled offset is loud", more: func(t *testing.T) []record.Record {
			return []record.Record{offsets(t, 3, EntryDeliver, "g", "m", 1, 10, 11), offsets(t, 4, EntryAck, "g", "m", 1, 11), offsets(t, 5, EntryDeliver, "g", "m", 1, 11)}
		}, err: ErrDiverged},
		{name: "an ack by a fenced generation is loud", more: func(t *testing.T) []record.Record {
			return []record.Record{offsets(t, 3, EntryDeliver, "g", "m", 1, 10), claim(t, 4, "g", "m2", 2), offsets(t, 5, EntryAck, "g", "m", 1, 10)}
		}, err: ErrDiverged},
		{name: "a cumulative commit of a per-record group is loud", more: func(t *testing.T) []record.Record {
			return []record.Record{commit(t, 3, "g", "m", 1, 20)}
		}, err: ErrDiverged},
		{name: "a zero max deliveries is loud", more: func(t *testing.T) []record.Record {
			return []record.Record{configure(t, 3, "g", "m", 1, 0, 8)}
		}, err: ErrDiverged},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			s := NewState(Limits{}, 0, false)
			recs := base(t)
			if tc.more != nil {
				recs = append(recs, tc.more(t)...)
			}
			var err error
			for _, r := range recs {
				if err = s.Apply(r); err != nil {
					break
				}
			}
			if tc.err != nil {
				if !errors.Is(err, tc.err) {
					t.Fatalf("fold error %v, want %v", err, tc.err)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			got, _ := s.Group("g")
			if !reflect.DeepEqual(got, tc.want) {
				t.Fatalf("g = %+v %+v, want %+v %+v", got, got.Ack, tc.want, tc.want.Ack)
			}
			// The snapshot of the state folds back to the same state.
			re := NewState(Limits{}, 100, true)
			if err := re.Apply(snap(t, 100, s.Snapshot().Groups)); err != nil {
				t.Fatal(err)
			}
			if back, _ := re.Group("g"); !reflect.DeepEqual(back, got) {
				t.Fatalf("after a snapshot g = %+v %+v, want %+v %+v", back, back.Ack, got, got.Ack)
			}
		})
	}
}

// TestGroupIsACopy: what Group and Snapshot return does not change when
// the fold goes on, and changing it does not change the fold.
func TestGroupIsACopy(t *testing.T) {
	s := NewState(Limits{}, 0, false)
	for _, r := range []record.Record{claim(t, 0, "g", "m", 1), configure(t, 1, "g", "m", 1, 3, 8), offsets(t, 2, EntryDeliver, "g", "m", 1, 0)} {
		if err := s.Apply(r); err != nil {
			t.Fatal(err)
		}
	}
	in, _ := s.Group("g")
	sn := s.Snapshot()
	if err := s.Apply(offsets(t, 3, EntryDeliver, "g", "m", 1, 0)); err != nil {
		t.Fatal(err)
	}
	in.Ack.Deliveries[0] = 99
	if in2, _ := s.Group("g"); in2.Ack.Deliveries[0] != 2 || sn.Groups["g"].Ack.Deliveries[0] != 1 {
		t.Fatalf("fold %d, snapshot %d: want 2 and 1", in2.Ack.Deliveries[0], sn.Groups["g"].Ack.Deliveries[0])
	}
}

func TestCheckConfigure(t *testing.T) {
	s := NewState(Limits{MaxInFlight: 4}, 0, false)
	for _, c := range []struct {
		cfg AckConfig
		err error
	}{
		{AckConfig{MaxDeliveries: 1, MaxInFlight: 4}, nil},
		{AckConfig{MaxDeliveries: 0, MaxInFlight: 4}, ErrBadAckConfig},
		{AckConfig{MaxDeliveries: 1, MaxInFlight: 0}, ErrBadAckConfig},
		{AckConfig{MaxDeliveries: 1, MaxInFlight: 5}, ErrInFlightLimit},
	} {
		if err := s.CheckConfigure(c.cfg); !errors.Is(err, c.err) {
			t.Errorf("CheckConfigure(%+v) = %v", c.cfg, err)
		}
	}
}

// A snapshot of a shard at every default bound, every group with a full
// window of outstanding offsets, fits one record of the log store's
// default record limit.
func TestFullAckSnapshotFitsARecord(t *testing.T) {
	lim := Limits{}.WithDefaults()
	gs := map[string]Info{}
	for i := range lim.MaxGroups {
		g := []byte(strings.Repeat("g", lim.MaxNameBytes))
		copy(g, []byte{byte(i)})
		out := map[uint64]uint32{}
		for o := range uint64(lim.MaxInFlight) {
			out[o] = ^uint32(0)
		}
		gs[string(g)] = Info{Owner: strings.Repeat("m", lim.MaxNameBytes), Generation: ^uint64(0), Committed: 0,
			Ack: &AckState{AckConfig: AckConfig{MaxDeliveries: 1, MaxInFlight: uint32(lim.MaxInFlight)}, Delivered: ^uint64(0), Deliveries: out}}
	}
	p, err := EncodeSnapshot(Snapshot{Groups: gs})
	if err != nil || len(p) > logstore.DefaultMaxRecordBytes {
		t.Fatalf("full snapshot: %d bytes, %v", len(p), err)
	}
	if _, err := DecodeEntry(p); err != nil {
		t.Fatal(err)
	}
}
