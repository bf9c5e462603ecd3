package felixd

import (
	"context"
	"errors"
	"strconv"
	"testing"
	"time"

	"github.com/go-logr/logr"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"

	"felix.dev/felix/broker/logstore"
)

// waitFor polls cond until it holds or the deadline passes.
func waitFor(t *testing.T, what string, d time.Duration, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(d)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out after %v waiting for %s", d, what)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// Run end to end in one process: a counter runs under the lease, snapshots
// and trims; it stops cleanly (releasing the lease); a second run takes
// over at the next epoch, rebuilds the counter from the latest snapshot
// plus the outputs after it, and continues the count.
func TestRun_CounterSurvivesHandover(t *testing.T) {
	cs, err := kubernetes.NewForConfig(apiServer(t).Config)
	if err != nil {
		t.Fatal(err)
	}
	l, sl := newStoreLog(t, logstore.Options{})
	run := func(id string) (*Counter, context.CancelFunc, chan error) {
		lease, err := NewLease(LeaseConfig{Client: cs.CoordinationV1(), Namespace: "default", Name: "run-handover", Identity: id,
			LeaseDuration: 5 * time.Second, RenewDeadline: 3 * time.Second, RetryPeriod: 200 * time.Millisecond, Logger: logr.Discard()})
		if err != nil {
			t.Fatal(err)
		}
		w := &Counter{}
		ctx, cancel := context.WithCancel(context.Background())
		done := make(chan error, 1)
		go func() {
			done <- Run(ctx, RunConfig{Lease: lease, Log: sl, Workload: w, SnapshotEvery: 5, StepInterval: 5 * time.Millisecond, Logger: logr.Discard()})
		}()
		return w, cancel, done
	}
	_, cancel1, done1 := run("first")
	waitFor(t, "a snapshot trim", 20*time.Second, func() bool { return l.Describe().Floor > 0 })
	cancel1()
	if err := <-done1; err != nil {
		t.Fatalf("first run: %v", err)
	}
	tail1 := l.Describe().Tail
	_, cancel2, done2 := run("second")
	waitFor(t, "the second run to write and trim", 20*time.Second, func() bool {
		i := l.Describe()
		return i.Tail > tail1+10 && i.Floor > tail1
	})
	cancel2()
	if err := <-done2; err != nil {
		t.Fatalf("second run: %v", err)
	}
	recs := rawContents(t, l)
	if err := CheckStaleTrimRefused(recs); err != nil {
		t.Fatal(err)
	}
	// Rebuild from the floor the way a holder does: the count continues
	// without a gap across the handover (Counter.Apply checks it), up to
	// the last output written.
	w := &Counter{}
	h := newHolderT(t, sl, 99, w, ruleKept)
	if err := h.Start(context.Background()); err != nil {
		t.Fatalf("rebuild: %v", err)
	}
	var epochs []uint64
	var last string
	for _, r := range rawContents(t, l) {
		e, _ := EpochOf(r.Headers)
		switch KindOf(r.Headers) {
		case KindFence:
			epochs = append(epochs, e)
		case KindOutput:
			last = string(r.Payload)
		}
	}
	if len(epochs) != 3 || epochs[1] <= epochs[0] || epochs[2] != 99 {
		t.Fatalf("fenced writes of epochs %v, want two increasing then 99", epochs)
	}
	if got := strconv.FormatUint(w.Value(), 10); got != last {
		t.Fatalf("rebuilt counter %s, last output %s", got, last)
	}
}

// [FD-4] at the Run level: a refused stream stops Run after the lease is
// acquired and before anything is written, and the lease is released.
func TestFD4_RunRefusesBeforeFencedWrite(t *testing.T) {
	cs, err := kubernetes.NewForConfig(apiServer(t).Config)
	if err != nil {
		t.Fatal(err)
	}
	l, sl := newStoreLog(t, logstore.Options{})
	lease, err := NewLease(LeaseConfig{Client: cs.CoordinationV1(), Namespace: "default", Name: "run-refused", Identity: "a",
		LeaseDuration: 5 * time.Second, RenewDeadline: 3 * time.Second, RetryPeriod: 200 * time.Millisecond, Logger: logr.Discard()})
	if err != nil {
		t.Fatal(err)
	}
	refuse := func(context.Context) error { return ErrRetention }
	err = Run(context.Background(), RunConfig{Lease: lease, Log: sl, Workload: &Counter{}, CheckStream: refuse, Logger: logr.Discard()})
	if !errors.Is(err, ErrRetention) {
		t.Fatalf("Run: %v, want ErrRetention", err)
	}
	if tail := l.Describe().Tail; tail != 0 {
		t.Fatalf("a refused run wrote: tail %d", tail)
	}
	got, err := cs.CoordinationV1().Leases("default").Get(context.Background(), "run-refused", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if h := got.Spec.HolderIdentity; h == nil || *h != "" {
		t.Fatalf("lease not released: holder %v", h)
	}
}
