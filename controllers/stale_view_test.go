package controllers_test

import (
	"context"
	"testing"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"felix.dev/felix/controllers"
)

// TestCP_StaleViewNeverRegressesTheAssignment: the shard reconciler
// decides from its informer cache, which can be behind its own last write.
// A status written from such a stale view must be refused, not applied:
// otherwise a promotion (epoch 2) is overwritten by the assignment read a
// moment before it (epoch 1), and brokers are told to lead at an epoch
// below the records already in their logs.
func TestCP_StaleViewNeverRegressesTheAssignment(t *testing.T) {
	ns := namespace(t)
	placed(t, ns, "stale", 3, 1, 3)
	stale := getShard(t, ns, "s-0")
	if stale.Status.Assignment == nil || stale.Status.Assignment.Epoch != 1 {
		t.Fatalf("first assignment %+v, want epoch 1", stale.Status.Assignment)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()

	// Someone moves the shard on (here: an annotation; in the operator,
	// its own promotion or a broker's report).
	fresh := stale.DeepCopy()
	base := fresh.DeepCopy()
	fresh.Annotations = map[string]string{"felix.dev/test": "moved"}
	if err := suite.c.Patch(ctx, fresh, client.MergeFrom(base)); err != nil {
		t.Fatal(err)
	}

	// A write decided from the old view is refused with a Conflict.
	regressed := stale.Status.Assignment.DeepCopy()
	regressed.Leader = stale.Spec.Replicas[1]
	err := controllers.ApplyShardAssignment(ctx, suite.c, stale, regressed)
	if !apierrors.IsConflict(err) {
		t.Fatalf("apply from a stale view: %v, want a Conflict", err)
	}
	now := getShard(t, ns, "s-0")
	if a := now.Status.Assignment; a == nil || a.Leader != stale.Status.Assignment.Leader {
		t.Fatalf("the stale write landed: %+v", a)
	}

	// The same write from the current view is applied.
	cur := getShard(t, ns, "s-0")
	if err := controllers.ApplyShardAssignment(ctx, suite.c, cur, cur.Status.Assignment); err != nil && !apierrors.IsConflict(err) {
		t.Fatalf("apply from the current view: %v", err)
	}
}
