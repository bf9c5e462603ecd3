package controlplane

import (
	"context"
	"errors"
	"fmt"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/client"

	felixv1 "felix.dev/felix/api/v1alpha1"
)

// ErrRegistrationRefused is wrapped by the error Register returns when the
// operator did not grant the request: another start registered since the
// broker read its incarnation. The broker must start its [ID-4] sequence
// again from CurrentIncarnation (the control plane is now ahead of what it
// saw, so [ID-3] may rotate its id).
var ErrRegistrationRefused = errors.New("registration refused")

// RefusedError says what the broker saw and what the control plane holds.
type RefusedError struct {
	Seen, Current int64
	StorageID     string
}

func (e *RefusedError) Error() string {
	return fmt.Sprintf("%v: storage id %s saw incarnation %d, control plane holds %d", ErrRegistrationRefused, e.StorageID, e.Seen, e.Current)
}

// Unwrap makes errors.Is(err, ErrRegistrationRefused) true.
func (e *RefusedError) Unwrap() error { return ErrRegistrationRefused }

// key is the broker's FelixBroker and Lease.
func (c *Client) key() types.NamespacedName {
	return types.NamespacedName{Namespace: c.cfg.Namespace, Name: c.cfg.Broker}
}

// getBroker reads the broker's FelixBroker, holding with backoff while the
// API server cannot be reached or the record does not exist yet (the
// operator creates it before the pod). It returns only with the record or
// ctx's error.
func (c *Client) getBroker(ctx context.Context) (*felixv1.FelixBroker, error) {
	for attempt := 0; ; attempt++ {
		var b felixv1.FelixBroker
		err := c.c.Get(ctx, c.key(), &b)
		if err == nil {
			c.holding.Store(false)
			return &b, nil
		}
		if ctx.Err() != nil {
			return nil, ctx.Err()
		}
		c.holding.Store(true)
		c.cfg.Log.Info("holding: control plane not answering; opening nothing", "broker", c.cfg.Broker, "attempt", attempt, "error", err.Error())
		if err := c.backoff(ctx, attempt); err != nil {
			return nil, err
		}
	}
}

// CurrentIncarnation is step (b) of [ID-4]: the incarnation the control
// plane holds for this broker (0: never registered). While the API server
// cannot be reached it holds, retrying with backoff, and Holding reports
// true; it returns only with an answer or when ctx ends.
func (c *Client) CurrentIncarnation(ctx context.Context) (int64, error) {
	b, err := c.getBroker(ctx)
	if err != nil {
		return 0, err
	}
	return b.Status.Incarnation, nil
}

// Register asks the operator to register storageID [ID-4]: it writes
// status.registrationRequest (storageID, seen, address and
// Config.PeerAddress) and waits for the
// operator's answer. The operator grants seen+1 only if seen is still the
// current incarnation, so of two racing starts only one wins; the other
// gets a *RefusedError. Register holds like CurrentIncarnation while the
// API server cannot be reached; a request the API rejects as invalid (a
// malformed storage id) returns an error at once. On success the broker
// writes the registration file, and only then opens its stores.
func (c *Client) Register(ctx context.Context, storageID string, seen int64, address string) (int64, error) {
	for attempt := 0; ; attempt++ {
		b, err := c.getBroker(ctx)
		if err != nil {
			return 0, err
		}
		if b.Status.Incarnation != seen {
			return 0, &RefusedError{Seen: seen, Current: b.Status.Incarnation, StorageID: storageID}
		}
		orig := b.DeepCopy()
		b.Status.RegistrationRequest = &felixv1.RegistrationRequest{StorageID: storageID, SeenIncarnation: seen, Address: address, PeerAddress: c.cfg.PeerAddress}
		err = c.c.Status().Patch(ctx, b, client.MergeFromWithOptions(orig, client.MergeFromWithOptimisticLock{}), client.FieldOwner(FieldManager))
		if err == nil {
			break
		}
		if ctx.Err() != nil {
			return 0, ctx.Err()
		}
		if apierrors.IsInvalid(err) || apierrors.IsBadRequest(err) {
			// Retrying cannot help (e.g. a malformed storage id).
			return 0, fmt.Errorf("controlplane: registration request rejected: %w", err)
		}
		if !apierrors.IsConflict(err) {
			c.holding.Store(true)
			c.cfg.Log.Info("holding: registration request not written", "error", err.Error())
		}
		if err := c.backoff(ctx, attempt); err != nil {
			return 0, err
		}
	}
	c.cfg.Log.Info("registration requested", "storageID", storageID, "seenIncarnation", seen)
	for attempt := 0; ; attempt++ {
		b, err := c.getBroker(ctx)
		if err != nil {
			return 0, err
		}
		st := b.Status
		switch {
		case st.Incarnation == seen+1 && st.StorageID == storageID && (st.RegistrationRequest == nil || st.RegistrationRequest.StorageID != storageID):
			c.incarnation.Store(st.Incarnation)
			c.cfg.Log.Info("registered", "storageID", storageID, "incarnation", st.Incarnation)
			return st.Incarnation, nil
		case st.Incarnation != seen:
			return 0, &RefusedError{Seen: seen, Current: st.Incarnation, StorageID: storageID}
		case st.RegistrationRequest == nil:
			// Cleared without a grant: the operator refused it.
			return 0, &RefusedError{Seen: seen, Current: st.Incarnation, StorageID: storageID}
		case st.RegistrationRequest.StorageID != storageID || st.RegistrationRequest.SeenIncarnation != seen:
			// Another start replaced the request: it races this one.
			return 0, &RefusedError{Seen: seen, Current: st.Incarnation, StorageID: storageID}
		}
		if err := c.backoff(ctx, min(attempt, 2)); err != nil {
			return 0, err
		}
	}
}
