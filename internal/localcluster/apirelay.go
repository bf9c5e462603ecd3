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
// refused, on the same addresses, until it is opened again.
type apiRelay struct {
	addrs  []string // 127.0.0.1:port first, then e.g. a bridge gateway on the same port; fixed
	target string   // the API server's host:port

	mu    sync.Mutex
	lns   []net.Listener    // one per address; nil while down
	conns map[net.Conn]bool // both ends of every relayed connection
	wg    sync.WaitGroup    // accept loops
}

// newAPIRelay listens on a free loopback port and relays to target.
func newAPIRelay(target string) (*apiRelay, error) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return nil, fmt.Errorf("localcluster: api relay: %w", err)
	}
	r := &apiRelay{addrs: []string{ln.Addr().String()}, target: target, conns: map[net.Conn]bool{}}
	r.mu.Lock()
	r.lns = []net.Listener{ln}
	r.mu.Unlock()
	r.serve(ln)
	return r, nil
}

// addr is the relay's loopback address.
func (r *apiRelay) addr() string { return r.addrs[0] }

// listenAlso makes the relay listen on host too, on the same port as on
// the loopback address (so a kubeconfig for the loopback address reaches
// it with only the host changed). The relay must be up; down and up close
// and reopen this address with the others.
func (r *apiRelay) listenAlso(host string) error {
	_, port, err := net.SplitHostPort(r.addr())
	if err != nil {
		return fmt.Errorf("localcluster: api relay: %w", err)
	}
	addr := net.JoinHostPort(host, port)
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.lns == nil {
		return fmt.Errorf("localcluster: api relay: listen on %s: %w", addr, errRelayDown)
	}
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		return fmt.Errorf("localcluster: api relay: %w", err)
	}
	r.addrs = append(r.addrs, addr)
	r.lns = append(r.lns, ln)
	r.serve(ln)
	return nil
}

// serve runs the accept loop of ln.
func (r *apiRelay) serve(ln net.Listener) {
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
	if r.lns == nil { // went down meanwhile
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

// down closes the listeners and cuts every relayed connection. Idempotent.
func (r *apiRelay) down() {
	r.mu.Lock()
	lns := r.lns
	r.lns = nil
	for c := range r.conns {
		_ = c.Close()
	}
	r.mu.Unlock()
	for _, ln := range lns {
		_ = ln.Close()
	}
	if lns != nil {
		r.wg.Wait()
	}
}

// up listens again on the same addresses. Idempotent.
func (r *apiRelay) up() error {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.lns != nil {
		return nil
	}
	var lns []net.Listener
	for _, a := range r.addrs {
		ln, err := net.Listen("tcp", a)
		if err != nil {
			for _, l := range lns {
				_ = l.Close()
			}
			return fmt.Errorf("localcluster: api relay: listen again on %s: %w", a, err)
		}
		lns = append(lns, ln)
	}
	r.lns = lns
	for _, ln := range lns {
		r.serve(ln)
	}
	return nil
}

// errRelayDown is returned by listenAlso while the relay is down.
var errRelayDown = errors.New("relay is down")

// errClosedRelay is returned by APIServerUp on a stopped cluster.
var errClosedRelay = errors.New("localcluster: cluster stopped")
