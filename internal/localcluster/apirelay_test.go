package localcluster

import (
	"errors"
	"io"
	"net"
	"strings"
	"testing"
	"time"
)

// echoServer accepts connections and echoes what it reads.
func echoServer(t *testing.T) string {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = ln.Close() })
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			go func() { _, _ = io.Copy(c, c); _ = c.Close() }()
		}
	}()
	return ln.Addr().String()
}

// roundTrip sends a line through addr and reads it back.
func roundTrip(addr string) error {
	c, err := net.DialTimeout("tcp", addr, time.Second)
	if err != nil {
		return err
	}
	defer c.Close()
	_ = c.SetDeadline(time.Now().Add(2 * time.Second))
	if _, err := c.Write([]byte("ping\n")); err != nil {
		return err
	}
	buf := make([]byte, 5)
	if _, err := io.ReadFull(c, buf); err != nil {
		return err
	}
	if string(buf) != "ping\n" {
		return errors.New("echo mismatch: " + string(buf))
	}
	return nil
}

// TestAPIRelay_ExtraAddressFollowsDownAndUp: an address added with
// listenAlso (the bridge gateway in bridge mode; another loopback address
// here) serves on the relay's port, and goes down and comes back up with
// the loopback address.
func TestAPIRelay_ExtraAddressFollowsDownAndUp(t *testing.T) {
	r, err := newAPIRelay(echoServer(t))
	if err != nil {
		t.Fatal(err)
	}
	defer r.down()
	if err := r.listenAlso("127.0.0.3"); err != nil {
		t.Fatal(err)
	}
	_, port, _ := net.SplitHostPort(r.addr())
	extra := net.JoinHostPort("127.0.0.3", port)
	if len(r.addrs) != 2 || r.addrs[1] != extra {
		t.Fatalf("relay addresses %v, want the loopback one and %s", r.addrs, extra)
	}
	for _, a := range r.addrs {
		if err := roundTrip(a); err != nil {
			t.Fatalf("through %s while up: %v", a, err)
		}
	}
	r.down()
	for _, a := range r.addrs {
		if err := roundTrip(a); err == nil {
			t.Fatalf("through %s while down: a connection got through", a)
		}
	}
	if err := r.listenAlso("127.0.0.4"); !errors.Is(err, errRelayDown) {
		t.Fatalf("listenAlso while down: %v, want errRelayDown", err)
	}
	if err := r.up(); err != nil {
		t.Fatal(err)
	}
	for _, a := range r.addrs {
		if err := roundTrip(a); err != nil {
			t.Fatalf("through %s after up: %v", a, err)
		}
	}
	if strings.Count(strings.Join(r.addrs, ","), ":"+port) != 2 {
		t.Fatalf("addresses changed port: %v", r.addrs)
	}
}
