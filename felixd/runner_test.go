package felixd

import (
	"context"
	"errors"
	"strconv"
	"sync"
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

// streamOK is a stream check that always passes (the in-process log
// reports its retention to Holder.Start itself).
func streamOK(context.Context) error { return nil }

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
			done <- Run(ctx, RunConfig{Lease: lease, Log: sl, Workload: w, CheckStream: streamOK, SnapshotEvery: 5,
				StepInterval: 5 * time.Millisecond, Logger: logr.Discard()})
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

// newRunLease returns a lease on the package's API server.
func newRunLease(t *testing.T, name string) *Lease {
	t.Helper()
	cs, err := kubernetes.NewForConfig(apiServer(t).Config)
	if err != nil {
		t.Fatal(err)
	}
	lease, err := NewLease(LeaseConfig{Client: cs.CoordinationV1(), Namespace: "default", Name: name, Identity: "a",
		LeaseDuration: 5 * time.Second, RenewDeadline: 3 * time.Second, RetryPeriod: 200 * time.Millisecond, Logger: logr.Discard()})
	if err != nil {
		t.Fatal(err)
	}
	return lease
}

// switchableCheck is a stream check whose answer a test changes while Run
// runs; it counts its calls.
type switchableCheck struct {
	mu    sync.Mutex
	err   error
	calls int
}

func (c *switchableCheck) check(context.Context) error {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.calls++
	return c.err
}

func (c *switchableCheck) set(err error) int {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.err = err
	return c.calls
}

func (c *switchableCheck) called() int {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.calls
}

// [FD-4] Run checks the stream again while it holds the lease, not only
// at acquisition: once the stream stops allowing a holder (here the check
// starts refusing, as it does when a FelixStream's settings change), Run
// stops with the refusal and writes nothing after the refusing check. A
// check that cannot read the stream pauses the writes until one succeeds.
func TestFD4_RunRechecksStream(t *testing.T) {
	l, sl := newStoreLog(t, logstore.Options{})
	c := &switchableCheck{}
	done := make(chan error, 1)
	go func() {
		done <- Run(context.Background(), RunConfig{Lease: newRunLease(t, "run-recheck"), Log: sl, Workload: &Counter{},
			CheckStream: c.check, CheckStreamEvery: 20 * time.Millisecond, StepInterval: 2 * time.Millisecond, Logger: logr.Discard()})
	}()
	waitFor(t, "outputs", 20*time.Second, func() bool { return l.Describe().Tail > 5 })

	// The API cannot be read: no write while the checks fail.
	n := c.set(errors.New("API unreachable"))
	waitFor(t, "a failing check", 20*time.Second, func() bool { return c.called() > n })
	paused := l.Describe().Tail
	waitFor(t, "two more failing checks", 20*time.Second, func() bool { return c.called() > n+2 })
	if tail := l.Describe().Tail; tail != paused {
		t.Fatalf("wrote while the stream check failed: tail %d, was %d", tail, paused)
	}
	c.set(nil)
	waitFor(t, "writes to resume", 20*time.Second, func() bool { return l.Describe().Tail > paused })

	// The stream stops allowing a holder.
	n = c.set(ErrRetention)
	var tail uint64
	waitFor(t, "the refusing check", 20*time.Second, func() bool {
		if c.called() > n {
			tail = l.Describe().Tail
			return true
		}
		return false
	})
	select {
	case err := <-done:
		if !errors.Is(err, ErrRetention) {
			t.Fatalf("Run: %v, want ErrRetention", err)
		}
	case <-time.After(20 * time.Second):
		t.Fatal("Run kept holding a stream its check refuses")
	}
	if got := l.Describe().Tail; got != tail {
		t.Fatalf("wrote after the refusing check: tail %d, was %d", got, tail)
	}
}

// Run refuses to start without a stream check [FD-4].
func TestFD4_RunNeedsCheckStream(t *testing.T) {
	_, sl := newStoreLog(t, logstore.Options{})
	err := Run(context.Background(), RunConfig{Lease: &Lease{}, Log: sl, Workload: &Counter{}, Logger: logr.Discard()})
	if err == nil {
		t.Fatal("Run started without a CheckStream")
	}
}

// [FD-4] The periodic check also asks the log: once the log reports its
// retention on, Run stops with ErrRetention even while the stream check
// passes.
func TestFD4_RunRechecksLogRetention(t *testing.T) {
	l, sl := newStoreLog(t, logstore.Options{})
	done := make(chan error, 1)
	go func() {
		done <- Run(context.Background(), RunConfig{Lease: newRunLease(t, "run-recheck-log"), Log: sl, Workload: &Counter{},
			CheckStream: streamOK, CheckStreamEvery: 20 * time.Millisecond, StepInterval: 2 * time.Millisecond, Logger: logr.Discard()})
	}()
	waitFor(t, "outputs", 20*time.Second, func() bool { return l.Describe().Tail > 5 })
	setRetention(t, l)
	select {
	case err := <-done:
		if !errors.Is(err, ErrRetention) {
			t.Fatalf("Run: %v, want ErrRetention", err)
		}
	case <-time.After(20 * time.Second):
		t.Fatal("Run kept writing to a log that reports retention on")
	}
}

// A holder whose renewal finds the lease lost reads once before it stops:
// when a newer epoch already trimmed past its cursor it retires, the same
// outcome as when its next write notices first; with no newer epoch in
// the log it reports the lost lease.
func TestRun_LeaseLostReadsBeforeStopping(t *testing.T) {
	lost := errors.Join(ErrLeaseLost, errors.New("held by \"b\""))
	ctx := context.Background()

	_, sl := newStoreLog(t, logstore.Options{})
	h1 := newHolderT(t, sl, 1, &Counter{}, ruleKept)
	if err := h1.Start(ctx); err != nil {
		t.Fatal(err)
	}
	if err := leaseLost(ctx, h1, logr.Discard(), lost); !errors.Is(err, ErrLeaseLost) || errors.Is(err, ErrRetired) {
		t.Fatalf("no newer epoch: %v, want the lost lease", err)
	}

	w2 := &Counter{}
	h2 := newHolderT(t, sl, 2, w2, ruleKept)
	if err := h2.Start(ctx); err != nil {
		t.Fatal(err)
	}
	out, _ := w2.Next(ctx)
	if err := h2.Append(ctx, out); err != nil {
		t.Fatal(err)
	}
	if err := h2.Snapshot(ctx); err != nil {
		t.Fatal(err)
	}
	if err := leaseLost(ctx, h1, logr.Discard(), lost); !errors.Is(err, ErrRetired) {
		t.Fatalf("a newer epoch trimmed past the cursor: %v, want ErrRetired", err)
	}
}
