package replica

import (
	"testing"

	"felix.dev/felix/broker/logstore"
	"felix.dev/felix/broker/record"
	"felix.dev/felix/broker/replication"
)

func TestSplitKeepsConsecutiveRecordsUnderTheLimit(t *testing.T) {
	recs := make([]record.Record, 10)
	for i := range recs {
		recs[i] = record.Record{Offset: 20 + uint64(i), Epoch: 2 + uint64(i/5), Payload: make([]byte, 100)}
	}
	one := recsBytes(recs[:1])
	for _, tc := range []struct {
		name  string
		m     replication.Message
		limit int
		parts int
	}{
		{"fits", replication.Message{Type: replication.MsgAppend, Index: 20, PrevEpoch: 1, Records: recs}, 100 * one, 1},
		{"append in threes", replication.Message{Type: replication.MsgAppend, Index: 20, PrevEpoch: 1, Commit: 7, Records: recs}, 3 * one, 4},
		{"fetch answer one by one", replication.Message{Type: replication.MsgFetchResp, Index: 20, PrevEpoch: 1, Tail: 30, Records: recs}, 1, 10},
		{"no records", replication.Message{Type: replication.MsgAppend, Index: 20}, 1, 1},
		{"other types untouched", replication.Message{Type: replication.MsgProbeResp}, 1, 1},
	} {
		t.Run(tc.name, func(t *testing.T) {
			parts := split(tc.m, tc.limit)
			if len(parts) != tc.parts {
				t.Fatalf("%d parts, want %d", len(parts), tc.parts)
			}
			next, prev := tc.m.Index, tc.m.PrevEpoch
			for i, p := range parts {
				if p.Type != tc.m.Type || p.Commit != tc.m.Commit || p.Tail != tc.m.Tail {
					t.Fatalf("part %d changed a field: %+v", i, p)
				}
				if p.Index != next || p.PrevEpoch != prev {
					t.Fatalf("part %d: index %d prev e%d, want %d e%d", i, p.Index, p.PrevEpoch, next, prev)
				}
				if len(parts) > 1 && recsBytes(p.Records) > tc.limit && len(p.Records) > 1 {
					t.Fatalf("part %d over the limit", i)
				}
				for _, r := range p.Records {
					if r.Offset != next {
						t.Fatalf("part %d: record %d, want %d", i, r.Offset, next)
					}
					next, prev = r.Offset+1, r.Epoch
				}
			}
		})
	}
}

// A write larger than one store append is persisted in several, in order.
func TestPersistChunksLargeWrites(t *testing.T) {
	s := loneShard(t, logstore.FsyncNone)
	big := make([]record.Record, 3*chunkMaxRecords+5)
	for i := range big {
		big[i] = record.Record{Offset: uint64(i), Epoch: 1, Kind: record.KindData, Payload: make([]byte, 2000)}
	}
	ws := []replication.LogWrite{
		{Op: replication.WriteAppend, Log: record.LogData, Offset: 0, Records: big[:10]},
		{Op: replication.WriteAppend, Log: record.LogData, Offset: 10, Records: big[10:]},
		{Op: replication.WriteTruncate, Log: record.LogData, Offset: 7},
	}
	s.cacheWrites(ws)
	if err := s.persist(ws); err != nil {
		t.Fatal(err)
	}
	if info := s.logs[record.LogData].Describe(); info.Tail != 7 {
		t.Fatalf("tail %d after append and truncate, want 7", info.Tail)
	}
	if got, ok := s.recent[record.LogData].get(6, 100, 100); !ok || len(got) != 1 {
		t.Fatalf("recent after truncate: %d records, %v", len(got), ok)
	}
}

// The persister queues appends without waiting for them; a truncation in a
// later Ready waits for them first, so the store ends up holding what the
// core's view holds, and every Ready is answered in order.
func TestPersisterTruncatesAfterQueuedAppends(t *testing.T) {
	s := loneShard(t, logstore.FsyncOnCommit)
	recs := func(from, n, epoch uint64) []record.Record {
		var out []record.Record
		for o := from; o < from+n; o++ {
			out = append(out, record.Record{Offset: o, Epoch: epoch, Kind: record.KindData, Payload: []byte{byte(o), byte(epoch)}})
		}
		return out
	}
	readies := []replication.Ready{
		{Writes: []replication.LogWrite{{Op: replication.WriteAppend, Log: record.LogData, Offset: 0, Records: recs(0, 10, 1)}}},
		{Writes: []replication.LogWrite{{Op: replication.WriteAppend, Log: record.LogData, Offset: 10, Records: recs(10, 10, 1)}}},
		{Writes: []replication.LogWrite{
			{Op: replication.WriteTruncate, Log: record.LogData, Offset: 5},
			{Op: replication.WriteAppend, Log: record.LogData, Offset: 5, Records: recs(5, 3, 2)},
		}},
		{Writes: []replication.LogWrite{{Op: replication.WriteAppend, Log: record.LogData, Offset: 8, Records: recs(8, 2, 2)}}},
	}
	done := make(chan struct{})
	go s.persistLoop(done)
	for _, rd := range readies {
		s.toPersist <- rd
	}
	for i := range readies {
		d := <-s.persisted
		if d.err != nil {
			t.Fatalf("Ready %d: %v", i, d.err)
		}
		if d.rd.Writes[0].Offset != readies[i].Writes[0].Offset {
			t.Fatalf("answer %d is for the Ready at %d, want %d", i, d.rd.Writes[0].Offset, readies[i].Writes[0].Offset)
		}
	}
	close(s.toPersist)
	<-done
	lg := s.logs[record.LogData]
	if d := lg.Describe(); d.Tail != 10 || d.Durable != 10 {
		t.Fatalf("log %+v, want tail and durable 10", d)
	}
	res, err := lg.ReadRaw(0, logstore.ReadOptions{MaxRecords: 100})
	if err != nil {
		t.Fatal(err)
	}
	for _, r := range res.Records {
		want := uint64(1)
		if r.Offset >= 5 {
			want = 2
		}
		if r.Epoch != want {
			t.Fatalf("record %d at epoch %d, want %d", r.Offset, r.Epoch, want)
		}
	}
	if len(res.Records) != 10 {
		t.Fatalf("%d records, want 10", len(res.Records))
	}
}

// loneShard is a shard of one replica on a store in t.TempDir(), built but
// not running (tests drive its persistence directly).
func loneShard(t *testing.T, fsync logstore.FsyncMode) *shard {
	t.Helper()
	st, err := logstore.Open(logstore.Options{Dir: t.TempDir(), Fsync: fsync})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = st.Close() })
	m, err := NewManager(Options{Store: st, Self: "a"})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(m.Close)
	s, err := newShard(m, testShard, []replication.NodeID{"a"}, replication.AckQuorum, 0)
	if err != nil {
		t.Fatal(err)
	}
	return s
}
