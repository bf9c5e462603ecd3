package controlplane

import (
	"context"
	"errors"
	"strconv"

	coordinationv1 "k8s.io/api/coordination/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"
)

// ErrNotRegistered is returned by Renew before Register succeeded: a
// broker announces itself only once it is registered [ID-4].
var ErrNotRegistered = errors.New("controlplane: heartbeat before registration")

// Renew renews the broker's heartbeat Lease once (the operator creates the
// Lease; the broker only reads and updates it). reportsCurrent says
// whether every report this broker leads was written within a heartbeat of
// its last change; it is recorded on the Lease (LeaseAnnotationReports).
func (c *Client) Renew(ctx context.Context, reportsCurrent bool) error {
	inc := c.incarnation.Load()
	if inc == 0 {
		return ErrNotRegistered
	}
	var l coordinationv1.Lease
	if err := c.c.Get(ctx, c.key(), &l); err != nil {
		return err
	}
	now := metav1.NewMicroTime(c.cfg.Clock.Now())
	secs := int32((c.cfg.NodeExpiry + 999_999_999) / 1_000_000_000)
	if l.Spec.HolderIdentity == nil || *l.Spec.HolderIdentity != c.cfg.Broker || l.Spec.AcquireTime == nil {
		l.Spec.AcquireTime = &now
		l.Spec.LeaseTransitions = ptr.To(ptr.Deref(l.Spec.LeaseTransitions, 0) + 1)
	}
	l.Spec.HolderIdentity = ptr.To(c.cfg.Broker)
	l.Spec.LeaseDurationSeconds = ptr.To(secs)
	l.Spec.RenewTime = &now
	if l.Annotations == nil {
		l.Annotations = map[string]string{}
	}
	l.Annotations[LeaseAnnotationIncarnation] = strconv.FormatInt(inc, 10)
	l.Annotations[LeaseAnnotationReports] = ReportsBehind
	if reportsCurrent {
		l.Annotations[LeaseAnnotationReports] = ReportsCurrent
	}
	return c.c.Update(ctx, &l)
}

// RunHeartbeat renews the Lease every HeartbeatInterval until ctx ends,
// starting at once. reportsCurrent (nil: always false) is asked at each
// renewal; pass ReportWriter.Current. A failed renewal is logged and
// retried at the next tick: the operator marks the broker Down when no
// renewal lands within the node expiry timeout.
func (c *Client) RunHeartbeat(ctx context.Context, reportsCurrent func() bool) error {
	t := c.cfg.Clock.NewTicker(c.cfg.HeartbeatInterval)
	defer t.Stop()
	for {
		cur := reportsCurrent != nil && reportsCurrent()
		if err := c.Renew(ctx, cur); err != nil {
			if ctx.Err() != nil {
				return ctx.Err()
			}
			if errors.Is(err, ErrNotRegistered) {
				return err
			}
			c.cfg.Log.Info("heartbeat renewal failed", "broker", c.cfg.Broker, "error", err.Error())
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-t.C():
		}
	}
}
