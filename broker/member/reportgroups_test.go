package member

import (
	"context"
	"fmt"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"

	felixv1 "felix.dev/felix/api/v1alpha1"
	brokerclient "felix.dev/felix/broker/client"
	"felix.dev/felix/broker/datadir"
	"felix.dev/felix/broker/logstore"
	"felix.dev/felix/broker/record"
	"felix.dev/felix/internal/testenv"
)

// A member leading a shard writes the shard's consumer groups into its
// FelixShard status.report, from its server's group fold: a group a
// client committed shows up with its committed offset and lag once the
// report is next written (here the refresh of a new view, 200ms).
func TestLeaderReportCarriesGroups(t *testing.T) {
	env := testenv.Start(t)
	ctx, cancel := context.WithTimeout(context.Background(), 90*time.Second)
	defer cancel()
	const broker = "logs-0"
	must := func(err error) {
		t.Helper()
		if err != nil {
			t.Fatal(err)
		}
	}
	must(env.Client.Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: testNS}}))
	must(env.Client.Create(ctx, &felixv1.FelixCluster{ObjectMeta: metav1.ObjectMeta{Name: testCluster, Namespace: testNS},
		Spec: felixv1.FelixClusterSpec{Brokers: 1, Image: "felix:dev"}}))
	must(env.Client.Create(ctx, &felixv1.FelixBroker{ObjectMeta: metav1.ObjectMeta{Name: broker, Namespace: testNS},
		Spec: felixv1.FelixBrokerSpec{Cluster: testCluster}}))
	must(env.Client.Create(ctx, &felixv1.FelixStream{ObjectMeta: metav1.ObjectMeta{Name: ordersShard.Stream, Namespace: testNS},
		Spec: felixv1.FelixStreamSpec{Cluster: testCluster, Shards: 1, Replicas: 1}}))
	key := types.NamespacedName{Namespace: testNS, Name: broker}
	go grantRegistrations(ctx, env.Client, key)

	cfg := Config{DataDir: t.TempDir(), Fsync: logstore.FsyncNone, REST: env.Config, Namespace: testNS, Cluster: testCluster,
		Broker: broker, HeartbeatInterval: 200 * time.Millisecond, NodeExpiry: 2 * time.Second, ShutdownTimeout: 5 * time.Second,
		Insecure: true, Listen: listen(t), HTTP: listen(t), ReportRefresh: 200 * time.Millisecond}
	started := make(chan struct{})
	cfg.Started = func(datadir.StorageID, int64, datadir.Decision) { close(started) }
	runCtx, stop := context.WithCancel(ctx)
	done := make(chan error, 1)
	go func() { done <- Run(runCtx, cfg) }()
	t.Cleanup(func() {
		stop()
		if err := <-done; err != nil {
			t.Errorf("Run: %v", err)
		}
	})
	select {
	case <-started:
	case err := <-done:
		t.Fatalf("Run ended: %v", err)
	case <-ctx.Done():
		t.Fatal("member did not start")
	}

	// The operator's part: logs-0 leads orders-0 at epoch 1.
	var b felixv1.FelixBroker
	must(env.Client.Get(ctx, key, &b))
	sh := &felixv1.FelixShard{ObjectMeta: metav1.ObjectMeta{Name: "orders-0", Namespace: testNS, Labels: map[string]string{"felix.dev/cluster": testCluster}},
		Spec: felixv1.FelixShardSpec{Stream: ordersShard.Stream, Index: int32(ordersShard.Shard), Replicas: []string{broker}}}
	must(env.Client.Create(ctx, sh))
	sh.Status.Assignment = &felixv1.Assignment{Leader: broker, Epoch: 1, LeaderIncarnation: b.Status.Incarnation,
		Counted: []felixv1.CountedReplica{{Name: broker, StorageID: b.Status.StorageID}}}
	must(env.Client.Status().Update(ctx, sh))

	c, err := brokerclient.Dial(ctx, cfg.Listen.Addr().String(), brokerclient.Options{})
	must(err)
	defer func() { _ = c.Close() }()
	eventually := func(what string, cond func() error) {
		t.Helper()
		var err error
		for ctx.Err() == nil {
			if err = cond(); err == nil {
				return
			}
			time.Sleep(50 * time.Millisecond)
		}
		t.Fatalf("%s: %v", what, err)
	}
	eventually("appending to the shard it leads", func() error {
		_, err := c.Append(ctx, ordersShard, []record.Record{{Payload: []byte("a")}, {Payload: []byte("b")}, {Payload: []byte("c")}}, nil)
		return err
	})
	cl, err := c.GroupClaim(ctx, ordersShard, "billing", "m1")
	must(err)
	tail, err := c.Describe(ctx, ordersShard)
	must(err)
	_, err = c.GroupCommit(ctx, ordersShard, "billing", "m1", cl.Generation, tail.Tail-1)
	must(err)

	eventually("the report lists billing one record behind", func() error {
		var got felixv1.FelixShard
		if err := env.Client.Get(ctx, types.NamespacedName{Namespace: testNS, Name: "orders-0"}, &got); err != nil {
			return err
		}
		r := got.Status.Report
		if r == nil || len(r.Groups) != 1 || r.Groups[0] != (felixv1.GroupReport{Name: "billing", Committed: int64(tail.Tail - 1), Lag: 1}) || r.GroupsOmitted != 0 {
			return fmt.Errorf("report %+v", r)
		}
		return nil
	})
}
