package localcluster

import (
	"context"
	"crypto/tls"
	"errors"
	"net"
	"os"
	"path/filepath"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"felix.dev/felix/broker/auth"
	"felix.dev/felix/broker/controlplane"
	"felix.dev/felix/broker/wire"
	"felix.dev/felix/internal/pki"
)

// testSecret issues a certificate of identity id by ca and returns it as
// a certificate Secret.
func testSecret(t *testing.T, ca *pki.CA, id pki.Identity, now time.Time) *corev1.Secret {
	t.Helper()
	crt, key, err := ca.Issue(pki.LeafRequest{Identity: id, Now: now, Validity: time.Hour}, nil)
	if err != nil {
		t.Fatal(err)
	}
	return &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Namespace: id.Namespace, Name: id.Name},
		Data: map[string][]byte{pki.CertFile: crt, pki.KeyFile: key, pki.CAFile: ca.CertPEM()}}
}

func TestUserSecretFilesAndClientConfig(t *testing.T) {
	now := time.Now()
	ca, err := pki.NewCA("test", now, 24*time.Hour, nil)
	if err != nil {
		t.Fatal(err)
	}
	user := testSecret(t, ca, pki.Identity{Namespace: "ns", Cluster: "demo", Kind: pki.KindUser, Name: "alice"}, now)
	broker := testSecret(t, ca, pki.Identity{Namespace: "ns", Cluster: "demo", Kind: pki.KindBroker, Name: "demo-0"}, now)

	// The files are the layout the CLI's --tls-dir reads; the key is
	// private.
	dir := filepath.Join(t.TempDir(), "users", "alice")
	if err := WriteSecretFiles(user, dir); err != nil {
		t.Fatal(err)
	}
	for name, mode := range map[string]os.FileMode{pki.CertFile: 0o644, pki.KeyFile: 0o600, pki.CAFile: 0o644} {
		fi, err := os.Stat(filepath.Join(dir, name))
		if err != nil {
			t.Fatal(err)
		}
		if fi.Mode().Perm() != mode {
			t.Errorf("%s: mode %v, want %v", name, fi.Mode().Perm(), mode)
		}
	}
	if _, err := pki.LoadClientFiles(pki.DirFiles(dir), "ns/demo", ""); err != nil {
		t.Fatalf("the written files do not load as client files: %v", err)
	}
	// Written again (a renewal), the files are replaced.
	if err := WriteSecretFiles(user, dir); err != nil {
		t.Fatal(err)
	}
	if left, _ := filepath.Glob(filepath.Join(dir, ".*")); len(left) != 0 {
		t.Errorf("temporary files left: %v", left)
	}

	// The client configuration presents the user's certificate to a
	// broker of the cluster.
	src, err := pki.NewSource(pki.SourceOptions{Files: writeDir(t, broker)})
	if err != nil {
		t.Fatal(err)
	}
	ln, err := tls.Listen("tcp", "127.0.0.1:0", pki.ClientPortConfig(src))
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	got := make(chan string, 1)
	go func() {
		c, err := ln.Accept()
		if err != nil {
			got <- err.Error()
			return
		}
		defer c.Close()
		tc := c.(*tls.Conn)
		if err := tc.Handshake(); err != nil {
			got <- err.Error()
			return
		}
		id, err := pki.VerifyClient(src, tc.ConnectionState())
		if err != nil {
			got <- err.Error()
			return
		}
		got <- id.String()
	}()
	cfg, err := SecretClientConfig(user, "ns/demo")
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	conn, err := (&tls.Dialer{Config: cfg}).DialContext(ctx, "tcp", ln.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	if id := <-got; id != "felix://ns/demo/user/alice" {
		t.Errorf("server saw %q, want the user's identity", id)
	}

	// Another cluster's brokers are refused.
	other, err := SecretClientConfig(user, "ns/other")
	if err != nil {
		t.Fatal(err)
	}
	go func() {
		if c, err := ln.Accept(); err == nil {
			_ = c.(*tls.Conn).Handshake()
			_ = c.Close()
		}
	}()
	if c, err := (&tls.Dialer{NetDialer: &net.Dialer{}, Config: other}).DialContext(ctx, "tcp", ln.Addr().String()); err == nil {
		_ = c.Close()
		t.Error("a broker of another cluster was accepted")
	} else if !errors.Is(err, pki.ErrWrongCluster) {
		t.Errorf("dial a broker of another cluster: %v, want ErrWrongCluster", err)
	}
}

func TestUserSecretIncomplete(t *testing.T) {
	s := &corev1.Secret{Data: map[string][]byte{pki.CertFile: []byte("x")}}
	if _, err := SecretClientConfig(s, ""); !errors.Is(err, ErrUserSecretIncomplete) {
		t.Errorf("SecretClientConfig: %v, want ErrUserSecretIncomplete", err)
	}
	if err := WriteSecretFiles(s, t.TempDir()); !errors.Is(err, ErrUserSecretIncomplete) {
		t.Errorf("WriteSecretFiles: %v, want ErrUserSecretIncomplete", err)
	}
}

// writeDir writes s into a fresh directory and returns its Files.
func writeDir(t *testing.T, s *corev1.Secret) pki.Files {
	t.Helper()
	dir := t.TempDir()
	if err := WriteSecretFiles(s, dir); err != nil {
		t.Fatal(err)
	}
	return pki.DirFiles(dir)
}

func TestAllGrantsCoverEveryStreamName(t *testing.T) {
	gs, unknown := controlplane.Grants(AllGrants())
	if len(unknown) != 0 {
		t.Fatalf("unknown operations: %v", unknown)
	}
	for c := 0; c < 256; c++ {
		name := string([]byte{byte(c)}) + "x"
		if wire.CheckStreamName(name) != nil {
			continue
		}
		for _, op := range []auth.Operation{auth.OpAppend, auth.OpRead, auth.OpTrim, auth.OpDescribe} {
			ok := false
			for _, g := range gs {
				ok = ok || g.Matches(op, name)
			}
			if !ok {
				t.Errorf("%s on stream %q not granted", op, name)
			}
		}
	}
}
