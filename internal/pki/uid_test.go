package pki

import (
	"crypto/x509"
	"crypto/x509/pkix"
	"errors"
	"strings"
	"testing"
	"time"
)

const testUID = "6f1c2a3b-4d5e-4f60-8a7b-9c0d1e2f3a4b"

func TestValidateUID(t *testing.T) {
	for _, ok := range []string{testUID, "a", "ABC-123", strings.Repeat("x", MaxUIDLength)} {
		if err := ValidateUID(ok); err != nil {
			t.Errorf("ValidateUID(%q): %v", ok, err)
		}
	}
	for _, bad := range []string{"", strings.Repeat("x", MaxUIDLength+1), "a b", "a/b", "a:b", "ü", "a\x00"} {
		if err := ValidateUID(bad); !errors.Is(err, ErrInvalidUID) {
			t.Errorf("ValidateUID(%q): %v, want ErrInvalidUID", bad, err)
		}
	}
}

// Issue writes LeafRequest.UID as the subject's serialNumber, UIDOf reads
// it back, the identity is untouched (still exactly one felix:// URI),
// and VerifyClientUID returns both after a handshake.
func TestIssueWithUID(t *testing.T) {
	ca := mustCA(t, "ca")
	c, k, err := ca.Issue(LeafRequest{Identity: userID("alice"), UID: testUID, Now: t0, Validity: time.Hour}, nil)
	if err != nil {
		t.Fatal(err)
	}
	leaf := mustLeaf(t, pair{c, k})
	if got := UIDOf(leaf.Leaf); got != testUID {
		t.Fatalf("UIDOf = %q, want %q", got, testUID)
	}
	if leaf.Leaf.Subject.SerialNumber != testUID || len(leaf.Leaf.URIs) != 1 {
		t.Fatalf("subject %v, URIs %v", leaf.Leaf.Subject, leaf.Leaf.URIs)
	}
	if id, err := IdentityOf(leaf.Leaf); err != nil || id != userID("alice") {
		t.Fatalf("IdentityOf = %v, %v", id, err)
	}
	// Without a UID: none.
	plain := mustLeaf(t, mustIssue(t, ca, userID("bob"), t0, time.Hour))
	if got := UIDOf(plain.Leaf); got != "" || plain.Leaf.Subject.SerialNumber != "" {
		t.Fatalf("certificate issued without a UID carries %q", got)
	}
	if UIDOf(nil) != "" {
		t.Fatal("UIDOf(nil) not empty")
	}
	// A serialNumber that is not a uid is no uid.
	if got := UIDOf(&x509.Certificate{Subject: pkix.Name{SerialNumber: "not a uid"}}); got != "" {
		t.Fatalf("UIDOf(malformed) = %q", got)
	}

	clk := newClock(t0)
	s, _ := brokerSource(t, ca, brokerID("b-0"), clk, nil)
	for _, tc := range []struct {
		name string
		cert pair
		uid  string
	}{{"bound", pair{c, k}, testUID}, {"unbound", mustIssue(t, ca, userID("bob"), t0, time.Hour), ""}} {
		res := handshake(t, ClientPortConfig(s), clientOf(mustLeaf(t, tc.cert), pool(ca.Cert), "prod/logs", "", clk))
		if res.serverErr != nil || res.clientErr != nil {
			t.Fatalf("%s: handshake: %v, %v", tc.name, res.serverErr, res.clientErr)
		}
		id, uid, err := VerifyClientUID(s, res.server)
		if err != nil || id.Kind != KindUser || uid != tc.uid {
			t.Fatalf("%s: VerifyClientUID = %v, %q, %v; want uid %q", tc.name, id, uid, err, tc.uid)
		}
	}
	// Errors are VerifyClient's.
	res := handshake(t, ClientPortConfig(s), clientOf(nil, pool(ca.Cert), "prod/logs", "", clk))
	if _, uid, err := VerifyClientUID(s, res.server); !errors.Is(err, ErrNoCertificate) || uid != "" {
		t.Fatalf("anonymous: %q, %v", uid, err)
	}
}

func TestIssueRejectsBadUID(t *testing.T) {
	ca := mustCA(t, "ca")
	for _, bad := range []string{"a b", strings.Repeat("x", MaxUIDLength+1), "x/y"} {
		_, _, err := ca.Issue(LeafRequest{Identity: userID("alice"), UID: bad, Now: t0, Validity: time.Hour}, nil)
		if !errors.Is(err, ErrBadRequest) || !errors.Is(err, ErrInvalidUID) {
			t.Errorf("Issue with UID %q: %v, want ErrBadRequest and ErrInvalidUID", bad, err)
		}
	}
}

// FuzzUIDOf: whatever a certificate's subject serialNumber holds, UIDOf
// returns either "" or exactly that value, and only when ValidateUID
// accepts it.
func FuzzUIDOf(f *testing.F) {
	f.Add(testUID)
	f.Fuzz(func(t *testing.T, s string) {
		got := UIDOf(&x509.Certificate{Subject: pkix.Name{SerialNumber: s}})
		valid := ValidateUID(s) == nil
		switch {
		case valid && got != s:
			t.Fatalf("UIDOf(%q) = %q for a valid uid", s, got)
		case !valid && got != "":
			t.Fatalf("UIDOf(%q) = %q for an invalid uid", s, got)
		case got != "" && (len(got) > MaxUIDLength || strings.ContainsFunc(got, func(r rune) bool {
			return !(r >= 'a' && r <= 'z' || r >= 'A' && r <= 'Z' || r >= '0' && r <= '9' || r == '-')
		})):
			t.Fatalf("UIDOf(%q) = %q is not of the uid form", s, got)
		}
	})
}
