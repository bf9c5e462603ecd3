package main

import (
	"crypto/tls"
	"encoding/json"
	"errors"
	"net"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"felix.dev/felix/broker/auth"
	"felix.dev/felix/broker/client"
	"felix.dev/felix/broker/logstore"
	"felix.dev/felix/broker/server"
	"felix.dev/felix/internal/pki"
)

// TestTLSFlagResolution: flags and FELIX_TLS_* variables, flag wins; the
// file flags replace the file variables as a group; --tls-dir gives the
// FelixUser Secret's three files, single-file flags override them.
func TestTLSFlagResolution(t *testing.T) {
	dirFiles := func(d string) client.TLSFiles {
		return client.TLSFiles{Cert: filepath.Join(d, "tls.crt"), Key: filepath.Join(d, "tls.key"), CA: filepath.Join(d, "ca.crt")}
	}
	cases := []struct {
		name    string
		flags   tlsFlags
		env     map[string]string
		want    tlsSettings
		wantErr bool
	}{
		{name: "nothing: plain TCP"},
		{name: "ca flag alone: anonymous over TLS", flags: tlsFlags{ca: "ca.pem"},
			want: tlsSettings{Enabled: true, Files: client.TLSFiles{CA: "ca.pem"}}},
		{name: "dir flag", flags: tlsFlags{dir: "/s/alice"}, want: tlsSettings{Enabled: true, Files: dirFiles("/s/alice")}},
		{name: "dir flag, cert and key overridden", flags: tlsFlags{dir: "/s/alice", cert: "c", key: "k"},
			want: tlsSettings{Enabled: true, Files: client.TLSFiles{Cert: "c", Key: "k", CA: "/s/alice/ca.crt"}}},
		{name: "dir env", env: map[string]string{envTLSDir: "/e/bob"}, want: tlsSettings{Enabled: true, Files: dirFiles("/e/bob")}},
		{name: "file envs", env: map[string]string{envTLSCert: "ec", envTLSKey: "ek", envTLSCA: "eca"},
			want: tlsSettings{Enabled: true, Files: client.TLSFiles{Cert: "ec", Key: "ek", CA: "eca"}}},
		{name: "a file flag replaces every file variable", flags: tlsFlags{ca: "fca"},
			env:  map[string]string{envTLSDir: "/e/bob", envTLSCert: "ec", envTLSKey: "ek"},
			want: tlsSettings{Enabled: true, Files: client.TLSFiles{CA: "fca"}}},
		{name: "dir flag wins over dir env", flags: tlsFlags{dir: "/f"}, env: map[string]string{envTLSDir: "/e"},
			want: tlsSettings{Enabled: true, Files: dirFiles("/f")}},
		{name: "server name env", flags: tlsFlags{dir: "/f"}, env: map[string]string{envTLSServerName: "b0.c-brokers.ns.svc"},
			want: tlsSettings{Enabled: true, Files: dirFiles("/f"), ServerName: "b0.c-brokers.ns.svc"}},
		{name: "server name flag wins", flags: tlsFlags{dir: "/f", serverName: "flag"}, env: map[string]string{envTLSServerName: "env"},
			want: tlsSettings{Enabled: true, Files: dirFiles("/f"), ServerName: "flag"}},
		{name: "cluster", flags: tlsFlags{dir: "/f", cluster: "ns/c"}, want: tlsSettings{Enabled: true, Files: dirFiles("/f"), Cluster: "ns/c"}},
		{name: "server name without a trust bundle", env: map[string]string{envTLSServerName: "x"}, wantErr: true},
		{name: "cluster without a trust bundle", flags: tlsFlags{cluster: "ns/c"}, wantErr: true},
		{name: "cert without key", flags: tlsFlags{ca: "ca", cert: "c"}, wantErr: true},
		{name: "key env without cert", env: map[string]string{envTLSCA: "ca", envTLSKey: "k"}, wantErr: true},
		{name: "malformed cluster", flags: tlsFlags{ca: "ca", cluster: "justname"}, wantErr: true},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			got, err := tc.flags.resolve(func(k string) string { return tc.env[k] })
			if tc.wantErr {
				if err == nil {
					t.Fatalf("resolved %+v, want an error", got)
				}
				return
			}
			if err != nil || got != tc.want {
				t.Fatalf("resolve = %+v, %v; want %+v", got, err, tc.want)
			}
		})
	}
}

// tlsCluster is a CA with a broker serving the client port over TLS
// (pki.ClientPortConfig), authenticating clients by certificate and
// authorizing them with an auth.Table.
type tlsCluster struct {
	ca    *pki.CA
	addr  string
	table *auth.Table
}

var testNow = time.Now()

func writeSecretDir(t *testing.T, dir string, ca *pki.CA, cert, key []byte) string {
	t.Helper()
	if err := os.MkdirAll(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	for name, b := range map[string][]byte{pki.CertFile: cert, pki.KeyFile: key, pki.CAFile: ca.CertPEM()} {
		if err := os.WriteFile(filepath.Join(dir, name), b, 0o600); err != nil {
			t.Fatal(err)
		}
	}
	return dir
}

func newCA(t *testing.T, cn string) *pki.CA {
	t.Helper()
	ca, err := pki.NewCA(cn, testNow, 24*time.Hour, nil)
	if err != nil {
		t.Fatal(err)
	}
	return ca
}

// issueDir writes a FelixUser-Secret-like directory for id signed by ca;
// a user's certificate is bound to uid "uid-<name>".
func issueDir(t *testing.T, ca *pki.CA, id pki.Identity) string {
	t.Helper()
	var uid string
	if id.Kind == pki.KindUser {
		uid = "uid-" + id.Name
	}
	cert, key, err := ca.Issue(pki.LeafRequest{Identity: id, UID: uid, Now: testNow, Validity: time.Hour}, nil)
	if err != nil {
		t.Fatal(err)
	}
	return writeSecretDir(t, filepath.Join(t.TempDir(), id.Name), ca, cert, key)
}

func startTLSBroker(t *testing.T) *tlsCluster {
	t.Helper()
	ca := newCA(t, "felix test CA")
	bdir := issueDir(t, ca, pki.Identity{Namespace: "ns", Cluster: "c", Kind: pki.KindBroker, Name: "b0"})
	src, err := pki.NewSource(pki.SourceOptions{Files: pki.DirFiles(bdir)})
	if err != nil {
		t.Fatal(err)
	}
	store, err := logstore.Open(logstore.Options{Dir: t.TempDir(), Fsync: logstore.FsyncNone, AutoCommit: true})
	if err != nil {
		t.Fatal(err)
	}
	table := auth.NewTable()
	srv := server.New(server.StoreShards(store), server.Options{
		TLS: pki.ClientPortConfig(src),
		Authenticate: func(cs *tls.ConnectionState) (auth.Principal, error) {
			if cs == nil || len(cs.PeerCertificates) == 0 {
				return auth.Principal{Kind: auth.Anonymous}, nil
			}
			id, uid, err := pki.VerifyClientUID(src, *cs)
			if err != nil {
				return auth.Principal{}, err
			}
			if id.Kind != pki.KindUser {
				return auth.Principal{}, errors.New("not a user")
			}
			return auth.Principal{Kind: auth.User, Name: id.Name, UID: uid}, nil
		},
		Authorizer: table,
	})
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	served := make(chan error, 1)
	go func() { served <- srv.Serve(l) }()
	t.Cleanup(func() {
		srv.Close()
		<-served
		_ = store.Close()
	})
	return &tlsCluster{ca: ca, addr: l.Addr().String(), table: table}
}

func clearTLSEnv(t *testing.T) {
	for _, k := range []string{envTLSCert, envTLSKey, envTLSCA, envTLSDir, envTLSServerName} {
		t.Setenv(k, "")
	}
}

// errorLine parses the JSON error object a failed command printed.
func errorLine(t *testing.T, out string) map[string]any {
	t.Helper()
	lines := strings.Split(strings.TrimSpace(out), "\n")
	var m map[string]any
	if err := json.Unmarshal([]byte(lines[len(lines)-1]), &m); err != nil {
		t.Fatalf("output %q: %v", out, err)
	}
	return m
}

// TestClientCommandsOverTLS: with --tls-dir holding a pki-issued user
// certificate, append, read and describe work against a TLS broker that
// verifies it; the user's missing Trim grant is reported readably; a
// trust bundle of another CA fails the handshake with a clear error; an
// anonymous client (--tls-ca alone) is refused at the Hello.
func TestClientCommandsOverTLS(t *testing.T) {
	clearTLSEnv(t)
	b := startTLSBroker(t)
	b.table.Set("alice", "uid-alice", []auth.Grant{{Stream: "orders", Ops: []auth.Operation{auth.OpAppend, auth.OpRead, auth.OpDescribe}}})
	alice := issueDir(t, b.ca, pki.Identity{Namespace: "ns", Cluster: "c", Kind: pki.KindUser, Name: "alice"})

	out, err := runFelix(t, "append", "--broker", b.addr, "--stream", "orders", "--payload", "hello", "--tls-dir", alice, "--cluster", "ns/c")
	if err != nil || !strings.Contains(out, `"tail":1`) {
		t.Fatalf("append over TLS: %v\n%s", err, out)
	}
	// The same through the environment.
	t.Setenv(envTLSDir, alice)
	out, err = runFelix(t, "read", "--broker", b.addr, "--stream", "orders", "--from", "0", "--limit", "1")
	if err != nil || !strings.Contains(out, `"payload":"hello"`) {
		t.Fatalf("read over TLS (FELIX_TLS_DIR): %v\n%s", err, out)
	}
	t.Setenv(envTLSDir, "")

	out, err = runFelix(t, "trim", "--broker", b.addr, "--stream", "orders", "--floor", "1", "--expect-tail", "1", "--tls-dir", alice)
	if err == nil {
		t.Fatalf("trim without a grant succeeded: %s", out)
	}
	t.Logf("trim refused: %s", out)
	m := errorLine(t, out)
	if m["error"] != "NotAuthorized" || m["message"] != "not authorized: user alice may not Trim stream orders" ||
		m["identity"] != "felix://ns/c/user/alice" || m["operation"] != "Trim" {
		t.Fatalf("trim refusal printed %v", m)
	}
	var ee *exitError
	if !errors.As(err, &ee) || ee.code != exitBrokerError {
		t.Fatalf("trim refusal exit %v, want %d", err, exitBrokerError)
	}

	// A trust bundle of another CA: the broker is not trusted.
	other := issueDir(t, newCA(t, "another CA"), pki.Identity{Namespace: "ns", Cluster: "c", Kind: pki.KindUser, Name: "alice"})
	out, err = runFelix(t, "describe", "--broker", b.addr, "--stream", "orders", "--tls-dir", other)
	if err == nil {
		t.Fatalf("describe trusting another CA succeeded: %s", out)
	}
	t.Logf("another CA: %s", out)
	if m := errorLine(t, out); m["error"] != errNameTLS || m["reason"] != "Untrusted" {
		t.Fatalf("wrong CA printed %v", m)
	}

	// The broker of another cluster than --cluster names.
	out, err = runFelix(t, "describe", "--broker", b.addr, "--stream", "orders", "--tls-dir", alice, "--cluster", "ns/other")
	if err == nil {
		t.Fatalf("describe requiring another cluster succeeded: %s", out)
	}
	if m := errorLine(t, out); m["error"] != errNameTLS || m["reason"] != "WrongCluster" {
		t.Fatalf("wrong cluster printed %v", m)
	}

	// Anonymous over TLS, anonymous access not allowed.
	out, err = runFelix(t, "describe", "--broker", b.addr, "--stream", "orders", "--tls-ca", filepath.Join(alice, pki.CAFile))
	if err == nil {
		t.Fatalf("anonymous describe succeeded: %s", out)
	}
	t.Logf("anonymous: %s", out)
	if m := errorLine(t, out); m["error"] != "Unauthenticated" || !strings.Contains(m["message"].(string), "requires a client certificate") {
		t.Fatalf("anonymous refusal printed %v", m)
	}
	// Allowed anonymous read: the same command works.
	b.table.SetAnonymous([]auth.Grant{{Stream: "orders", Ops: []auth.Operation{auth.OpDescribe}}}, true)
	out, err = runFelix(t, "describe", "--broker", b.addr, "--stream", "orders", "--tls-ca", filepath.Join(alice, pki.CAFile))
	if err != nil || !strings.Contains(out, `"tail":1`) {
		t.Fatalf("anonymous describe with a grant: %v\n%s", err, out)
	}
}

// TestBootstrapOverTLS: through --bootstrap the client commands print the
// same refusals as through --broker: a broker not trusted, one of another
// cluster, an anonymous connection refused, a request not granted.
func TestBootstrapOverTLS(t *testing.T) {
	clearTLSEnv(t)
	b := startTLSBroker(t)
	b.table.Set("alice", "uid-alice", []auth.Grant{{Stream: "orders", Ops: []auth.Operation{auth.OpAppend, auth.OpRead, auth.OpDescribe}}})
	alice := issueDir(t, b.ca, pki.Identity{Namespace: "ns", Cluster: "c", Kind: pki.KindUser, Name: "alice"})
	other := issueDir(t, newCA(t, "another CA"), pki.Identity{Namespace: "ns", Cluster: "c", Kind: pki.KindUser, Name: "alice"})

	out, err := runFelix(t, "append", "--bootstrap", b.addr, "--stream", "orders", "--payload", "hello", "--tls-dir", alice, "--cluster", "ns/c")
	if err != nil || !strings.Contains(out, `"tail":1`) {
		t.Fatalf("append over TLS through --bootstrap: %v\n%s", err, out)
	}
	for _, tc := range []struct {
		name       string
		args       []string
		wantError  string
		wantReason string
	}{
		{"not granted", []string{"trim", "--floor", "1", "--expect-tail", "1", "--tls-dir", alice}, "NotAuthorized", ""},
		{"another CA", []string{"describe", "--tls-dir", other}, errNameTLS, "Untrusted"},
		{"another cluster", []string{"describe", "--tls-dir", alice, "--cluster", "ns/other"}, errNameTLS, "WrongCluster"},
		{"anonymous", []string{"describe", "--tls-ca", filepath.Join(alice, pki.CAFile)}, "Unauthenticated", ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			args := append([]string{tc.args[0], "--bootstrap", b.addr, "--stream", "orders"}, tc.args[1:]...)
			out, err := runFelix(t, args...)
			if err == nil {
				t.Fatalf("succeeded: %s", out)
			}
			m := errorLine(t, out)
			if m["error"] != tc.wantError || (tc.wantReason != "" && m["reason"] != tc.wantReason) {
				t.Fatalf("printed %v, want error %s reason %q", m, tc.wantError, tc.wantReason)
			}
		})
	}
}
