package e2e

import (
	"bytes"
	"context"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"net/http"
	"os"
	"path/filepath"
	"sync"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	felixv1 "felix.dev/felix/api/v1alpha1"
	felixclient "felix.dev/felix/broker/client"
	"felix.dev/felix/controllers"
	"felix.dev/felix/internal/pki"
	"felix.dev/felix/internal/podrunner"
)

// The harness runs brokers as the operator's pods do: secure, each with
// its <broker>-tls Secret in a directory laid out as the kubelet mounts
// it and kept in step with the Secret, so that rotation reaches the
// broker. FELIX_E2E_INSECURE=1 runs them with --insecure-no-tls instead
// (the benchmarks' plaintext comparison).

// insecureFromEnv reports whether FELIX_E2E_INSECURE asks for plaintext
// brokers.
func insecureFromEnv() bool { return os.Getenv("FELIX_E2E_INSECURE") == "1" }

// adminUser is the FelixUser the harness's clients connect as.
const adminUser = "e2e-admin"

// adminPrefixes are the stream name prefixes the end-to-end tests use;
// adminUser may do everything on them.
var adminPrefixes = []string{"orders", "events", "bench", "sec-", "tally"}

// allOperations are the four stream operations.
var allOperations = []felixv1.StreamOperation{felixv1.OperationAppend, felixv1.OperationRead,
	felixv1.OperationTrim, felixv1.OperationDescribe}

// secretSync keeps directories in step with Secrets, as the kubelet does
// with mounted Secret volumes, polling every interval; it records every
// distinct tls.crt serial each Secret had.
type secretSync struct {
	c         client.Client
	namespace string

	mu      sync.Mutex
	dirs    map[string]string   // Secret name -> directory
	written map[string][]byte   // Secret name -> the content last written (joined)
	serials map[string][]string // Secret name -> serials seen, in order
	seq     int
}

func newSecretSync(ctx context.Context, c client.Client, namespace string, interval time.Duration) *secretSync {
	s := &secretSync{c: c, namespace: namespace, dirs: map[string]string{}, written: map[string][]byte{}, serials: map[string][]string{}}
	go func() {
		tick := time.NewTicker(interval)
		defer tick.Stop()
		for {
			select {
			case <-ctx.Done():
				return
			case <-tick.C:
				s.mu.Lock()
				names := make([]string, 0, len(s.dirs))
				for n := range s.dirs {
					names = append(names, n)
				}
				s.mu.Unlock()
				for _, n := range names {
					_, _ = s.syncOne(ctx, n)
				}
			}
		}
	}()
	return s
}

// track waits until Secret name holds a certificate, writes it into dir
// and keeps dir in step from then on.
func (s *secretSync) track(t testing.TB, name, dir string) {
	t.Helper()
	s.mu.Lock()
	s.dirs[name] = dir
	s.mu.Unlock()
	deadline := time.Now().Add(60 * time.Second)
	for {
		ok, err := s.syncOne(context.Background(), name)
		if ok {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("Secret %s/%s not usable within 60s: %v", s.namespace, name, err)
		}
		time.Sleep(100 * time.Millisecond)
	}
}

// syncOne writes Secret name into its directory if it changed; ok is
// whether the directory holds a certificate now.
func (s *secretSync) syncOne(ctx context.Context, name string) (bool, error) {
	var sec corev1.Secret
	if err := s.c.Get(ctx, client.ObjectKey{Namespace: s.namespace, Name: name}, &sec); err != nil {
		return false, err
	}
	if len(sec.Data[controllers.SecretKeyTLSCert]) == 0 {
		return false, errors.New("no certificate in it yet")
	}
	files := map[string][]byte{pki.CertFile: sec.Data[controllers.SecretKeyTLSCert],
		pki.KeyFile: sec.Data[controllers.SecretKeyTLSKey], pki.CAFile: sec.Data[controllers.SecretKeyCACert]}
	joined := bytes.Join([][]byte{files[pki.CertFile], files[pki.KeyFile], files[pki.CAFile]}, []byte{0})
	s.mu.Lock()
	defer s.mu.Unlock()
	if bytes.Equal(s.written[name], joined) {
		return true, nil
	}
	s.seq++
	if _, err := podrunner.WriteAtomicDir(s.dirs[name], files, time.Unix(0, int64(s.seq))); err != nil {
		return false, err
	}
	s.written[name] = joined
	if certs, err := pki.ParseCertsPEM(files[pki.CertFile]); err == nil {
		serial := certs[0].SerialNumber.String()
		if h := s.serials[name]; len(h) == 0 || h[len(h)-1] != serial {
			s.serials[name] = append(h, serial)
		}
	}
	return true, nil
}

// serialsOf returns the distinct certificate serials Secret name had.
func (s *secretSync) serialsOf(name string) []string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return append([]string(nil), s.serials[name]...)
}

// clusterRef is the cluster as "namespace/name", what clients require of
// a broker's identity.
func (c *cluster) clusterRef() string { return c.namespace + "/" + c.name }

// brokerTLSDir is where broker name's Secret is kept.
func (c *cluster) brokerTLSDir(name string) string { return filepath.Join(c.dir, "tls", name) }

// userDir is where FelixUser name's Secret is kept.
func (c *cluster) userDir(name string) string { return filepath.Join(c.dir, "users", name) }

// createUser creates a FelixUser of the cluster with grants, waits for its
// certificate Secret and keeps it in userDir(name).
func (c *cluster) createUser(t testing.TB, name string, grants []felixv1.StreamGrant) string {
	t.Helper()
	u := &felixv1.FelixUser{ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: c.namespace},
		Spec: felixv1.FelixUserSpec{Cluster: c.name, Authorization: felixv1.UserAuthorization{Grants: grants}}}
	if err := c.c.Create(context.Background(), u); err != nil && !apierrors.IsAlreadyExists(err) {
		t.Fatal(err)
	}
	dir := c.userDir(name)
	c.secrets.track(t, controllers.UserSecretName(name), dir)
	return dir
}

// prefixGrants grants ops on every stream starting with one of prefixes.
func prefixGrants(ops []felixv1.StreamOperation, prefixes ...string) []felixv1.StreamGrant {
	var g []felixv1.StreamGrant
	for _, p := range prefixes {
		g = append(g, felixv1.StreamGrant{Prefix: p, Operations: ops})
	}
	return g
}

// clientTLSAs is the client TLS configuration of FelixUser user's kept
// files, read now (so a new connection presents the current
// certificate); nil for insecure brokers.
func (c *cluster) clientTLSAs(user string) (*tls.Config, error) {
	if c.insecure {
		return nil, nil
	}
	return felixclient.TLSFromDir(c.userDir(user), c.clusterRef(), "")
}

// dial connects to a broker's client port as the harness's admin user.
func (c *cluster) dial(ctx context.Context, addr string) (*felixclient.Client, error) {
	return c.dialAs(ctx, addr, adminUser)
}

// dialAs connects to a broker's client port as FelixUser user.
func (c *cluster) dialAs(ctx context.Context, addr, user string) (*felixclient.Client, error) {
	conf, err := c.clientTLSAs(user)
	if err != nil {
		return nil, err
	}
	return felixclient.Dial(ctx, addr, felixclient.Options{TLS: conf})
}

// clientArgs are the TLS flags of a felix client command (felix bench)
// connecting as the admin user.
func (c *cluster) clientArgs() []string {
	if c.insecure {
		return nil
	}
	return []string{"--tls-dir", c.userDir(adminUser), "--cluster", c.clusterRef()}
}

// clusterCA is the cluster's CA, read from the operator's <cluster>-ca
// Secret.
func (c *cluster) clusterCA(t testing.TB) *pki.CA {
	t.Helper()
	var sec corev1.Secret
	if err := c.c.Get(context.Background(), client.ObjectKey{Namespace: c.namespace, Name: controllers.CASecretName(c.name)}, &sec); err != nil {
		t.Fatal(err)
	}
	ca, err := pki.ParseCA(sec.Data[controllers.SecretKeyCACert], sec.Data[controllers.SecretKeyCAKey])
	if err != nil {
		t.Fatal(err)
	}
	return ca
}

// issue signs a certificate for id with ca, valid from now-ClockSkew for
// validity, and returns it with the CA as a trust pool.
func issue(t testing.TB, ca *pki.CA, id pki.Identity, now time.Time, validity time.Duration) (*tls.Certificate, *x509.CertPool) {
	t.Helper()
	certPEM, keyPEM, err := ca.Issue(pki.LeafRequest{Identity: id, Now: now, Validity: validity}, nil)
	if err != nil {
		t.Fatal(err)
	}
	cert, err := pki.ParseLeaf(certPEM, keyPEM)
	if err != nil {
		t.Fatal(err)
	}
	pool := x509.NewCertPool()
	pool.AddCert(ca.Cert)
	return &cert, pool
}

// metricsClient is an HTTP client of the brokers' metrics ports: over
// HTTPS with an operator certificate of the cluster's CA (plain HTTP for
// insecure brokers, whose /metrics is on --http).
func (c *cluster) metricsClient(t testing.TB) *http.Client {
	t.Helper()
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.metricsHTTP != nil {
		return c.metricsHTTP
	}
	hc := &http.Client{Timeout: 5 * time.Second}
	if !c.insecure {
		cert, pool := issue(t, c.clusterCA(t), pki.Identity{Namespace: c.namespace, Cluster: c.name, Kind: pki.KindOperator, Name: "e2e"},
			time.Now(), time.Hour)
		hc.Transport = &http.Transport{TLSClientConfig: pki.ClientConfig(cert, pool, c.clusterRef(), "")}
	}
	c.metricsHTTP = hc
	return hc
}

// metricsURL is the /metrics address of broker b.
func (c *cluster) metricsURL(b *brokerProc) string {
	if c.insecure {
		return "http://" + b.http + "/metrics"
	}
	return "https://" + b.metrics + "/metrics"
}
