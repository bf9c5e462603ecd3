package e2e

import (
	"context"
	"testing"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	felixv1 "felix.dev/felix/api/v1alpha1"
)

// TestStreamDeletion_RecreatedStreamStartsEmpty: three broker processes and
// the operator; records are acknowledged on a stream, the stream is
// deleted (its leader trims the shard empty before the finalizer goes),
// and a stream recreated under the same name starts above the old epoch,
// its leader serves none of the old records, and every record
// acknowledged on it reads back.
func TestStreamDeletion_RecreatedStreamStartsEmpty(t *testing.T) {
	c := newCluster(t, 3, felixv1.FsyncPeriodic)
	for i := 0; i < 3; i++ {
		c.startBroker(i)
	}
	c.createStream(t, "orders", 3)
	old := c.appendAcked(t, "orders", 50, "old")
	oldEpoch := c.shard("orders", 0).Status.Assignment.Epoch
	if len(old) != 50 {
		t.Fatalf("acknowledged %d of 50 records", len(old))
	}

	ctx := context.Background()
	st := &felixv1.FelixStream{ObjectMeta: metav1.ObjectMeta{Name: "orders", Namespace: c.namespace}}
	if err := c.c.Delete(ctx, st); err != nil {
		t.Fatal(err)
	}
	c.eventually("the stream and its shard gone", 90*time.Second, func() (bool, string) {
		err := c.c.Get(ctx, client.ObjectKeyFromObject(st), &felixv1.FelixStream{})
		if !apierrors.IsNotFound(err) {
			return false, "stream still there: " + shardState(c.shard("orders", 0))
		}
		return c.shard("orders", 0) == nil, "shard still there"
	})

	c.createStream(t, "orders", 3)
	c.waitServing(t, "orders")
	sh := c.shard("orders", 0)
	if sh.Spec.FirstEpoch <= oldEpoch || sh.Status.Assignment.Epoch <= oldEpoch {
		t.Fatalf("recreated shard: firstEpoch %d, epoch %d; want above the old epoch %d", sh.Spec.FirstEpoch, sh.Status.Assignment.Epoch, oldEpoch)
	}
	leader := sh.Status.Assignment.Leader
	if got := c.readAll(t, c.addressOf(leader), "orders"); len(got) != 0 {
		t.Fatalf("the recreated stream's leader %s serves %d records of the deleted stream: %v", leader, len(got), got)
	}
	acked := c.appendAcked(t, "orders", 20, "new")
	got := c.readAll(t, c.addressOf(c.shard("orders", 0).Status.Assignment.Leader), "orders")
	for off, want := range acked {
		if got[off] != want {
			t.Errorf("acknowledged record at %d: want %q, read %q", off, want, got[off])
		}
	}
	if len(got) != len(acked) {
		t.Errorf("read %d records, %d acknowledged on the recreated stream: %v", len(got), len(acked), got)
	}
}
