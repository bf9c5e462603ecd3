package client_test

import (
	"context"
	"crypto/tls"
	"errors"
	"os"
	"path/filepath"
	"testing"
	"time"

	"felix.dev/felix/broker/client"
	"felix.dev/felix/broker/record"
	"felix.dev/felix/broker/wire"
	"felix.dev/felix/internal/pki"
)

// tlsDir writes id's certificate from ca, its key and ca's certificate as
// a FelixUser Secret's files.
func tlsDir(t *testing.T, ca *pki.CA, id pki.Identity, now time.Time) string {
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

// startScriptedTLS is startScripted behind TLS with broker id's
// certificate from ca.
func startScriptedTLS(t *testing.T, ca *pki.CA, id pki.Identity, now time.Time, answer func(f wire.Frame, n int) (wire.MsgType, []byte, bool)) *scripted {
	t.Helper()
	src, err := pki.NewSource(pki.SourceOptions{Files: pki.DirFiles(tlsDir(t, ca, id, now))})
	if err != nil {
		t.Fatal(err)
	}
	l, err := tls.Listen("tcp", "127.0.0.1:0", pki.ClientPortConfig(src))
	if err != nil {
		t.Fatal(err)
	}
	return serveScripted(t, l, allFeatures, answer)
}

// TestClusterDropsAnAddressThatIsAnotherClustersBroker: pod addresses are
// reused, so the address the metadata names for a shard's leader can be,
// by the time the client dials it, another cluster's broker (another CA's
// certificate). That address is out of date, not the client
// misconfigured: the client drops it, asks for the metadata again and
// reaches the leader. A bootstrap address that fails the handshake still
// stops at once, and an address that keeps failing ends the request with
// the handshake's error once the attempts are spent.
func TestClusterDropsAnAddressThatIsAnotherClustersBroker(t *testing.T) {
	now := time.Now()
	ours, err := pki.NewCA("felix ns/c CA", now, 24*time.Hour, nil)
	if err != nil {
		t.Fatal(err)
	}
	theirs, err := pki.NewCA("felix ns/other CA", now, 24*time.Hour, nil)
	if err != nil {
		t.Fatal(err)
	}
	broker := func(cluster, name string) pki.Identity {
		return pki.Identity{Namespace: "ns", Cluster: cluster, Kind: pki.KindBroker, Name: name}
	}
	appendOK := func(f wire.Frame, _ int) (wire.MsgType, []byte, bool) {
		return wire.MsgAppendOK, wire.EncodeAppendOK(wire.AppendOK{First: 7, Tail: 8}), true
	}
	stranger := startScriptedTLS(t, theirs, broker("other", "other-1"), now, appendOK)
	leader := startScriptedTLS(t, ours, broker("c", "c-1"), now, appendOK)
	// The first answer names the stranger's address (stale), later ones
	// the leader's.
	boot := startScriptedTLS(t, ours, broker("c", "c-0"), now, func(f wire.Frame, n int) (wire.MsgType, []byte, bool) {
		if f.Type == wire.MsgMetadata {
			if n == 1 {
				return wire.MsgMetadataOK, metaLeading(stranger.addr), true
			}
			return wire.MsgMetadataOK, metaLeading(leader.addr), true
		}
		return wire.MsgError, errBody(&wire.Error{Code: wire.CodeNotLeader, Message: "not leader"}), true
	})
	userTLS, err := client.TLSFromDir(tlsDir(t, ours, pki.Identity{Namespace: "ns", Cluster: "c", Kind: pki.KindUser, Name: "alice"}, now), "", "")
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	newCluster := func(attempts int, bootstrap ...string) (*client.Cluster, error) {
		c, err := client.NewCluster(ctx, client.ClusterOptions{Options: client.Options{TLS: userTLS}, Attempts: attempts, After: noWait}, bootstrap...)
		if err == nil {
			t.Cleanup(func() { _ = c.Close() })
		}
		return c, err
	}

	c, err := newCluster(4, boot.addr)
	if err != nil {
		t.Fatal(err)
	}
	res, err := c.Append(ctx, shard, []record.Record{{Payload: []byte("x")}}, nil)
	if err != nil || res.First != 7 {
		t.Fatalf("append through a stale address = %+v, %v; want the leader's answer", res, err)
	}
	if leader.count(wire.MsgAppend) != 1 || stranger.count(wire.MsgAppend) != 0 {
		t.Fatalf("appends: %d to the leader, %d to the stranger; want 1 and 0", leader.count(wire.MsgAppend), stranger.count(wire.MsgAppend))
	}

	// The stranger given as the bootstrap: a configuration error, at once.
	var he *client.HandshakeError
	if _, err := newCluster(4, stranger.addr); !errors.As(err, &he) || !errors.Is(err, pki.ErrUntrusted) {
		t.Fatalf("bootstrap at another cluster's broker: %v; want a HandshakeError matching pki.ErrUntrusted", err)
	}

	// Metadata that keeps naming the stranger: the attempts run out and
	// the error says why.
	stuck := startScriptedTLS(t, ours, broker("c", "c-2"), now, func(f wire.Frame, _ int) (wire.MsgType, []byte, bool) {
		if f.Type == wire.MsgMetadata {
			return wire.MsgMetadataOK, metaLeading(stranger.addr), true
		}
		return wire.MsgError, errBody(&wire.Error{Code: wire.CodeNotLeader, Message: "not leader"}), true
	})
	c2, err := newCluster(3, stuck.addr)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := c2.Append(ctx, shard, []record.Record{{Payload: []byte("x")}}, nil); !errors.As(err, &he) || !errors.Is(err, pki.ErrUntrusted) {
		t.Fatalf("append while the metadata names only a stranger: %v; want the handshake's error after the attempts", err)
	}
	if stranger.count(wire.MsgAppend) != 0 {
		t.Fatalf("the stranger received %d appends", stranger.count(wire.MsgAppend))
	}
}
