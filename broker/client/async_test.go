package client_test

import (
	"context"
	"errors"
	"fmt"
	"net"
	"testing"
	"time"

	"felix.dev/felix/broker/client"
	"felix.dev/felix/broker/record"
	"felix.dev/felix/broker/wire"
)

// TestAppendAsyncKeepsOrderAndMatchesAnswers: appends sent one after the
// other from one goroutine reach the broker in that order, each Wait gets
// its own answer even when the answers come in another order, and a broker
// error is the outcome of that append alone.
func TestAppendAsyncKeepsOrderAndMatchesAnswers(t *testing.T) {
	fb := startFake(t, wire.HelloOK{Version: 1, Features: wire.FeatureTrimTag, MaxFrameSize: 1 << 20, MaxBatchRecords: 10})
	c := dial(t, fb.addr)
	ctx := context.Background()
	const n = 4
	var pend []*client.PendingAppend
	for i := 0; i < n; i++ {
		p, err := c.AppendAsync(ctx, shard, []record.Record{{Payload: []byte{byte('a' + i)}}}, nil)
		if err != nil {
			t.Fatal(err)
		}
		pend = append(pend, p)
	}
	var frames []wire.Frame
	for i := 0; i < n; i++ {
		f := <-fb.frames
		req, err := wire.DecodeAppend(f.Body)
		if err != nil || string(req.Records[0].Payload) != string(rune('a'+i)) {
			t.Fatalf("request %d: %q %v, want payload %q", i, req.Records[0].Payload, err, string(rune('a'+i)))
		}
		frames = append(frames, f)
	}
	nc := <-fb.conn
	for i := n - 1; i >= 0; i-- { // answer in reverse order
		f := frames[i]
		if i == 2 {
			body, _ := wire.EncodeError(&wire.Error{Code: wire.CodeOffsetMismatch, Message: "tail moved", Tail: 9}, wire.FeatureTrimTag)
			_ = wire.WriteFrame(nc, wire.Frame{Type: wire.MsgError, ReqID: f.ReqID, Body: body})
			continue
		}
		_ = wire.WriteFrame(nc, wire.Frame{Type: wire.MsgAppendOK, ReqID: f.ReqID,
			Body: wire.EncodeAppendOK(wire.AppendOK{First: uint64(10 + i), Tail: uint64(11 + i)})})
	}
	for i, p := range pend {
		ok, err := p.Wait(ctx)
		if i == 2 {
			if !errors.Is(err, record.ErrOffsetMismatch) || errors.Is(err, client.ErrUnknownOutcome) {
				t.Fatalf("append %d: %v, want the broker's offset mismatch", i, err)
			}
			continue
		}
		if err != nil || ok.First != uint64(10+i) {
			t.Fatalf("append %d: %+v %v, want first %d", i, ok, err, 10+i)
		}
		if again, err := p.Wait(ctx); err != nil || again != ok {
			t.Fatalf("append %d: second Wait %+v %v", i, again, err)
		}
	}
}

// TestAppendAsyncUnansweredIsUnknown: a Wait whose context ends first
// reports an unknown outcome, and so does every later Wait, without
// blocking.
func TestAppendAsyncUnansweredIsUnknown(t *testing.T) {
	fb := startFake(t, wire.HelloOK{Version: 1, Features: wire.FeatureTrimTag, MaxFrameSize: 1 << 20, MaxBatchRecords: 10})
	c := dial(t, fb.addr)
	p, err := c.AppendAsync(context.Background(), shard, []record.Record{{Payload: []byte("x")}}, nil)
	if err != nil {
		t.Fatal(err)
	}
	<-fb.frames
	ctx, cancel := context.WithTimeout(context.Background(), 50*time.Millisecond)
	defer cancel()
	if _, err := p.Wait(ctx); !errors.Is(err, client.ErrUnknownOutcome) || !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("Wait = %v, want an unknown outcome after the deadline", err)
	}
	if _, err := p.Wait(context.Background()); !errors.Is(err, client.ErrUnknownOutcome) {
		t.Fatalf("second Wait = %v, want the same unknown outcome", err)
	}
}

// TestLoneAppendsAndQueuedOnesKeepOrder: a caller's lone request is
// written on its own goroutine, the rest through the writer goroutine;
// either way one goroutine's appends reach the broker in the order made,
// here alternating lone synchronous appends with a pipelined pair.
func TestLoneAppendsAndQueuedOnesKeepOrder(t *testing.T) {
	fb := startFake(t, wire.HelloOK{Version: 1, Features: wire.FeatureTrimTag, MaxFrameSize: 1 << 20, MaxBatchRecords: 10})
	c := dial(t, fb.addr)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	var nc net.Conn
	next := byte('a')
	answer := func(want byte) {
		t.Helper()
		f := <-fb.frames
		req, err := wire.DecodeAppend(f.Body)
		if err != nil || req.Records[0].Payload[0] != want {
			t.Fatalf("got %q %v, want payload %q", req.Records[0].Payload, err, want)
		}
		if nc == nil {
			nc = <-fb.conn
		}
		_ = wire.WriteFrame(nc, wire.Frame{Type: wire.MsgAppendOK, ReqID: f.ReqID,
			Body: wire.EncodeAppendOK(wire.AppendOK{First: uint64(want), Tail: uint64(want) + 1})})
	}
	rec := func() []record.Record {
		r := []record.Record{{Payload: []byte{next}}}
		next++
		return r
	}
	for round := 0; round < 3; round++ {
		want := next
		done := make(chan error, 1)
		go func(r []record.Record) {
			ok, err := c.Append(ctx, shard, r, nil)
			if err == nil && ok.First != uint64(want) {
				err = fmt.Errorf("answer %+v, want first %d", ok, want)
			}
			done <- err
		}(rec())
		answer(want)
		if err := <-done; err != nil {
			t.Fatalf("synchronous append %q: %v", want, err)
		}
		p1, err := c.AppendAsync(ctx, shard, rec(), nil)
		if err != nil {
			t.Fatal(err)
		}
		p2, err := c.AppendAsync(ctx, shard, rec(), nil)
		if err != nil {
			t.Fatal(err)
		}
		answer(want + 1)
		answer(want + 2)
		for i, p := range []*client.PendingAppend{p1, p2} {
			if ok, err := p.Wait(ctx); err != nil || ok.First != uint64(want)+1+uint64(i) {
				t.Fatalf("pipelined append %d of round %d: %+v %v", i, round, ok, err)
			}
		}
	}
}
