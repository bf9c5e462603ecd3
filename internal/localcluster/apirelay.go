package localcluster

import (
	"errors"
	"fmt"
	"io"
	"net"
	"sync"
)

// apiRelay forwards TCP connections from its own port to the API server.
// Every component of the local cluster except the test's own client (the
// operator, the podrunner, the snapshot controller and every pod) reaches
// the API server through it, so closing it is, for all of them, the API
// server going down: established connections are cut and new ones are
// refused, on the same address, until it is opened again.
type apiRelay struct {
	addr   string // 127.0.0.1:port, fixed for the relay's life
	target string // the API server's host:port

	mu    sync.Mutex
	ln    net.Listener      // nil while down
	conns map[net.Conn]bool // both ends of every relayed connection
	wg    sync.WaitGroup    // accept loops
}

// newAPIRelay listens on a free loopback port and relays to target.
func newAPIRelay(target string) (*apiRelay, error) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return nil, fmt.Errorf("localcluster: api relay: %w", err)
	}
	r := &apiRelay{addr: ln.Addr().String(), target: target, conns: map[net.Conn]bool{}}
	r.serve(ln)
	return r, nil
}

// serve runs the accept loop of ln; the caller has set nothing yet.
func (r *apiRelay) serve(ln net.Listener) {
	r.mu.Lock()
	r.ln = ln
	r.mu.Unlock()
	r.wg.Add(1)
	go func() {
		defer r.wg.Done()
		for {
			in, err := ln.Accept()
			if err != nil {
				return
			}
			go r.relay(in)
		}
	}()
}

func (r *apiRelay) relay(in net.Conn) {
	out, err := net.Dial("tcp", r.target)
	if err != nil {
		_ = in.Close()
		return
	}
	r.mu.Lock()
	if r.ln == nil { // went down meanwhile
		r.mu.Unlock()
		_ = in.Close()
		_ = out.Close()
		return
	}
	r.conns[in], r.conns[out] = true, true
	r.mu.Unlock()
	done := func() {
		_ = in.Close()
		_ = out.Close()
		r.mu.Lock()
		delete(r.conns, in)
		delete(r.conns, out)
		r.mu.Unlock()
	}
	go func() { _, _ = io.Copy(out, in); done() }()
	_, _ = io.Copy(in, out)
	done()
}

// down closes the listener and cuts every relayed connection. Idempotent.
func (r *apiRelay) down() {
	r.mu.Lock()
	ln := r.ln
	r.ln = nil
	for c := range r.conns {
		_ = c.Close()
	}
	r.mu.Unlock()
	if ln != nil {
		_ = ln.Close()
		r.wg.Wait()
	}
}

// up listens again on the same address. Idempotent.
func (r *apiRelay) up() error {
	r.mu.Lock()
	isUp := r.ln != nil
	r.mu.Unlock()
	if isUp {
		return nil
	}
	ln, err := net.Listen("tcp", r.addr)
	if err != nil {
		return fmt.Errorf("localcluster: api relay: listen again on %s: %w", r.addr, err)
	}
	r.serve(ln)
	return nil
}

// errClosedRelay is returned by APIServerUp on a stopped cluster.
var errClosedRelay = errors.New("localcluster: cluster stopped")
