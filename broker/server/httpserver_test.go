package server

import (
	"bufio"
	"errors"
	"io"
	"net"
	"net/http"
	"testing"
	"time"
)

// TestHTTPServerClosesIdleKeepAlive [M6]: the broker's HTTP servers carry
// read, write and idle timeouts, and a keep-alive connection left idle is
// closed by the server (the idle timeout shortened for the test).
func TestHTTPServerClosesIdleKeepAlive(t *testing.T) {
	srv := NewHTTPServer(HealthHandler(func() error { return nil }))
	if srv.IdleTimeout != HTTPIdleTimeout || srv.ReadTimeout != HTTPReadTimeout || srv.WriteTimeout != HTTPWriteTimeout ||
		srv.ReadHeaderTimeout != HTTPReadHeaderTimeout {
		t.Fatalf("timeouts idle %v read %v write %v header %v", srv.IdleTimeout, srv.ReadTimeout, srv.WriteTimeout, srv.ReadHeaderTimeout)
	}
	srv.IdleTimeout = 200 * time.Millisecond
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	go func() { _ = srv.Serve(LimitHTTPListener(l, 0)) }()
	t.Cleanup(func() { _ = srv.Close() })
	nc, err := net.Dial("tcp", l.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	defer nc.Close()
	_ = nc.SetDeadline(time.Now().Add(10 * time.Second))
	if _, err := io.WriteString(nc, "GET /live HTTP/1.1\r\nHost: x\r\n\r\n"); err != nil {
		t.Fatal(err)
	}
	br := bufio.NewReader(nc)
	resp, err := http.ReadResponse(br, nil)
	if err != nil {
		t.Fatal(err)
	}
	_, _ = io.Copy(io.Discard, resp.Body)
	_ = resp.Body.Close()
	if resp.StatusCode != http.StatusOK || resp.Close {
		t.Fatalf("status %d close %v", resp.StatusCode, resp.Close)
	}
	start := time.Now()
	if _, err := br.ReadByte(); !errors.Is(err, io.EOF) {
		t.Fatalf("idle keep-alive connection: %v, want closed (EOF)", err)
	}
	if d := time.Since(start); d > 5*time.Second {
		t.Fatalf("closed after %v", d)
	}
}

// TestHTTPListenerCap [M6]: a capped listener serves no more connections
// than its cap at once.
func TestHTTPListenerCap(t *testing.T) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	ll := LimitHTTPListener(l, 1)
	defer ll.Close()
	accepted := make(chan net.Conn, 2)
	go func() {
		for {
			c, err := ll.Accept()
			if err != nil {
				return
			}
			accepted <- c
		}
	}()
	for range 2 {
		c, err := net.Dial("tcp", l.Addr().String())
		if err != nil {
			t.Fatal(err)
		}
		defer c.Close()
	}
	first := <-accepted
	select {
	case <-accepted:
		t.Fatal("a second connection was accepted over the cap")
	case <-time.After(200 * time.Millisecond):
	}
	_ = first.Close()
	select {
	case c := <-accepted:
		_ = c.Close()
	case <-time.After(5 * time.Second):
		t.Fatal("the waiting connection was not accepted after the first closed")
	}
}
