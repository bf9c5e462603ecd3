package controllers

import (
	"crypto/x509"
	"errors"
	"slices"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	felixv1 "felix.dev/felix/api/v1alpha1"
	"felix.dev/felix/internal/pki"
)

// TestPKI_CARollover walks the operator CA through its life: created,
// a new CA joins the bundle at two thirds (the old one still signs and
// leaves are untouched but for ca.crt), the new CA signs CARolloverDelay
// later (leaves are reissued from it, the old CA stays trusted), and the
// old CA leaves the bundle when it expires.
func TestPKI_CARollover(t *testing.T) {
	t0 := time.Date(2030, 1, 1, 0, 0, 0, 0, time.UTC)
	c := &felixv1.FelixCluster{ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: "c"}}
	want := leafWant{Identity: brokerIdentity(c, "c-0"), DNSNames: brokerDNSNames(c, "c-0"), Duration: DefaultCertificateDuration}

	p, err := planCA(nil, "test CA", t0, nil)
	if err != nil || p.Reason != "CACreated" || !p.Changed {
		t.Fatalf("create: %+v %v", p, err)
	}
	first := p.Signer.CA.Cert
	again, err := planCA(p.Data, "test CA", t0.Add(time.Hour), nil)
	if err != nil || again.Changed || again.Reason != "" {
		t.Fatalf("an unchanged CA must plan no change: %+v %v", again, err)
	}
	leaf, err := planLeaf(nil, p.Signer, want, t0, nil)
	if err != nil || leaf.Reason != "CertificateIssued" {
		t.Fatalf("issue: %+v %v", leaf, err)
	}

	// Two thirds of the CA's life: the new CA joins the bundle.
	at := pki.RenewAt(first, 0)
	if !at.Equal(p.NextCheck) {
		t.Errorf("NextCheck %s, want the CA's renewal time %s", p.NextCheck, at)
	}
	roll, err := planCA(p.Data, "test CA", at, nil)
	if err != nil || roll.Reason != "CARolloverStarted" {
		t.Fatalf("rollover: %+v %v", roll, err)
	}
	if !roll.Signer.CA.Cert.Equal(first) {
		t.Fatal("the old CA must keep signing while the new one propagates")
	}
	bundle, _ := pki.ParseCertsPEM(roll.Signer.Bundle)
	if len(bundle) != 2 || !bundle[0].Equal(first) {
		t.Fatalf("bundle during rollover: %d certs", len(bundle))
	}
	newCA := bundle[1]
	// A leaf of the old CA keeps its certificate; only ca.crt changes.
	leafData := leaf.Data
	if lp, err := planLeaf(leafData, roll.Signer, want, t0.Add(time.Hour), nil); err != nil || lp.Reason != "TrustBundleUpdated" {
		t.Fatalf("bundle change on a fresh leaf: %+v %v", lp, err)
	}

	// CARolloverDelay later the new CA signs; the old one stays trusted.
	promote, err := planCA(roll.Data, "test CA", roll.NextCheck, nil)
	if err != nil || promote.Reason != "CARotated" || !promote.Signer.CA.Cert.Equal(newCA) {
		t.Fatalf("promote: %+v %v", promote, err)
	}
	if !roll.NextCheck.Equal(at.Add(CARolloverDelay)) {
		t.Errorf("promotion at %s, want CARolloverDelay after %s", roll.NextCheck, at)
	}
	bundle, _ = pki.ParseCertsPEM(promote.Signer.Bundle)
	if len(bundle) != 2 || !bundle[0].Equal(newCA) || !bundle[1].Equal(first) {
		t.Fatalf("bundle after promotion: %d certs", len(bundle))
	}
	if _, ok := promote.Data[SecretKeyNextCAKey]; ok {
		t.Error("the next CA's key must leave the Secret once it signs")
	}
	lp, err := planLeaf(leafData, promote.Signer, want, roll.NextCheck, nil)
	if err != nil || lp.Reason != "CertificateRenewed" || lp.Why != "signing CA changed" {
		t.Fatalf("leaf after promotion: %+v %v", lp, err)
	}
	certs, _ := pki.ParseCertsPEM(lp.Data[SecretKeyTLSCert])
	if err := certs[0].CheckSignatureFrom(newCA); err != nil {
		t.Errorf("reissued leaf not signed by the new CA: %v", err)
	}

	// The old CA leaves the bundle once it expired.
	late, err := planCA(promote.Data, "test CA", first.NotAfter.Add(time.Second), nil)
	if err != nil {
		t.Fatal(err)
	}
	bundle, _ = pki.ParseCertsPEM(late.Signer.Bundle)
	if slices.ContainsFunc(bundle, first.Equal) {
		t.Error("an expired CA must leave the bundle")
	}
}

// TestPKI_LeafReissueReasons: what makes a leaf be reissued.
func TestPKI_LeafReissueReasons(t *testing.T) {
	t0 := time.Date(2030, 1, 1, 0, 0, 0, 0, time.UTC)
	c := &felixv1.FelixCluster{ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: "c"}}
	ca, err := planCA(nil, "test CA", t0, nil)
	if err != nil {
		t.Fatal(err)
	}
	want := leafWant{Identity: brokerIdentity(c, "c-0"), DNSNames: brokerDNSNames(c, "c-0"), Duration: 90 * 24 * time.Hour}
	first, err := planLeaf(nil, ca.Signer, want, t0, nil)
	if err != nil {
		t.Fatal(err)
	}
	leaf, _ := pki.ParseCertsPEM(first.Data[SecretKeyTLSCert])
	if !slices.Equal(leaf[0].ExtKeyUsage, []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth, x509.ExtKeyUsageClientAuth}) {
		t.Errorf("broker EKU %v", leaf[0].ExtKeyUsage)
	}
	other := want
	other.DNSNames = want.DNSNames[:2]
	shorter := want
	shorter.Duration = 24 * time.Hour
	early := want
	early.RenewBefore = 80 * 24 * time.Hour
	bound := want
	bound.UID = "6f1c2a3b-4d5e-4f60-8a7b-9c0d1e2f3a4b"
	for _, tt := range []struct {
		name string
		want leafWant
		now  time.Time
		why  string
	}{
		{"unchanged", want, t0.Add(time.Hour), ""},
		{"two thirds", want, first.RenewAt, "renewal due"},
		{"DNS names", other, t0.Add(time.Hour), "DNS names changed"},
		{"duration", shorter, t0.Add(time.Hour), "certificate duration shortened"},
		{"renewBefore", early, t0.Add(11 * 24 * time.Hour), "renewal due"},
		{"a uid wanted, none carried", bound, t0.Add(time.Hour), "bound to another object uid"},
	} {
		t.Run(tt.name, func(t *testing.T) {
			p, err := planLeaf(first.Data, ca.Signer, tt.want, tt.now, nil)
			if err != nil {
				t.Fatal(err)
			}
			if p.Why != tt.why || p.Changed != (tt.why != "") {
				t.Errorf("why %q changed %v, want %q", p.Why, p.Changed, tt.why)
			}
			if tt.why != "" {
				certs, _ := pki.ParseCertsPEM(p.Data[SecretKeyTLSCert])
				if got := pki.UIDOf(certs[0]); got != tt.want.UID {
					t.Errorf("reissued certificate carries uid %q, want %q", got, tt.want.UID)
				}
			}
		})
	}
}

// TestPKI_InvalidCASecretIsNotReplaced: a CA Secret the operator controls
// that holds no usable CA is reported (errCASecretInvalid), not replaced by
// a fresh CA that would drop the trust bundle; an expired one is rolled
// over as a missing one.
func TestPKI_InvalidCASecretIsNotReplaced(t *testing.T) {
	t0 := time.Date(2030, 1, 1, 0, 0, 0, 0, time.UTC)
	p, err := planCA(nil, "test CA", t0, nil)
	if err != nil {
		t.Fatal(err)
	}
	for name, data := range map[string]map[string][]byte{
		"junk":        {SecretKeyCACert: []byte("junk"), SecretKeyCAKey: []byte("junk")},
		"key missing": {SecretKeyCACert: p.Data[SecretKeyCACert]},
		"cert junk":   {SecretKeyCACert: []byte("junk"), SecretKeyCAKey: p.Data[SecretKeyCAKey]},
	} {
		if q, err := planCA(data, "test CA", t0.Add(time.Hour), nil); !errors.Is(err, errCASecretInvalid) {
			t.Errorf("%s: plan %q changed=%v, err %v; want errCASecretInvalid", name, q.Reason, q.Changed, err)
		}
	}
	expired := p.Data
	q, err := planCA(map[string][]byte{SecretKeyCACert: expired[SecretKeyCACert], SecretKeyCAKey: []byte("lost")}, "test CA", t0.Add(CAValidity+time.Hour), nil)
	if err != nil || q.Reason != "CACreated" {
		t.Errorf("expired CA with a bad key: %q %v; want CACreated", q.Reason, err)
	}
}

// TestPKI_TLSStyleCASecretTrustsOnlyItself: a CA Secret in cert-manager's
// CA layout (tls.crt, tls.key, ca.crt = the parent CA) signs with tls.crt,
// and the bundle holds that CA only: the parent may sign anyone's
// certificates. A ca.crt + ca.key Secret keeps its whole bundle.
func TestPKI_TLSStyleCASecretTrustsOnlyItself(t *testing.T) {
	now := time.Now()
	ca, err := pki.NewCA("cluster CA", now, time.Hour, nil)
	if err != nil {
		t.Fatal(err)
	}
	parent, err := pki.NewCA("parent CA", now, time.Hour, nil)
	if err != nil {
		t.Fatal(err)
	}
	key, err := ca.KeyPEM()
	if err != nil {
		t.Fatal(err)
	}
	s, err := signerFromSecret(&corev1.Secret{Data: map[string][]byte{SecretKeyTLSCert: ca.CertPEM(), SecretKeyTLSKey: key, SecretKeyCACert: parent.CertPEM()}})
	if err != nil {
		t.Fatal(err)
	}
	if certs, _ := pki.ParseCertsPEM(s.Bundle); len(certs) != 1 || !certs[0].Equal(ca.Cert) {
		t.Errorf("bundle of a tls.crt-style CA Secret holds %d certificates; want its CA only", len(certs))
	}
	s, err = signerFromSecret(&corev1.Secret{Data: map[string][]byte{SecretKeyCACert: pki.EncodeCertsPEM(ca.Cert, parent.Cert), SecretKeyCAKey: key}})
	if err != nil {
		t.Fatal(err)
	}
	if certs, _ := pki.ParseCertsPEM(s.Bundle); len(certs) != 2 {
		t.Errorf("bundle of a ca.crt-style CA Secret holds %d certificates; want both", len(certs))
	}
}

// TestPKI_ReservedSecretNames: a FelixUser may not take a name the
// cluster's own Secrets use or will use after a scale-up.
func TestPKI_ReservedSecretNames(t *testing.T) {
	for name, want := range map[string]bool{
		"c-ca": true, "c-trust": true, "c-0-tls": true, "c-5-tls": true, "c-12-tls": true,
		"c": false, "c-tls": false, "c-x-tls": false, "c-5": false, "d-5-tls": false, "c-ca-x": false, "c-5-tls-x": false, "alice": false,
	} {
		if got := clusterReservedSecret("c", name); got != want {
			t.Errorf("clusterReservedSecret(c, %q) = %v; want %v", name, got, want)
		}
	}
}

// TestPKI_LeafBoundToUID: a certificate bound to one uid is kept while
// that uid is wanted and reissued for another (a FelixUser deleted and
// recreated under the same name), or when no uid is wanted any more.
func TestPKI_LeafBoundToUID(t *testing.T) {
	t0 := time.Date(2030, 1, 1, 0, 0, 0, 0, time.UTC)
	ca, err := planCA(nil, "test CA", t0, nil)
	if err != nil {
		t.Fatal(err)
	}
	id := pki.Identity{Namespace: "ns", Cluster: "c", Kind: pki.KindUser, Name: "alice"}
	want := leafWant{Identity: id, UID: "uid-1", Duration: 24 * time.Hour}
	first, err := planLeaf(nil, ca.Signer, want, t0, nil)
	if err != nil {
		t.Fatal(err)
	}
	if p, err := planLeaf(first.Data, ca.Signer, want, t0.Add(time.Hour), nil); err != nil || p.Changed {
		t.Fatalf("same uid: %+v %v", p, err)
	}
	for _, uid := range []string{"uid-2", ""} {
		w := want
		w.UID = uid
		p, err := planLeaf(first.Data, ca.Signer, w, t0.Add(time.Hour), nil)
		if err != nil || p.Why != "bound to another object uid" || p.Reason != "CertificateRenewed" {
			t.Fatalf("uid %q: %+v %v", uid, p, err)
		}
		certs, _ := pki.ParseCertsPEM(p.Data[SecretKeyTLSCert])
		if got := pki.UIDOf(certs[0]); got != uid {
			t.Fatalf("reissued for uid %q carries %q", uid, got)
		}
	}
}
