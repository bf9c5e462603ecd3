package main

import (
	"bytes"
	"context"
	"testing"
	"time"

	coordinationv1 "k8s.io/api/coordination/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	felixv1 "felix.dev/felix/api/v1alpha1"
	"felix.dev/felix/internal/testenv"
)

// TestOperatorCommand runs `felix operator --leader-elect` against a real
// API server: it takes the leader-election Lease and reconciles a
// FelixCluster into broker pods.
func TestOperatorCommand(t *testing.T) {
	env := testenv.Start(t)
	t.Setenv("KUBECONFIG", env.Kubeconfig)
	ctx, cancel := context.WithCancel(context.Background())
	var stderr bytes.Buffer
	root := newRootCmd()
	root.SetArgs([]string{"operator", "--leader-elect", "--leader-election-namespace", "default",
		"--metrics-bind-address", "0", "--health-probe-bind-address", "127.0.0.1:0"})
	root.SetErr(&stderr)
	done := make(chan error, 1)
	go func() { done <- root.ExecuteContext(ctx) }()
	defer func() {
		cancel()
		select {
		case err := <-done:
			if err != nil {
				t.Errorf("operator exited with %v", err)
			}
		case <-time.After(20 * time.Second):
			t.Error("operator did not stop")
		}
	}()

	c := env.Client
	fc := &felixv1.FelixCluster{ObjectMeta: metav1.ObjectMeta{Namespace: "default", Name: "op"}, Spec: felixv1.FelixClusterSpec{Brokers: 1, Image: "felix:test"}}
	if err := c.Create(ctx, fc); err != nil {
		t.Fatal(err)
	}
	deadline := time.Now().Add(30 * time.Second)
	for {
		var pods corev1.PodList
		var lease coordinationv1.Lease
		_ = c.List(ctx, &pods, client.InNamespace("default"))
		leaseErr := c.Get(ctx, client.ObjectKey{Namespace: "default", Name: "felix-operator.felix.dev"}, &lease)
		if len(pods.Items) == 1 && leaseErr == nil && lease.Spec.HolderIdentity != nil {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("operator did not lead and reconcile: pods %d, lease %v; stderr:\n%s", len(pods.Items), leaseErr, stderr.String())
		}
		time.Sleep(100 * time.Millisecond)
	}
}
