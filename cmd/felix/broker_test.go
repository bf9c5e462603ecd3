package main

import (
	"bytes"
	"context"
	"crypto/tls"
	"crypto/x509"
	"encoding/json"
	"errors"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/go-logr/logr"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"

	felixv1 "felix.dev/felix/api/v1alpha1"
	"felix.dev/felix/broker/auth"
	brokerclient "felix.dev/felix/broker/client"
	"felix.dev/felix/broker/record"
	"felix.dev/felix/broker/wire"
	"felix.dev/felix/controllers"
	"felix.dev/felix/internal/pki"
	"felix.dev/felix/internal/testenv"
)

// Cluster mode refuses to start without --tls-dir (unless
// --insecure-no-tls), and the modes' TLS flags do not mix; each refusal
// comes before the data directory is touched.
func TestBrokerSecurityFlags(t *testing.T) {
	for _, tc := range []struct {
		name string
		args []string
	}{
		{"cluster without --tls-dir", nil},
		{"cluster with --tls-cert", []string{"--tls-cert", "c", "--tls-key", "k"}},
		{"insecure with --tls-dir", []string{"--insecure-no-tls", "--tls-dir", "d"}},
		{"insecure with --peer-listen", []string{"--insecure-no-tls", "--peer-listen", "127.0.0.1:0"}},
		{"standalone with --tls-dir", []string{"--standalone", "--tls-dir", "d"}},
		{"standalone --tls-client-ca without a certificate", []string{"--standalone", "--tls-client-ca", "ca.crt"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			dataDir := filepath.Join(t.TempDir(), "data")
			cmd := newBrokerCmd()
			cmd.SetOut(&bytes.Buffer{})
			cmd.SetErr(&bytes.Buffer{})
			args := []string{"--data-dir", dataDir, "--listen", "127.0.0.1:0", "--http", "127.0.0.1:0",
				"--cluster", "logs", "--broker", "logs-0", "--namespace", "prod", "--kubeconfig", filepath.Join(t.TempDir(), "none")}
			cmd.SetArgs(append(args, tc.args...))
			if err := cmd.ExecuteContext(context.Background()); err == nil {
				t.Fatal("accepted")
			}
			if _, err := os.Stat(dataDir); !os.IsNotExist(err) {
				t.Fatalf("data directory touched: %v", err)
			}
		})
	}
}

// TestBrokerCommandSecureClusterMode runs `felix operator` and a secure
// `felix broker` (certificate files in --tls-dir, a client, peer, probe and
// metrics port) against a real API server: the operator grants the
// registration and records both addresses; a client certificate with no
// FelixUser is refused (NotAuthorized), and so is the certificate of a
// FelixUser deleted and recreated under the same name; the probe port answers /live in
// plain HTTP and serves no /metrics; the metrics port wants credentials.
func TestBrokerCommandSecureClusterMode(t *testing.T) {
	env := testenv.Start(t)
	t.Setenv("KUBECONFIG", env.Kubeconfig)
	ctx, cancel := context.WithTimeout(context.Background(), 90*time.Second)
	defer cancel()
	opCtx, stopOp := context.WithCancel(ctx)
	// The operator's own manager and controllers, in this process: other
	// tests of this binary run the same controllers, so controller names
	// are not checked for uniqueness (TestOperatorCommand runs the whole
	// command).
	o := operatorOptions{metricsAddr: "0", probeAddr: "0", maxClockSkew: time.Second}
	mopts := managerOptions(o, logr.Discard())
	mopts.Controller.SkipNameValidation = ptr.To(true)
	mgr, err := ctrl.NewManager(env.Config, mopts)
	if err != nil {
		t.Fatal(err)
	}
	if err := controllers.Setup(mgr, controllerOptions(o)); err != nil {
		t.Fatal(err)
	}
	opDone := make(chan error, 1)
	go func() { opDone <- mgr.Start(opCtx) }()
	defer func() { stopOp(); <-opDone }()

	const ns, cluster, broker = "default", "sec", "sec-0"
	if err := env.Client.Create(ctx, &felixv1.FelixCluster{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: cluster},
		Spec: felixv1.FelixClusterSpec{Brokers: 1, Image: "felix:test"}}); err != nil {
		t.Fatal(err)
	}
	ca, err := pki.NewCA("test-ca", time.Now(), 24*time.Hour, nil)
	if err != nil {
		t.Fatal(err)
	}
	issue := func(kind pki.Kind, name string) ([]byte, []byte) {
		c, k, err := ca.Issue(pki.LeafRequest{Identity: pki.Identity{Namespace: ns, Cluster: cluster, Kind: kind, Name: name},
			Now: time.Now(), Validity: time.Hour}, nil)
		if err != nil {
			t.Fatal(err)
		}
		return c, k
	}
	tlsDir := t.TempDir()
	bc, bk := issue(pki.KindBroker, broker)
	for name, b := range map[string][]byte{pki.CertFile: bc, pki.KeyFile: bk, pki.CAFile: ca.CertPEM()} {
		if err := os.WriteFile(filepath.Join(tlsDir, name), b, 0o600); err != nil {
			t.Fatal(err)
		}
	}

	brCtx, stopBr := context.WithCancel(ctx)
	out := &syncBuffer{}
	br := newRootCmd()
	br.SetArgs([]string{"broker", "--cluster", cluster, "--broker", broker, "--namespace", ns, "--data-dir", t.TempDir(),
		"--listen", "127.0.0.1:0", "--http", "127.0.0.1:0", "--peer-listen", "127.0.0.1:0", "--metrics-listen", "127.0.0.1:0",
		"--tls-dir", tlsDir, "--fsync", "none", "--heartbeat-interval", "500ms", "--node-expiry", "5s"})
	br.SetOut(out)
	br.SetErr(&bytes.Buffer{})
	brDone := make(chan error, 1)
	go func() { brDone <- br.ExecuteContext(brCtx) }()
	defer func() {
		stopBr()
		if err := <-brDone; err != nil {
			t.Errorf("broker: %v", err)
		}
	}()
	var serving map[string]any
	for serving == nil {
		select {
		case err := <-brDone:
			t.Fatalf("broker exited: %v", err)
		case <-ctx.Done():
			t.Fatal("broker did not serve")
		case <-time.After(50 * time.Millisecond):
		}
		for _, line := range strings.Split(out.String(), "\n") {
			var m map[string]any
			if json.Unmarshal([]byte(line), &m) == nil && m["msg"] == "serving" {
				serving = m
			}
		}
	}
	listenAddr, peerAddr := serving["listen"].(string), serving["peer"].(string)
	httpAddr, metricsAddr := serving["http"].(string), serving["metrics"].(string)

	var fb felixv1.FelixBroker
	if err := env.Client.Get(ctx, client.ObjectKey{Namespace: ns, Name: broker}, &fb); err != nil {
		t.Fatal(err)
	}
	if fb.Status.PeerAddress != peerAddr || fb.Status.Address != listenAddr || fb.Status.Incarnation != 1 {
		t.Fatalf("registration: address %q peer %q incarnation %d; want %s, %s, 1", fb.Status.Address, fb.Status.PeerAddress, fb.Status.Incarnation, listenAddr, peerAddr)
	}

	roots := x509.NewCertPool()
	roots.AddCert(ca.Cert)
	uc, uk := issue(pki.KindUser, "nobody")
	userCert, err := pki.ParseLeaf(uc, uk)
	if err != nil {
		t.Fatal(err)
	}
	cl, err := brokerclient.Dial(ctx, listenAddr, brokerclient.Options{TLS: pki.ClientConfig(&userCert, roots, ns+"/"+cluster, "")})
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = cl.Close() }()
	_, err = cl.Describe(ctx, record.ShardID{Stream: "orders"})
	var we *wire.Error
	if !errors.As(err, &we) || we.Code != wire.CodeNotAuthorized {
		t.Fatalf("describe by a user with no FelixUser: %v, want NotAuthorized", err)
	}

	// A FelixUser deleted and recreated under the same name: the earlier
	// user's certificate (bound to its uid, and still valid) is refused,
	// the new user's is not.
	aliceUser := func() *felixv1.FelixUser {
		return &felixv1.FelixUser{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "alice"}, Spec: felixv1.FelixUserSpec{Cluster: cluster,
			Authorization: felixv1.UserAuthorization{Grants: []felixv1.StreamGrant{{Stream: "orders", Operations: []felixv1.StreamOperation{felixv1.OperationDescribe}}}}}}
	}
	dialUser := func(uid string) *brokerclient.Client {
		t.Helper()
		c, k, err := ca.Issue(pki.LeafRequest{Identity: pki.Identity{Namespace: ns, Cluster: cluster, Kind: pki.KindUser, Name: "alice"},
			UID: uid, Now: time.Now(), Validity: time.Hour}, nil)
		if err != nil {
			t.Fatal(err)
		}
		kp, err := pki.ParseLeaf(c, k)
		if err != nil {
			t.Fatal(err)
		}
		cl, err := brokerclient.Dial(ctx, listenAddr, brokerclient.Options{TLS: pki.ClientConfig(&kp, roots, ns+"/"+cluster, "")})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = cl.Close() })
		return cl
	}
	// describeRefusal is the NotAuthorized refusal of a Describe, nil when
	// the request was authorized (whatever else it answered).
	describeRefusal := func(cl *brokerclient.Client) *wire.Error {
		_, err := cl.Describe(ctx, record.ShardID{Stream: "orders"})
		var we *wire.Error
		if errors.As(err, &we) && we.Code == wire.CodeNotAuthorized {
			return we
		}
		return nil
	}
	waitAuthorized := func(what string, cl *brokerclient.Client, want bool) {
		t.Helper()
		for (describeRefusal(cl) == nil) != want {
			select {
			case <-ctx.Done():
				t.Fatalf("timed out waiting for %s", what)
			case <-time.After(50 * time.Millisecond):
			}
		}
	}
	first := aliceUser()
	if err := env.Client.Create(ctx, first); err != nil {
		t.Fatal(err)
	}
	oldCl := dialUser(string(first.UID))
	waitAuthorized("the first alice authorized", oldCl, true)
	if err := env.Client.Delete(ctx, first); err != nil {
		t.Fatal(err)
	}
	waitAuthorized("the deleted alice refused", oldCl, false)
	second := aliceUser()
	if err := env.Client.Create(ctx, second); err != nil {
		t.Fatal(err)
	}
	if second.UID == first.UID {
		t.Fatal("recreated FelixUser has the same uid")
	}
	waitAuthorized("the recreated alice authorized", dialUser(string(second.UID)), true)
	if we := describeRefusal(oldCl); we == nil || !strings.Contains(we.Message, "certificate was issued to an earlier FelixUser of this name") {
		t.Fatalf("the earlier alice's certificate after the recreation: %v, want the earlier-FelixUser refusal", we)
	}
	if we := describeRefusal(dialUser("")); we == nil {
		t.Fatal("a user certificate without a uid was authorized")
	}

	hc := &http.Client{Timeout: 5 * time.Second}
	for path, want := range map[string]int{"/live": 200, "/metrics": 404} {
		resp, err := hc.Get("http://" + httpAddr + path)
		if err != nil {
			t.Fatal(err)
		}
		_ = resp.Body.Close()
		if resp.StatusCode != want {
			t.Fatalf("probe port %s: %d, want %d", path, resp.StatusCode, want)
		}
	}
	hs := &http.Client{Timeout: 5 * time.Second, Transport: &http.Transport{TLSClientConfig: pki.ClientConfig(nil, roots, ns+"/"+cluster, "")}}
	resp, err := hs.Get("https://" + metricsAddr + "/metrics")
	if err != nil {
		t.Fatal(err)
	}
	_ = resp.Body.Close()
	if resp.StatusCode != http.StatusUnauthorized {
		t.Fatalf("metrics without credentials: %d, want 401", resp.StatusCode)
	}
}

// syncBuffer is a bytes.Buffer safe for one writer and one reader.
type syncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *syncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *syncBuffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}

// --tls-client-ca makes a standalone broker require client certificates
// of that CA; the principal is named by the certificate's CN.
func TestStandaloneClientCA(t *testing.T) {
	ca, err := pki.NewCA("standalone-ca", time.Now(), time.Hour, nil)
	if err != nil {
		t.Fatal(err)
	}
	id := pki.Identity{Namespace: "dev", Cluster: "solo", Kind: pki.KindBroker, Name: "solo"}
	certPEM, keyPEM, err := ca.Issue(pki.LeafRequest{Identity: id, Now: time.Now(), Validity: time.Hour}, nil)
	if err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	f := brokerFlags{tlsCert: filepath.Join(dir, "tls.crt"), tlsKey: filepath.Join(dir, "tls.key"), tlsClientCA: filepath.Join(dir, "ca.crt")}
	for p, b := range map[string][]byte{f.tlsCert: certPEM, f.tlsKey: keyPEM, f.tlsClientCA: ca.CertPEM()} {
		if err := os.WriteFile(p, b, 0o600); err != nil {
			t.Fatal(err)
		}
	}
	conf, authn, err := standaloneTLS(f)
	if err != nil {
		t.Fatal(err)
	}
	if conf.ClientAuth != tls.RequireAndVerifyClientCert || conf.ClientCAs == nil || authn == nil {
		t.Fatalf("client auth %v, CAs %v", conf.ClientAuth, conf.ClientCAs != nil)
	}
	leaf, _ := x509.ParseCertificate(mustLeaf(t, certPEM, keyPEM).Certificate[0])
	p, err := authn(&tls.ConnectionState{PeerCertificates: []*x509.Certificate{leaf}})
	if err != nil || p.Kind != auth.User || p.Name != "solo" {
		t.Fatalf("principal %v, %v", p, err)
	}
	if _, err := authn(&tls.ConnectionState{}); err == nil {
		t.Fatal("no certificate accepted")
	}
	// Without --tls-client-ca: TLS, no client authentication.
	f.tlsClientCA = ""
	if conf, authn, err := standaloneTLS(f); err != nil || conf.ClientAuth != tls.NoClientCert || authn != nil {
		t.Fatalf("plain TLS: %v %v %v", conf.ClientAuth, authn != nil, err)
	}
}

func mustLeaf(t *testing.T, certPEM, keyPEM []byte) tls.Certificate {
	t.Helper()
	c, err := pki.ParseLeaf(certPEM, keyPEM)
	if err != nil {
		t.Fatal(err)
	}
	return c
}
