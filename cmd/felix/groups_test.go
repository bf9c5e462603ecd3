package main

import (
	"strings"
	"testing"
	"time"

	"felix.dev/felix/broker/auth"
	"felix.dev/felix/internal/pki"
)

// felix group commit and felix groups against a broker with grants: both
// need Read on the stream.
func TestGroupCommands(t *testing.T) {
	clearTLSEnv(t)
	b := startTLSBroker(t)
	b.table.Set("alice", "uid-alice", []auth.Grant{{Stream: "orders", Ops: []auth.Operation{auth.OpRead}}})
	b.table.Set("carol", "uid-carol", []auth.Grant{{Stream: "orders", Ops: []auth.Operation{auth.OpAppend}}})
	alice := issueDir(t, b.ca, pki.Identity{Namespace: "ns", Cluster: "c", Kind: pki.KindUser, Name: "alice"})
	carol := issueDir(t, b.ca, pki.Identity{Namespace: "ns", Cluster: "c", Kind: pki.KindUser, Name: "carol"})
	as := func(dir string, args ...string) (string, error) {
		return runFelix(t, append(args, "--broker", b.addr, "--stream", "orders", "--tls-dir", dir, "--cluster", "ns/c")...)
	}
	out, err := as(alice, "group", "commit", "--shard", "2", "--group", "billing", "--offset", "7")
	if err != nil || strings.TrimSpace(out) != `{"group":"billing","generation":1,"committed":7,"entry":1}` {
		t.Fatalf("group commit printed %q (%v)", out, err)
	}
	out, err = as(alice, "groups", "--shard", "2")
	if err != nil || strings.TrimSpace(out) != `{"stream":"orders","shard":2,"group":"billing","owner":"","generation":1,"committed":7,"tail":0,"lag":0,"lease_ms":0}` {
		t.Fatalf("groups printed %q (%v)", out, err)
	}
	if out, err := as(alice, "groups", "--shard", "2", "--group", "other", "-o", "table"); err != nil || !strings.Contains(out, "LAG") || strings.Contains(out, "billing") {
		t.Fatalf("groups --group other -o table printed %q (%v)", out, err)
	}
	if out, err := as(carol, "groups", "--shard", "2"); err == nil || !strings.Contains(out, `"error":"NotAuthorized"`) {
		t.Fatalf("groups without the Read grant printed %q (%v), want NotAuthorized", out, err)
	}
	if out, err := as(alice, "group", "commit", "--shard", "2", "--group", "billing"); err == nil || !strings.Contains(out, "--offset is required") {
		t.Fatalf("group commit without --offset printed %q (%v), want a usage error", out, err)
	}
}

// The broker's group flags reach the server options.
func TestBrokerGroupFlags(t *testing.T) {
	cmd := newBrokerCmd()
	if err := cmd.ParseFlags([]string{"--group-lease", "3s", "--max-groups", "7"}); err != nil {
		t.Fatal(err)
	}
	var f brokerFlags
	f.groupLease, _ = cmd.Flags().GetDuration("group-lease")
	f.maxGroups, _ = cmd.Flags().GetInt("max-groups")
	o := f.serverOptions(nil)
	if o.GroupLease != 3*time.Second || o.GroupLimits.MaxGroups != 7 {
		t.Fatalf("options: lease %v, max groups %d; want 3s and 7", o.GroupLease, o.GroupLimits.MaxGroups)
	}
	if d := newBrokerCmd().Flags().Lookup("group-lease").DefValue; d != "10s" {
		t.Fatalf("--group-lease defaults to %s; docs/clients.md says 10s", d)
	}
}
