package controllers_test

import (
	"context"
	"encoding/json"
	"testing"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"

	felixv1 "felix.dev/felix/api/v1alpha1"
	"felix.dev/felix/controllers"
)

func getStream(ns, name string) (*felixv1.FelixStream, error) {
	var s felixv1.FelixStream
	err := suite.c.Get(context.Background(), types.NamespacedName{Namespace: ns, Name: name}, &s)
	return &s, err
}

// TestStream_DeletionTrimsLogsThenRecreatedStartsAbove: a stream carries
// the log finalizer; deleting it tells its shards' brokers (the watch's
// StreamDeleting) and keeps it until the shard's leader reports the
// deletion trim as its last committed record; then it goes, the cluster
// records the stream's epoch, and a stream recreated under the name starts
// above it.
func TestStream_DeletionTrimsLogsThenRecreatedStartsAbove(t *testing.T) {
	ns := namespace(t)
	ctx := context.Background()
	brokers := placed(t, ns, "sd", 3, 1, 3)
	sh := getShard(t, ns, "s-0")
	leader := brokers[sh.Status.Assignment.Leader]
	epoch := sh.Status.Assignment.Epoch
	eventually(t, 10*time.Second, "finalizer on the stream", func() (bool, string) {
		s, err := getStream(ns, "s")
		if err != nil {
			return false, err.Error()
		}
		for _, f := range s.Finalizers {
			if f == controllers.FinalizerStreamLogs {
				return true, ""
			}
		}
		return false, "finalizers " + itoa(len(s.Finalizers))
	})
	// Records written.
	leader.reports.Set("s-0", report(leader, epoch))
	eventually(t, 10*time.Second, "report stored", func() (bool, string) {
		sh := getShard(t, ns, "s-0")
		return sh.Status.Report != nil && sh.Status.Report.Position == 100, "no report"
	})

	// The brokers' watch sees the stream going.
	w, err := leader.cp.NewShardWatcher()
	if err != nil {
		t.Fatal(err)
	}
	wctx, cancel := context.WithCancel(ctx)
	defer cancel()
	go func() { _ = w.Run(wctx) }()
	if !w.WaitForSync(wctx) {
		t.Fatal("watch did not sync")
	}

	s, _ := getStream(ns, "s")
	if err := suite.c.Delete(ctx, s); err != nil {
		t.Fatalf("delete stream: %v", err)
	}
	eventually(t, 10*time.Second, "StreamDeleting in the leader's assignments", func() (bool, string) {
		as, err := w.Assignments(wctx)
		if err != nil || len(as) != 1 {
			return false, errString(err)
		}
		return as[0].StreamDeleting, "not deleting"
	})
	eventually(t, 10*time.Second, "Progressing "+controllers.RemovingLogsReason, func() (bool, string) {
		s, err := getStream(ns, "s")
		if err != nil {
			return false, "stream: " + err.Error()
		}
		c := condition(s.Status.Conditions, felixv1.ConditionProgressing)
		if c == nil {
			return false, "no condition"
		}
		return c.Reason == controllers.RemovingLogsReason, c.Reason
	})
	eventually(t, 10*time.Second, "RemovingLogs event", func() (bool, string) { return hasEvent(ns, "s", controllers.RemovingLogsReason) })
	// A report of the old view, or one whose trim is not the last record,
	// keeps the stream.
	rep := report(leader, epoch)
	rep.Floor, rep.Position, rep.Committed = 100, 102, 102
	leader.reports.Set("s-0", rep)
	eventually(t, 10*time.Second, "report with a floor below the tail stored", func() (bool, string) {
		sh := getShard(t, ns, "s-0")
		return sh.Status.Report != nil && sh.Status.Report.Floor == 100, "not yet"
	})
	if _, err := getStream(ns, "s"); err != nil {
		t.Fatalf("the stream went while its log still had a record after the trim: %v", err)
	}

	// The leader trims to its tail: the trim is the last committed record.
	rep.Floor, rep.Position, rep.Committed = 102, 103, 103
	leader.reports.Set("s-0", rep)
	eventually(t, 15*time.Second, "stream gone", func() (bool, string) {
		_, err := getStream(ns, "s")
		return apierrors.IsNotFound(err), errString(err)
	})
	cl := getCluster(t, ns, "sd")
	var epochs map[string]int64
	if err := json.Unmarshal([]byte(cl.Annotations[controllers.AnnotationDeletedStreamEpochs]), &epochs); err != nil || epochs["s"] != epoch {
		t.Fatalf("deleted stream epochs %q: %v (want s: %d)", cl.Annotations[controllers.AnnotationDeletedStreamEpochs], err, epoch)
	}
	eventually(t, 10*time.Second, "LogsRemoved event", func() (bool, string) { return hasEvent(ns, "s", "LogsRemoved") })

	// Recreated: its shard starts above the old epoch.
	eventually(t, 15*time.Second, "old shard gone", func() (bool, string) {
		return getShard(t, ns, "s-0") == nil, "still there"
	})
	create(t, &felixv1.FelixStream{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "s"}, Spec: felixv1.FelixStreamSpec{Cluster: "sd", Shards: 1, Replicas: 3}})
	eventually(t, 15*time.Second, "recreated shard assigned above the old epoch", func() (bool, string) {
		sh := getShard(t, ns, "s-0")
		if sh == nil || sh.Status.Assignment == nil {
			return false, "unassigned"
		}
		return sh.Spec.FirstEpoch == epoch+1 && sh.Status.Assignment.Epoch > epoch,
			"firstEpoch " + itoa(int(sh.Spec.FirstEpoch)) + " epoch " + itoa(int(sh.Status.Assignment.Epoch))
	})
	// A shard added later by raising spec.shards starts above it too: the
	// old stream may have had that index.
	setShards(t, ns, "s", 2)
	eventually(t, 15*time.Second, "added shard s-1 assigned above the old epoch", func() (bool, string) {
		sh := getShard(t, ns, "s-1")
		if sh == nil || sh.Status.Assignment == nil {
			return false, "unassigned"
		}
		return sh.Spec.FirstEpoch == epoch+1 && sh.Status.Assignment.Epoch > epoch,
			"firstEpoch " + itoa(int(sh.Spec.FirstEpoch)) + " epoch " + itoa(int(sh.Status.Assignment.Epoch))
	})
}

// TestStream_DeletionSkipAnnotation: a stream whose brokers never trim
// (here: none reports) goes once annotated to skip the log removal.
func TestStream_DeletionSkipAnnotation(t *testing.T) {
	ns := namespace(t)
	ctx := context.Background()
	brokers := placed(t, ns, "sk", 3, 1, 3)
	sh := getShard(t, ns, "s-0")
	leader := brokers[sh.Status.Assignment.Leader]
	leader.reports.Set("s-0", report(leader, sh.Status.Assignment.Epoch))
	eventually(t, 10*time.Second, "report and finalizer", func() (bool, string) {
		sh := getShard(t, ns, "s-0")
		s, err := getStream(ns, "s")
		return err == nil && len(s.Finalizers) == 1 && sh.Status.Report != nil, "not yet"
	})
	s, _ := getStream(ns, "s")
	if err := suite.c.Delete(ctx, s); err != nil {
		t.Fatal(err)
	}
	eventually(t, 10*time.Second, "RemovingLogs", func() (bool, string) {
		s, err := getStream(ns, "s")
		if err != nil {
			return false, err.Error()
		}
		c := condition(s.Status.Conditions, felixv1.ConditionProgressing)
		return c != nil && c.Reason == controllers.RemovingLogsReason, "not yet"
	})
	s, _ = getStream(ns, "s")
	s.Annotations = map[string]string{controllers.AnnotationSkipLogRemoval: "true"}
	if err := suite.c.Update(ctx, s); err != nil {
		t.Fatal(err)
	}
	eventually(t, 15*time.Second, "stream gone", func() (bool, string) {
		_, err := getStream(ns, "s")
		return apierrors.IsNotFound(err), errString(err)
	})
	eventually(t, 10*time.Second, "LogRemovalSkipped event", func() (bool, string) { return hasEvent(ns, "s", "LogRemovalSkipped") })
}
