package main

import (
	"bufio"
	"context"
	"errors"
	"net"
	"os"
	"testing"
	"time"

	"felix.dev/felix/broker/client"
	"felix.dev/felix/broker/wire"
)

// holdingBroker accepts connections, does the handshake and holds every
// append unanswered for hold; it then reports on counts how many appends
// the connection had sent, answers them, and answers every later append
// at once.
func holdingBroker(t *testing.T, hold time.Duration, counts chan<- int) string {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = l.Close() })
	go func() {
		for {
			nc, err := l.Accept()
			if err != nil {
				return
			}
			go serveHolding(nc, hold, counts)
		}
	}()
	return l.Addr().String()
}

func serveHolding(nc net.Conn, hold time.Duration, counts chan<- int) {
	defer nc.Close()
	br := bufio.NewReader(nc)
	if _, err := wire.ReadFrame(br, 1<<20); err != nil {
		return
	}
	body, _ := wire.EncodeHelloOK(wire.HelloOK{Version: 1, MaxFrameSize: 1 << 20, MaxBatchRecords: 100})
	if wire.WriteFrame(nc, wire.Frame{Type: wire.MsgHelloOK, Body: body}) != nil {
		return
	}
	answer := func(f wire.Frame) error {
		return wire.WriteFrame(nc, wire.Frame{Type: wire.MsgAppendOK, ReqID: f.ReqID, Body: wire.EncodeAppendOK(wire.AppendOK{Tail: 1})})
	}
	var held []wire.Frame
	_ = nc.SetReadDeadline(time.Now().Add(hold))
	for {
		f, err := wire.ReadFrame(br, 1<<20)
		if errors.Is(err, os.ErrDeadlineExceeded) {
			break
		}
		if err != nil {
			return
		}
		held = append(held, f)
	}
	counts <- len(held)
	_ = nc.SetReadDeadline(time.Time{})
	for _, f := range held {
		if answer(f) != nil {
			return
		}
	}
	for {
		f, err := wire.ReadFrame(br, 1<<20)
		if err != nil || answer(f) != nil {
			return
		}
	}
}

// TestBenchKeepsPipelineInFlight: `felix bench` keeps exactly --pipeline
// appends unanswered on each connection (the peer harness's window), one
// for a synchronous producer, and counts the answered ones.
func TestBenchKeepsPipelineInFlight(t *testing.T) {
	for _, pipeline := range []int{1, 2, 8} {
		counts := make(chan int, 4)
		addr := holdingBroker(t, 200*time.Millisecond, counts)
		f := benchFlags{broker: addr, stream: "bench", shards: 1, connections: 2, pipeline: pipeline,
			batch: 1, recordSize: 16, duration: 500 * time.Millisecond}
		res, err := runBench(context.Background(), f, client.Options{})
		if err != nil {
			t.Fatalf("pipeline %d: %v", pipeline, err)
		}
		for i := 0; i < f.connections; i++ {
			if n := <-counts; n != pipeline {
				t.Fatalf("pipeline %d: a connection had %d appends unanswered, want %d", pipeline, n, pipeline)
			}
		}
		if res.Errors != 0 || res.Records == 0 || res.Requests != res.Records {
			t.Fatalf("pipeline %d: %+v", pipeline, res)
		}
	}
}
