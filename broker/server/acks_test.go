package server

import (
	"context"
	"errors"
	"fmt"
	"testing"
	"time"

	"felix.dev/felix/broker/client"
	"felix.dev/felix/broker/deadletter"
	"felix.dev/felix/broker/group"
	"felix.dev/felix/broker/logstore"
	"felix.dev/felix/broker/record"
	"felix.dev/felix/broker/wire"
)

// ackBroker starts a broker on clk with records a..e in shardA's data
// log, member m1 owning the shard for group g at generation 1, the group
// acknowledging per record (ack wait 10s, maxDel deliveries, 8 in
// flight).
func ackBroker(t *testing.T, clk *fakeClock, maxDel uint32) *broker {
	t.Helper()
	return ackBrokerWith(t, clk, maxDel, Options{})
}

// ackBrokerWith is ackBroker with options o (its lease and clock set).
func ackBrokerWith(t *testing.T, clk *fakeClock, maxDel uint32, o Options) *broker {
	t.Helper()
	o.GroupLease, o.Now = time.Hour, clk.Now
	b := startBroker(t, o)
	ctx := ctxT(t)
	c := dial(t, b.addr, client.Options{})
	if _, err := c.Append(ctx, shardA, []record.Record{
		{Payload: []byte("a"), Headers: []record.Header{{Key: "k", Value: []byte("v")}}}, {Payload: []byte("b")}, {Payload: []byte("c")},
	}, nil); err != nil {
		t.Fatal(err)
	}
	if _, err := c.GroupClaim(ctx, shardA, "g", "m1"); err != nil {
		t.Fatal(err)
	}
	if _, err := b.srv.groupAckConfig(wire.GroupAckConfigRequest{Shard: shardA, Group: "g", Member: "m1", Generation: 1,
		MaxDeliveries: maxDel, AckWaitMillis: 10_000, MaxInFlight: 8}); err != nil {
		t.Fatal(err)
	}
	return b
}

// isCode reports whether err is a *wire.Error with code.
func isCode(err error, code wire.Code) bool {
	var we *wire.Error
	return errors.As(err, &we) && we.Code == code
}

func fetch(t *testing.T, s *Server, maxRecs uint32) wire.GroupFetchOK {
	t.Helper()
	out, err := s.groupFetch(wire.GroupFetchRequest{Shard: shardA, Group: "g", Member: "m1", Generation: 1, MaxRecords: maxRecs})
	if err != nil {
		t.Fatalf("fetch: %v", err)
	}
	return out
}

// delivered lists a fetch's offsets and delivery counts as offset:count.
func delivered(out wire.GroupFetchOK) map[uint64]uint32 {
	m := map[uint64]uint32{}
	for _, d := range out.Deliveries {
		m[d.Record.Offset] = d.Deliveries
	}
	return m
}

func wantDelivered(t *testing.T, what string, out wire.GroupFetchOK, want map[uint64]uint32) {
	t.Helper()
	got := delivered(out)
	if len(got) != len(want) {
		t.Fatalf("%s: delivered %v, want %v", what, got, want)
	}
	for o, n := range want {
		if got[o] != n {
			t.Fatalf("%s: delivered %v, want %v", what, got, want)
		}
	}
}

func ack(t *testing.T, s *Server, offs ...uint64) uint64 {
	t.Helper()
	out, err := s.groupAck(wire.GroupAckRequest{Shard: shardA, Group: "g", Member: "m1", Generation: 1, Offsets: offs})
	if err != nil {
		t.Fatalf("ack %v: %v", offs, err)
	}
	return out.Committed
}

// A record not acknowledged within the ack wait is redelivered at the
// next fetch, with its delivery count, and not before; the committed
// offset moves over contiguous acknowledged offsets only.
func TestAckWaitRedelivers(t *testing.T) {
	clk := newFakeClock()
	b := ackBroker(t, clk, 5)
	out := fetch(t, b.srv, 0)
	wantDelivered(t, "first fetch", out, map[uint64]uint32{0: 1, 1: 1, 2: 1})
	if string(out.Deliveries[0].Record.Payload) != "a" || out.Deliveries[0].Record.Headers[0].Key != "k" {
		t.Fatalf("record 0: %+v", out.Deliveries[0].Record)
	}
	wantDelivered(t, "fetch within the ack wait", fetch(t, b.srv, 0), nil)
	if c := ack(t, b.srv, 1); c != 0 {
		t.Fatalf("committed %d after acking 1 of 0..2, want 0", c)
	}
	clk.Advance(9 * time.Second)
	wantDelivered(t, "fetch before the ack wait ran out", fetch(t, b.srv, 0), nil)
	clk.Advance(2 * time.Second)
	wantDelivered(t, "fetch after the ack wait", fetch(t, b.srv, 0), map[uint64]uint32{0: 2, 2: 2})
	if c := ack(t, b.srv, 0); c != 2 {
		t.Fatalf("committed %d after acking 0 and 1, want 2", c)
	}
	if c := ack(t, b.srv, 0, 2, 2); c != 3 {
		t.Fatalf("committed %d after acking all (0 again), want 3", c)
	}
	_, err := b.srv.groupAck(wire.GroupAckRequest{Shard: shardA, Group: "g", Member: "m1", Generation: 1, Offsets: []uint64{7}})
	if !isCode(err, wire.CodeBadRequest) {
		t.Fatalf("ack of an offset never delivered: %v, want BadRequest", err)
	}
}

// A nak'd record is redelivered at the next fetch, without waiting.
func TestNakRedeliversAtOnce(t *testing.T) {
	clk := newFakeClock()
	b := ackBroker(t, clk, 5)
	wantDelivered(t, "first fetch", fetch(t, b.srv, 2), map[uint64]uint32{0: 1, 1: 1})
	if _, err := b.srv.groupNak(wire.GroupNakRequest{Shard: shardA, Group: "g", Member: "m1", Generation: 1, Offsets: []uint64{1, 9}}); err != nil {
		t.Fatal(err)
	}
	wantDelivered(t, "fetch after the nak", fetch(t, b.srv, 0), map[uint64]uint32{1: 2, 2: 1})
	_, err := b.srv.groupNak(wire.GroupNakRequest{Shard: shardA, Group: "g", Member: "m2", Generation: 1, Offsets: []uint64{1}})
	wantFenced(t, "nak by another member", err, "m1", 1)
}

// The window of outstanding records is bounded: a fetch that finds it
// full and nothing due is refused with GroupLimit; settings above the
// broker's limit are refused with GroupLimit too.
func TestAckWindowBounded(t *testing.T) {
	clk := newFakeClock()
	b := ackBroker(t, clk, 5)
	if _, err := b.srv.groupAckConfig(wire.GroupAckConfigRequest{Shard: shardA, Group: "g", Member: "m1", Generation: 1,
		MaxDeliveries: 5, AckWaitMillis: 10_000, MaxInFlight: 2}); err != nil {
		t.Fatal(err)
	}
	wantDelivered(t, "first fetch", fetch(t, b.srv, 0), map[uint64]uint32{0: 1, 1: 1})
	_, err := b.srv.groupFetch(wire.GroupFetchRequest{Shard: shardA, Group: "g", Member: "m1", Generation: 1})
	var we *wire.Error
	if !errors.As(err, &we) || we.Code != wire.CodeGroupLimit || we.Limit != 2 {
		t.Fatalf("fetch with a full window: %v, want GroupLimit 2", err)
	}
	ack(t, b.srv, 0)
	wantDelivered(t, "fetch after an ack", fetch(t, b.srv, 0), map[uint64]uint32{2: 1})
	_, err = b.srv.groupAckConfig(wire.GroupAckConfigRequest{Shard: shardA, Group: "g", Member: "m1", Generation: 1,
		MaxDeliveries: 5, MaxInFlight: group.DefaultMaxInFlight + 1})
	if !errors.As(err, &we) || we.Code != wire.CodeGroupLimit {
		t.Fatalf("max in flight above the limit: %v, want GroupLimit", err)
	}
}

// A cumulative commit of a group that acknowledges per record is refused
// before anything is written: the group log stays foldable (a fresh fold
// agrees) and the group keeps working.
func TestCommitOfAckGroupRefused(t *testing.T) {
	clk := newFakeClock()
	b := ackBroker(t, clk, 5)
	c := dial(t, b.addr, client.Options{})
	_, err := c.GroupCommit(ctxT(t), shardA, "g", "m1", 1, 2)
	if !isCode(err, wire.CodeBadRequest) {
		t.Fatalf("commit of a per-record group: %v, want BadRequest", err)
	}
	again := New(StoreShards(b.store), Options{GroupLease: time.Hour, Now: clk.Now})
	wantDelivered(t, "fetch from a fresh fold", fetch(t, again, 0), map[uint64]uint32{0: 1, 1: 1, 2: 1})
}

func deadLetters(t *testing.T, s *Server) []wire.DeadLetter {
	t.Helper()
	out, err := s.deadLetterRead(wire.DeadLetterReadRequest{Shard: shardA})
	if err != nil {
		t.Fatalf("dead-letter read: %v", err)
	}
	return out.Entries
}

// After its maximum deliveries a record lands in the dead-letter log with
// its original offset, epoch, timestamp, headers and payload, the group,
// the delivery count and the reason; it is settled in the group log, so
// the committed offset moves past it; the metric counts it.
func TestMaxDeliveriesDeadLetters(t *testing.T) {
	clk := newFakeClock()
	b := ackBroker(t, clk, 2)
	fetch(t, b.srv, 1)
	clk.Advance(11 * time.Second)
	wantDelivered(t, "second delivery", fetch(t, b.srv, 1), map[uint64]uint32{0: 2})
	clk.Advance(11 * time.Second)
	out := fetch(t, b.srv, 1)
	if out.DeadLettered != 1 || out.Committed != 1 {
		t.Fatalf("third fetch: %+v, want 1 dead-lettered and committed 1", out)
	}
	wantDelivered(t, "third fetch", out, map[uint64]uint32{1: 1})
	data, _ := b.store.Lookup(record.LogID{ShardID: shardA, Log: record.LogData})
	orig, err := data.Read(0, logstore.ReadOptions{MaxRecords: 1})
	if err != nil {
		t.Fatal(err)
	}
	dl := deadLetters(t, b.srv)
	if len(dl) != 1 {
		t.Fatalf("dead letters: %+v", dl)
	}
	d := dl[0]
	if d.Group != "g" || d.Offset != 0 || d.Epoch != orig.Records[0].Epoch || d.Timestamp != orig.Records[0].Timestamp || d.Deliveries != 2 ||
		deadletter.Reason(d.Reason) != deadletter.ReasonMaxDeliveries || string(d.Payload) != "a" ||
		len(d.Headers) != 1 || d.Headers[0].Key != "k" || string(d.Headers[0].Value) != "v" || d.Redriven {
		t.Fatalf("dead letter %+v, original %+v", d, orig.Records[0])
	}
	if n := b.metric("felix_broker_group_dead_lettered_total", "stream", "orders", "shard", "0", "group", "g"); n != 1 {
		t.Fatalf("dead-lettered metric %v, want 1", n)
	}
	// A fresh fold (a new leader) agrees, and dead-letters nothing again.
	again := New(StoreShards(b.store), Options{GroupLease: time.Hour, Now: clk.Now})
	clk.Advance(11 * time.Second)
	if out := fetch(t, again, 0); out.DeadLettered != 0 || out.Committed != 1 {
		t.Fatalf("fetch from a fresh fold: %+v", out)
	}
	if dl := deadLetters(t, again); len(dl) != 1 {
		t.Fatalf("dead letters after the new fold: %+v", dl)
	}
}

// A fetch that stopped after appending a record to the dead-letter log
// but before settling it in the group log (the dead-letter entry is there,
// the offset still outstanding) is finished by the next fetch without a
// second dead-letter entry.
func TestDeadLetterRetryDoesNotDuplicate(t *testing.T) {
	clk := newFakeClock()
	b := ackBroker(t, clk, 1)
	fetch(t, b.srv, 1)
	// The first half of a dead-lettering, as a leader that stopped there
	// left it.
	rec, err := deadletter.EncodeRecord(deadletter.Record{Group: "g", Offset: 0, Deliveries: 1, Reason: deadletter.ReasonMaxDeliveries, Payload: []byte("a")})
	if err != nil {
		t.Fatal(err)
	}
	dlog, err := StoreShards(b.store).(DeadLetterShards).DeadLetterLog(shardA)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := dlog.Append(context.Background(), []record.Record{rec}, nil); err != nil {
		t.Fatal(err)
	}
	// A new leader's fold starts the ack wait of the outstanding offset
	// afresh: nothing is due at its first fetch.
	again := New(StoreShards(b.store), Options{GroupLease: time.Hour, Now: clk.Now})
	if out := fetch(t, again, 1); out.DeadLettered != 0 || out.Committed != 0 {
		t.Fatalf("first fetch of the new fold: %+v", out)
	}
	clk.Advance(11 * time.Second)
	out := fetch(t, again, 1)
	if out.Committed != 2 {
		t.Fatalf("fetch after the half dead-lettering: %+v, want offset 0 settled", out)
	}
	// Offset 1 (delivered once by the new leader) is dead-lettered too;
	// offset 0 only once.
	if dl := deadLetters(t, again); len(dl) != 2 || dl[0].Offset != 0 || dl[1].Offset != 1 {
		t.Fatalf("dead letters: %+v, want offsets 0 and 1 once each", dl)
	}
}

func redrive(t *testing.T, s *Server, entry uint64) wire.DeadLetterRedriveOK {
	t.Helper()
	out, err := s.deadLetterRedrive(wire.DeadLetterRedriveRequest{Shard: shardA, Entry: entry})
	if err != nil {
		t.Fatalf("redrive %d: %v", entry, err)
	}
	return out
}

// A redrive appends the dead-lettered record to the data log once: a
// second redrive, on this leader or a new one, answers with the first's
// offset and writes nothing.
func TestRedriveOnce(t *testing.T) {
	clk := newFakeClock()
	b := ackBroker(t, clk, 1)
	fetch(t, b.srv, 1)
	clk.Advance(11 * time.Second)
	if out := fetch(t, b.srv, 1); out.DeadLettered != 1 {
		t.Fatalf("fetch: %+v", out)
	}
	entry := deadLetters(t, b.srv)[0].Entry
	first := redrive(t, b.srv, entry)
	if first.DataOffset != 3 || first.Already {
		t.Fatalf("first redrive: %+v, want offset 3", first)
	}
	if again := redrive(t, b.srv, entry); again.DataOffset != 3 || !again.Already {
		t.Fatalf("second redrive: %+v", again)
	}
	other := New(StoreShards(b.store), Options{Now: clk.Now})
	if again := redrive(t, other, entry); again.DataOffset != 3 || !again.Already {
		t.Fatalf("redrive on a new leader: %+v", again)
	}
	data, _ := b.store.Lookup(record.LogID{ShardID: shardA, Log: record.LogData})
	res, err := data.Read(0, logstore.ReadOptions{MaxRecords: 10})
	if err != nil || len(res.Records) != 4 {
		t.Fatalf("data log: %d records %v, want 4", len(res.Records), err)
	}
	r := res.Records[3]
	if string(r.Payload) != "a" || len(r.Headers) != 2 || r.Headers[0].Key != "k" || r.Headers[1].Key != deadletter.RedriveHeader {
		t.Fatalf("redriven record %+v", r)
	}
	if d := deadLetters(t, other)[0]; !d.Redriven || d.DataOffset != 3 {
		t.Fatalf("dead letter after the redrive: %+v", d)
	}
	if _, err := b.srv.deadLetterRedrive(wire.DeadLetterRedriveRequest{Shard: shardA, Entry: entry + 1}); !isCode(err, wire.CodeBadRequest) {
		t.Fatalf("redrive of no entry: %v, want BadRequest", err)
	}
}

// A redrive that stopped after its record landed in the data log but
// before the redriven entry (the intent is there, the record at the
// intent's offset with the redrive header) is finished by the next
// redrive without a second copy; one whose intent never landed (another
// record took the offset) is redone at the new tail.
func TestRedriveAfterAStop(t *testing.T) {
	clk := newFakeClock()
	b := ackBroker(t, clk, 1)
	fetch(t, b.srv, 2)
	clk.Advance(11 * time.Second)
	if out := fetch(t, b.srv, 2); out.DeadLettered != 2 {
		t.Fatalf("fetch: %+v", out)
	}
	dls := deadLetters(t, b.srv)
	ss := StoreShards(b.store)
	dlog, _ := ss.(DeadLetterShards).DeadLetterLog(shardA)
	data, _ := ss.DataLog(shardA)
	intent := func(entry, at uint64) {
		rec, err := deadletter.EncodeRedrive(deadletter.EntryRedriving, deadletter.Redrive{Entry: entry, DataOffset: at})
		if err != nil {
			t.Fatal(err)
		}
		if _, err := dlog.Append(context.Background(), []record.Record{rec}, nil); err != nil {
			t.Fatal(err)
		}
	}
	// Entry 0: its intent at 3 and its record landed there.
	intent(dls[0].Entry, 3)
	if _, err := data.Append(context.Background(), []record.Record{{Kind: record.KindData, Payload: []byte("a"),
		Headers: []record.Header{{Key: "k", Value: []byte("v")}, {Key: deadletter.RedriveHeader, Value: []byte("0")}}}}, nil); err != nil {
		t.Fatal(err)
	}
	// Entry 1: its intent at 4, but another record took offset 4.
	intent(dls[1].Entry, 4)
	if _, err := data.Append(context.Background(), []record.Record{{Kind: record.KindData, Payload: []byte("other")}}, nil); err != nil {
		t.Fatal(err)
	}
	s := New(ss, Options{Now: clk.Now})
	if out := redrive(t, s, dls[0].Entry); out.DataOffset != 3 || out.Already {
		t.Fatalf("redrive of the landed intent: %+v, want 3", out)
	}
	if out := redrive(t, s, dls[1].Entry); out.DataOffset != 5 {
		t.Fatalf("redrive of the lost intent: %+v, want 5", out)
	}
	if tail := data.Describe().Tail; tail != 6 {
		t.Fatalf("data log tail %d, want 6 (one copy of each)", tail)
	}
}

// The whole cycle over the wire: configure, fetch, nak, ack, dead-letter,
// read and redrive twice; a connection without the feature is refused
// before anything is sent.
func TestAcksOverTheWire(t *testing.T) {
	clk := newFakeClock()
	b := startBroker(t, Options{GroupLease: time.Hour, Now: clk.Now})
	ctx := ctxT(t)
	c := dial(t, b.addr, client.Options{})
	if !c.Features().Has(wire.FeatureAcks) {
		t.Fatalf("features %v: acks not negotiated", c.Features())
	}
	if _, err := c.Append(ctx, shardA, recs("a", "b"), nil); err != nil {
		t.Fatal(err)
	}
	if _, err := c.GroupClaim(ctx, shardA, "g", "m1"); err != nil {
		t.Fatal(err)
	}
	if _, err := c.GroupAckConfig(ctx, wire.GroupAckConfigRequest{Shard: shardA, Group: "g", Member: "m1", Generation: 1,
		MaxDeliveries: 2, AckWaitMillis: 1000, MaxInFlight: 4}); err != nil {
		t.Fatal(err)
	}
	req := wire.GroupFetchRequest{Shard: shardA, Group: "g", Member: "m1", Generation: 1}
	out, err := c.GroupFetch(ctx, req)
	if err != nil || len(out.Deliveries) != 2 || string(out.Deliveries[1].Record.Payload) != "b" || out.Deliveries[1].Deliveries != 1 {
		t.Fatalf("fetch: %+v %v", out, err)
	}
	if _, err := c.GroupNak(ctx, shardA, "g", "m1", 1, []uint64{0}); err != nil {
		t.Fatal(err)
	}
	if ok, err := c.GroupAck(ctx, shardA, "g", "m1", 1, []uint64{1}); err != nil || ok.Committed != 0 {
		t.Fatalf("ack: %+v %v", ok, err)
	}
	if out, err := c.GroupFetch(ctx, req); err != nil || len(out.Deliveries) != 1 || out.Deliveries[0].Deliveries != 2 {
		t.Fatalf("fetch after the nak: %+v %v", out, err)
	}
	clk.Advance(2 * time.Second)
	if out, err := c.GroupFetch(ctx, req); err != nil || out.DeadLettered != 1 || out.Committed != 2 {
		t.Fatalf("fetch after max deliveries: %+v %v", out, err)
	}
	dl, err := c.DeadLetterRead(ctx, shardA, 0, 0)
	if err != nil || len(dl.Entries) != 1 || dl.Entries[0].Offset != 0 || dl.Entries[0].Deliveries != 2 || string(dl.Entries[0].Payload) != "a" {
		t.Fatalf("dead-letter read: %+v %v", dl, err)
	}
	first, err := c.DeadLetterRedrive(ctx, shardA, dl.Entries[0].Entry)
	if err != nil || first.DataOffset != 2 || first.Already {
		t.Fatalf("redrive: %+v %v", first, err)
	}
	if again, err := c.DeadLetterRedrive(ctx, shardA, dl.Entries[0].Entry); err != nil || again.DataOffset != 2 || !again.Already {
		t.Fatalf("second redrive: %+v %v", again, err)
	}
	if d, err := c.Describe(ctx, shardA); err != nil || d.Tail != 3 {
		t.Fatalf("data log after two redrives: %+v %v", d, err)
	}
	old := dial(t, b.addr, client.Options{Features: wire.FeatureGroups})
	if _, err := old.DeadLetterRead(ctx, shardA, 0, 0); !errors.Is(err, client.ErrNoAcks) {
		t.Fatalf("read without the feature: %v", err)
	}
}

// Only new records take room in the window: a fetch redelivers the due
// ones and adds new records up to MaxInFlight outstanding.
func TestFetchWindowCountsNewRecordsOnly(t *testing.T) {
	clk := newFakeClock()
	b := ackBroker(t, clk, 5)
	if _, err := b.srv.groupAckConfig(wire.GroupAckConfigRequest{Shard: shardA, Group: "g", Member: "m1", Generation: 1,
		MaxDeliveries: 5, AckWaitMillis: 10_000, MaxInFlight: 3}); err != nil {
		t.Fatal(err)
	}
	wantDelivered(t, "first fetch", fetch(t, b.srv, 2), map[uint64]uint32{0: 1, 1: 1})
	if _, err := b.srv.groupNak(wire.GroupNakRequest{Shard: shardA, Group: "g", Member: "m1", Generation: 1, Offsets: []uint64{0}}); err != nil {
		t.Fatal(err)
	}
	wantDelivered(t, "fetch after the nak", fetch(t, b.srv, 0), map[uint64]uint32{0: 2, 2: 1})
}

// A fetch answer and a dead-letter read answer stop at MaxAnswerBytes of
// records (one record past it at most), far below the frame limit.
func TestAnswersBoundedInBytes(t *testing.T) {
	clk := newFakeClock()
	b := ackBroker(t, clk, 1)
	if _, err := b.srv.groupAckConfig(wire.GroupAckConfigRequest{Shard: shardA, Group: "g", Member: "m1", Generation: 1,
		MaxDeliveries: 1, AckWaitMillis: 10_000, MaxInFlight: 64}); err != nil {
		t.Fatal(err)
	}
	c := dial(t, b.addr, client.Options{})
	big := make([]byte, 1_000_000)
	for range 4 {
		if _, err := c.Append(ctxT(t), shardA, []record.Record{{Payload: big}, {Payload: big}, {Payload: big}}, nil); err != nil {
			t.Fatal(err)
		}
	}
	size := func(n int, what string) {
		t.Helper()
		if n > MaxAnswerBytes+len(big) {
			t.Fatalf("%s: %d record bytes, bound %d plus one record", what, n, MaxAnswerBytes)
		}
	}
	first := fetch(t, b.srv, 0)
	n := 0
	for _, d := range first.Deliveries {
		n += len(d.Record.Payload)
	}
	if len(first.Deliveries) >= 15 {
		t.Fatalf("first fetch delivered all %d records", len(first.Deliveries))
	}
	size(n, "fetch")
	// Everything delivered so far is due and dead-lettered at once.
	clk.Advance(11 * time.Second)
	for range 3 {
		fetch(t, b.srv, 0)
		clk.Advance(11 * time.Second)
	}
	out, err := b.srv.deadLetterRead(wire.DeadLetterReadRequest{Shard: shardA})
	if err != nil {
		t.Fatal(err)
	}
	n = 0
	for _, d := range out.Entries {
		n += len(d.Payload)
	}
	if len(out.Entries) == 0 || out.Next == 0 {
		t.Fatalf("dead-letter read: %d entries, next %d", len(out.Entries), out.Next)
	}
	size(n, "dead-letter read")
	if rest, err := b.srv.deadLetterRead(wire.DeadLetterReadRequest{Shard: shardA, From: out.Next}); err != nil || len(rest.Entries) == 0 {
		t.Fatalf("dead-letter read from %d: %d entries %v, want the rest", out.Next, len(rest.Entries), err)
	}
}

// The dead-letter log holds at most MaxDeadLetters records: a record due
// to be dead-lettered beyond it stays outstanding (nothing lost, the
// committed offset waits) until a trim of the dead-letter log makes room.
func TestDeadLetterCapAndTrim(t *testing.T) {
	clk := newFakeClock()
	b := ackBrokerWith(t, clk, 1, Options{MaxDeadLetters: 1})
	fetch(t, b.srv, 0)
	clk.Advance(11 * time.Second)
	if out := fetch(t, b.srv, 0); out.DeadLettered != 1 || out.Committed != 1 {
		t.Fatalf("fetch with room for one dead letter: %+v", out)
	}
	dl := deadLetters(t, b.srv)
	if len(dl) != 1 || dl[0].Offset != 0 {
		t.Fatalf("dead letters: %+v", dl)
	}
	if out := fetch(t, b.srv, 0); out.DeadLettered != 0 || out.Committed != 1 || len(out.Deliveries) != 0 {
		t.Fatalf("fetch with the dead-letter log full: %+v, want 1 and 2 kept outstanding", out)
	}
	if _, err := b.srv.deadLetterTrim(wire.DeadLetterTrimRequest{Shard: shardA, Floor: 99}); !isCode(err, wire.CodeBadRequest) {
		t.Fatalf("trim above the tail: %v, want BadRequest", err)
	}
	tr, err := b.srv.deadLetterTrim(wire.DeadLetterTrimRequest{Shard: shardA, Floor: dl[0].Entry + 1})
	if err != nil || tr.Floor != dl[0].Entry+1 {
		t.Fatalf("trim: %+v %v", tr, err)
	}
	if dl := deadLetters(t, b.srv); len(dl) != 0 {
		t.Fatalf("dead letters after the trim: %+v", dl)
	}
	// A record kept outstanding for want of room is tried again after
	// another ack wait.
	if out := fetch(t, b.srv, 0); out.DeadLettered != 0 {
		t.Fatalf("fetch right after the trim: %+v, want nothing tried before the ack wait", out)
	}
	clk.Advance(11 * time.Second)
	if out := fetch(t, b.srv, 0); out.DeadLettered != 1 || out.Committed != 2 {
		t.Fatalf("fetch after the trim and the ack wait: %+v, want 1 dead-lettered", out)
	}
	if dl := deadLetters(t, b.srv); len(dl) != 1 || dl[0].Offset != 1 {
		t.Fatalf("dead letters after the second round: %+v", dl)
	}
}

// A GroupConsumer acknowledging per record: Poll configures the shard and
// fetches; a nak'd record comes at the next Poll with its count, an
// unacknowledged one after the ack wait on the broker's clock, and after
// its maximum deliveries it is dead-lettered; a second member takes the
// shard over after the first's lease and gets what was not acknowledged.
func TestGroupConsumerAckMode(t *testing.T) {
	clk := newFakeClock()
	b := startBroker(t, Options{GroupLease: 10 * time.Second, Now: clk.Now})
	ctx := ctxT(t)
	if _, err := dial(t, b.addr, client.Options{}).Append(ctx, shardA, recs("a", "b", "c"), nil); err != nil {
		t.Fatal(err)
	}
	cl, err := client.NewCluster(ctx, client.ClusterOptions{Attempts: 3}, b.addr)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = cl.Close() })
	member := func(name string) *client.GroupConsumer {
		g, err := client.NewGroupConsumer(cl, client.GroupConsumerOptions{Stream: shardA.Stream, Shards: []uint32{shardA.Shard}, Group: "g", Member: name,
			Ack: &client.AckOptions{MaxDeliveries: 2, AckWait: 5 * time.Second, MaxInFlight: 10}})
		if err != nil {
			t.Fatal(err)
		}
		return g
	}
	offsets := func(bs []client.GroupBatch) map[uint64]uint32 {
		m := map[uint64]uint32{}
		for _, b := range bs {
			for i, r := range b.Records {
				m[r.Offset] = b.Deliveries[i]
			}
		}
		return m
	}
	first := member("first")
	bs, err := first.Poll(ctx)
	if got := offsets(bs); err != nil || len(got) != 3 || got[0] != 1 {
		t.Fatalf("first poll: %v %v", got, err)
	}
	if err := first.Ack(ctx, shardA, 1); err != nil {
		t.Fatal(err)
	}
	if err := first.Nak(ctx, shardA, 0); err != nil {
		t.Fatal(err)
	}
	bs, err = first.Poll(ctx)
	if got := offsets(bs); err != nil || len(got) != 1 || got[0] != 2 {
		t.Fatalf("poll after the nak: %v %v, want 0 a second time", got, err)
	}
	clk.Advance(6 * time.Second)
	bs, err = first.Poll(ctx)
	if got := offsets(bs); err != nil || len(got) != 1 || got[2] != 2 {
		t.Fatalf("poll after the ack wait: %v %v, want 2 a second time (0 dead-lettered)", got, err)
	}
	if dl, err := cl.DeadLetterRead(ctx, shardA, 0, 0); err != nil || len(dl.Entries) != 1 || dl.Entries[0].Offset != 0 {
		t.Fatalf("dead letters: %+v %v", dl, err)
	}
	// The first member goes silent; the second takes over after its lease.
	// Offset 2, delivered its maximum twice and never acknowledged, is due:
	// the second member's first fetch dead-letters it.
	second := member("second")
	clk.Advance(11 * time.Second)
	bs, err = second.Poll(ctx)
	if err != nil || len(second.Owned()) != 1 {
		t.Fatalf("second poll: %v %v owned %v", offsets(bs), err, second.Owned())
	}
	if err := first.Ack(ctx, shardA, 2); !errors.Is(err, wire.ErrGroupFenced) {
		t.Fatalf("ack of the silent member: %v, want GroupFenced", err)
	}
	if got := offsets(bs); len(got) != 0 {
		t.Fatalf("second poll delivered %v, want nothing (2 dead-lettered)", got)
	}
	d, err := cl.GroupDescribe(ctx, shardA, "g")
	if err != nil || d.Groups[0].Owner != "second" || d.Groups[0].Committed != 3 {
		t.Fatalf("describe: %+v %v, want second owning, 0 dead-lettered, 1 acked, 2 dead-lettered", d, err)
	}
	if dl, err := cl.DeadLetterRead(ctx, shardA, 0, 0); err != nil || len(dl.Entries) != 2 || dl.Entries[1].Offset != 2 || dl.Entries[1].Deliveries != 2 {
		t.Fatalf("dead letters after the takeover: %+v %v", dl, err)
	}
}

// racingShards serves the store's logs, except that the first races
// conditional appends to a data log each lose to another append: one
// record lands at the expected tail just before them, as a concurrent
// producer's append does between a redrive's intent and its append.
type racingShards struct {
	Shards
	races *int
}

func (r racingShards) DataLog(shard record.ShardID) (Log, error) {
	l, err := r.Shards.DataLog(shard)
	if err != nil {
		return nil, err
	}
	return racingLog{Log: l, races: r.races}, nil
}

func (r racingShards) DeadLetterLog(shard record.ShardID) (Log, error) {
	return r.Shards.(DeadLetterShards).DeadLetterLog(shard)
}

type racingLog struct {
	Log
	races *int
}

func (l racingLog) Append(ctx context.Context, recs []record.Record, expectTail *uint64) (logstore.AppendResult, error) {
	if expectTail != nil && *l.races > 0 {
		*l.races--
		if _, err := l.Log.Append(ctx, []record.Record{{Kind: record.KindData, Payload: []byte("racer")}}, nil); err != nil {
			return logstore.AppendResult{}, err
		}
	}
	return l.Log.Append(ctx, recs, expectTail)
}

// redriveRace is the scenario of the redrive's intent bounds [TR-10]: one
// record is dead-lettered, then a server over the same store (with
// maxDead as Options.MaxDeadLetters and the twin switches) redrives it
// requests times while the first races conditional appends to the data
// log each lose to another append. It returns every answer's error (nil
// for a redrive that landed) and the intents the requests wrote.
func redriveRace(t *testing.T, twin serverTwin, maxDead, races, requests int) (errs []error, intents int) {
	t.Helper()
	clk := newFakeClock()
	b := ackBroker(t, clk, 1)
	fetch(t, b.srv, 1)
	clk.Advance(11 * time.Second)
	if out := fetch(t, b.srv, 1); out.DeadLettered != 1 {
		t.Fatalf("fetch: %+v", out)
	}
	entry := deadLetters(t, b.srv)[0].Entry
	left := races
	ss := racingShards{Shards: StoreShards(b.store), races: &left}
	s := New(ss, Options{Now: clk.Now, MaxDeadLetters: maxDead, twin: twin})
	dlog, _ := ss.DeadLetterLog(shardA)
	for i := 0; i < requests; i++ {
		_, err := s.deadLetterRedrive(wire.DeadLetterRedriveRequest{Shard: shardA, Entry: entry})
		errs = append(errs, err)
	}
	res, err := dlog.Read(0, logstore.ReadOptions{MaxRecords: 1000})
	if err != nil {
		t.Fatal(err)
	}
	for _, r := range res.Records {
		e, err := deadletter.DecodeEntry(r)
		if err != nil {
			t.Fatal(err)
		}
		if e.Redriving != nil {
			intents++
		}
	}
	return errs, intents
}

// TestTR10_RedriveIntentsBounded: a redrive that keeps losing its
// conditional append to other appends writes at most maxRedriveIntents
// intents per request and answers Unavailable (retryable); across
// requests the intents that replace an earlier one stop at
// Options.MaxDeadLetters, answered GroupLimit; a redrive that wins in the
// end lands once. TestTR10Twin_UnboundedRedriveGrowsTheDeadLetterLog runs
// the same scenarios with the bounds off.
func TestTR10_RedriveIntentsBounded(t *testing.T) {
	for _, tc := range redriveBoundCases {
		t.Run(tc.name, func(t *testing.T) {
			errs, intents := redriveRace(t, serverTwin{}, tc.maxDead, tc.races, tc.requests)
			if broke := tc.check(errs, intents); len(broke) > 0 {
				t.Fatalf("bounds broken: %v (answers %v, %d intents)", broke, errs, intents)
			}
		})
	}
}

// redriveBoundCases are the scenarios of TestTR10_RedriveIntentsBounded
// and its twin; check returns the bounds that broke.
var redriveBoundCases = []struct {
	name                     string
	maxDead, races, requests int
	check                    func(errs []error, intents int) []string
}{
	{name: "one request writes at most two intents", maxDead: 100, races: 5, requests: 1,
		check: func(errs []error, intents int) []string {
			var broke []string
			if intents > maxRedriveIntents {
				broke = append(broke, fmt.Sprintf("one request wrote %d intents", intents))
			}
			if !isCode(errs[0], wire.CodeUnavailable) {
				broke = append(broke, fmt.Sprintf("answer %v, want Unavailable", errs[0]))
			}
			return broke
		}},
	{name: "replaced intents stop at the shard's cap", maxDead: 3, races: 30, requests: 10,
		check: func(errs []error, intents int) []string {
			var broke []string
			// One first intent, then at most 3 replacing it.
			if intents > 1+3 {
				broke = append(broke, fmt.Sprintf("%d intents in the dead-letter log, want at most 4", intents))
			}
			var we *wire.Error
			if last := errs[len(errs)-1]; !errors.As(last, &we) || we.Code != wire.CodeGroupLimit || we.Limit != 3 {
				broke = append(broke, fmt.Sprintf("last answer %v, want GroupLimit 3", last))
			}
			return broke
		}},
	{name: "a redrive that wins lands once", maxDead: 3, races: 1, requests: 2,
		check: func(errs []error, intents int) []string {
			var broke []string
			if errs[0] != nil || errs[1] != nil {
				broke = append(broke, fmt.Sprintf("answers %v, want both to succeed", errs))
			}
			if intents != 2 {
				broke = append(broke, fmt.Sprintf("%d intents, want 2 (one lost, one landed)", intents))
			}
			return broke
		}},
}
