package server

import (
	"testing"
	"time"

	"felix.dev/felix/broker/wire"
)

// TestFrameBudgetHeaderOnlyHogs: sixteen connections that each announce a
// maximum-size Append and send nothing more hold none of the frame budget
// (a body is charged as it arrives), so with the default options another
// client's Describe is answered at once and a replication frame is still
// handed on.
func TestFrameBudgetHeaderOnlyHogs(t *testing.T) {
	h := captureRepl{pcs: make(chan PeerConn, 1)}
	b := startBroker(t, Options{Replication: h, InsecurePeersOnClientPort: true})
	const hogs = 16
	for i := 0; i < hogs; i++ {
		r := dialRaw(t, b.addr)
		r.hello(0)
		if _, err := r.nc.Write(frameHeader(wire.MsgAppend, 1, wire.DefaultMaxFrameSize-9)); err != nil {
			t.Fatal(err)
		}
	}
	// Until the broker has read every hog's header (old code: admitted
	// them against the budget).
	eventually(t, 5*time.Second, "hogs' headers read", func() bool {
		return b.metric("felix_broker_frames_in_progress") >= hogs ||
			b.metric("felix_broker_frame_memory_bytes") >= hogs*wire.DefaultMaxFrameSize
	})
	start := time.Now()
	r := dialRaw(t, b.addr)
	r.hello(0)
	r.send(wire.MsgDescribe, 7, describeBody(t, "orders"))
	if f := r.recv(); f.Type != wire.MsgDescribeOK || f.ReqID != 7 {
		e := decodeErr(t, f, 0)
		t.Fatalf("describe while %d hogs sent only headers: %v code=%v msg=%q", hogs, f.Type, e.Code, e.Message)
	}
	if d := time.Since(start); d > 2*time.Second {
		t.Fatalf("describe answered after %v", d)
	}
	p := dialRaw(t, b.addr)
	p.hello(wire.FeatureStorageID)
	p.send(wire.MsgShip, 0, []byte{1})
	select {
	case <-h.pcs:
	case <-time.After(2 * time.Second):
		t.Fatal("replication frame not handed on while client frames were announced")
	}
	if held := b.metric("felix_broker_frame_memory_bytes"); held != 0 {
		t.Fatalf("header-only frames hold %v bytes of the frame budget, want 0", held)
	}
}

// TestFrameBudgetReplicationHasItsOwn: client frames that fill the client
// frame budget with real bytes never stall a replication frame.
func TestFrameBudgetReplicationHasItsOwn(t *testing.T) {
	const frame = 256 << 10
	h := captureRepl{pcs: make(chan PeerConn, 1)}
	b := startBroker(t, Options{Replication: h, InsecurePeersOnClientPort: true, MaxFrameSize: frame, MaxFrameMemory: 1,
		FrameMemoryWait: 5 * time.Second})
	hog := dialRaw(t, b.addr)
	hog.hello(0)
	// All but the last byte: the hog holds the whole client budget.
	if _, err := hog.nc.Write(append(frameHeader(wire.MsgAppend, 1, frame-5), make([]byte, frame-6)...)); err != nil {
		t.Fatal(err)
	}
	eventually(t, 5*time.Second, "the hog holds the client budget", func() bool {
		return b.metric("felix_broker_frame_memory_bytes") == frame+4
	})
	p := dialRaw(t, b.addr)
	p.hello(wire.FeatureStorageID)
	p.send(wire.MsgShip, 0, make([]byte, 128<<10))
	select {
	case <-h.pcs:
	case <-time.After(2 * time.Second):
		t.Fatal("replication frame waited on the client frame budget")
	}
}
