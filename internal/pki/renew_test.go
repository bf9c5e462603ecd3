package pki

import (
	"crypto/x509"
	"testing"
	"time"
)

func TestRenewAt(t *testing.T) {
	// A 90-minute certificate: two thirds is 60 minutes in.
	cert := &x509.Certificate{NotBefore: t0, NotAfter: t0.Add(90 * time.Minute)}
	for _, tc := range []struct {
		name        string
		renewBefore time.Duration
		now         time.Duration // after NotBefore
		at          time.Duration // RenewAt, after NotBefore
		needs       bool
	}{
		{"fresh", 0, 0, 60 * time.Minute, false},
		{"just before two thirds", 0, 60*time.Minute - time.Nanosecond, 60 * time.Minute, false},
		{"at two thirds", 0, 60 * time.Minute, 60 * time.Minute, true},
		{"expired", 0, 2 * time.Hour, 60 * time.Minute, true},
		{"before earlier", 40 * time.Minute, 50 * time.Minute, 50 * time.Minute, true},
		{"before earlier, not yet", 40 * time.Minute, 49 * time.Minute, 50 * time.Minute, false},
		{"before later than two thirds", 10 * time.Minute, 70 * time.Minute, 60 * time.Minute, true},
		{"before negative ignored", -time.Hour, 59 * time.Minute, 60 * time.Minute, false},
		{"before longer than lifetime", 2 * time.Hour, 0, -30 * time.Minute, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if got, want := RenewAt(cert, tc.renewBefore), t0.Add(tc.at); !got.Equal(want) {
				t.Fatalf("RenewAt = %s, want %s", got, want)
			}
			if got := NeedsRenewal(cert, tc.renewBefore, t0.Add(tc.now)); got != tc.needs {
				t.Fatalf("NeedsRenewal = %v, want %v", got, tc.needs)
			}
		})
	}
	if !NeedsRenewal(nil, 0, t0) || !RenewAt(nil, 0).IsZero() {
		t.Fatal("a nil certificate needs renewal")
	}
}

// An issued certificate is renewed two thirds of the way from its
// backdated NotBefore.
func TestRenewAtIssued(t *testing.T) {
	ca := mustCA(t, "ca")
	p := mustIssue(t, ca, brokerID("b-0"), t0, 3*time.Hour-ClockSkew)
	c := mustCerts(t, p.cert)[0]
	if got, want := RenewAt(c, 0), t0.Add(-ClockSkew).Add(2*time.Hour); !got.Equal(want) {
		t.Fatalf("RenewAt = %s, want %s", got, want)
	}
}

// TestShortLivedLeafRenewsAfterIssue: a leaf is backdated by at most a
// tenth of its validity, so its renewal point lies after it was issued
// however short it is (a five-minute backdate on a 45 s certificate would
// put it before: renewed on every reconcile).
func TestShortLivedLeafRenewsAfterIssue(t *testing.T) {
	now := time.Date(2026, 12, 2, 0, 0, 0, 0, time.UTC)
	ca, err := NewCA("test", now.Add(-time.Hour), 200*24*time.Hour, nil)
	if err != nil {
		t.Fatal(err)
	}
	for _, validity := range []time.Duration{45 * time.Second, 3 * time.Minute, time.Hour, 90 * 24 * time.Hour} {
		certPEM, _, err := ca.Issue(LeafRequest{Identity: Identity{Namespace: "ns", Cluster: "c", Kind: KindBroker, Name: "c-0"},
			Now: now, Validity: validity}, nil)
		if err != nil {
			t.Fatal(err)
		}
		certs, err := ParseCertsPEM(certPEM)
		if err != nil {
			t.Fatal(err)
		}
		at := RenewAt(certs[0], 0)
		if min := now.Add(validity / 2); at.Before(min) {
			t.Errorf("validity %v: renewal at %v, before half the validity after issue (%v)", validity, at.Sub(now), validity/2)
		}
		// Certificates keep whole seconds.
		if got, want := now.Sub(certs[0].NotBefore), Backdate(validity); got < want || got > want+time.Second {
			t.Errorf("validity %v: backdated %v, want %v (to the second)", validity, got, want)
		}
	}
}
