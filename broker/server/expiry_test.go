package server

import (
	"crypto/tls"
	"errors"
	"sync"
	"testing"
	"time"

	"felix.dev/felix/broker/auth"
	"felix.dev/felix/broker/client"
	"felix.dev/felix/broker/wire"
)

// fakeClock is a settable clock for Options.Now.
type fakeClock struct {
	mu  sync.Mutex
	now time.Time
}

func (f *fakeClock) Now() time.Time {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.now
}

func (f *fakeClock) Set(t time.Time) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.now = t
}

// TestConnectionEndsWhenCertificateExpires [M2]: a connection authenticated
// by a client certificate is served until the server's clock passes the
// certificate's NotAfter; then a follow-mode read waiting at the broker is
// answered Unauthenticated "certificate expired", the next request is not
// applied, and the connection closes.
func TestConnectionEndsWhenCertificateExpires(t *testing.T) {
	srvCert, pool := selfSigned(t)
	cliCert, _ := selfSigned(t) // NotAfter: an hour from now
	clock := &fakeClock{now: time.Now()}
	b := startBroker(t, Options{
		TLS: &tls.Config{Certificates: []tls.Certificate{srvCert}, ClientAuth: tls.RequireAnyClientCert, MinVersion: tls.VersionTLS13},
		Authenticate: func(cs *tls.ConnectionState) (auth.Principal, error) {
			return auth.Principal{Kind: auth.User, Name: "alice"}, nil
		},
		Now: clock.Now, CertCheckInterval: 10 * time.Millisecond,
	})
	c := dial(t, b.addr, client.Options{TLS: &tls.Config{RootCAs: pool, ServerName: "127.0.0.1",
		Certificates: []tls.Certificate{cliCert}, MinVersion: tls.VersionTLS13}})
	if _, err := c.Append(ctxT(t), shardA, recs("before"), nil); err != nil {
		t.Fatalf("append before expiry: %v", err)
	}
	read := make(chan error, 1)
	go func() {
		_, err := c.Read(ctxT(t), wire.ReadRequest{Shard: shardA, Offset: 1, MaxBytes: 1 << 20, WaitMillis: 60_000})
		read <- err
	}()
	// Let the read park at the broker.
	deadline := time.Now().Add(5 * time.Second)
	for unanswered(b.srv) == 0 {
		if time.Now().After(deadline) {
			t.Fatal("the follow read never reached the broker")
		}
		time.Sleep(time.Millisecond)
	}
	clock.Set(cliCert.Leaf.NotAfter.Add(47 * time.Hour))
	select {
	case err := <-read:
		if we := wantCode(t, err, wire.CodeUnauthenticated); we.Message != "certificate expired" {
			t.Fatalf("read refused with %q", we.Message)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("the follow read is still waiting after the certificate expired")
	}
	_, err := c.Append(ctxT(t), shardA, recs("after"), nil)
	if err == nil {
		t.Fatal("append accepted after the certificate expired")
	}
	var we *wire.Error
	if errors.As(err, &we) && we.Code != wire.CodeUnauthenticated {
		t.Fatalf("append after expiry: %v", err)
	}
	info, err := StoreShards(b.store).DataLog(shardA)
	if err != nil {
		t.Fatal(err)
	}
	if tail := info.Describe().Tail; tail != 1 {
		t.Fatalf("tail = %d after expiry, want 1", tail)
	}
}
