package server

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"felix.dev/felix/broker/client"
	"felix.dev/felix/broker/record"
	"felix.dev/felix/broker/wire"
)

func TestAppendReadDescribe(t *testing.T) {
	b := startBroker(t, Options{})
	c := dial(t, b.addr, client.Options{})
	ctx := ctxT(t)
	hdr := []record.Header{{Key: "epoch", Value: []byte("1")}}
	res, err := c.Append(ctx, shardA, []record.Record{{Headers: hdr, Payload: []byte("a")}, {Payload: []byte("b")}}, nil)
	if err != nil {
		t.Fatal(err)
	}
	if res != (wire.AppendOK{First: 0, Tail: 2}) {
		t.Fatalf("append = %+v", res)
	}
	tests := []struct {
		name string
		req  wire.ReadRequest
		want []string
		next uint64
	}{
		{"from offset", wire.ReadRequest{Shard: shardA, From: wire.FromOffset, Offset: 1}, []string{"b"}, 2},
		{"earliest", wire.ReadRequest{Shard: shardA, From: wire.FromEarliest}, []string{"a", "b"}, 2},
		{"latest", wire.ReadRequest{Shard: shardA, From: wire.FromLatest}, nil, 2},
		{"bounded by records", wire.ReadRequest{Shard: shardA, From: wire.FromEarliest, MaxRecords: 1}, []string{"a"}, 1},
		{"bounded by bytes returns at least one", wire.ReadRequest{Shard: shardA, From: wire.FromEarliest, MaxBytes: 1}, []string{"a"}, 1},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			r, err := c.Read(ctx, tc.req)
			if err != nil {
				t.Fatal(err)
			}
			var got []string
			for _, rec := range r.Records {
				got = append(got, string(rec.Payload))
			}
			if diff := cmp.Diff(tc.want, got); diff != "" || r.Next != tc.next {
				t.Fatalf("records (-want +got) %s; next %d want %d", diff, r.Next, tc.next)
			}
		})
	}
	r, _ := c.Read(ctx, wire.ReadRequest{Shard: shardA, From: wire.FromEarliest})
	if len(r.Records) == 0 || r.Records[0].Offset != 0 || !cmp.Equal(r.Records[0].Headers, hdr) || r.Records[0].Timestamp == 0 {
		t.Fatalf("record 0 = %+v", r.Records)
	}
	d, err := c.Describe(ctx, shardA)
	if err != nil {
		t.Fatal(err)
	}
	if d != (wire.DescribeOK{Base: 0, Floor: 0, Tail: 2, Committed: 2}) {
		t.Fatalf("describe = %+v", d)
	}
}

func TestTR1_ConditionalAppendRefusedWithTail(t *testing.T) {
	b := startBroker(t, Options{})
	c := dial(t, b.addr, client.Options{})
	ctx := ctxT(t)
	if _, err := c.Append(ctx, shardA, recs("a", "b", "c"), u64(0)); err != nil {
		t.Fatal(err)
	}
	_, err := c.Append(ctx, shardA, recs("x"), u64(1))
	var we *wire.Error
	if !errors.As(err, &we) || we.Code != wire.CodeOffsetMismatch || we.Tail != 3 || we.Expected != 1 {
		t.Fatalf("err = %#v, want OffsetMismatch with tail 3", err)
	}
	if !errors.Is(err, record.ErrOffsetMismatch) {
		t.Fatalf("errors.Is(record.ErrOffsetMismatch) is false")
	}
	if res, err := c.Append(ctx, shardA, recs("d"), u64(3)); err != nil || res.First != 3 {
		t.Fatalf("append at the right tail: %+v %v", res, err)
	}
}

// TestTR4_CursorTooOldCarriesTrimHeaders: a reader that negotiated the trim
// tag learns the epoch of the trim that set the floor; one that did not gets
// the refusal it always got, byte for byte.
func TestTR4_CursorTooOldCarriesTrimHeaders(t *testing.T) {
	b := startBroker(t, Options{})
	c := dial(t, b.addr, client.Options{})
	ctx := ctxT(t)
	if _, err := c.Append(ctx, shardA, recs("0", "1", "2", "3"), nil); err != nil {
		t.Fatal(err)
	}
	trimHdr := []record.Header{{Key: "epoch", Value: []byte("2")}}
	tr, err := c.Trim(ctx, wire.TrimRequest{Shard: shardA, Floor: 2, ExpectTail: 4, Headers: trimHdr})
	if err != nil {
		t.Fatal(err)
	}
	if tr != (wire.TrimOK{Tail: 5, Floor: 2}) {
		t.Fatalf("trim = %+v", tr)
	}
	_, err = c.Read(ctx, wire.ReadRequest{Shard: shardA, From: wire.FromOffset, Offset: 1})
	var we *wire.Error
	if !errors.As(err, &we) || we.Code != wire.CodeCursorTooOld || we.Floor != 2 || !we.HasTag || !cmp.Equal(we.TrimHeaders, trimHdr) {
		t.Fatalf("err = %#v, want CursorTooOld floor 2 with the trim's headers", err)
	}
	// Readers skip the trim record; earliest resolves to the floor.
	r, err := c.Read(ctx, wire.ReadRequest{Shard: shardA, From: wire.FromEarliest})
	if err != nil || len(r.Records) != 2 || r.Records[0].Offset != 2 || r.Next != 5 {
		t.Fatalf("read from earliest = %+v, %v", r, err)
	}

	// A peer offering no bits: the version-1 refusal, no tag field.
	raw := dialRaw(t, b.addr)
	if h := raw.hello(0); h.Features != 0 || h.StorageID != nil {
		t.Fatalf("HelloOK to a peer offering nothing = %+v", h)
	}
	body, _ := wire.EncodeRead(wire.ReadRequest{Shard: shardA, From: wire.FromOffset, Offset: 1})
	raw.send(wire.MsgRead, 7, body)
	f := raw.recv()
	want, _ := wire.EncodeError(&wire.Error{Code: wire.CodeCursorTooOld, Message: we.Message, From: 1, Floor: 2}, 0)
	if f.Type != wire.MsgError || f.ReqID != 7 || !bytes.Equal(f.Body, want) {
		t.Fatalf("untagged refusal differs:\n got %x\nwant %x", f.Body, want)
	}
}

// TestTR3_NoOpTrimStillChecksTail: a trim at or below the floor writes
// nothing but a wrong tail is still refused.
func TestTR3_NoOpTrimStillChecksTail(t *testing.T) {
	b := startBroker(t, Options{})
	c := dial(t, b.addr, client.Options{})
	ctx := ctxT(t)
	if _, err := c.Append(ctx, shardA, recs("0", "1", "2"), nil); err != nil {
		t.Fatal(err)
	}
	if _, err := c.Trim(ctx, wire.TrimRequest{Shard: shardA, Floor: 2, ExpectTail: 3}); err != nil {
		t.Fatal(err)
	}
	_, err := c.Trim(ctx, wire.TrimRequest{Shard: shardA, Floor: 1, ExpectTail: 3})
	var we *wire.Error
	if !errors.As(err, &we) || we.Code != wire.CodeOffsetMismatch || we.Tail != 4 {
		t.Fatalf("no-op trim with a stale tail: %v", err)
	}
	tr, err := c.Trim(ctx, wire.TrimRequest{Shard: shardA, Floor: 1, ExpectTail: 4})
	if err != nil || tr.Tail != 4 || tr.Floor != 2 {
		t.Fatalf("no-op trim = %+v, %v", tr, err)
	}
}

func TestRP2_StorageIDOnlyWhenNegotiated(t *testing.T) {
	id := bytes.Repeat([]byte{0xab}, 16)
	b := startBroker(t, Options{StorageID: id})
	peer := dial(t, b.addr, client.Options{Features: wire.FeatureStorageID | wire.FeatureTrimTag, StorageID: bytes.Repeat([]byte{1}, 16)})
	if !bytes.Equal(peer.BrokerStorageID(), id) || peer.Features() != wire.FeatureStorageID|wire.FeatureTrimTag {
		t.Fatalf("peer sees id %x, features %v", peer.BrokerStorageID(), peer.Features())
	}
	plain := dial(t, b.addr, client.Options{NoFeatures: true})
	if plain.BrokerStorageID() != nil || plain.Features() != 0 {
		t.Fatalf("a client offering nothing sees id %x, features %v", plain.BrokerStorageID(), plain.Features())
	}
	// The HelloOK bytes to a peer offering nothing are the version-1 bytes.
	raw := dialRaw(t, b.addr)
	body, _ := wire.EncodeHello(wire.Hello{Version: 1})
	raw.send(wire.MsgHello, 0, body)
	f := raw.recv()
	want, _ := wire.EncodeHelloOK(wire.HelloOK{Version: 1, MaxFrameSize: wire.DefaultMaxFrameSize, MaxBatchRecords: DefaultMaxBatchRecords})
	if !bytes.Equal(f.Body, want) {
		t.Fatalf("HelloOK bytes differ:\n got %x\nwant %x", f.Body, want)
	}
}

func TestFollowReadWaitsForNewRecords(t *testing.T) {
	b := startBroker(t, Options{})
	reader := dial(t, b.addr, client.Options{})
	writer := dial(t, b.addr, client.Options{})
	ctx := ctxT(t)
	if _, err := writer.Append(ctx, shardA, recs("old"), nil); err != nil {
		t.Fatal(err)
	}
	// Latest resolves to the tail: nothing old is returned.
	r, err := reader.Read(ctx, wire.ReadRequest{Shard: shardA, From: wire.FromLatest, WaitMillis: 20})
	if err != nil || len(r.Records) != 0 || r.Next != 1 {
		t.Fatalf("read from latest = %+v, %v", r, err)
	}
	type result struct {
		r   wire.ReadOK
		err error
	}
	got := make(chan result, 1)
	start := time.Now()
	go func() {
		r, err := reader.Read(ctx, wire.ReadRequest{Shard: shardA, From: wire.FromOffset, Offset: r.Next, WaitMillis: 5000})
		got <- result{r, err}
	}()
	if _, err := writer.Append(ctx, shardA, recs("new"), nil); err != nil {
		t.Fatal(err)
	}
	res := <-got
	if res.err != nil {
		t.Fatal(res.err)
	}
	if time.Since(start) > 4*time.Second {
		t.Fatalf("follow read waited out its 5s instead of answering the append")
	}
	if len(res.r.Records) != 1 || string(res.r.Records[0].Payload) != "new" || res.r.Next != 2 {
		t.Fatalf("follow read = %+v", res.r)
	}
	// A follow read with nothing new answers empty after its wait.
	r, err = reader.Read(ctx, wire.ReadRequest{Shard: shardA, From: wire.FromOffset, Offset: 2, WaitMillis: 50})
	if err != nil || len(r.Records) != 0 || r.Next != 2 {
		t.Fatalf("idle follow read = %+v, %v", r, err)
	}
}

// TestPipelinedAppendsOneConnection: many goroutines share one connection;
// every append gets its own dense range and per-goroutine order holds.
func TestPipelinedAppendsOneConnection(t *testing.T) {
	b := startBroker(t, Options{})
	c := dial(t, b.addr, client.Options{})
	ctx := ctxT(t)
	const writers, each = 8, 50
	var mu sync.Mutex
	seen := map[uint64]string{}
	var wg sync.WaitGroup
	errc := make(chan error, writers)
	for w := 0; w < writers; w++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			last := uint64(0)
			for i := 0; i < each; i++ {
				p := fmt.Sprintf("w%d-%d", w, i)
				res, err := c.Append(ctx, shardA, recs(p, p+"b"), nil)
				if err != nil {
					errc <- err
					return
				}
				if res.Tail != res.First+2 || (i > 0 && res.First < last) {
					errc <- fmt.Errorf("append %s = %+v after %d", p, res, last)
					return
				}
				last = res.Tail
				mu.Lock()
				seen[res.First] = p
				mu.Unlock()
			}
		}()
	}
	wg.Wait()
	close(errc)
	for err := range errc {
		t.Fatal(err)
	}
	d, _ := c.Describe(ctx, shardA)
	if d.Tail != writers*each*2 || len(seen) != writers*each {
		t.Fatalf("tail %d, %d distinct appends", d.Tail, len(seen))
	}
	r, err := c.Read(ctx, wire.ReadRequest{Shard: shardA, From: wire.FromEarliest, MaxRecords: 10000})
	if err != nil {
		t.Fatal(err)
	}
	for _, rec := range r.Records {
		if rec.Offset%2 == 0 && string(rec.Payload) != seen[rec.Offset] {
			t.Fatalf("offset %d holds %q, the append answered for %q", rec.Offset, rec.Payload, seen[rec.Offset])
		}
	}
}

func TestBatcherGathersRecords(t *testing.T) {
	b := startBroker(t, Options{})
	c := dial(t, b.addr, client.Options{})
	ctx := ctxT(t)
	bt := c.NewBatcher(shardA, client.BatcherOptions{MaxRecords: 10, Linger: time.Hour})
	var futs []*client.Future
	for i := 0; i < 25; i++ {
		futs = append(futs, bt.Add(record.Record{Payload: []byte{byte(i)}}))
	}
	bt.Flush()
	for i, f := range futs {
		off, err := f.Wait(ctx)
		if err != nil || off != uint64(i) {
			t.Fatalf("record %d: offset %d, %v", i, off, err)
		}
	}
}

func TestClientDeadline(t *testing.T) {
	b := startBroker(t, Options{})
	c := dial(t, b.addr, client.Options{})
	ctx, cancel := context.WithTimeout(context.Background(), 50*time.Millisecond)
	defer cancel()
	_, err := c.Read(ctx, wire.ReadRequest{Shard: shardA, From: wire.FromLatest, WaitMillis: 10000})
	if !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("err = %v, want deadline exceeded", err)
	}
	// The connection stays usable.
	if _, err := c.Describe(ctxT(t), shardA); err != nil {
		t.Fatal(err)
	}
}

// The count of unanswered requests that decides whether the writer waits
// for more answers before a flush returns to zero once every request on
// the connection is answered, successes and errors alike (a count left
// above zero would make every later answer wait; below, none).
func TestUnansweredCountReturnsToZero(t *testing.T) {
	b := startBroker(t, Options{})
	c := dial(t, b.addr, client.Options{})
	ctx := ctxT(t)
	var wg sync.WaitGroup
	errc := make(chan error, 8)
	for w := 0; w < 8; w++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := 0; i < 20; i++ {
				if _, err := c.Append(ctx, shardA, recs(fmt.Sprintf("w%d-%d", w, i)), nil); err != nil {
					errc <- err
					return
				}
			}
		}()
	}
	wg.Wait()
	close(errc)
	for err := range errc {
		t.Fatal(err)
	}
	if _, err := c.Read(ctx, wire.ReadRequest{Shard: shardA, From: wire.FromEarliest, MaxRecords: 10}); err != nil {
		t.Fatal(err)
	}
	if _, err := c.Append(ctx, shardA, recs("late"), u64(0)); err == nil {
		t.Fatal("a conditional append at a stale tail succeeded")
	}
	b.srv.mu.Lock()
	defer b.srv.mu.Unlock()
	if len(b.srv.conns) != 1 {
		t.Fatalf("%d connections, want 1", len(b.srv.conns))
	}
	for conn := range b.srv.conns {
		if n := conn.unanswered.Load(); n != 0 {
			t.Fatalf("%d requests counted unanswered after every answer arrived", n)
		}
	}
}
