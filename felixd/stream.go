package felixd

import (
	"context"
	"fmt"

	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/client"

	felixv1 "felix.dev/felix/api/v1alpha1"
)

// CheckStream reads the FelixStream key through the API and refuses it
// [FD-4] with ErrRetention when its retention is on or it is not marked
// fenced, and with ErrAckLeader when it acknowledges on ack Leader.
// Retention can delete the new holder's fenced write with no trim
// involved, and then no refusal carries the newer epoch. A stream not
// marked fenced is refused too: the API refuses retention only on fenced
// streams, and fixes `fenced` at creation, so only a fenced stream keeps
// retention off for the holder's whole run. Under ack Leader an
// acknowledged fenced write can vanish at failover. Run calls it at every
// acquisition and again while it holds the lease (RunConfig.CheckStreamEvery).
func CheckStream(ctx context.Context, c client.Reader, key types.NamespacedName) error {
	var s felixv1.FelixStream
	if err := c.Get(ctx, key, &s); err != nil {
		return fmt.Errorf("felixd: read FelixStream %s: %w", key, err)
	}
	return checkStreamSpec(key, &s.Spec)
}

func checkStreamSpec(key types.NamespacedName, spec *felixv1.FelixStreamSpec) error {
	if r := spec.Retention; r != nil && (r.MaxAge != nil || r.MaxBytes != nil) {
		return fmt.Errorf("%w: FelixStream %s has retention on [FD-4]", ErrRetention, key)
	}
	if !spec.Fenced {
		return fmt.Errorf("%w: FelixStream %s is not marked fenced, so retention could be switched on [FD-4]", ErrRetention, key)
	}
	if spec.Ack == felixv1.AckLeader {
		return fmt.Errorf("%w: FelixStream %s acknowledges on ack Leader [FD-4]", ErrAckLeader, key)
	}
	return nil
}
