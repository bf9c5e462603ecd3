package controllers

import (
	"strconv"
	"sync"
	"time"

	coordinationv1 "k8s.io/api/coordination/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/utils/clock"

	felixv1 "felix.dev/felix/api/v1alpha1"
	"felix.dev/felix/broker/controlplane"
)

// Heartbeat is what the operator saw of one broker's heartbeat Lease.
// Times are on the operator's clock: a renewal counts from when the
// operator first saw it, never from the renewTime the broker wrote, so
// clock skew between broker and operator cannot keep a dead broker Up (the
// node lifecycle controller's habit).
type Heartbeat struct {
	// RenewTime is the last renewTime seen on the Lease (broker clock),
	// used only to notice a renewal.
	RenewTime time.Time
	// ObservedAt is when the operator first saw RenewTime.
	ObservedAt time.Time
	// Incarnation is the incarnation the broker renewed under.
	Incarnation int64
	// AttestedAt is ObservedAt of the last renewal whose Lease said the
	// broker's reports were current, at AttestedIncarnation.
	AttestedAt          time.Time
	AttestedIncarnation int64
}

// Heartbeats tracks heartbeat Leases in memory. It is shared by the
// FelixBroker reconciler (which observes Leases) and the FelixShard
// reconciler (which reads last heartbeats for placement). Safe for
// concurrent use.
type Heartbeats struct {
	clock clock.PassiveClock
	mu    sync.Mutex
	seen  map[types.NamespacedName]Heartbeat
}

// NewHeartbeats returns an empty tracker reading time from clk.
func NewHeartbeats(clk clock.PassiveClock) *Heartbeats {
	return &Heartbeats{clock: clk, seen: map[types.NamespacedName]Heartbeat{}}
}

// Observe records lease and returns the broker's heartbeat. A Lease never
// renewed returns false. A renewal counts from when the operator first saw
// it; only the first sight after an operator start counts from the
// earlier of now and the Lease's renewTime (the broker's clock), for
// liveness and for attesting reports alike.
func (h *Heartbeats) Observe(lease *coordinationv1.Lease) (Heartbeat, bool) {
	key := types.NamespacedName{Namespace: lease.Namespace, Name: lease.Name}
	if lease.Spec.RenewTime == nil {
		h.mu.Lock()
		hb, ok := h.seen[key]
		h.mu.Unlock()
		return hb, ok
	}
	renew := lease.Spec.RenewTime.Time
	inc, _ := strconv.ParseInt(lease.Annotations[controlplane.LeaseAnnotationIncarnation], 10, 64)
	current := lease.Annotations[controlplane.LeaseAnnotationReports] == controlplane.ReportsCurrent
	now := h.clock.Now()

	h.mu.Lock()
	defer h.mu.Unlock()
	prev, known := h.seen[key]
	if known && prev.RenewTime.Equal(renew) {
		return prev, true
	}
	hb := prev
	hb.RenewTime, hb.ObservedAt, hb.Incarnation = renew, now, inc
	if !known && renew.Before(now) {
		// First sight since the operator started: a renewal older than
		// now counts from its own time, so a broker dead before the
		// restart is not shown Up for another node expiry.
		hb.ObservedAt = renew
	}
	if current {
		at := now
		if !known && renew.Before(now) {
			at = renew
		}
		hb.AttestedAt, hb.AttestedIncarnation = at, inc
	}
	h.seen[key] = hb
	return hb, true
}

// Get returns the last heartbeat observed for a broker.
func (h *Heartbeats) Get(key types.NamespacedName) (Heartbeat, bool) {
	h.mu.Lock()
	defer h.mu.Unlock()
	hb, ok := h.seen[key]
	return hb, ok
}

// Forget drops a broker (its Lease was deleted).
func (h *Heartbeats) Forget(key types.NamespacedName) {
	h.mu.Lock()
	defer h.mu.Unlock()
	delete(h.seen, key)
}

// liveness is the pure heartbeat decision for one broker.
type liveness struct {
	State  felixv1.BrokerState
	Reason string
	// RecheckAfter is when the state would change without a new renewal
	// (zero: no time-driven change is pending).
	RecheckAfter time.Duration
}

// decideLiveness marks a broker Left when it was removed from the cluster,
// Up while its last renewal was observed within nodeExpiry, and Down
// otherwise.
func decideLiveness(now time.Time, hb Heartbeat, renewed, removed bool, nodeExpiry time.Duration) liveness {
	switch {
	case removed:
		return liveness{State: felixv1.BrokerLeft, Reason: "Removed"}
	case !renewed:
		return liveness{State: felixv1.BrokerDown, Reason: "NoHeartbeat"}
	}
	deadline := hb.ObservedAt.Add(nodeExpiry)
	if now.Before(deadline) || now.Equal(deadline) {
		return liveness{State: felixv1.BrokerUp, Reason: "HeartbeatRenewed", RecheckAfter: deadline.Sub(now) + time.Millisecond}
	}
	return liveness{State: felixv1.BrokerDown, Reason: "HeartbeatExpired"}
}
