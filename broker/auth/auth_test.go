package auth

import (
	"errors"
	"strings"
	"sync"
	"testing"
)

func TestParseOperation(t *testing.T) {
	for _, op := range []Operation{OpAppend, OpRead, OpTrim, OpDescribe} {
		got, err := ParseOperation(op.String())
		if err != nil || got != op {
			t.Fatalf("ParseOperation(%q) = %v, %v", op.String(), got, err)
		}
	}
	for _, s := range []string{"", "append", "Write", "Trim "} {
		if _, err := ParseOperation(s); !errors.Is(err, ErrUnknownOperation) {
			t.Fatalf("ParseOperation(%q): err %v, want ErrUnknownOperation", s, err)
		}
	}
}

func TestGrantMatches(t *testing.T) {
	exact := Grant{Stream: "orders", Ops: []Operation{OpAppend}}
	prefix := Grant{Stream: "team-a.", Prefix: true, Ops: []Operation{OpRead, OpDescribe}}
	all := Grant{Prefix: true, Ops: []Operation{OpDescribe}}
	for _, tc := range []struct {
		g      Grant
		op     Operation
		stream string
		want   bool
	}{
		{exact, OpAppend, "orders", true},
		{exact, OpAppend, "orders2", false},
		{exact, OpAppend, "order", false},
		{exact, OpTrim, "orders", false},
		{prefix, OpRead, "team-a.x", true},
		{prefix, OpRead, "team-a.", true},
		{prefix, OpRead, "team-b.x", false},
		{prefix, OpAppend, "team-a.x", false},
		{all, OpDescribe, "anything", true},
		{all, OpRead, "anything", false},
	} {
		if got := tc.g.Matches(tc.op, tc.stream); got != tc.want {
			t.Errorf("%+v.Matches(%v, %q) = %v, want %v", tc.g, tc.op, tc.stream, got, tc.want)
		}
	}
}

func TestTable(t *testing.T) {
	tb := NewTable()
	alice := Principal{Kind: User, Name: "alice", UID: "uid-alice"}
	bob := Principal{Kind: User, Name: "bob", UID: "uid-bob"}
	anon := Principal{}
	broker := Principal{Kind: Broker, Name: "b-0"}
	operator := Principal{Kind: Operator, Name: "felix-operator"}
	tb.Set("alice", "uid-alice", []Grant{{Stream: "orders", Ops: []Operation{OpAppend, OpRead}}, {Stream: "logs-", Prefix: true, Ops: []Operation{OpTrim}}})

	check := func(p Principal, op Operation, stream string, want bool) {
		t.Helper()
		err := tb.Authorize(p, op, stream)
		if want && err != nil {
			t.Errorf("%v %v %q refused: %v", p, op, stream, err)
		}
		if !want && !errors.Is(err, ErrNotAuthorized) {
			t.Errorf("%v %v %q: err %v, want ErrNotAuthorized", p, op, stream, err)
		}
	}
	check(alice, OpAppend, "orders", true)
	check(alice, OpRead, "orders", true)
	check(alice, OpTrim, "orders", false) // trim is never implied by append
	check(alice, OpDescribe, "orders", false)
	check(alice, OpTrim, "logs-1", true)
	check(alice, OpAppend, "logs-1", false)
	check(bob, OpRead, "orders", false) // unknown user
	check(anon, OpRead, "orders", false)
	if tb.AnonymousAllowed() {
		t.Fatal("anonymous allowed by default")
	}
	check(broker, OpDescribe, "orders", true)
	for _, op := range []Operation{OpAppend, OpRead, OpTrim} {
		check(broker, op, "orders", false)
		check(operator, op, "orders", false)
	}
	check(operator, OpDescribe, "orders", true)
	check(Principal{Kind: PrincipalKind(9), Name: "x"}, OpDescribe, "orders", false)

	// Anonymous: allowed with grants, then only those.
	tb.SetAnonymous([]Grant{{Stream: "public", Ops: []Operation{OpRead}}}, true)
	if !tb.AnonymousAllowed() {
		t.Fatal("anonymous not allowed after SetAnonymous(true)")
	}
	check(anon, OpRead, "public", true)
	check(anon, OpAppend, "public", false)
	tb.SetAnonymous([]Grant{{Stream: "public", Ops: []Operation{OpRead}}}, false)
	check(anon, OpRead, "public", false)

	// Set replaces, Delete forgets; the table keeps copies.
	grants := []Grant{{Stream: "orders", Ops: []Operation{OpRead}}}
	tb.Set("alice", "uid-alice", grants)
	grants[0].Ops[0] = OpTrim
	check(alice, OpRead, "orders", true)
	check(alice, OpAppend, "orders", false)
	check(alice, OpTrim, "orders", false)
	tb.Delete("alice")
	check(alice, OpRead, "orders", false)
}

// TestTableBindsUsersToUID: a FelixUser deleted and recreated under the
// same name has a new uid; the earlier user's certificate (its UID) is
// refused whatever the new user's grants, and so is a certificate that
// carries no uid. The refusal says why.
func TestTableBindsUsersToUID(t *testing.T) {
	tb := NewTable()
	grants := []Grant{{Stream: "orders", Ops: []Operation{OpRead}}}
	old := Principal{Kind: User, Name: "alice", UID: "uid-1"}
	tb.Set("alice", "uid-1", grants)
	if err := tb.Authorize(old, OpRead, "orders"); err != nil {
		t.Fatalf("the FelixUser's own certificate: %v", err)
	}
	// Deleted and recreated (another uid), by someone else, with more grants.
	tb.Delete("alice")
	tb.Set("alice", "uid-2", []Grant{{Stream: "", Prefix: true, Ops: []Operation{OpRead, OpAppend, OpTrim}}})
	err := tb.Authorize(old, OpRead, "orders")
	if !errors.Is(err, ErrNotAuthorized) || !strings.Contains(err.Error(), "certificate was issued to an earlier FelixUser of this name") {
		t.Fatalf("the earlier user's certificate: %v, want the earlier-FelixUser refusal", err)
	}
	if err := tb.Authorize(Principal{Kind: User, Name: "alice", UID: "uid-2"}, OpTrim, "orders"); err != nil {
		t.Fatalf("the new user's certificate: %v", err)
	}
	// A certificate bound to no FelixUser is refused.
	err = tb.Authorize(Principal{Kind: User, Name: "alice"}, OpRead, "orders")
	if !errors.Is(err, ErrNotAuthorized) || !strings.Contains(err.Error(), "not bound to a FelixUser uid") {
		t.Fatalf("certificate without a uid: %v", err)
	}
	// A table row without a uid matches no certificate, not even one
	// without a uid.
	tb.Set("bob", "", grants)
	for _, p := range []Principal{{Kind: User, Name: "bob"}, {Kind: User, Name: "bob", UID: "x"}} {
		if err := tb.Authorize(p, OpRead, "orders"); !errors.Is(err, ErrNotAuthorized) {
			t.Fatalf("%+v against a row without a uid: %v", p, err)
		}
	}
}

func TestZeroTableRefuses(t *testing.T) {
	var tb Table
	if err := tb.Authorize(Principal{Kind: User, Name: "u"}, OpRead, "s"); !errors.Is(err, ErrNotAuthorized) {
		t.Fatalf("zero table: %v", err)
	}
	tb.Set("u", "uid-u", []Grant{{Stream: "s", Ops: []Operation{OpRead}}})
	if err := tb.Authorize(Principal{Kind: User, Name: "u", UID: "uid-u"}, OpRead, "s"); err != nil {
		t.Fatal(err)
	}
}

func TestAllowAll(t *testing.T) {
	var a Authorizer = AllowAll{}
	for _, op := range []Operation{OpAppend, OpRead, OpTrim, OpDescribe} {
		if err := a.Authorize(Principal{}, op, "x"); err != nil {
			t.Fatal(err)
		}
	}
}

// TestTableConcurrent runs updates against checks (meaningful under -race).
func TestTableConcurrent(t *testing.T) {
	tb := NewTable()
	var wg sync.WaitGroup
	wg.Add(2)
	go func() {
		defer wg.Done()
		for i := 0; i < 1000; i++ {
			tb.Set("u", "uid-u", []Grant{{Stream: "s", Ops: []Operation{OpRead}}})
			tb.Delete("u")
			tb.SetAnonymous(nil, i%2 == 0)
		}
	}()
	go func() {
		defer wg.Done()
		for i := 0; i < 1000; i++ {
			_ = tb.Authorize(Principal{Kind: User, Name: "u", UID: "uid-u"}, OpRead, "s")
			_ = tb.Authorize(Principal{}, OpRead, "s")
			_ = tb.AnonymousAllowed()
		}
	}()
	wg.Wait()
}
