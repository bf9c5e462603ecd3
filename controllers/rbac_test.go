package controllers_test

import (
	"context"
	"testing"
	"time"

	coordinationv1 "k8s.io/api/coordination/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/rest"
	"sigs.k8s.io/controller-runtime/pkg/client"

	felixv1 "felix.dev/felix/api/v1alpha1"
	"felix.dev/felix/controllers"
)

// TestRBAC_BrokerRoleIsEnoughAndNoMore runs a broker's whole control-plane
// conversation as the brokers' ServiceAccount: register, renew its Lease,
// watch shards, write a report. It may not delete its FelixBroker or touch
// objects of brokers outside its cluster.
func TestRBAC_BrokerRoleIsEnoughAndNoMore(t *testing.T) {
	ns := namespace(t)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	create(t, fastCluster(ns, "rb", 3))
	create(t, fastCluster(ns, "other", 1))
	waitForBrokers(t, ns, "rb", 3)
	waitForBrokers(t, ns, "other", 1)

	sa := rest.CopyConfig(suite.env.Config)
	sa.Impersonate = rest.ImpersonationConfig{UserName: "system:serviceaccount:" + ns + ":" + controllers.BrokerServiceAccountName("rb")}
	saClient, err := client.New(sa, client.Options{Scheme: controllers.NewScheme()})
	if err != nil {
		t.Fatal(err)
	}
	// The RoleBinding may land a moment after the brokers.
	eventually(t, 10*time.Second, "broker SA can read its FelixBroker", func() (bool, string) {
		var b felixv1.FelixBroker
		err := saClient.Get(ctx, client.ObjectKey{Namespace: ns, Name: "rb-0"}, &b)
		return err == nil, errString(err)
	})

	cp := newClient(t, sa, ns, "rb", "rb-0")
	seen, err := cp.CurrentIncarnation(ctx)
	if err != nil {
		t.Fatal(err)
	}
	id := newStorageID()
	if _, err := cp.Register(ctx, id, seen, ""); err != nil {
		t.Fatalf("Register as the broker SA: %v", err)
	}
	if err := cp.Renew(ctx, true); err != nil {
		t.Fatalf("Renew as the broker SA: %v", err)
	}
	w, err := cp.NewShardWatcher()
	if err != nil {
		t.Fatal(err)
	}
	go func() { _ = w.Run(ctx) }()
	if !w.WaitForSync(ctx) {
		t.Fatal("shard watch did not sync as the broker SA")
	}
	shard := &felixv1.FelixShard{
		ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "x-0", Labels: map[string]string{controllers.LabelCluster: "rb"}},
		Spec:       felixv1.FelixShardSpec{Stream: "x", Index: 0, Replicas: []string{"rb-0", "rb-1", "rb-2"}},
	}
	create(t, shard)
	eventually(t, 10*time.Second, "assignment seen by the broker's watch", func() (bool, string) {
		as, err := w.Assignments(ctx)
		if err != nil || len(as) != 1 {
			return false, errString(err)
		}
		return true, ""
	})
	reports := cp.NewReportWriter(controlplaneReportOptions())
	go func() { _ = reports.Run(ctx) }()
	reports.Set("x-0", felixv1.ShardReport{Leader: "rb-0", LeaderIncarnation: cp.Incarnation(), LeaderStorageID: id, Epoch: 1, TakenAt: metav1.Now()})
	eventually(t, 10*time.Second, "report written as the broker SA", func() (bool, string) {
		sh := getShard(t, ns, "x-0")
		return sh.Status.Report != nil && sh.Status.Report.Leader == "rb-0", "no report"
	})
	if reports.Failures() != 0 {
		t.Fatalf("%d report writes failed", reports.Failures())
	}

	// And no more.
	if err := saClient.Delete(ctx, &felixv1.FelixBroker{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "rb-0"}}); !apierrors.IsForbidden(err) {
		t.Errorf("delete own FelixBroker: %v; want Forbidden", err)
	}
	var b felixv1.FelixBroker
	if err := saClient.Get(ctx, client.ObjectKey{Namespace: ns, Name: "other-0"}, &b); !apierrors.IsForbidden(err) {
		t.Errorf("read another cluster's FelixBroker: %v; want Forbidden", err)
	}
	var l coordinationv1.Lease
	if err := saClient.Get(ctx, client.ObjectKey{Namespace: ns, Name: "other-0"}, &l); !apierrors.IsForbidden(err) {
		t.Errorf("read another cluster's Lease: %v; want Forbidden", err)
	}
	// Authorization data: the users and its own cluster, nothing else,
	// and never a certificate Secret (the CA key is in one).
	var users felixv1.FelixUserList
	if err := saClient.List(ctx, &users, client.InNamespace(ns)); err != nil {
		t.Errorf("list FelixUsers as the broker SA: %v", err)
	}
	var fc felixv1.FelixCluster
	if err := saClient.Get(ctx, client.ObjectKey{Namespace: ns, Name: "rb"}, &fc); err != nil {
		t.Errorf("read own FelixCluster: %v", err)
	}
	if err := saClient.Get(ctx, client.ObjectKey{Namespace: ns, Name: "other"}, &fc); !apierrors.IsForbidden(err) {
		t.Errorf("read another FelixCluster: %v; want Forbidden", err)
	}
	var sec corev1.Secret
	if err := saClient.Get(ctx, client.ObjectKey{Namespace: ns, Name: controllers.CASecretName("rb")}, &sec); !apierrors.IsForbidden(err) {
		t.Errorf("read the CA Secret: %v; want Forbidden", err)
	}
	var own coordinationv1.Lease
	if err := saClient.Get(ctx, client.ObjectKey{Namespace: ns, Name: "rb-0"}, &own); err != nil {
		t.Fatal(err)
	}
	if err := saClient.Delete(ctx, &own); !apierrors.IsForbidden(err) {
		t.Errorf("delete own Lease: %v; want Forbidden", err)
	}
}

func errString(err error) string {
	if err == nil {
		return ""
	}
	return err.Error()
}
