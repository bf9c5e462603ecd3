package main

import (
	"context"
	"crypto/tls"
	"net/http"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/go-logr/logr"
	authenticationv1 "k8s.io/api/authentication/v1"
	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/yaml"
	"k8s.io/client-go/rest"
	"k8s.io/utils/ptr"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
	metricsserver "sigs.k8s.io/controller-runtime/pkg/metrics/server"

	felixv1 "felix.dev/felix/api/v1alpha1"
	"felix.dev/felix/controllers"
	"felix.dev/felix/internal/testenv"
)

// TestOperatorMetrics_SecureByDefault serves the operator's metrics as
// `felix operator` does by default (HTTPS, authentication and
// authorization by the API server) and scrapes them: no token is refused,
// a token of a ServiceAccount without felix-metrics-reader is refused, a
// token of one bound to it is served.
func TestOperatorMetrics_SecureByDefault(t *testing.T) {
	env := testenv.Start(t)
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	c := env.Client

	o := operatorOptions{metricsAddr: "127.0.0.1:0", metricsSecure: true}
	opts := metricsOptions(o)
	if !opts.SecureServing || opts.FilterProvider == nil {
		t.Fatalf("default metrics options are not secure: %+v", opts)
	}
	httpClient, err := rest.HTTPClientFor(env.Config)
	if err != nil {
		t.Fatal(err)
	}
	srv, err := metricsserver.NewServer(opts, env.Config, httpClient)
	if err != nil {
		t.Fatal(err)
	}
	sctx, scancel := context.WithCancel(ctx)
	done := make(chan error, 1)
	go func() { done <- srv.Start(sctx) }()
	defer func() { scancel(); <-done }()
	addrOf, ok := srv.(interface{ GetBindAddr() string })
	if !ok {
		t.Fatal("metrics server does not tell its address")
	}
	var addr string
	for deadline := time.Now().Add(10 * time.Second); addr == ""; {
		addr = addrOf.GetBindAddr()
		if time.Now().After(deadline) {
			t.Fatal("metrics server did not listen")
		}
		time.Sleep(20 * time.Millisecond)
	}

	// The reader role as shipped, and two ServiceAccounts, one bound to it.
	data, err := os.ReadFile(filepath.Join(testenv.RepoRoot(), "config", "rbac", "metrics_reader_role.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	var reader rbacv1.ClusterRole
	if err := yaml.Unmarshal(data, &reader); err != nil {
		t.Fatal(err)
	}
	if err := c.Create(ctx, &reader); err != nil {
		t.Fatal(err)
	}
	token := func(sa string) string {
		t.Helper()
		acct := &corev1.ServiceAccount{ObjectMeta: metav1.ObjectMeta{Namespace: "default", Name: sa}}
		if err := c.Create(ctx, acct); err != nil {
			t.Fatal(err)
		}
		tr := &authenticationv1.TokenRequest{Spec: authenticationv1.TokenRequestSpec{ExpirationSeconds: ptr.To[int64](3600)}}
		if err := c.SubResource("token").Create(ctx, acct, tr); err != nil {
			t.Fatal(err)
		}
		return tr.Status.Token
	}
	scraper, stranger := token("scraper"), token("stranger")
	if err := c.Create(ctx, &rbacv1.ClusterRoleBinding{
		ObjectMeta: metav1.ObjectMeta{Name: "scraper"},
		RoleRef:    rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "ClusterRole", Name: reader.Name},
		Subjects:   []rbacv1.Subject{{Kind: rbacv1.ServiceAccountKind, Namespace: "default", Name: "scraper"}},
	}); err != nil {
		t.Fatal(err)
	}

	// The certificate is self-signed: the test checks authentication of
	// the scraper, not of the server.
	hc := &http.Client{Timeout: 5 * time.Second, Transport: &http.Transport{TLSClientConfig: &tls.Config{InsecureSkipVerify: true}}} //nolint:gosec // self-signed test certificate
	scrape := func(token string) int {
		t.Helper()
		req, err := http.NewRequestWithContext(ctx, http.MethodGet, "https://"+addr+"/metrics", nil)
		if err != nil {
			t.Fatal(err)
		}
		if token != "" {
			req.Header.Set("Authorization", "Bearer "+token)
		}
		resp, err := hc.Do(req)
		if err != nil {
			t.Fatalf("scrape: %v", err)
		}
		_ = resp.Body.Close()
		return resp.StatusCode
	}
	if code := scrape(""); code != http.StatusUnauthorized && code != http.StatusForbidden {
		t.Errorf("scrape without a token: %d; want 401 or 403", code)
	}
	if code := scrape(stranger); code != http.StatusForbidden {
		t.Errorf("scrape by a ServiceAccount without felix-metrics-reader: %d; want 403", code)
	}
	// RBAC and the filter's cache may lag the binding a moment.
	for deadline := time.Now().Add(15 * time.Second); ; {
		code := scrape(scraper)
		if code == http.StatusOK {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("scrape by a felix-metrics-reader: %d; want 200", code)
		}
		time.Sleep(200 * time.Millisecond)
	}
}

// TestOperatorMetrics_PlainWhenAsked: --metrics-secure=false serves plain
// HTTP without a filter (development only).
func TestOperatorMetrics_PlainWhenAsked(t *testing.T) {
	cmd := newOperatorCmd()
	if err := cmd.ParseFlags([]string{"--metrics-secure=false", "--metrics-bind-address=127.0.0.1:0", "--watch-namespace=a", "--watch-namespaces=b,c"}); err != nil {
		t.Fatal(err)
	}
	secure, _ := cmd.Flags().GetBool("metrics-secure")
	ns, _ := cmd.Flags().GetStringSlice("watch-namespaces")
	opts := metricsOptions(operatorOptions{metricsAddr: "127.0.0.1:0", metricsSecure: secure})
	if opts.SecureServing || opts.FilterProvider != nil {
		t.Errorf("--metrics-secure=false: %+v; want plain", opts)
	}
	got := watchedNamespaces(ns)
	if len(got) != 3 {
		t.Errorf("--watch-namespace a --watch-namespaces b,c: %v; want a, b, c", got)
	}
	if watchedNamespaces(nil) != nil {
		t.Error("no --watch-namespaces must watch every namespace")
	}
}

// TestOperatorWatchNamespaces runs the operator's manager as
// `felix operator --watch-namespaces a` builds it: a FelixCluster in a gets
// its brokers, one in b is never reconciled.
func TestOperatorWatchNamespaces(t *testing.T) {
	env := testenv.Start(t)
	c := env.Client
	ctx, cancel := context.WithCancel(context.Background())
	for _, ns := range []string{"a", "b"} {
		if err := c.Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns}}); err != nil {
			t.Fatal(err)
		}
	}
	o := operatorOptions{watchNamespaces: []string{"a"}, metricsAddr: "0", probeAddr: "0", maxClockSkew: time.Second}
	opts := managerOptions(o, logr.Discard())
	// Another test of this binary runs the same controllers.
	opts.Controller.SkipNameValidation = ptr.To(true)
	mgr, err := ctrl.NewManager(env.Config, opts)
	if err != nil {
		t.Fatal(err)
	}
	if err := controllers.Setup(mgr, controllerOptions(o)); err != nil {
		t.Fatal(err)
	}
	done := make(chan error, 1)
	go func() { done <- mgr.Start(ctx) }()
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
	// b first: by the time a is reconciled, b had every chance.
	for _, ns := range []string{"b", "a"} {
		fc := &felixv1.FelixCluster{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "w"}, Spec: felixv1.FelixClusterSpec{Brokers: 1, Image: "felix:test"}}
		if err := c.Create(ctx, fc); err != nil {
			t.Fatal(err)
		}
	}
	for deadline := time.Now().Add(30 * time.Second); ; {
		var fc felixv1.FelixCluster
		if err := c.Get(ctx, client.ObjectKey{Namespace: "a", Name: "w"}, &fc); err == nil && fc.Status.ObservedGeneration == fc.Generation {
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("the cluster in the watched namespace was not reconciled")
		}
		time.Sleep(50 * time.Millisecond)
	}
	var pods corev1.PodList
	if err := c.List(ctx, &pods, client.InNamespace("a")); err != nil || len(pods.Items) != 1 {
		t.Errorf("pods in a: %d (%v); want 1", len(pods.Items), err)
	}
	var fb felixv1.FelixCluster
	if err := c.Get(ctx, client.ObjectKey{Namespace: "b", Name: "w"}, &fb); err != nil {
		t.Fatal(err)
	}
	if fb.Status.ObservedGeneration != 0 {
		t.Errorf("the cluster in b was reconciled (observed generation %d)", fb.Status.ObservedGeneration)
	}
	if err := c.List(ctx, &pods, client.InNamespace("b")); err != nil || len(pods.Items) != 0 {
		t.Errorf("pods in b: %d (%v); want none", len(pods.Items), err)
	}
	var sas corev1.ServiceAccountList
	if err := c.List(ctx, &sas, client.InNamespace("b"), client.MatchingLabels{"felix.dev/cluster": "w"}); err != nil || len(sas.Items) != 0 {
		t.Errorf("broker ServiceAccounts in b: %d (%v); want none", len(sas.Items), err)
	}
}
