package felixd

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/go-logr/logr"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	clocktesting "k8s.io/utils/clock/testing"
)

func newTestLease(t *testing.T, name, id string, clk *clocktesting.FakeClock) *Lease {
	t.Helper()
	cs, err := kubernetes.NewForConfig(apiServer(t).Config)
	if err != nil {
		t.Fatal(err)
	}
	l, err := NewLease(LeaseConfig{Client: cs.CoordinationV1(), Namespace: "default", Name: name, Identity: id,
		LeaseDuration: 10 * time.Second, RenewDeadline: 5 * time.Second, RetryPeriod: time.Second, Clock: clk, Logger: logr.Discard()})
	if err != nil {
		t.Fatal(err)
	}
	return l
}

// The epoch is the lease's transitions count after each acquisition: 1 for
// the creator, one more for every takeover; a takeover waits a lease
// duration on the taker's own clock since it last saw the lease change.
func TestLease_EpochMonotonicPerWorkload(t *testing.T) {
	ctx := context.Background()
	clk := clocktesting.NewFakeClock(time.Unix(1_000_000, 0))
	a := newTestLease(t, "lease-epochs", "a", clk)
	b := newTestLease(t, "lease-epochs", "b", clk)

	if ok, err := a.TryAcquire(ctx); !ok || err != nil || a.Epoch() != 1 {
		t.Fatalf("a: ok %v err %v epoch %d, want epoch 1", ok, err, a.Epoch())
	}
	if ok, err := b.TryAcquire(ctx); ok || err != nil {
		t.Fatalf("b took a held lease: %v %v", ok, err)
	}
	clk.Step(6 * time.Second)
	if err := a.Renew(ctx); err != nil {
		t.Fatalf("a renew: %v", err)
	}
	clk.Step(6 * time.Second) // 12s since b first looked, 6s since a renewed
	if ok, _ := b.TryAcquire(ctx); ok {
		t.Fatal("b took the lease 6s after a renewed it (duration 10s)")
	}
	clk.Step(11 * time.Second) // a frozen: no renewal for 11s
	if ok, err := b.TryAcquire(ctx); !ok || err != nil || b.Epoch() != 2 {
		t.Fatalf("b: ok %v err %v epoch %d, want epoch 2", ok, err, b.Epoch())
	}
	if err := a.Renew(ctx); !errors.Is(err, ErrLeaseLost) {
		t.Fatalf("a renew after the takeover: %v, want ErrLeaseLost", err)
	}
	// A clean release lets the next holder in at once, at a new epoch.
	if err := b.Release(ctx); err != nil {
		t.Fatal(err)
	}
	if ok, err := a.TryAcquire(ctx); !ok || err != nil || a.Epoch() != 3 {
		t.Fatalf("a again: ok %v err %v epoch %d, want epoch 3", ok, err, a.Epoch())
	}
	if err := b.Renew(ctx); !errors.Is(err, ErrLeaseLost) {
		t.Fatalf("b renew after release: %v", err)
	}
}

// A renewal that keeps failing for a transient reason gives the lease up
// once RenewDeadline has passed since the last successful renewal.
func TestLease_RenewDeadline(t *testing.T) {
	ctx := context.Background()
	clk := clocktesting.NewFakeClock(time.Unix(2_000_000, 0))
	a := newTestLease(t, "lease-deadline", "a", clk)
	if ok, err := a.TryAcquire(ctx); !ok || err != nil {
		t.Fatalf("acquire: %v %v", ok, err)
	}
	unreachable, err := kubernetes.NewForConfig(&rest.Config{Host: "http://127.0.0.1:1", Timeout: time.Second})
	if err != nil {
		t.Fatal(err)
	}
	a.cfg.Client = unreachable.CoordinationV1()
	clk.Step(2 * time.Second)
	if err := a.Renew(ctx); err == nil || errors.Is(err, ErrLeaseLost) {
		t.Fatalf("renew 2s in: %v, want a transient error", err)
	}
	clk.Step(4 * time.Second) // 6s since the last renewal, deadline 5s
	if err := a.Renew(ctx); !errors.Is(err, ErrLeaseLost) {
		t.Fatalf("renew past the deadline: %v, want ErrLeaseLost", err)
	}
}
