package main

import (
	"strings"
	"testing"

	"felix.dev/felix/broker/auth"
	"felix.dev/felix/internal/pki"
)

// felix counter add/get/snapshot against a broker with grants: an add
// needs Append (write) on the stream, a get Read, a snapshot Trim.
func TestCounterCommands(t *testing.T) {
	clearTLSEnv(t)
	b := startTLSBroker(t)
	b.table.Set("alice", "uid-alice", []auth.Grant{{Stream: "orders", Ops: []auth.Operation{auth.OpAppend, auth.OpRead}}})
	b.table.Set("bob", "uid-bob", []auth.Grant{{Stream: "orders", Ops: []auth.Operation{auth.OpRead, auth.OpTrim}}})
	alice := issueDir(t, b.ca, pki.Identity{Namespace: "ns", Cluster: "c", Kind: pki.KindUser, Name: "alice"})
	bob := issueDir(t, b.ca, pki.Identity{Namespace: "ns", Cluster: "c", Kind: pki.KindUser, Name: "bob"})
	as := func(dir string, args ...string) (string, error) {
		return runFelix(t, append(args, "--broker", b.addr, "--stream", "orders", "--shard", "2", "--tls-dir", dir, "--cluster", "ns/c")...)
	}

	for i, want := range []string{`{"key":"shipped","value":3,"offset":0}`, `{"key":"shipped","value":1,"offset":1}`} {
		delta := []string{"3", "-2"}[i]
		out, err := as(alice, "counter", "add", "--key", "shipped", "--delta", delta)
		if err != nil || strings.TrimSpace(out) != want {
			t.Fatalf("add %s printed %q (%v), want %s", delta, out, err, want)
		}
	}
	if out, err := as(bob, "counter", "get", "--key", "shipped"); err != nil || strings.TrimSpace(out) != `{"key":"shipped","value":1,"through":2}` {
		t.Fatalf("get printed %q (%v)", out, err)
	}
	if out, err := as(bob, "counter", "add", "--key", "shipped", "--delta", "1"); err == nil || !strings.Contains(out, `"error":"NotAuthorized"`) {
		t.Fatalf("add without the Append grant printed %q (%v), want NotAuthorized", out, err)
	}
	if out, err := as(alice, "counter", "snapshot"); err == nil || !strings.Contains(out, `"error":"NotAuthorized"`) {
		t.Fatalf("snapshot without the Trim grant printed %q (%v), want NotAuthorized", out, err)
	}
	if out, err := as(bob, "counter", "snapshot"); err != nil || strings.TrimSpace(out) != `{"offset":2,"floor":2,"keys":1}` {
		t.Fatalf("snapshot printed %q (%v)", out, err)
	}
	if out, err := as(alice, "counter", "get", "--key", "shipped", "-o", "table"); err != nil || !strings.Contains(out, "shipped") || !strings.Contains(out, "THROUGH") {
		t.Fatalf("get -o table printed %q (%v)", out, err)
	}
	if out, err := as(alice, "counter", "add", "--key", "shipped"); err == nil || !strings.Contains(out, "--delta is required") {
		t.Fatalf("add without --delta printed %q (%v), want a usage error", out, err)
	}
}

// The broker's counter flags reach the server options; a 0 turns the
// automatic snapshot off (the option's negative).
func TestBrokerCounterFlags(t *testing.T) {
	cmd := newBrokerCmd()
	if err := cmd.ParseFlags([]string{"--counter-snapshot-every", "0", "--max-counters", "12"}); err != nil {
		t.Fatal(err)
	}
	var f brokerFlags
	f.counterSnapshotEvery, _ = cmd.Flags().GetInt("counter-snapshot-every")
	f.maxCounters, _ = cmd.Flags().GetInt("max-counters")
	o := f.serverOptions(nil)
	if o.CounterSnapshotEvery >= 0 || o.CounterLimits.MaxKeys != 12 {
		t.Fatalf("options: snapshot every %d, max keys %d; want off (negative) and 12", o.CounterSnapshotEvery, o.CounterLimits.MaxKeys)
	}
	if d := newBrokerCmd().Flags().Lookup("counter-snapshot-every").DefValue; d != "4096" {
		t.Fatalf("--counter-snapshot-every defaults to %s; docs/clients.md and docs/protocol.md say 4096", d)
	}
}
