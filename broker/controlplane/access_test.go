package controlplane

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	toolscache "k8s.io/client-go/tools/cache"

	felixv1 "felix.dev/felix/api/v1alpha1"
	"felix.dev/felix/broker/auth"
	"felix.dev/felix/internal/testenv"
)

func TestGrantsConversion(t *testing.T) {
	got, unknown := Grants([]felixv1.StreamGrant{
		{Stream: "orders", Operations: []felixv1.StreamOperation{felixv1.OperationAppend, felixv1.OperationRead}},
		{Prefix: "audit.", Operations: []felixv1.StreamOperation{felixv1.OperationDescribe, "Delete"}},
		{Stream: "x", Operations: []felixv1.StreamOperation{"Admin"}},
	})
	if len(unknown) != 2 || len(got) != 2 {
		t.Fatalf("grants %+v, unknown %v", got, unknown)
	}
	if g := got[0]; g.Stream != "orders" || g.Prefix || len(g.Ops) != 2 {
		t.Fatalf("stream grant %+v", g)
	}
	if g := got[1]; g.Stream != "audit." || !g.Prefix || len(g.Ops) != 1 || g.Ops[0] != auth.OpDescribe {
		t.Fatalf("prefix grant %+v", g)
	}
}

// Before its first list, the watcher's authorizer refuses everything and
// every anonymous connection.
func TestAccessAuthorizerRefusesUntilSynced(t *testing.T) {
	w := &AccessWatcher{table: auth.NewTable(), registered: make(chan struct{})}
	w.table.SetAnonymous([]auth.Grant{{Prefix: true, Ops: []auth.Operation{auth.OpRead}}}, true)
	a := w.Authorizer()
	err := a.Authorize(auth.Principal{Kind: auth.Operator, Name: "op"}, auth.OpDescribe, "orders")
	if !errors.Is(err, auth.ErrNotAuthorized) || !errors.Is(err, ErrNotSynced) {
		t.Fatalf("before sync: %v", err)
	}
	if a.(auth.AnonymousGate).AnonymousAllowed() {
		t.Fatal("anonymous allowed before sync")
	}
}

// The watcher follows the cluster's FelixUsers (not another cluster's)
// and the FelixCluster's anonymous access, and forgets deleted users.
func TestAccessWatcherFollowsUsersAndCluster(t *testing.T) {
	env := testenv.Start(t)
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	const ns = "access"
	must := func(err error) {
		t.Helper()
		if err != nil {
			t.Fatal(err)
		}
	}
	must(env.Client.Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns}}))
	fc := &felixv1.FelixCluster{ObjectMeta: metav1.ObjectMeta{Name: "logs", Namespace: ns},
		Spec: felixv1.FelixClusterSpec{Brokers: 1, Image: "felix:dev"}}
	must(env.Client.Create(ctx, fc))
	user := func(name, cluster string, ops ...felixv1.StreamOperation) *felixv1.FelixUser {
		return &felixv1.FelixUser{ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: ns},
			Spec: felixv1.FelixUserSpec{Cluster: cluster, Authorization: felixv1.UserAuthorization{
				Grants: []felixv1.StreamGrant{{Stream: "orders", Operations: ops}}}}}
	}
	alice := user("alice", "logs", felixv1.OperationAppend)
	must(env.Client.Create(ctx, alice))
	eve := user("eve", "other", felixv1.OperationAppend)
	must(env.Client.Create(ctx, eve))

	cp, err := New(Config{REST: env.Config, Namespace: ns, Cluster: "logs", Broker: "logs-0"})
	must(err)
	w, err := cp.NewAccessWatcher(auth.NewTable())
	must(err)
	runCtx, stopRun := context.WithCancel(ctx)
	defer stopRun()
	go func() { _ = w.Run(runCtx) }()
	if !w.WaitForSync(ctx) || !w.Synced() {
		t.Fatal("no sync")
	}
	a := w.Authorizer()
	allowed := func(p auth.Principal, op auth.Operation) bool { return a.Authorize(p, op, "orders") == nil }
	aliceP := auth.Principal{Kind: auth.User, Name: "alice", UID: string(alice.UID)}
	eveP := auth.Principal{Kind: auth.User, Name: "eve", UID: string(eve.UID)}
	if !allowed(aliceP, auth.OpAppend) || allowed(aliceP, auth.OpTrim) {
		t.Fatal("alice's grants not applied")
	}
	if allowed(eveP, auth.OpAppend) {
		t.Fatal("a user of another cluster is allowed")
	}
	if a.(auth.AnonymousGate).AnonymousAllowed() {
		t.Fatal("anonymous allowed by default")
	}

	// Anonymous access switched on with a Read grant.
	must(env.Client.Get(ctx, types.NamespacedName{Namespace: ns, Name: "logs"}, fc))
	fc.Spec.Security.AllowAnonymous = true
	fc.Spec.Security.AnonymousGrants = []felixv1.StreamGrant{{Prefix: "ord", Operations: []felixv1.StreamOperation{felixv1.OperationRead}}}
	must(env.Client.Update(ctx, fc))
	anon := auth.Principal{Kind: auth.Anonymous}
	poll(t, ctx, "anonymous read allowed", func() bool {
		return a.(auth.AnonymousGate).AnonymousAllowed() && allowed(anon, auth.OpRead) && !allowed(anon, auth.OpAppend)
	})

	// A deleted user is refused.
	must(env.Client.Delete(ctx, alice))
	poll(t, ctx, "alice refused after delete", func() bool { return !allowed(aliceP, auth.OpAppend) })

	// Recreated under the same name, with more grants: a new uid. The new
	// user's certificates are allowed, the earlier user's stay refused.
	again := user("alice", "logs", felixv1.OperationAppend, felixv1.OperationTrim)
	must(env.Client.Create(ctx, again))
	if again.UID == alice.UID || again.UID == "" {
		t.Fatalf("recreated user uid %q (was %q)", again.UID, alice.UID)
	}
	newP := auth.Principal{Kind: auth.User, Name: "alice", UID: string(again.UID)}
	poll(t, ctx, "the recreated alice allowed", func() bool { return allowed(newP, auth.OpTrim) })
	if err := a.Authorize(aliceP, auth.OpAppend, "orders"); !errors.Is(err, auth.ErrNotAuthorized) ||
		!strings.Contains(err.Error(), "certificate was issued to an earlier FelixUser of this name") {
		t.Fatalf("the earlier alice's certificate: %v", err)
	}

	// [L10] The watch stops: anonymous reads, allowed a moment ago, are
	// refused as stale.
	stopRun()
	poll(t, ctx, "refused as stale after the watch stopped", func() bool {
		return errors.Is(a.Authorize(anon, auth.OpRead, "orders"), ErrStale) && !a.(auth.AnonymousGate).AnonymousAllowed()
	})
}

// TestAccessAuthorizerRefusesWhenStale [L10]: once the watch has stopped,
// the table it fed is not trusted: every request is refused with
// ErrStale, and anonymous connections too.
func TestAccessAuthorizerRefusesWhenStale(t *testing.T) {
	w := &AccessWatcher{table: auth.NewTable(), registered: make(chan struct{})}
	w.table.Set("alice", "u1", []auth.Grant{{Stream: "orders", Ops: []auth.Operation{auth.OpAppend}}})
	w.table.SetAnonymous([]auth.Grant{{Prefix: true, Ops: []auth.Operation{auth.OpRead}}}, true)
	w.synced = []toolscache.InformerSynced{func() bool { return true }}
	close(w.registered)
	a := w.Authorizer()
	alice := auth.Principal{Kind: auth.User, Name: "alice", UID: "u1"}
	if err := a.Authorize(alice, auth.OpAppend, "orders"); err != nil {
		t.Fatalf("synced: %v", err)
	}
	w.stopped.Store(true) // what Run does when it returns
	err := a.Authorize(alice, auth.OpAppend, "orders")
	if !errors.Is(err, auth.ErrNotAuthorized) || !errors.Is(err, ErrStale) || !errors.Is(err, ErrNotSynced) {
		t.Fatalf("after the watch stopped: %v", err)
	}
	if a.(auth.AnonymousGate).AnonymousAllowed() {
		t.Fatal("anonymous allowed after the watch stopped")
	}
}

func poll(t *testing.T, ctx context.Context, what string, cond func() bool) {
	t.Helper()
	for !cond() {
		select {
		case <-ctx.Done():
			t.Fatalf("timed out waiting for %s", what)
		case <-time.After(20 * time.Millisecond):
		}
	}
}
