package main

import (
	"context"
	"errors"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	ctrlclient "sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/envtest"

	felixv1 "felix.dev/felix/api/v1alpha1"
	"felix.dev/felix/broker/auth"
	"felix.dev/felix/internal/pki"
	"felix.dev/felix/internal/testenv"
)

// kubeFixture creates objects in an API server.
type kubeFixture struct {
	t *testing.T
	c ctrlclient.Client
}

// create creates obj and, when status is set, then writes its status.
func (k kubeFixture) create(obj ctrlclient.Object, status func()) {
	k.t.Helper()
	ctx := k.t.Context()
	if err := k.c.Create(ctx, obj); err != nil {
		k.t.Fatalf("create %T %s: %v", obj, obj.GetName(), err)
	}
	if status != nil {
		status()
		if err := k.c.Status().Update(ctx, obj); err != nil {
			k.t.Fatalf("status of %T %s: %v", obj, obj.GetName(), err)
		}
	}
}

func (k kubeFixture) namespace(name string) {
	k.create(&corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: name}}, nil)
}

func (k kubeFixture) cluster(ns, name string) {
	k.create(&felixv1.FelixCluster{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name},
		Spec: felixv1.FelixClusterSpec{Image: "felix:test", Brokers: 3}}, nil)
}

// broker creates FelixBroker cluster-ordinal with the given state,
// incarnation and address.
func (k kubeFixture) broker(ns, cluster string, ordinal int32, state felixv1.BrokerState, inc int64, addr string) {
	b := &felixv1.FelixBroker{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: cluster + "-" + strconv.Itoa(int(ordinal))},
		Spec: felixv1.FelixBrokerSpec{Cluster: cluster, Ordinal: ordinal}}
	k.create(b, func() { b.Status.State, b.Status.Incarnation, b.Status.Address = state, inc, addr })
}

// TestClusterBootstrapThroughKubeconfig: --cluster is resolved through a
// real API server: the client Service's LoadBalancer ingress first, then
// the addresses of the ready brokers by ordinal (Down, unregistered and
// other clusters' brokers left out); a missing cluster, a cluster without
// a ready broker and a user without RBAC are clear errors.
func TestClusterBootstrapThroughKubeconfig(t *testing.T) {
	env := testenv.Start(t)
	k := kubeFixture{t: t, c: env.Client}
	ctx, cancel := context.WithTimeout(t.Context(), 60*time.Second)
	defer cancel()

	const ns = "shop"
	k.namespace(ns)
	k.cluster(ns, "demo")
	k.broker(ns, "demo", 2, felixv1.BrokerUp, 1, "10.0.0.3:7100")
	k.broker(ns, "demo", 0, felixv1.BrokerUp, 4, "10.0.0.1:7100")
	k.broker(ns, "demo", 1, felixv1.BrokerDown, 2, "10.0.0.2:7100")
	k.broker(ns, "demo", 3, felixv1.BrokerUp, 0, "10.0.0.4:7100") // not registered yet
	k.cluster(ns, "idle")
	k.broker(ns, "idle", 0, felixv1.BrokerDown, 1, "10.0.1.1:7100")
	k.broker(ns, "idle", 1, felixv1.BrokerUp, 1, "")
	k.cluster(ns, "lb")
	k.broker(ns, "lb", 0, felixv1.BrokerUp, 1, "10.0.2.1:7100")
	svc := &corev1.Service{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "lb"}, Spec: corev1.ServiceSpec{
		Type:     corev1.ServiceTypeLoadBalancer,
		Selector: map[string]string{"app": "lb"},
		Ports:    []corev1.ServicePort{{Name: "felix", Port: 7100}, {Name: "http", Port: 7101}}}}
	k.create(svc, func() {
		svc.Status.LoadBalancer.Ingress = []corev1.LoadBalancerIngress{{IP: "203.0.113.7"}, {Hostname: "lb.example.com"}}
	})
	// A ClusterIP client Service adds nothing.
	k.create(&corev1.Service{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "demo"}, Spec: corev1.ServiceSpec{
		Selector: map[string]string{"app": "demo"}, Ports: []corev1.ServicePort{{Name: "felix", Port: 7100}}}}, nil)

	admin, err := openKubeconfig(kubeFlags{kubeconfig: env.Kubeconfig}).Reader()
	if err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		name    string
		ref     clusterRef
		want    []string
		wantErr error
		reason  string
		msg     string // the error message must say this
	}{
		{name: "ready brokers by ordinal", ref: clusterRef{ns, "demo"}, want: []string{"10.0.0.1:7100", "10.0.0.3:7100"}},
		{name: "load balancer first", ref: clusterRef{ns, "lb"}, want: []string{"203.0.113.7:7100", "lb.example.com:7100", "10.0.2.1:7100"}},
		{name: "no ready broker", ref: clusterRef{ns, "idle"}, wantErr: errNoReadyBrokers, reason: lookupNoReadyBrokers, msg: "shop/idle"},
		{name: "no such cluster", ref: clusterRef{ns, "nope"}, wantErr: errClusterNotFound, reason: lookupNotFound, msg: `no FelixCluster "nope" in namespace "shop"`},
		{name: "no such namespace", ref: clusterRef{"elsewhere", "demo"}, wantErr: errClusterNotFound, reason: lookupNotFound, msg: `namespace "elsewhere"`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got, err := clusterBootstrap(ctx, admin, tc.ref)
			if tc.wantErr == nil {
				if err != nil {
					t.Fatal(err)
				}
				if diff := cmp.Diff(tc.want, got); diff != "" {
					t.Fatalf("bootstrap (-want +got):\n%s", diff)
				}
				return
			}
			var le *clusterLookupError
			if !errors.Is(err, tc.wantErr) || !errors.As(err, &le) || le.reason != tc.reason || !strings.Contains(err.Error(), tc.msg) {
				t.Fatalf("bootstrap = %v, %v; want %v (%s) saying %q", got, err, tc.wantErr, tc.reason, tc.msg)
			}
		})
	}

	t.Run("no RBAC", func(t *testing.T) {
		user, err := env.Env.AddUser(envtest.User{Name: "nobody"}, nil)
		if err != nil {
			t.Fatal(err)
		}
		c, err := ctrlclient.New(user.Config(), ctrlclient.Options{Scheme: lookupScheme()})
		if err != nil {
			t.Fatal(err)
		}
		_, err = clusterBootstrap(ctx, c, clusterRef{ns, "demo"})
		var le *clusterLookupError
		if !errors.Is(err, errForbidden) || !errors.As(err, &le) || le.reason != lookupForbidden ||
			!strings.Contains(err.Error(), `get on felixclusters.felix.dev in namespace "shop"`) {
			t.Fatalf("err = %v, want Forbidden naming get on felixclusters", err)
		}
	})
}

// TestClusterFlagThroughKubeconfig: a client command given --cluster
// NAME -n NAMESPACE and a kubeconfig, no address, reaches the broker the
// cluster's FelixBroker advertises, and still requires the broker's
// certificate to be of that cluster.
func TestClusterFlagThroughKubeconfig(t *testing.T) {
	clearTLSEnv(t)
	t.Setenv(envBootstrap, "")
	env := testenv.Start(t)
	b := startTLSBroker(t) // a broker of ns/c
	b.table.Set("alice", "uid-alice", []auth.Grant{{Stream: "orders", Ops: []auth.Operation{auth.OpAppend, auth.OpDescribe}}})
	alice := issueDir(t, b.ca, pki.Identity{Namespace: "ns", Cluster: "c", Kind: pki.KindUser, Name: "alice"})

	k := kubeFixture{t: t, c: env.Client}
	k.namespace("ns")
	k.cluster("ns", "c")
	k.broker("ns", "c", 0, felixv1.BrokerUp, 1, b.addr)
	k.cluster("ns", "other") // whose broker advertises the same address
	k.broker("ns", "other", 0, felixv1.BrokerUp, 1, b.addr)
	k.cluster("ns", "down")
	k.broker("ns", "down", 0, felixv1.BrokerDown, 1, b.addr)

	out, err := runFelix(t, "append", "--cluster", "c", "-n", "ns", "--kubeconfig", env.Kubeconfig, "--stream", "orders", "--payload", "hi", "--tls-dir", alice)
	if err != nil || !strings.Contains(out, `"tail":1`) {
		t.Fatalf("append --cluster c -n ns: %v\n%s", err, out)
	}
	// The context's namespace: the kubeconfig names none, so default,
	// where there is no cluster c.
	out, err = runFelix(t, "describe", "--cluster", "c", "--kubeconfig", env.Kubeconfig, "--stream", "orders", "--tls-dir", alice)
	if m := errorLine(t, out); err == nil || m["error"] != errNameClusterLookup || m["reason"] != lookupNotFound ||
		!strings.Contains(m["message"].(string), `namespace "default"`) {
		t.Fatalf("describe --cluster c in default: %v, %v", err, m)
	}
	for _, tc := range []struct {
		name, cluster, wantError, wantReason string
	}{
		{"another cluster's broker", "other", errNameTLS, "WrongCluster"},
		{"no ready broker", "down", errNameClusterLookup, lookupNoReadyBrokers},
		{"no such cluster", "nope", errNameClusterLookup, lookupNotFound},
	} {
		t.Run(tc.name, func(t *testing.T) {
			out, err := runFelix(t, "describe", "--cluster", "ns/"+tc.cluster, "--kubeconfig", env.Kubeconfig, "--stream", "orders", "--tls-dir", alice)
			if err == nil {
				t.Fatalf("succeeded: %s", out)
			}
			if m := errorLine(t, out); m["error"] != tc.wantError || m["reason"] != tc.wantReason {
				t.Fatalf("printed %v, want error %s reason %s", m, tc.wantError, tc.wantReason)
			}
		})
	}
}
