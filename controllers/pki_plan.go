package controllers

import (
	"bytes"
	"crypto/x509"
	"errors"
	"fmt"
	"io"
	"maps"
	"slices"
	"time"

	corev1 "k8s.io/api/core/v1"

	felixv1 "felix.dev/felix/api/v1alpha1"
	"felix.dev/felix/internal/pki"
)

// Keys of the certificate Secrets (the layout of package pki's doc).
const (
	// SecretKeyCACert is the trust bundle: every CA whose leaves are
	// accepted. In the operator's CA Secret the first certificate is the
	// CA that signs.
	SecretKeyCACert = "ca.crt"
	// SecretKeyCAKey is the signing CA's private key (CA Secret only).
	SecretKeyCAKey = "ca.key"
	// SecretKeyNextCACert and SecretKeyNextCAKey hold the CA that takes
	// over during a rollover, from the moment it joins the bundle until it
	// starts signing.
	SecretKeyNextCACert = "next-ca.crt"
	SecretKeyNextCAKey  = "next-ca.key"
	// SecretKeyTLSCert is a leaf's chain, leaf first; SecretKeyTLSKey its
	// key (corev1.TLSCertKey, corev1.TLSPrivateKeyKey).
	SecretKeyTLSCert = corev1.TLSCertKey
	SecretKeyTLSKey  = corev1.TLSPrivateKeyKey
)

// ConditionTLSReady is the FelixCluster condition saying whether every
// broker has a usable certificate.
const ConditionTLSReady = "TLSReady"

// Certificate lifetimes.
const (
	// CAValidity is the lifetime of a CA the operator makes. It is rolled
	// over once two thirds of it passed.
	CAValidity = 5 * 365 * 24 * time.Hour
	// CARolloverDelay is how long a new CA sits in every trust bundle
	// before it signs anything, so that every broker and client reloaded
	// a bundle holding it (the kubelet refreshes mounted Secrets within
	// about a minute).
	CARolloverDelay = time.Hour
	// DefaultCertificateDuration is a leaf's lifetime when the cluster
	// does not say (the API default).
	DefaultCertificateDuration = 2160 * time.Hour
)

// errCASecretInvalid: a CA Secret holds no usable CA.
var errCASecretInvalid = errors.New("CA secret holds no usable CA")

// signer is the CA leaves are issued from and the trust bundle they are
// shipped with.
type signer struct {
	CA *pki.CA
	// Bundle is the PEM trust bundle (ca.crt of every leaf Secret).
	Bundle []byte
}

// certTimes returns a cluster's leaf lifetime and renewBefore (0: the two
// thirds rule). A renewBefore not shorter than the lifetime would renew
// forever and is ignored.
func certTimes(c *felixv1.FelixCluster) (duration, renewBefore time.Duration) {
	duration = DefaultCertificateDuration
	tls := c.Spec.Security.TLS
	if d := tls.CertificateDuration; d != nil && d.Duration > 0 {
		duration = d.Duration
	}
	if d := tls.RenewBefore; d != nil && d.Duration > 0 && d.Duration < duration {
		renewBefore = d.Duration
	}
	return duration, renewBefore
}

// caPlan is what the operator's CA Secret should hold at a given time.
type caPlan struct {
	Data    map[string][]byte
	Changed bool
	// Reason is CACreated, CARolloverStarted or CARotated when the CA
	// changed, "" otherwise.
	Reason string
	Signer signer
	// NextCheck is when the plan changes next (rollover start or
	// promotion, an expiring bundle member).
	NextCheck time.Time
}

// planCA decides the content of the operator-managed CA Secret from its
// current content (nil when it does not exist): create a CA, start a
// rollover once two thirds of the signing CA's lifetime passed (the new
// CA joins the bundle, the old one keeps signing), promote the new CA
// CARolloverDelay later (it signs, the old one stays in the bundle until
// it expires), and drop expired CAs from the bundle.
//
// A Secret that holds data but no usable CA is not replaced (that would
// drop every CA of the bundle clients and brokers trust): planCA returns
// an error wrapping errCASecretInvalid, unless the Secret's signing CA
// certificate parses and has expired, when a new CA is made as for a
// missing Secret.
func planCA(data map[string][]byte, cn string, now time.Time, rnd io.Reader) (caPlan, error) {
	var p caPlan
	cur, err := pki.ParseCA(data[SecretKeyCACert], data[SecretKeyCAKey])
	if err != nil && len(data) > 0 && !caExpired(data[SecretKeyCACert], now) {
		return p, fmt.Errorf("%w: %w", errCASecretInvalid, err)
	}
	var others []*x509.Certificate
	if err != nil || !cur.Cert.NotAfter.After(now) {
		cur, err = pki.NewCA(cn, now, CAValidity, rnd)
		if err != nil {
			return p, err
		}
		p.Reason = "CACreated"
		data = nil
	} else if certs, err := pki.ParseCertsPEM(data[SecretKeyCACert]); err == nil {
		others = certs[1:]
	}
	var next *pki.CA
	if data != nil {
		if n, err := pki.ParseCA(data[SecretKeyNextCACert], data[SecretKeyNextCAKey]); err == nil && n.Cert.NotAfter.After(now) {
			next = n
		}
	}
	switch {
	case next != nil && !now.Before(promoteAt(next)):
		others = append([]*x509.Certificate{cur.Cert}, others...)
		cur, next = next, nil
		p.Reason = "CARotated"
	case next == nil && pki.NeedsRenewal(cur.Cert, 0, now):
		n, err := pki.NewCA(cn, now, CAValidity, rnd)
		if err != nil {
			return p, err
		}
		next = n
		p.Reason = "CARolloverStarted"
	}
	bundle := []*x509.Certificate{cur.Cert}
	for _, o := range others {
		if o.NotAfter.After(now) && !containsCert(bundle, o) && (next == nil || !o.Equal(next.Cert)) {
			bundle = append(bundle, o)
		}
	}
	if next != nil {
		bundle = append(bundle, next.Cert)
	}
	key, err := cur.KeyPEM()
	if err != nil {
		return p, err
	}
	p.Data = map[string][]byte{SecretKeyCACert: pki.EncodeCertsPEM(bundle...), SecretKeyCAKey: key}
	p.NextCheck = pki.RenewAt(cur.Cert, 0)
	if next != nil {
		nk, err := next.KeyPEM()
		if err != nil {
			return p, err
		}
		p.Data[SecretKeyNextCACert] = next.CertPEM()
		p.Data[SecretKeyNextCAKey] = nk
		p.NextCheck = promoteAt(next)
	}
	for _, b := range bundle[1:] {
		if b.NotAfter.Before(p.NextCheck) {
			p.NextCheck = b.NotAfter
		}
	}
	p.Changed = !maps.EqualFunc(data, p.Data, bytes.Equal)
	p.Signer = signer{CA: cur, Bundle: p.Data[SecretKeyCACert]}
	return p, nil
}

// caExpired reports whether the first certificate of bundle parses and
// has expired at now.
func caExpired(bundle []byte, now time.Time) bool {
	certs, err := pki.ParseCertsPEM(bundle)
	return err == nil && len(certs) > 0 && !certs[0].NotAfter.After(now)
}

// promoteAt is when a CA added to the bundle by a rollover starts signing.
func promoteAt(next *pki.CA) time.Time {
	return next.Cert.NotBefore.Add(pki.ClockSkew + CARolloverDelay)
}

func containsCert(list []*x509.Certificate, c *x509.Certificate) bool {
	return slices.ContainsFunc(list, c.Equal)
}

// signerFromSecret reads a CA Secret: keys ca.crt + ca.key (the first
// certificate of ca.crt signs, the others stay trusted: a rollover the
// Secret's owner runs), or tls.crt + tls.key (a cert-manager CA Secret).
// The trust bundle holds only CAs of this cluster: of a tls.crt-style
// Secret only the signing CA, never its ca.crt, which is the parent CA
// that may sign other clusters' (or anyone's) certificates too. Errors
// wrap errCASecretInvalid.
func signerFromSecret(s *corev1.Secret) (signer, error) {
	certPEM, keyPEM := s.Data[SecretKeyCACert], s.Data[SecretKeyCAKey]
	if len(keyPEM) == 0 {
		certPEM, keyPEM = s.Data[SecretKeyTLSCert], s.Data[SecretKeyTLSKey]
	}
	if len(certPEM) == 0 || len(keyPEM) == 0 {
		return signer{}, fmt.Errorf("%w: Secret %s has neither ca.crt and ca.key nor tls.crt and tls.key", errCASecretInvalid, s.Name)
	}
	ca, err := pki.ParseCA(certPEM, keyPEM)
	if err != nil {
		return signer{}, fmt.Errorf("%w: Secret %s: %w", errCASecretInvalid, s.Name, err)
	}
	bundle := []*x509.Certificate{ca.Cert}
	if len(s.Data[SecretKeyCAKey]) == 0 {
		return signer{CA: ca, Bundle: pki.EncodeCertsPEM(bundle...)}, nil
	}
	if extra, err := pki.ParseCertsPEM(s.Data[SecretKeyCACert]); err == nil {
		for _, e := range extra {
			if !containsCert(bundle, e) {
				bundle = append(bundle, e)
			}
		}
	}
	return signer{CA: ca, Bundle: pki.EncodeCertsPEM(bundle...)}, nil
}

// leafWant is the certificate a Secret should hold.
type leafWant struct {
	Identity pki.Identity
	// UID is the metadata.uid of the object the certificate is bound to
	// (pki.LeafRequest.UID): a FelixUser's; "" for brokers.
	UID         string
	DNSNames    []string
	Duration    time.Duration
	RenewBefore time.Duration
}

// leafPlan is what a leaf Secret should hold at a given time.
type leafPlan struct {
	Data    map[string][]byte
	Changed bool
	// Reason is CertificateIssued (no usable certificate before),
	// CertificateRenewed (a new certificate replaces a usable one) or
	// TrustBundleUpdated (only ca.crt changed); "" when nothing changed.
	Reason string
	// Why says what made a certificate be reissued.
	Why      string
	NotAfter time.Time
	RenewAt  time.Time
}

// planLeaf decides a leaf Secret's content: the certificate is kept while
// it is the wanted one (identity, object uid, DNS names, signed by s's
// CA, lifetime not longer than wanted) and not due for renewal; otherwise a new one is
// issued. ca.crt always becomes s's bundle.
func planLeaf(data map[string][]byte, s signer, want leafWant, now time.Time, rnd io.Reader) (leafPlan, error) {
	var p leafPlan
	why, leaf := leafProblem(data, s, want, now)
	if why == "" {
		p.Data = map[string][]byte{SecretKeyTLSCert: data[SecretKeyTLSCert], SecretKeyTLSKey: data[SecretKeyTLSKey], SecretKeyCACert: s.Bundle}
		p.NotAfter, p.RenewAt = leaf.NotAfter, pki.RenewAt(leaf, want.RenewBefore)
		if p.Changed = !maps.EqualFunc(data, p.Data, bytes.Equal); p.Changed {
			p.Reason = "TrustBundleUpdated"
		}
		return p, nil
	}
	certPEM, keyPEM, err := s.CA.Issue(pki.LeafRequest{Identity: want.Identity, UID: want.UID, DNSNames: want.DNSNames, Now: now, Validity: want.Duration}, rnd)
	if err != nil {
		return p, err
	}
	certs, err := pki.ParseCertsPEM(certPEM)
	if err != nil {
		return p, err
	}
	p.Data = map[string][]byte{SecretKeyTLSCert: certPEM, SecretKeyTLSKey: keyPEM, SecretKeyCACert: s.Bundle}
	p.Changed, p.Why = true, why
	p.Reason = "CertificateRenewed"
	if leaf == nil {
		p.Reason = "CertificateIssued"
	}
	p.NotAfter, p.RenewAt = certs[0].NotAfter, pki.RenewAt(certs[0], want.RenewBefore)
	return p, nil
}

// leafProblem says why data's certificate must be replaced ("" when it
// need not), and returns the parsed leaf when there is a usable one.
func leafProblem(data map[string][]byte, s signer, want leafWant, now time.Time) (string, *x509.Certificate) {
	tc, err := pki.ParseLeaf(data[SecretKeyTLSCert], data[SecretKeyTLSKey])
	if err != nil {
		return "no usable certificate", nil
	}
	leaf := tc.Leaf
	switch id, err := pki.IdentityOf(leaf); {
	case err != nil || id != want.Identity:
		return "identity changed", leaf
	case pki.UIDOf(leaf) != want.UID:
		return "bound to another object uid", leaf
	case !slices.Equal(leaf.DNSNames, want.DNSNames):
		return "DNS names changed", leaf
	case leaf.CheckSignatureFrom(s.CA.Cert) != nil:
		return "signing CA changed", leaf
	case leaf.NotAfter.Sub(leaf.NotBefore) > want.Duration+pki.ClockSkew+time.Second:
		return "certificate duration shortened", leaf
	case pki.NeedsRenewal(leaf, want.RenewBefore, now):
		return "renewal due", leaf
	}
	return "", leaf
}

// brokerIdentity is the identity on a broker's certificate.
func brokerIdentity(c *felixv1.FelixCluster, broker string) pki.Identity {
	return pki.Identity{Namespace: c.Namespace, Cluster: c.Name, Kind: pki.KindBroker, Name: broker}
}

// userIdentity is the identity on a FelixUser's certificate.
func userIdentity(u *felixv1.FelixUser) pki.Identity {
	return pki.Identity{Namespace: u.Namespace, Cluster: u.Spec.Cluster, Kind: pki.KindUser, Name: u.Name}
}

// brokerDNSNames are the DNS SANs of a broker's certificate: its pod name
// under the headless Service, the client Service and the headless
// Service itself.
func brokerDNSNames(c *felixv1.FelixCluster, broker string) []string {
	ns, headless, svc := c.Namespace, HeadlessServiceName(c.Name), ClientServiceName(c.Name)
	return []string{
		fmt.Sprintf("%s.%s.%s.svc", broker, headless, ns),
		fmt.Sprintf("%s.%s.%s.svc.cluster.local", broker, headless, ns),
		fmt.Sprintf("%s.%s.svc", svc, ns),
		fmt.Sprintf("%s.%s.svc.cluster.local", svc, ns),
		fmt.Sprintf("%s.%s.svc", headless, ns),
	}
}
