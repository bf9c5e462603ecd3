package main

import (
	"context"
	"crypto/x509"
	"strings"
	"testing"
	"time"

	"felix.dev/felix/broker/auth"
	brokerclient "felix.dev/felix/broker/client"
	"felix.dev/felix/broker/record"
	"felix.dev/felix/broker/wire"
	"felix.dev/felix/internal/pki"
)

// felix deadletter read and redrive against a broker with grants: a
// record dead-lettered (delivered once, nak'd, max deliveries 1) is
// printed with its fields, redriven once (a second redrive says already),
// and a redrive needs Append.
func TestDeadLetterCommands(t *testing.T) {
	clearTLSEnv(t)
	b := startTLSBroker(t)
	b.table.Set("alice", "uid-alice", []auth.Grant{{Stream: "orders", Ops: []auth.Operation{auth.OpRead, auth.OpAppend}}})
	b.table.Set("dave", "uid-dave", []auth.Grant{{Stream: "orders", Ops: []auth.Operation{auth.OpRead}}})
	alice := issueDir(t, b.ca, pki.Identity{Namespace: "ns", Cluster: "c", Kind: pki.KindUser, Name: "alice"})
	dave := issueDir(t, b.ca, pki.Identity{Namespace: "ns", Cluster: "c", Kind: pki.KindUser, Name: "dave"})

	// Dead-letter offset 0 through the client, as alice.
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	cert, key, err := b.ca.Issue(pki.LeafRequest{Identity: pki.Identity{Namespace: "ns", Cluster: "c", Kind: pki.KindUser, Name: "alice"},
		UID: "uid-alice", Now: testNow, Validity: time.Hour}, nil)
	if err != nil {
		t.Fatal(err)
	}
	leaf, err := pki.ParseLeaf(cert, key)
	if err != nil {
		t.Fatal(err)
	}
	roots := x509.NewCertPool()
	roots.AddCert(b.ca.Cert)
	c, err := brokerclient.Dial(ctx, b.addr, brokerclient.Options{TLS: pki.ClientConfig(&leaf, roots, "ns/c", "")})
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = c.Close() }()
	shard := record.ShardID{Stream: "orders", Shard: 1}
	if _, err := c.Append(ctx, shard, []record.Record{{Payload: []byte("hello"), Headers: []record.Header{{Key: "k", Value: []byte("v")}}}}, nil); err != nil {
		t.Fatal(err)
	}
	if _, err := c.GroupClaim(ctx, shard, "billing", "w1"); err != nil {
		t.Fatal(err)
	}
	if _, err := c.GroupAckConfig(ctx, wire.GroupAckConfigRequest{Shard: shard, Group: "billing", Member: "w1", Generation: 1,
		MaxDeliveries: 1, AckWaitMillis: 60_000, MaxInFlight: 10}); err != nil {
		t.Fatal(err)
	}
	req := wire.GroupFetchRequest{Shard: shard, Group: "billing", Member: "w1", Generation: 1}
	if _, err := c.GroupFetch(ctx, req); err != nil {
		t.Fatal(err)
	}
	if _, err := c.GroupNak(ctx, shard, "billing", "w1", 1, []uint64{0}); err != nil {
		t.Fatal(err)
	}
	if out, err := c.GroupFetch(ctx, req); err != nil || out.DeadLettered != 1 {
		t.Fatalf("fetch: %+v %v", out, err)
	}

	as := func(dir string, args ...string) (string, error) {
		return runFelix(t, append(args, "--broker", b.addr, "--stream", "orders", "--shard", "1", "--tls-dir", dir, "--cluster", "ns/c")...)
	}
	out, err := as(dave, "deadletter", "read")
	if err != nil || !strings.Contains(out, `"entry":0,"group":"billing","offset":0,`) ||
		!strings.Contains(out, `"deliveries":1,"reason":"max-deliveries","headers":{"k":"v"},"payload":"hello","redriven":false}`) {
		t.Fatalf("deadletter read printed %q (%v)", out, err)
	}
	if out, err := as(dave, "deadletter", "redrive", "--entry", "0"); err == nil || !strings.Contains(out, `"error":"NotAuthorized"`) {
		t.Fatalf("redrive without the Append grant printed %q (%v), want NotAuthorized", out, err)
	}
	out, err = as(alice, "deadletter", "redrive", "--entry", "0")
	if err != nil || strings.TrimSpace(out) != `{"entry":0,"offset":1,"already":false}` {
		t.Fatalf("deadletter redrive printed %q (%v)", out, err)
	}
	out, err = as(alice, "deadletter", "redrive", "--entry", "0")
	if err != nil || strings.TrimSpace(out) != `{"entry":0,"offset":1,"already":true}` {
		t.Fatalf("second deadletter redrive printed %q (%v)", out, err)
	}
	if out, err := as(dave, "deadletter", "read", "-o", "table"); err != nil || !strings.Contains(out, "REDRIVEN_TO") || !strings.Contains(out, "max-deliveries") {
		t.Fatalf("deadletter read -o table printed %q (%v)", out, err)
	}
	if out, err := as(dave, "deadletter", "read"); err != nil || !strings.Contains(out, `"redriven":true,"data_offset":1}`) {
		t.Fatalf("deadletter read after the redrive printed %q (%v)", out, err)
	}
	if out, err := as(alice, "deadletter", "redrive"); err == nil || !strings.Contains(out, "--entry is required") {
		t.Fatalf("redrive without --entry printed %q (%v), want a usage error", out, err)
	}
	if out, err := as(alice, "deadletter", "trim", "--floor", "1"); err == nil || !strings.Contains(out, `"error":"NotAuthorized"`) {
		t.Fatalf("trim without the Trim grant printed %q (%v), want NotAuthorized", out, err)
	}
	b.table.Set("tom", "uid-tom", []auth.Grant{{Stream: "orders", Ops: []auth.Operation{auth.OpTrim, auth.OpRead}}})
	tom := issueDir(t, b.ca, pki.Identity{Namespace: "ns", Cluster: "c", Kind: pki.KindUser, Name: "tom"})
	if out, err := as(tom, "deadletter", "trim", "--floor", "1"); err != nil || strings.TrimSpace(out) != `{"floor":1}` {
		t.Fatalf("deadletter trim printed %q (%v)", out, err)
	}
	if out, err := as(tom, "deadletter", "read"); err != nil || strings.TrimSpace(out) != "" {
		t.Fatalf("deadletter read after the trim printed %q (%v), want nothing", out, err)
	}
}
