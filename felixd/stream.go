package felixd

import (
	"context"
	"fmt"

	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/client"

	felixv1 "felix.dev/felix/api/v1alpha1"
)

// CheckStream reads the FelixStream key through the API and refuses it with
// ErrRetention [FD-4] when its retention is on, or when it is not marked
// fenced. Retention can delete the new holder's fenced write with no trim
// involved, and then no refusal carries the newer epoch. A stream not
// marked fenced is refused too: the API refuses retention only on fenced
// streams, so an unfenced stream could have retention switched on while
// the workload runs.
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
	return nil
}
