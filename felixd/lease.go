package felixd

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/go-logr/logr"
	coordinationv1 "k8s.io/api/coordination/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	coordclient "k8s.io/client-go/kubernetes/typed/coordination/v1"
	"k8s.io/utils/clock"
)

// ErrLeaseLost is returned when the holder no longer holds the lease: its
// renewal found another holder, or did not succeed within RenewDeadline.
var ErrLeaseLost = errors.New("felixd: lease lost")

// LeaseConfig configures a workload's lease.
type LeaseConfig struct {
	// Client reaches the API server's coordination.k8s.io/v1 Leases.
	Client coordclient.LeasesGetter
	// Namespace and Name name the Lease; Name is the workload's name.
	Namespace, Name string
	// Identity names this holder (unique per process: a restarted
	// process is a new holder and takes a new epoch).
	Identity string
	// LeaseDuration is how long others wait, after they last saw the lease
	// change, before taking it over.
	LeaseDuration time.Duration
	// RenewDeadline is how long the holder keeps trying to renew before
	// it gives the lease up; less than LeaseDuration.
	RenewDeadline time.Duration
	// RetryPeriod is the interval between acquisition attempts and between
	// renewals.
	RetryPeriod time.Duration
	// Clock is injected; nil means the real clock.
	Clock clock.Clock
	// Logger receives the lease's log lines.
	Logger logr.Logger
}

// Lease acquires and renews one workload's Lease. The epoch is the lease's
// spec.leaseTransitions after this holder's acquisition: every acquisition
// (creation included, which sets it to 1) raises it by one under the API
// server's optimistic concurrency, so no two acquisitions share an epoch
// and epochs only grow while the Lease object is kept.
//
// Expiry is judged the way client-go's leader election judges it: by how
// long this process has seen the lease unchanged on its own clock, never by
// comparing another process's timestamps with ours. Safety never depends
// on it: the fenced write stops a holder that lost the lease without
// knowing.
type Lease struct {
	cfg        LeaseConfig
	clk        clock.Clock
	observedRV string
	observedAt time.Time
	epoch      uint64
	lastRenew  time.Time
}

// NewLease returns a lease client; nothing is sent until Acquire.
func NewLease(cfg LeaseConfig) (*Lease, error) {
	switch {
	case cfg.Client == nil || cfg.Name == "" || cfg.Identity == "":
		return nil, errors.New("felixd: lease needs a client, a name and an identity")
	case cfg.LeaseDuration <= 0 || cfg.RenewDeadline <= 0 || cfg.RetryPeriod <= 0:
		return nil, errors.New("felixd: lease timings must be positive")
	case cfg.RenewDeadline >= cfg.LeaseDuration:
		return nil, errors.New("felixd: renew deadline must be shorter than the lease duration")
	}
	if cfg.Namespace == "" {
		cfg.Namespace = "default"
	}
	clk := cfg.Clock
	if clk == nil {
		clk = clock.RealClock{}
	}
	return &Lease{cfg: cfg, clk: clk}, nil
}

// Epoch returns the epoch of the current acquisition (0 before one).
func (l *Lease) Epoch() uint64 { return l.epoch }

// Acquire blocks until this identity holds the lease, trying every
// RetryPeriod, and returns the new epoch.
func (l *Lease) Acquire(ctx context.Context) (uint64, error) {
	for {
		ok, err := l.TryAcquire(ctx)
		if ok {
			return l.epoch, nil
		}
		if err != nil {
			l.cfg.Logger.V(1).Info("lease not acquired", "err", err.Error())
		}
		select {
		case <-ctx.Done():
			return 0, ctx.Err()
		case <-l.clk.After(l.cfg.RetryPeriod):
		}
	}
}

// TryAcquire makes one attempt: it creates the lease if absent, or takes it
// over if it has no holder or this process has seen it unchanged for a
// LeaseDuration. It reports whether this identity now holds it.
func (l *Lease) TryAcquire(ctx context.Context) (bool, error) {
	leases := l.cfg.Client.Leases(l.cfg.Namespace)
	now := l.clk.Now()
	cur, err := leases.Get(ctx, l.cfg.Name, metav1.GetOptions{})
	if apierrors.IsNotFound(err) {
		lease := &coordinationv1.Lease{ObjectMeta: metav1.ObjectMeta{Name: l.cfg.Name, Namespace: l.cfg.Namespace}}
		l.fill(lease, now, 1)
		created, err := leases.Create(ctx, lease, metav1.CreateOptions{})
		if err != nil {
			return false, fmt.Errorf("create lease: %w", err)
		}
		l.acquired(created, now)
		return true, nil
	}
	if err != nil {
		return false, fmt.Errorf("get lease: %w", err)
	}
	if cur.ResourceVersion != l.observedRV {
		l.observedRV, l.observedAt = cur.ResourceVersion, now
	}
	holder := ""
	if cur.Spec.HolderIdentity != nil {
		holder = *cur.Spec.HolderIdentity
	}
	dur := l.cfg.LeaseDuration
	if cur.Spec.LeaseDurationSeconds != nil {
		dur = time.Duration(*cur.Spec.LeaseDurationSeconds) * time.Second
	}
	if holder != "" && now.Before(l.observedAt.Add(dur)) {
		return false, nil
	}
	var transitions int32
	if cur.Spec.LeaseTransitions != nil {
		transitions = *cur.Spec.LeaseTransitions
	}
	next := cur.DeepCopy()
	l.fill(next, now, transitions+1)
	updated, err := leases.Update(ctx, next, metav1.UpdateOptions{})
	if err != nil {
		return false, fmt.Errorf("take over lease from %q: %w", holder, err)
	}
	l.acquired(updated, now)
	l.cfg.Logger.Info("lease taken over", "previousHolder", holder, "epoch", l.epoch)
	return true, nil
}

func (l *Lease) fill(lease *coordinationv1.Lease, now time.Time, transitions int32) {
	id := l.cfg.Identity
	secs := int32((l.cfg.LeaseDuration + time.Second - 1) / time.Second)
	mt := metav1.NewMicroTime(now)
	lease.Spec.HolderIdentity = &id
	lease.Spec.LeaseDurationSeconds = &secs
	lease.Spec.AcquireTime = &mt
	lease.Spec.RenewTime = &mt
	lease.Spec.LeaseTransitions = &transitions
}

func (l *Lease) acquired(lease *coordinationv1.Lease, now time.Time) {
	l.epoch = uint64(*lease.Spec.LeaseTransitions)
	l.observedRV, l.observedAt, l.lastRenew = lease.ResourceVersion, now, now
}

// RenewDue reports whether a RetryPeriod passed since the last renewal.
func (l *Lease) RenewDue() bool {
	return !l.clk.Now().Before(l.lastRenew.Add(l.cfg.RetryPeriod))
}

// Renew renews the lease. It returns ErrLeaseLost when another holder or
// another epoch holds it, or when no renewal succeeded for RenewDeadline;
// other errors are transient.
func (l *Lease) Renew(ctx context.Context) error {
	now := l.clk.Now()
	err := l.renew(ctx, now)
	if err == nil || errors.Is(err, ErrLeaseLost) {
		return err
	}
	if now.Sub(l.lastRenew) >= l.cfg.RenewDeadline {
		return fmt.Errorf("%w: no renewal for %v: %w", ErrLeaseLost, now.Sub(l.lastRenew), err)
	}
	return err
}

func (l *Lease) renew(ctx context.Context, now time.Time) error {
	leases := l.cfg.Client.Leases(l.cfg.Namespace)
	cur, err := leases.Get(ctx, l.cfg.Name, metav1.GetOptions{})
	if apierrors.IsNotFound(err) {
		return fmt.Errorf("%w: the lease was deleted", ErrLeaseLost)
	}
	if err != nil {
		return err
	}
	if !l.holds(cur) {
		return fmt.Errorf("%w: held by %q", ErrLeaseLost, ptrString(cur.Spec.HolderIdentity))
	}
	mt := metav1.NewMicroTime(now)
	cur.Spec.RenewTime = &mt
	updated, err := leases.Update(ctx, cur, metav1.UpdateOptions{})
	if err != nil {
		return fmt.Errorf("renew lease: %w", err)
	}
	l.observedRV, l.observedAt, l.lastRenew = updated.ResourceVersion, now, now
	return nil
}

// Release gives the lease up if this holder still holds it, so the next
// holder need not wait for it to expire. The epoch stays counted.
func (l *Lease) Release(ctx context.Context) error {
	leases := l.cfg.Client.Leases(l.cfg.Namespace)
	cur, err := leases.Get(ctx, l.cfg.Name, metav1.GetOptions{})
	if err != nil {
		return err
	}
	if !l.holds(cur) {
		return nil
	}
	empty := ""
	cur.Spec.HolderIdentity = &empty
	_, err = leases.Update(ctx, cur, metav1.UpdateOptions{})
	return err
}

func (l *Lease) holds(cur *coordinationv1.Lease) bool {
	return l.epoch != 0 && ptrString(cur.Spec.HolderIdentity) == l.cfg.Identity &&
		cur.Spec.LeaseTransitions != nil && uint64(*cur.Spec.LeaseTransitions) == l.epoch
}

func ptrString(s *string) string {
	if s == nil {
		return ""
	}
	return *s
}
