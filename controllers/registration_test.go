package controllers_test

import (
	"context"
	"errors"
	"io"
	"net"
	"net/url"
	"sync"
	"testing"
	"time"

	"k8s.io/client-go/rest"

	"felix.dev/felix/broker/controlplane"
)

// TestID4_RegistrationGrantsNextIncarnation: the operator grants
// seenIncarnation+1, records the storage id, address and time, clears the
// request, and emits StorageIDRotated when the id changes.
func TestID4_RegistrationGrantsNextIncarnation(t *testing.T) {
	ns := namespace(t)
	create(t, fastCluster(ns, "reg", 1))
	waitForBrokers(t, ns, "reg", 1)
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	cp := newClient(t, suite.env.Config, ns, "reg", "reg-0")

	seen, err := cp.CurrentIncarnation(ctx)
	if err != nil || seen != 0 {
		t.Fatalf("CurrentIncarnation = %d, %v; want 0 for a broker never registered", seen, err)
	}
	first := newStorageID()
	inc, err := cp.Register(ctx, first, seen, "reg-0.reg-brokers:7100")
	if err != nil || inc != 1 {
		t.Fatalf("Register = %d, %v; want 1", inc, err)
	}
	b := getBroker(t, ns, "reg-0")
	if b.Status.Incarnation != 1 || b.Status.StorageID != first || b.Status.RegistrationRequest != nil ||
		b.Status.RegisteredAt == nil || b.Status.Address != "reg-0.reg-brokers:7100" {
		t.Fatalf("registration record: %+v", b.Status)
	}
	eventually(t, 10*time.Second, "Registered event", func() (bool, string) { return hasEvent(ns, "reg-0", "Registered") })

	// A restart that keeps its id, then one that rotated it [ID-3].
	seen, _ = cp.CurrentIncarnation(ctx)
	if inc, err := cp.Register(ctx, first, seen, ""); err != nil || inc != 2 {
		t.Fatalf("re-register = %d, %v; want 2", inc, err)
	}
	second := newStorageID()
	if inc, err := cp.Register(ctx, second, 2, ""); err != nil || inc != 3 {
		t.Fatalf("register rotated id = %d, %v; want 3", inc, err)
	}
	if b := getBroker(t, ns, "reg-0"); b.Status.StorageID != second {
		t.Fatalf("storage id %s, want %s", b.Status.StorageID, second)
	}
	eventually(t, 10*time.Second, "StorageIDRotated event", func() (bool, string) { return hasEvent(ns, "reg-0", "StorageIDRotated") })

	// A malformed storage id is rejected by the API, not retried forever.
	if _, err := cp.Register(ctx, "not-hex", 3, ""); err == nil || errors.Is(err, controlplane.ErrRegistrationRefused) || cp.Holding() {
		t.Fatalf("malformed id: err = %v, holding %v; want a rejection", err, cp.Holding())
	}

	// A start that read an old incarnation is refused.
	_, err = cp.Register(ctx, newStorageID(), 1, "")
	var refused *controlplane.RefusedError
	if !errors.Is(err, controlplane.ErrRegistrationRefused) || !errors.As(err, &refused) || refused.Current != 3 {
		t.Fatalf("stale registration: err = %v; want RefusedError with Current 3", err)
	}
}

// TestID4_RacingRegistrationsOnlyOneWins: two starts that read the same
// incarnation race; exactly one is granted.
func TestID4_RacingRegistrationsOnlyOneWins(t *testing.T) {
	ns := namespace(t)
	create(t, fastCluster(ns, "race", 1))
	waitForBrokers(t, ns, "race", 1)
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	for round := 0; round < 3; round++ {
		a := newClient(t, suite.env.Config, ns, "race", "race-0")
		b := newClient(t, suite.env.Config, ns, "race", "race-0")
		seen, err := a.CurrentIncarnation(ctx)
		if err != nil {
			t.Fatal(err)
		}
		var wg sync.WaitGroup
		errs := make([]error, 2)
		incs := make([]int64, 2)
		for i, cp := range []*controlplane.Client{a, b} {
			wg.Add(1)
			go func() {
				defer wg.Done()
				incs[i], errs[i] = cp.Register(ctx, newStorageID(), seen, "")
			}()
		}
		wg.Wait()
		won := 0
		for i := range errs {
			switch {
			case errs[i] == nil:
				won++
				if incs[i] != seen+1 {
					t.Errorf("winner got %d, want %d", incs[i], seen+1)
				}
			case !errors.Is(errs[i], controlplane.ErrRegistrationRefused):
				t.Errorf("loser: %v; want ErrRegistrationRefused", errs[i])
			}
		}
		if won != 1 {
			t.Fatalf("round %d: %d starts won (errors %v); want exactly 1", round, won, errs)
		}
	}
}

// TestID4_HoldsWhileAPIServerUnreachable: with the API server unreachable
// the broker holds (Holding true: /ready down, /live up) and opens
// nothing; once it answers, CurrentIncarnation returns and registration
// proceeds.
func TestID4_HoldsWhileAPIServerUnreachable(t *testing.T) {
	ns := namespace(t)
	create(t, fastCluster(ns, "hold", 1))
	waitForBrokers(t, ns, "hold", 1)

	// The broker's client points at a port nobody listens on yet; later a
	// TCP relay to the real API server opens on it (TLS stays end to end).
	real, err := url.Parse(suite.env.Config.Host)
	if err != nil {
		t.Fatal(err)
	}
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := l.Addr().String()
	_ = l.Close()
	cfg := rest.CopyConfig(suite.env.Config)
	cfg.Host = "https://" + addr
	cp := newClient(t, cfg, ns, "hold", "hold-0")

	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	type answer struct {
		inc int64
		err error
	}
	got := make(chan answer, 1)
	go func() {
		inc, err := cp.CurrentIncarnation(ctx)
		got <- answer{inc, err}
	}()
	eventually(t, 10*time.Second, "holding", func() (bool, string) { return cp.Holding(), "not holding" })
	select {
	case a := <-got:
		t.Fatalf("CurrentIncarnation returned %+v while the API server was unreachable", a)
	case <-time.After(500 * time.Millisecond):
	}

	stop := relay(t, addr, real.Host)
	defer stop()
	select {
	case a := <-got:
		if a.err != nil || a.inc != 0 {
			t.Fatalf("CurrentIncarnation = %d, %v", a.inc, a.err)
		}
	case <-time.After(15 * time.Second):
		t.Fatal("CurrentIncarnation still holding after the API server came back")
	}
	if cp.Holding() {
		t.Fatal("Holding still true after an answer")
	}
	if inc, err := cp.Register(ctx, newStorageID(), 0, ""); err != nil || inc != 1 {
		t.Fatalf("Register after the outage = %d, %v", inc, err)
	}
}

// relay listens on addr and forwards each connection to target.
func relay(t *testing.T, addr, target string) func() {
	t.Helper()
	var l net.Listener
	var err error
	for i := 0; i < 50; i++ {
		if l, err = net.Listen("tcp", addr); err == nil {
			break
		}
		time.Sleep(20 * time.Millisecond)
	}
	if err != nil {
		t.Fatalf("relay listen %s: %v", addr, err)
	}
	var wg sync.WaitGroup
	go func() {
		for {
			c, err := l.Accept()
			if err != nil {
				return
			}
			wg.Add(1)
			go func() {
				defer wg.Done()
				defer c.Close()
				u, err := net.Dial("tcp", target)
				if err != nil {
					return
				}
				defer u.Close()
				done := make(chan struct{}, 2)
				go func() { _, _ = io.Copy(u, c); done <- struct{}{} }()
				go func() { _, _ = io.Copy(c, u); done <- struct{}{} }()
				<-done
			}()
		}
	}()
	return func() { _ = l.Close() }
}
