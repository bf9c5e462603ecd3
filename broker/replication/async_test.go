package replication

import (
	"testing"

	"felix.dev/felix/broker/record"
)

// appendMsg is an Append from leader a at epoch e of records [index,
// index+n), all of epoch e, after a record of epoch prev.
func appendMsg(e, index, prev uint64, n int) Message {
	m := Message{Type: MsgAppend, From: "a", To: "b", Conn: 1, Epoch: e, Log: record.LogData,
		Index: index, PrevEpoch: prev}
	for i := 0; i < n; i++ {
		m.Records = append(m.Records, record.Record{Offset: index + uint64(i), Epoch: e, Kind: record.KindData})
	}
	return m
}

// TestAsyncPersist_TruncationLowersReadiesInFlight: a follower's runtime
// persists asynchronously, so a Ready may still be in flight when a later
// one truncates what it wrote. Advancing the earlier Ready must not count
// the truncated records (or the new ones written over them) as persisted,
// and no answer may claim them; the later Ready's Advance does. The
// simulator finds committed records truncated without this rule.
func TestAsyncPersist_TruncationLowersReadiesInFlight(t *testing.T) {
	mem := &memLog{}
	r, err := New(Config{Shard: record.ShardID{Stream: "s"}, Self: "b", Replicas: []NodeID{"a", "b", "c"}, Log: mem}, State{})
	if err != nil {
		t.Fatal(err)
	}
	r.SetKnownEpoch(1)
	r.Step(appendMsg(1, 0, 0, 10)) // [0,10) at epoch 1
	rd1 := r.Ready()
	if len(rd1.Writes) != 1 || len(rd1.Messages) != 0 {
		t.Fatalf("first Ready: %+v", rd1)
	}
	// A new leader of epoch 2 holds only [0,5) of epoch 1: b truncates at
	// 5 and appends [5,8) at epoch 2 while rd1 is still being persisted.
	r.Step(appendMsg(2, 5, 1, 3))
	rd2 := r.Ready()
	var ops []WriteOp
	for _, w := range rd2.Writes {
		ops = append(ops, w.Op)
	}
	if len(ops) != 2 || ops[0] != WriteTruncate || ops[1] != WriteAppend {
		t.Fatalf("second Ready writes %v, want truncate then append", ops)
	}
	for _, w := range rd1.Writes {
		mem.apply(w)
	}
	r.Advance(rd1)
	if p := r.Status().Persisted[record.LogData]; p != 5 {
		t.Fatalf("after the first Ready's Advance: persisted %d, want 5 (the truncation point)", p)
	}
	if rd := r.Ready(); len(rd.Messages) != 0 {
		t.Fatalf("an answer before the epoch-2 records are persisted: %+v", rd.Messages)
	}
	r.Advance(Ready{}) // the empty Ready just taken
	for _, w := range rd2.Writes {
		mem.apply(w)
	}
	r.Advance(rd2)
	if p := r.Status().Persisted[record.LogData]; p != 8 {
		t.Fatalf("after the second Ready's Advance: persisted %d, want 8", p)
	}
	rd := r.Ready()
	if len(rd.Messages) != 1 || !rd.Messages[0].Match || rd.Messages[0].MatchEnd != 8 {
		t.Fatalf("answer after both Readies: %+v", rd.Messages)
	}
}
