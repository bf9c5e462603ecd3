package client_test

import (
	"bufio"
	"context"
	"errors"
	"net"
	"testing"
	"time"

	"felix.dev/felix/broker/client"
	"felix.dev/felix/broker/record"
	"felix.dev/felix/broker/wire"
)

// fakeBroker accepts one connection, answers the Hello with ok, and hands
// every later frame to the test.
type fakeBroker struct {
	addr   string
	frames chan wire.Frame
	conn   chan net.Conn
}

func startFake(t *testing.T, ok wire.HelloOK) *fakeBroker {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = l.Close() })
	fb := &fakeBroker{addr: l.Addr().String(), frames: make(chan wire.Frame, 16), conn: make(chan net.Conn, 1)}
	go func() {
		nc, err := l.Accept()
		if err != nil {
			return
		}
		t.Cleanup(func() { _ = nc.Close() })
		br := bufio.NewReader(nc)
		if _, err := wire.ReadFrame(br, 1<<20); err != nil {
			return
		}
		body, _ := wire.EncodeHelloOK(ok)
		_ = wire.WriteFrame(nc, wire.Frame{Type: wire.MsgHelloOK, Body: body})
		fb.conn <- nc
		for {
			f, err := wire.ReadFrame(br, 1<<20)
			if err != nil {
				close(fb.frames)
				return
			}
			fb.frames <- f
		}
	}()
	return fb
}

var shard = record.ShardID{Stream: "s", Shard: 1}

func dial(t *testing.T, addr string) *client.Client {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	c, err := client.Dial(ctx, addr, client.Options{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = c.Close() })
	return c
}

// TestFD1_UnansweredConditionalAppendIsUnknownAndNotRetried: a conditional
// append whose answer does not come in time fails with ErrUnknownOutcome,
// and the client sent it exactly once.
func TestFD1_UnansweredConditionalAppendIsUnknownAndNotRetried(t *testing.T) {
	fb := startFake(t, wire.HelloOK{Version: 1, Features: wire.FeatureTrimTag, MaxFrameSize: 1 << 20, MaxBatchRecords: 10})
	c := dial(t, fb.addr)
	ctx, cancel := context.WithTimeout(context.Background(), 100*time.Millisecond)
	defer cancel()
	tail := uint64(7)
	_, err := c.Append(ctx, shard, []record.Record{{Payload: []byte("x")}}, &tail)
	if !errors.Is(err, client.ErrUnknownOutcome) || !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("err = %v, want unknown outcome after the deadline", err)
	}
	f := <-fb.frames
	req, derr := wire.DecodeAppend(f.Body)
	if f.Type != wire.MsgAppend || derr != nil || req.ExpectTail == nil || *req.ExpectTail != 7 {
		t.Fatalf("broker got %v %+v %v", f.Type, req, derr)
	}
	select {
	case f := <-fb.frames:
		t.Fatalf("client sent a second frame (%v): a blind retry", f.Type)
	case <-time.After(200 * time.Millisecond):
	}
	// A late answer to the abandoned request is dropped; the connection
	// keeps working.
	nc := <-fb.conn
	_ = wire.WriteFrame(nc, wire.Frame{Type: wire.MsgAppendOK, ReqID: f.ReqID, Body: wire.EncodeAppendOK(wire.AppendOK{First: 7, Tail: 8})})
	go func() {
		f := <-fb.frames
		_ = wire.WriteFrame(nc, wire.Frame{Type: wire.MsgDescribeOK, ReqID: f.ReqID, Body: wire.EncodeDescribeOK(wire.DescribeOK{Tail: 8, Committed: 8})})
	}()
	d, err := c.Describe(context.Background(), shard)
	if err != nil || d.Tail != 8 {
		t.Fatalf("describe after a dropped answer: %+v %v", d, err)
	}
}

func TestBrokenConnectionFailsPendingCalls(t *testing.T) {
	fb := startFake(t, wire.HelloOK{Version: 1, MaxFrameSize: 1 << 20})
	c := dial(t, fb.addr)
	appendErr, readErr := make(chan error, 1), make(chan error, 1)
	go func() {
		_, err := c.Append(context.Background(), shard, []record.Record{{Payload: []byte("x")}}, nil)
		appendErr <- err
	}()
	go func() {
		_, err := c.Read(context.Background(), wire.ReadRequest{Shard: shard})
		readErr <- err
	}()
	<-fb.frames
	<-fb.frames
	// A connection-level error from the broker ends the connection.
	nc := <-fb.conn
	body, _ := wire.EncodeError(&wire.Error{Code: wire.CodeRecordTooLarge, Message: "frame too large", Limit: 5}, 0)
	_ = wire.WriteFrame(nc, wire.Frame{Type: wire.MsgError, Body: body})
	for name, ch := range map[string]chan error{"append": appendErr, "read": readErr} {
		err := <-ch
		var we *wire.Error
		if !errors.Is(err, client.ErrClosed) || !errors.As(err, &we) || we.Code != wire.CodeRecordTooLarge {
			t.Fatalf("pending %s error = %v", name, err)
		}
		if got := errors.Is(err, client.ErrUnknownOutcome); got != (name == "append") {
			t.Fatalf("%s: unknown outcome = %v", name, got)
		}
	}
	if _, err := c.Describe(context.Background(), shard); !errors.Is(err, client.ErrClosed) {
		t.Fatalf("call after the connection ended: %v", err)
	}
}

func TestHandshakeRefusesFeaturesNotOffered(t *testing.T) {
	fb := startFake(t, wire.HelloOK{Version: 1, Features: wire.FeatureStorageID, MaxFrameSize: 1 << 20})
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	if _, err := client.Dial(ctx, fb.addr, client.Options{}); !errors.Is(err, wire.ErrMalformed) {
		t.Fatalf("Dial accepted a feature it did not offer: %v", err)
	}
}

// TestClosedByBrokerConditionalWritesAreNotSent: once the broker closed
// the connection with a connection-level error (its idle timeout), a
// conditional append or trim fails with ErrClosed and not
// ErrUnknownOutcome: the contract that lets a caller send it again on a
// new connection.
func TestClosedByBrokerConditionalWritesAreNotSent(t *testing.T) {
	fb := startFake(t, wire.HelloOK{Version: 1, Features: wire.FeatureTrimTag, MaxFrameSize: 1 << 20, MaxBatchRecords: 10})
	c := dial(t, fb.addr)
	nc := <-fb.conn
	body, _ := wire.EncodeError(&wire.Error{Code: wire.CodeBadRequest, Message: "idle timeout"}, 0)
	_ = wire.WriteFrame(nc, wire.Frame{Type: wire.MsgError, Body: body})
	_ = nc.Close()
	if _, ok := <-fb.frames; ok {
		t.Fatal("the fake broker read a frame before any call")
	}
	// The client learns of the close on its read loop; a call made before
	// it did may have been written to the dead socket, so wait for a
	// call that fails without being sent (an append would be unknown).
	deadline := time.Now().Add(5 * time.Second)
	for {
		_, err := c.Describe(context.Background(), shard)
		if errors.Is(err, client.ErrClosed) {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("describe on a connection the broker closed: %v, want ErrClosed", err)
		}
	}
	tail := uint64(3)
	_, aerr := c.Append(context.Background(), shard, []record.Record{{Payload: []byte("x")}}, &tail)
	_, terr := c.Trim(context.Background(), wire.TrimRequest{Shard: shard, Floor: 1, ExpectTail: tail})
	_, perr := c.AppendAsync(context.Background(), shard, []record.Record{{Payload: []byte("y")}}, &tail)
	for name, err := range map[string]error{"append": aerr, "trim": terr, "append async": perr} {
		if !errors.Is(err, client.ErrClosed) || errors.Is(err, client.ErrUnknownOutcome) {
			t.Fatalf("%s after the broker closed: %v, want ErrClosed and not ErrUnknownOutcome", name, err)
		}
		var we *wire.Error
		if !errors.As(err, &we) || we.Code != wire.CodeBadRequest {
			t.Fatalf("%s: %v does not carry the broker's reason", name, err)
		}
	}
}
