package client

import (
	"context"
	"crypto/tls"
	"errors"
	"io/fs"
	"net"
	"os"
	"path/filepath"
	"testing"
	"time"

	"felix.dev/felix/broker/auth"
	"felix.dev/felix/broker/record"
	"felix.dev/felix/broker/wire"
	"felix.dev/felix/internal/pki"
)

func TestAuthErrorIsTyped(t *testing.T) {
	shard := record.ShardID{Stream: "orders", Shard: 2}
	err := authError(&wire.Error{Code: wire.CodeNotAuthorized, Message: "user/alice may not Trim"}, auth.OpTrim, shard)
	var ae *AuthError
	if !errors.As(err, &ae) || ae.Op != auth.OpTrim || ae.Shard != shard {
		t.Fatalf("authError = %#v", err)
	}
	if !errors.Is(err, ErrNotAuthorized) || errors.Is(err, ErrUnauthenticated) {
		t.Fatalf("%v: Is NotAuthorized %v, Unauthenticated %v", err, errors.Is(err, ErrNotAuthorized), errors.Is(err, ErrUnauthenticated))
	}
	var we *wire.Error
	if !errors.As(err, &we) || we.Code != wire.CodeNotAuthorized {
		t.Fatalf("the wire error is not reachable: %v", err)
	}
	if got := err.Error(); got != `not authorized to Trim stream "orders" shard 2: user/alice may not Trim` {
		t.Fatalf("message %q", got)
	}
	hello := authError(&wire.Error{Code: wire.CodeUnauthenticated, Message: "no certificate"}, 0, record.ShardID{})
	if !errors.Is(hello, ErrUnauthenticated) || errors.Is(hello, ErrNotAuthorized) {
		t.Fatalf("hello refusal %v", hello)
	}
	other := &wire.Error{Code: wire.CodeOffsetMismatch}
	if got := authError(other, auth.OpAppend, shard); got != error(other) {
		t.Fatalf("authError wrapped %v", got)
	}
	if authError(nil, auth.OpAppend, shard) != nil {
		t.Fatal("authError(nil) is not nil")
	}
}

func writeDir(t *testing.T, ca *pki.CA, id pki.Identity, now time.Time) string {
	t.Helper()
	cert, key, err := ca.Issue(pki.LeafRequest{Identity: id, Now: now, Validity: time.Hour}, nil)
	if err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	for name, b := range map[string][]byte{pki.CertFile: cert, pki.KeyFile: key, pki.CAFile: ca.CertPEM()} {
		if err := os.WriteFile(filepath.Join(dir, name), b, 0o600); err != nil {
			t.Fatal(err)
		}
	}
	return dir
}

// TestDialTLSHandshakeError: a broker whose certificate another CA signed
// fails Dial with a *HandshakeError matching pki.ErrUntrusted; the right
// trust bundle completes the handshake.
func TestDialTLSHandshakeError(t *testing.T) {
	now := time.Now()
	ca, err := pki.NewCA("test CA", now, 24*time.Hour, nil)
	if err != nil {
		t.Fatal(err)
	}
	other, err := pki.NewCA("other CA", now, 24*time.Hour, nil)
	if err != nil {
		t.Fatal(err)
	}
	bdir := writeDir(t, ca, pki.Identity{Namespace: "ns", Cluster: "c", Kind: pki.KindBroker, Name: "b0"}, now)
	src, err := pki.NewSource(pki.SourceOptions{Files: pki.DirFiles(bdir)})
	if err != nil {
		t.Fatal(err)
	}
	l, err := tls.Listen("tcp", "127.0.0.1:0", pki.ClientPortConfig(src))
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	handshakes := make(chan error, 4)
	go func() {
		for {
			nc, err := l.Accept()
			if err != nil {
				return
			}
			handshakes <- nc.(*tls.Conn).Handshake()
			_ = nc.Close()
		}
	}()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()

	wrong, err := TLSFromDir(writeDir(t, other, pki.Identity{Namespace: "ns", Cluster: "c", Kind: pki.KindUser, Name: "alice"}, now), "", "")
	if err != nil {
		t.Fatal(err)
	}
	_, err = Dial(ctx, l.Addr().String(), Options{TLS: wrong})
	var he *HandshakeError
	if !errors.As(err, &he) || !errors.Is(err, pki.ErrUntrusted) {
		t.Fatalf("Dial with another CA: %v, want a HandshakeError matching pki.ErrUntrusted", err)
	}
	<-handshakes

	right, err := TLSFromDir(writeDir(t, ca, pki.Identity{Namespace: "ns", Cluster: "c", Kind: pki.KindUser, Name: "alice"}, now), "ns/c", "")
	if err != nil {
		t.Fatal(err)
	}
	nc, err := net.Dial("tcp", l.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	tc := tls.Client(nc, right)
	if err := tc.HandshakeContext(ctx); err != nil {
		t.Fatalf("handshake with the right bundle: %v", err)
	}
	_ = tc.Close()
	if err := <-handshakes; err != nil {
		t.Fatalf("server side: %v", err)
	}

	if _, err := TLSFromDir(t.TempDir(), "", ""); !errors.Is(err, fs.ErrNotExist) {
		t.Fatalf("TLSFromDir of an empty directory: %v", err)
	}
	if _, err := TLSFromFiles(TLSFiles{Cert: "c"}, "", ""); !errors.Is(err, pki.ErrIncompleteFiles) {
		t.Fatalf("TLSFromFiles without a bundle: %v", err)
	}
}
