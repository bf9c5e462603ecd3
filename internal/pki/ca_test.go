package pki

import (
	"bytes"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/rsa"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"errors"
	"math/big"
	"net"
	"slices"
	"testing"
	"time"
)

func TestNewCA(t *testing.T) {
	ca := mustCA(t, "felix prod/logs")
	c := ca.Cert
	if !c.IsCA || !c.BasicConstraintsValid || c.MaxPathLen != 0 || !c.MaxPathLenZero {
		t.Fatalf("basic constraints: IsCA %v valid %v maxPathLen %d zero %v", c.IsCA, c.BasicConstraintsValid, c.MaxPathLen, c.MaxPathLenZero)
	}
	if c.KeyUsage != x509.KeyUsageCertSign|x509.KeyUsageCRLSign {
		t.Fatalf("key usage %b", c.KeyUsage)
	}
	if k, ok := c.PublicKey.(*ecdsa.PublicKey); !ok || k.Curve != elliptic.P256() {
		t.Fatalf("public key %T", c.PublicKey)
	}
	if !c.NotBefore.Equal(t0.Add(-ClockSkew)) || !c.NotAfter.Equal(t0.Add(year)) {
		t.Fatalf("validity %s..%s", c.NotBefore, c.NotAfter)
	}
	if c.Subject.CommonName != "felix prod/logs" {
		t.Fatalf("CN %q", c.Subject.CommonName)
	}
	for _, bad := range []struct {
		cn  string
		now time.Time
		v   time.Duration
	}{{"", t0, year}, {"x", time.Time{}, year}, {"x", t0, 0}, {"x", t0, -time.Hour}} {
		if _, err := NewCA(bad.cn, bad.now, bad.v, nil); !errors.Is(err, ErrBadRequest) {
			t.Errorf("NewCA(%q, %s, %s): %v, want ErrBadRequest", bad.cn, bad.now, bad.v, err)
		}
	}
}

func TestParseCARoundTrip(t *testing.T) {
	ca := mustCA(t, "ca")
	keyPEM, err := ca.KeyPEM()
	if err != nil {
		t.Fatal(err)
	}
	got, err := ParseCA(ca.CertPEM(), keyPEM)
	if err != nil {
		t.Fatalf("ParseCA: %v", err)
	}
	if !got.Cert.Equal(ca.Cert) {
		t.Fatal("certificate differs")
	}
	// The parsed CA signs leaves the original's certificate verifies.
	p := mustIssue(t, got, brokerID("b-0"), t0, time.Hour)
	if _, err := verifyChain(mustCerts(t, p.cert), pool(ca.Cert), t0, x509.ExtKeyUsageServerAuth, ""); err != nil {
		t.Fatalf("leaf of parsed CA: %v", err)
	}
}

func mustCerts(t *testing.T, b []byte) []*x509.Certificate {
	t.Helper()
	c, err := ParseCertsPEM(b)
	if err != nil {
		t.Fatal(err)
	}
	return c
}

func pool(certs ...*x509.Certificate) *x509.CertPool {
	p := x509.NewCertPool()
	for _, c := range certs {
		p.AddCert(c)
	}
	return p
}

// selfSignedCA makes a CA certificate for key by hand (as a user might
// bring one), with the given template adjustments.
func selfSignedCA(t *testing.T, key any, pub any, isCA bool, ku x509.KeyUsage) []byte {
	t.Helper()
	tmpl := &x509.Certificate{
		SerialNumber:          big.NewInt(7),
		Subject:               pkix.Name{CommonName: "brought"},
		NotBefore:             t0.Add(-time.Hour),
		NotAfter:              t0.Add(year),
		IsCA:                  isCA,
		BasicConstraintsValid: true,
		KeyUsage:              ku,
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, pub, key)
	if err != nil {
		t.Fatal(err)
	}
	return pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der})
}

func TestParseCAKeyFormats(t *testing.T) {
	ec, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	rk, err := rsa.GenerateKey(rand.Reader, 2048)
	if err != nil {
		t.Fatal(err)
	}
	ecDER, _ := x509.MarshalECPrivateKey(ec)
	ecPKCS8, _ := x509.MarshalPKCS8PrivateKey(ec)
	rsaPKCS8, _ := x509.MarshalPKCS8PrivateKey(rk)
	enc := func(typ string, der []byte) []byte { return pem.EncodeToMemory(&pem.Block{Type: typ, Bytes: der}) }
	ecCert := selfSignedCA(t, ec, ec.Public(), true, x509.KeyUsageCertSign)
	rsaCert := selfSignedCA(t, rk, rk.Public(), true, x509.KeyUsageCertSign|x509.KeyUsageDigitalSignature)
	ecParams := append(enc("EC PARAMETERS", []byte{0x06, 0x08, 0x2a, 0x86, 0x48, 0xce, 0x3d, 0x03, 0x01, 0x07}), enc("EC PRIVATE KEY", ecDER)...)
	for _, tc := range []struct {
		name      string
		cert, key []byte
		want      error
	}{
		{"ec pkcs8", ecCert, enc("PRIVATE KEY", ecPKCS8), nil},
		{"ec sec1", ecCert, enc("EC PRIVATE KEY", ecDER), nil},
		{"ec sec1 with params", ecCert, ecParams, nil},
		{"rsa pkcs1", rsaCert, enc("RSA PRIVATE KEY", x509.MarshalPKCS1PrivateKey(rk)), nil},
		{"rsa pkcs8", rsaCert, enc("PRIVATE KEY", rsaPKCS8), nil},
		{"mismatch", ecCert, enc("RSA PRIVATE KEY", x509.MarshalPKCS1PrivateKey(rk)), ErrKeyMismatch},
		{"not a CA", selfSignedCA(t, ec, ec.Public(), false, x509.KeyUsageDigitalSignature), enc("PRIVATE KEY", ecPKCS8), ErrNotCA},
		{"no certSign", selfSignedCA(t, ec, ec.Public(), true, x509.KeyUsageDigitalSignature), enc("PRIVATE KEY", ecPKCS8), ErrNotCA},
		{"no key", ecCert, nil, ErrBadKey},
		{"two keys", ecCert, append(enc("PRIVATE KEY", ecPKCS8), enc("PRIVATE KEY", ecPKCS8)...), ErrBadKey},
		{"cert as key", ecCert, ecCert, ErrBadKey},
		{"garbage key", ecCert, enc("PRIVATE KEY", []byte("nope")), ErrBadKey},
		{"garbage cert", []byte("hello"), enc("PRIVATE KEY", ecPKCS8), ErrBadPEM},
	} {
		t.Run(tc.name, func(t *testing.T) {
			ca, err := ParseCA(tc.cert, tc.key)
			if !errors.Is(err, tc.want) {
				t.Fatalf("ParseCA: %v, want %v", err, tc.want)
			}
			if err != nil {
				return
			}
			// A brought CA signs ECDSA leaves that verify.
			p := mustIssue(t, ca, userID("alice"), t0, time.Hour)
			if _, err := verifyChain(mustCerts(t, p.cert), pool(ca.Cert), t0, x509.ExtKeyUsageClientAuth, ""); err != nil {
				t.Fatalf("leaf: %v", err)
			}
			if _, err := ca.KeyPEM(); err != nil {
				t.Fatalf("KeyPEM: %v", err)
			}
		})
	}
}

func TestIssue(t *testing.T) {
	ca := mustCA(t, "ca")
	for _, tc := range []struct {
		id   Identity
		ekus []x509.ExtKeyUsage
	}{
		{brokerID("logs-0"), []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth, x509.ExtKeyUsageClientAuth}},
		{userID("alice"), []x509.ExtKeyUsage{x509.ExtKeyUsageClientAuth}},
		{Identity{Namespace: "prod", Cluster: "logs", Kind: KindOperator, Name: "op"}, []x509.ExtKeyUsage{x509.ExtKeyUsageClientAuth}},
	} {
		t.Run(string(tc.id.Kind), func(t *testing.T) {
			now := t0.Add(time.Hour)
			certPEM, keyPEM, err := ca.Issue(LeafRequest{
				Identity: tc.id,
				DNSNames: []string{"logs.prod.svc"},
				IPs:      []net.IP{net.ParseIP("10.0.0.7")},
				Now:      now,
				Validity: 24 * time.Hour,
			}, nil)
			if err != nil {
				t.Fatal(err)
			}
			if blk, _ := pem.Decode(keyPEM); blk == nil || blk.Type != "PRIVATE KEY" {
				t.Fatalf("key PEM is not PKCS8: %q", keyPEM)
			}
			tc2, err := ParseLeaf(certPEM, keyPEM)
			if err != nil {
				t.Fatal(err)
			}
			c := tc2.Leaf
			if len(tc2.Certificate) != 1 {
				t.Fatalf("chain of %d for a self-signed CA", len(tc2.Certificate))
			}
			if got, err := IdentityOf(c); err != nil || got != tc.id {
				t.Fatalf("IdentityOf = %+v, %v", got, err)
			}
			if c.Subject.CommonName != tc.id.Name || !slices.Equal(c.Subject.Organization, []string{"felix:prod/logs"}) {
				t.Fatalf("subject %s", c.Subject)
			}
			if !slices.Equal(c.ExtKeyUsage, tc.ekus) {
				t.Fatalf("EKU %v, want %v", c.ExtKeyUsage, tc.ekus)
			}
			if c.IsCA || c.KeyUsage != x509.KeyUsageDigitalSignature {
				t.Fatalf("IsCA %v key usage %b", c.IsCA, c.KeyUsage)
			}
			if !c.NotBefore.Equal(now.Add(-ClockSkew)) || !c.NotAfter.Equal(now.Add(24*time.Hour)) {
				t.Fatalf("validity %s..%s", c.NotBefore, c.NotAfter)
			}
			if c.SerialNumber.Sign() <= 0 || c.SerialNumber.BitLen() > 128 {
				t.Fatalf("serial %s", c.SerialNumber)
			}
			if !slices.Equal(c.DNSNames, []string{"logs.prod.svc"}) || len(c.IPAddresses) != 1 {
				t.Fatalf("SANs %v %v", c.DNSNames, c.IPAddresses)
			}
			if _, err := verifyChain([]*x509.Certificate{c}, pool(ca.Cert), now, tc.ekus[0], ""); err != nil {
				t.Fatalf("verify: %v", err)
			}
		})
	}
}

func TestIssueClipsToCA(t *testing.T) {
	ca := mustCA(t, "ca")
	now := ca.Cert.NotAfter.Add(-time.Hour)
	p := mustIssue(t, ca, userID("alice"), now, 30*24*time.Hour)
	if c := mustCerts(t, p.cert)[0]; !c.NotAfter.Equal(ca.Cert.NotAfter) {
		t.Fatalf("NotAfter %s, want the CA's %s", c.NotAfter, ca.Cert.NotAfter)
	}
	if _, _, err := ca.Issue(LeafRequest{Identity: userID("alice"), Now: ca.Cert.NotAfter, Validity: time.Hour}, nil); !errors.Is(err, ErrCAExpired) {
		t.Fatalf("Issue after CA expiry: %v", err)
	}
}

func TestIssueRejects(t *testing.T) {
	ca := mustCA(t, "ca")
	for name, req := range map[string]LeafRequest{
		"invalid identity": {Identity: Identity{Namespace: "prod", Cluster: "logs", Kind: "admin", Name: "x"}, Now: t0, Validity: time.Hour},
		"zero identity":    {Now: t0, Validity: time.Hour},
		"zero now":         {Identity: userID("a"), Validity: time.Hour},
		"zero validity":    {Identity: userID("a"), Now: t0},
	} {
		if _, _, err := ca.Issue(req, nil); !errors.Is(err, ErrBadRequest) {
			t.Errorf("%s: %v, want ErrBadRequest", name, err)
		}
	}
}

// An intermediate CA brought by the user: leaves carry it after
// themselves, so a bundle holding only the root verifies them, and a
// Source accepts them.
func TestIssueFromIntermediate(t *testing.T) {
	root := mustCA(t, "root")
	ikey, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	tmpl := &x509.Certificate{
		SerialNumber: big.NewInt(2), Subject: pkix.Name{CommonName: "intermediate"},
		NotBefore: t0.Add(-time.Hour), NotAfter: t0.Add(year / 2),
		IsCA: true, BasicConstraintsValid: true, KeyUsage: x509.KeyUsageCertSign,
	}
	// The root has path length zero, so it cannot sign a usable
	// intermediate: make a root that can.
	rootTmpl := *root.Cert
	rootTmpl.MaxPathLen, rootTmpl.MaxPathLenZero = 1, false
	rootDER, err := x509.CreateCertificate(rand.Reader, &rootTmpl, &rootTmpl, root.Key.Public(), root.Key)
	if err != nil {
		t.Fatal(err)
	}
	rootCert, _ := x509.ParseCertificate(rootDER)
	der, err := x509.CreateCertificate(rand.Reader, tmpl, rootCert, ikey.Public(), root.Key)
	if err != nil {
		t.Fatal(err)
	}
	icert, _ := x509.ParseCertificate(der)
	inter := &CA{Cert: icert, Key: ikey}
	p := mustIssue(t, inter, brokerID("b-0"), t0, time.Hour)
	chain := mustCerts(t, p.cert)
	if len(chain) != 2 || !chain[1].Equal(icert) {
		t.Fatalf("chain of %d", len(chain))
	}
	if _, err := verifyChain(chain, pool(rootCert), t0, x509.ExtKeyUsageServerAuth, ""); err != nil {
		t.Fatalf("verify against root: %v", err)
	}
	d := newSecretDir(t)
	d.write(p.cert, p.key, EncodeCertsPEM(rootCert))
	if _, err := NewSource(SourceOptions{Files: d.files(), Now: newClock(t0).Now}); err != nil {
		t.Fatalf("NewSource: %v", err)
	}
}

func TestParseCertsPEM(t *testing.T) {
	ca := mustCA(t, "a")
	other := mustCA(t, "b")
	two := append(ca.CertPEM(), other.CertPEM()...)
	if certs, err := ParseCertsPEM(two); err != nil || len(certs) != 2 || !certs[1].Equal(other.Cert) {
		t.Fatalf("two certs: %d %v", len(certs), err)
	}
	if _, err := ParseCertsPEM([]byte("\n  " + string(ca.CertPEM()) + "\r\n\n")); err != nil {
		t.Fatalf("surrounding whitespace: %v", err)
	}
	keyPEM, _ := ca.KeyPEM()
	withHeader := pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Headers: map[string]string{"a": "b"}, Bytes: ca.Cert.Raw})
	for _, tc := range []struct {
		name string
		in   []byte
		want error
	}{
		{"empty", nil, ErrNoCertificates},
		{"whitespace", []byte(" \n\t"), ErrNoCertificates},
		{"text before", append([]byte("hello\n"), ca.CertPEM()...), ErrBadPEM},
		{"text after", append(ca.CertPEM(), "bye"...), ErrBadPEM},
		{"text between", append(append(ca.CertPEM(), "x\n"...), other.CertPEM()...), ErrBadPEM},
		{"key block", append(ca.CertPEM(), keyPEM...), ErrBadPEM},
		{"headers", withHeader, ErrBadPEM},
		{"bad der", pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: []byte{1, 2, 3}}), ErrBadPEM},
		{"truncated", ca.CertPEM()[:40], ErrBadPEM},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if _, err := ParseCertsPEM(tc.in); !errors.Is(err, tc.want) {
				t.Fatalf("ParseCertsPEM: %v, want %v", err, tc.want)
			}
		})
	}
}

func TestParseLeafMismatch(t *testing.T) {
	ca := mustCA(t, "ca")
	a := mustIssue(t, ca, userID("a"), t0, time.Hour)
	b := mustIssue(t, ca, userID("b"), t0, time.Hour)
	if _, err := ParseLeaf(a.cert, b.key); !errors.Is(err, ErrKeyMismatch) {
		t.Fatalf("ParseLeaf(a, b's key): %v", err)
	}
	tc, err := ParseLeaf(a.cert, a.key)
	if err != nil || tc.Leaf == nil || !bytes.Equal(tc.Certificate[0], tc.Leaf.Raw) {
		t.Fatalf("ParseLeaf: %v", err)
	}
}

// FuzzParseCertsPEM: the decoder never panics, refuses with its
// sentinels, and what it accepts re-encodes to the same certificates.
func FuzzParseCertsPEM(f *testing.F) {
	ca, err := NewCA("fuzz", t0, year, nil)
	if err != nil {
		f.Fatal(err)
	}
	f.Add(ca.CertPEM())
	f.Fuzz(func(t *testing.T, b []byte) {
		certs, err := ParseCertsPEM(b)
		if err != nil {
			if !errors.Is(err, ErrBadPEM) && !errors.Is(err, ErrNoCertificates) {
				t.Fatalf("unexpected error %v", err)
			}
			return
		}
		again, err := ParseCertsPEM(EncodeCertsPEM(certs...))
		if err != nil || len(again) != len(certs) {
			t.Fatalf("re-encode: %d certs, %v", len(again), err)
		}
		for i := range certs {
			if !certs[i].Equal(again[i]) {
				t.Fatalf("certificate %d changed", i)
			}
		}
	})
}

// FuzzParseKeyPEM: the key decoder never panics and refuses with its
// sentinels.
func FuzzParseKeyPEM(f *testing.F) {
	ca, err := NewCA("fuzz", t0, year, nil)
	if err != nil {
		f.Fatal(err)
	}
	k, err := ca.KeyPEM()
	if err != nil {
		f.Fatal(err)
	}
	f.Add(k)
	f.Fuzz(func(t *testing.T, b []byte) {
		key, err := ParseKeyPEM(b)
		if err != nil {
			if !errors.Is(err, ErrBadPEM) && !errors.Is(err, ErrBadKey) {
				t.Fatalf("unexpected error %v", err)
			}
			return
		}
		if key == nil {
			t.Fatal("nil key without error")
		}
	})
}
