package server

import (
	"context"
	"errors"
	"sync"
	"testing"
	"time"

	"felix.dev/felix/broker/client"
	"felix.dev/felix/broker/record"
	"felix.dev/felix/broker/wire"
)

// TestBadClientsAreCutOffWhileOthersAreServed: garbage, an oversized frame
// and half a frame followed by silence each get an error frame and are
// disconnected within the deadline, while a well-behaved client keeps
// appending throughout.
func TestBadClientsAreCutOffWhileOthersAreServed(t *testing.T) {
	b := startBroker(t, Options{MaxFrameSize: 1 << 16, HandshakeTimeout: 300 * time.Millisecond, FrameTimeout: 300 * time.Millisecond})
	good := dial(t, b.addr, client.Options{})
	ctx := ctxT(t)
	stop := make(chan struct{})
	var appended int
	var goodErr error
	var wg sync.WaitGroup
	wg.Add(1)
	go func() {
		defer wg.Done()
		for {
			select {
			case <-stop:
				return
			default:
			}
			if _, err := good.Append(ctx, shardA, recs("ok"), nil); err != nil {
				goodErr = err
				return
			}
			appended++
		}
	}()

	tests := []struct {
		name     string
		act      func(r *rawConn)
		wantCode wire.Code // 0: disconnected, error frame optional
	}{
		{"garbage instead of hello", func(r *rawConn) { _, _ = r.nc.Write([]byte("GET / HTTP/1.1\r\nHost: x\r\n\r\n")) }, wire.CodeBadRequest},
		{"oversized frame after hello", func(r *rawConn) {
			r.hello(0)
			_, _ = r.nc.Write([]byte{0x10, 0, 0, 0, byte(wire.MsgAppend), 0, 0, 0, 1})
		}, wire.CodeRecordTooLarge},
		{"frame length below minimum", func(r *rawConn) {
			r.hello(0)
			_, _ = r.nc.Write([]byte{0, 0, 0, 2, 1, 1})
		}, wire.CodeBadRequest},
		{"half a frame then silence", func(r *rawConn) {
			r.hello(0)
			_, _ = r.nc.Write([]byte{0, 0, 0, 40, byte(wire.MsgAppend), 0, 0})
		}, wire.CodeBadRequest},
		{"half a hello then silence", func(r *rawConn) { _, _ = r.nc.Write([]byte{0, 0}) }, wire.CodeBadRequest},
		{"silence instead of hello", func(r *rawConn) {}, wire.CodeBadRequest},
		{"unsupported version", func(r *rawConn) {
			body, _ := wire.EncodeHello(wire.Hello{Version: 0})
			r.send(wire.MsgHello, 0, body)
		}, wire.CodeUnsupportedVersion},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			r := dialRaw(t, b.addr)
			tc.act(r)
			frames := r.expectClosed(3 * time.Second)
			if len(frames) == 0 {
				t.Fatalf("disconnected without an error frame")
			}
			last := frames[len(frames)-1]
			if e := decodeErr(t, last, 0); e.Code != tc.wantCode || last.ReqID != 0 {
				t.Fatalf("error frame %v (request %d), want %v with request id 0", e, last.ReqID, tc.wantCode)
			}
		})
	}
	close(stop)
	wg.Wait()
	if goodErr != nil || appended == 0 {
		t.Fatalf("the good client was disturbed: %d appends, %v", appended, goodErr)
	}
	if _, err := good.Describe(ctx, shardA); err != nil {
		t.Fatalf("good client after the bad ones: %v", err)
	}
}

// TestRequestLimitsAnswerAndKeepTheConnection: requests over the batch
// limits and unknown or reserved message types are refused with an error
// frame for that request; the connection stays usable and nothing of the
// refused batch is written.
func TestRequestLimitsAnswerAndKeepTheConnection(t *testing.T) {
	b := startBroker(t, Options{MaxBatchRecords: 4, MaxRecordBytes: 100})
	r := dialRaw(t, b.addr)
	r.hello(0)
	big := make([]byte, 101)
	tests := []struct {
		name  string
		typ   wire.MsgType
		body  func() []byte
		code  wire.Code
		limit uint64
	}{
		{"too many records", wire.MsgAppend, func() []byte {
			b, _ := wire.EncodeAppend(wire.AppendRequest{Shard: shardA, Records: recs("1", "2", "3", "4", "5")})
			return b
		}, wire.CodeRecordTooLarge, 4},
		{"record too large", wire.MsgAppend, func() []byte {
			b, _ := wire.EncodeAppend(wire.AppendRequest{Shard: shardA, Records: []record.Record{{Payload: big}}})
			return b
		}, wire.CodeRecordTooLarge, 100},
		{"empty batch", wire.MsgAppend, func() []byte {
			b, _ := wire.EncodeAppend(wire.AppendRequest{Shard: shardA})
			return b
		}, wire.CodeBadRequest, 0},
		{"undecodable body", wire.MsgAppend, func() []byte { return []byte{0, 1} }, wire.CodeBadRequest, 0},
		{"undecodable read", wire.MsgRead, func() []byte { return []byte{0, 1, 'x', 0, 0, 0, 0, 9} }, wire.CodeBadRequest, 0},
		{"undecodable trim", wire.MsgTrim, func() []byte { return []byte{0, 0} }, wire.CodeBadRequest, 0},
		{"undecodable describe", wire.MsgDescribe, func() []byte { return nil }, wire.CodeBadRequest, 0},
		{"read above the tail", wire.MsgRead, func() []byte {
			b, _ := wire.EncodeRead(wire.ReadRequest{Shard: shardA, From: wire.FromOffset, Offset: 5})
			return b
		}, wire.CodeBadRequest, 0},
		{"trim floor above its own offset", wire.MsgTrim, func() []byte {
			b, _ := wire.EncodeTrim(wire.TrimRequest{Shard: shardA, Floor: 5, ExpectTail: 0})
			return b
		}, wire.CodeBadRequest, 0},
		{"unknown type", 0x55, func() []byte { return nil }, wire.CodeBadRequest, 0},
		{"reserved replication type", wire.MsgShip, func() []byte { return []byte{1} }, wire.CodeBadRequest, 0},
		{"second hello", wire.MsgHello, func() []byte { b, _ := wire.EncodeHello(wire.Hello{Version: 1}); return b }, wire.CodeBadRequest, 0},
	}
	for i, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			id := uint32(100 + i)
			r.send(tc.typ, id, tc.body())
			f := r.recv()
			e := decodeErr(t, f, 0)
			if f.ReqID != id || e.Code != tc.code || e.Limit != tc.limit {
				t.Fatalf("answer %d: %v limit %d; want request %d %v limit %d", f.ReqID, e, e.Limit, id, tc.code, tc.limit)
			}
		})
	}
	body, _ := wire.EncodeDescribe(wire.DescribeRequest{Shard: shardA})
	r.send(wire.MsgDescribe, 1, body)
	f := r.recv()
	d, err := wire.DecodeDescribeOK(f.Body)
	if f.Type != wire.MsgDescribeOK || err != nil || d.Tail != 0 {
		t.Fatalf("describe after refusals: %v %+v %v (nothing refused may be written)", f.Type, d, err)
	}
}

// TestInFlightBytesBackpressure: while a connection's unanswered requests
// hold its in-flight budget the broker reads nothing more from it; the next
// request is read, and answered, only after an answer frees budget.
func TestInFlightBytesBackpressure(t *testing.T) {
	const maxBytes = 64 << 10
	readBody, _ := wire.EncodeRead(wire.ReadRequest{Shard: shardA, From: wire.FromLatest, MaxBytes: maxBytes, WaitMillis: 300})
	descBody, _ := wire.EncodeDescribe(wire.DescribeRequest{Shard: shardA})
	readCharge := int64(wire.FrameHeaderSize + len(readBody) + maxBytes + readAnswerReserve)
	// Room for exactly two follow reads; a describe does not fit beside them.
	budget := 2*readCharge + int64(wire.FrameHeaderSize+len(descBody)) - 1
	b := startBroker(t, Options{MaxFrameSize: 1 << 17, MaxInFlightBytes: budget})
	r := dialRaw(t, b.addr)
	r.hello(0)
	// Two follow reads on an empty shard hold the budget for 300ms.
	r.send(wire.MsgRead, 1, readBody)
	r.send(wire.MsgRead, 2, readBody)
	r.send(wire.MsgDescribe, 3, descBody)
	f := r.recv()
	if f.ReqID == 3 {
		t.Fatalf("describe was answered before any read freed the budget")
	}
	seen := map[uint32]bool{f.ReqID: true}
	for len(seen) < 3 {
		seen[r.recv().ReqID] = true
	}
}

func TestBudgetBlocksUntilRelease(t *testing.T) {
	b := newBudget(10)
	ctx := context.Background()
	if n, err := b.acquire(ctx, 8); err != nil || n != 8 {
		t.Fatal(n, err)
	}
	short, cancel := context.WithTimeout(ctx, 20*time.Millisecond)
	defer cancel()
	if _, err := b.acquire(short, 5); !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("acquire over the limit returned %v, want to block", err)
	}
	got := make(chan int64)
	go func() {
		n, _ := b.acquire(ctx, 50) // clamped to the limit
		got <- n
	}()
	b.release(8)
	if n := <-got; n != 10 {
		t.Fatalf("clamped acquire took %d, want 10", n)
	}
}

func TestMaxConnectionsRefusesWithUnavailable(t *testing.T) {
	b := startBroker(t, Options{MaxConnections: 2})
	first := dial(t, b.addr, client.Options{})
	_ = dial(t, b.addr, client.Options{})
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	_, err := client.Dial(ctx, b.addr, client.Options{})
	var we *wire.Error
	if !errors.As(err, &we) || we.Code != wire.CodeUnavailable {
		t.Fatalf("third connection: %v, want Unavailable", err)
	}
	if _, err := first.Describe(ctx, shardA); err != nil {
		t.Fatalf("an admitted connection stopped working: %v", err)
	}
	// Closing one admits the next.
	_ = first.Close()
	deadline := time.Now().Add(5 * time.Second)
	for {
		c, err := client.Dial(ctx, b.addr, client.Options{})
		if err == nil {
			_ = c.Close()
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("no connection admitted after one closed: %v", err)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// TestRecordAnswersChargedBeforeTheyRun: a group fetch or a dead-letter
// read is charged its answer's bound on admission, like a read; a request
// whose answer carries no records is charged its frame alone.
func TestRecordAnswersChargedBeforeTheyRun(t *testing.T) {
	for _, typ := range []wire.MsgType{wire.MsgGroupFetch, wire.MsgDeadLetterRead} {
		if got := recordAnswerCharge(typ); got < MaxAnswerBytes {
			t.Errorf("%v charged %d, want at least MaxAnswerBytes (%d)", typ, got, MaxAnswerBytes)
		}
	}
	for _, typ := range []wire.MsgType{wire.MsgAppend, wire.MsgDescribe, wire.MsgGroupCommit, wire.MsgGroupAck} {
		if got := recordAnswerCharge(typ); got != 0 {
			t.Errorf("%v charged %d, want 0", typ, got)
		}
	}
}
