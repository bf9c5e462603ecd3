package main

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"net"
	"strings"
	"testing"
	"time"

	"felix.dev/felix/broker/record"
	"felix.dev/felix/broker/wire"
)

// closingBroker serves one shard of one record at offset 5. Its first
// connection answers the first read empty (at the tail, Next 5) and then,
// like a broker's idle timeout, ends the connection with a connection-level
// error instead of answering the second; later connections answer every
// read. froms receives the start offset of every read, in order.
func closingBroker(t *testing.T, froms chan<- uint64) string {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = l.Close() })
	go func() {
		for conn := 0; ; conn++ {
			nc, err := l.Accept()
			if err != nil {
				return
			}
			go serveClosing(nc, conn == 0, froms)
		}
	}()
	return l.Addr().String()
}

func serveClosing(nc net.Conn, closeOnSecond bool, froms chan<- uint64) {
	defer nc.Close()
	br := bufio.NewReader(nc)
	if _, err := wire.ReadFrame(br, 1<<20); err != nil {
		return
	}
	body, _ := wire.EncodeHelloOK(wire.HelloOK{Version: 1, Features: wire.FeatureTrimTag, MaxFrameSize: 1 << 20, MaxBatchRecords: 100})
	if wire.WriteFrame(nc, wire.Frame{Type: wire.MsgHelloOK, Body: body}) != nil {
		return
	}
	for n := 0; ; n++ {
		f, err := wire.ReadFrame(br, 1<<20)
		if err != nil {
			return
		}
		req, err := wire.DecodeRead(f.Body)
		if err != nil {
			return
		}
		froms <- req.Offset
		if closeOnSecond && n == 1 {
			body, _ := wire.EncodeError(&wire.Error{Code: wire.CodeBadRequest, Message: "idle timeout"}, wire.FeatureTrimTag)
			_ = wire.WriteFrame(nc, wire.Frame{Type: wire.MsgError, Body: body})
			return
		}
		ok := wire.ReadOK{Next: 5}
		if !closeOnSecond && req.Offset <= 5 {
			ok = wire.ReadOK{Next: 6, Records: []record.Record{{Offset: 5, Epoch: 1, Payload: []byte("after the redial")}}}
		}
		body, _ := wire.EncodeReadOK(ok)
		if wire.WriteFrame(nc, wire.Frame{Type: wire.MsgReadOK, ReqID: f.ReqID, Body: body}) != nil {
			return
		}
	}
}

// TestReadFollowRedialsWhenTheBrokerClosesTheConnection: `felix read
// --follow` whose connection the broker closed dials again and reads on
// from the same position, so it prints the next record instead of exiting.
func TestReadFollowRedialsWhenTheBrokerClosesTheConnection(t *testing.T) {
	froms := make(chan uint64, 16)
	addr := closingBroker(t, froms)
	cmd := newReadCmd()
	var out bytes.Buffer
	cmd.SetOut(&out)
	cmd.SetErr(&out)
	cmd.SetArgs([]string{"--broker", addr, "--stream", "s", "--from", "latest", "--follow", "--limit", "1", "--timeout", "5s"})
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	if err := cmd.ExecuteContext(ctx); err != nil {
		t.Fatalf("read --follow after the broker closed the connection: %v\n%s", err, out.String())
	}
	var line readLine
	if err := json.Unmarshal([]byte(strings.TrimSpace(out.String())), &line); err != nil || line.Offset != 5 || line.Payload == nil ||
		*line.Payload != "after the redial" {
		t.Fatalf("printed %q (%v), want the record at 5", out.String(), err)
	}
	var got []uint64
	for len(froms) > 0 {
		got = append(got, <-froms)
	}
	// latest (0 on the wire), then 5 on the closed connection, then 5 again.
	if len(got) != 3 || got[1] != 5 || got[2] != 5 {
		t.Fatalf("reads started at %v, want [0 5 5]: the redial reads on from the same position", got)
	}
}
