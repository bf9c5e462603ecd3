package pki

import (
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/x509"
	"crypto/x509/pkix"
	"fmt"
	"io"
	"net"
	"net/url"
	"time"
)

// LeafRequest says what certificate Issue signs.
type LeafRequest struct {
	// Identity is who the certificate speaks for; it becomes the one
	// felix:// URI SAN. Must be valid.
	Identity Identity
	// DNSNames and IPs are added as SANs, for clients that check a
	// server name (ClientConfig with serverName). Peers do not use them.
	DNSNames []string
	IPs      []net.IP
	// Now is the issuing time (required): NotBefore is Now-ClockSkew.
	Now time.Time
	// Validity is how long after Now the certificate is valid (required,
	// positive); NotAfter is clipped to the CA's NotAfter.
	Validity time.Duration
	// UID is the metadata.uid of the Kubernetes object the certificate is
	// issued for (a FelixUser), "" for none. When set it must satisfy
	// ValidateUID and becomes the subject's serialNumber attribute (OID
	// 2.5.4.5), which UIDOf reads: it binds the certificate to that one
	// object, so that an object deleted and recreated under the same name
	// (a new uid) is not matched by the old object's certificates.
	UID string
}

// ExtKeyUsages returns the extended key usages a certificate of kind k
// gets: server and client authentication for brokers (they serve clients
// and dial peers), client authentication only for users and the
// operator.
func ExtKeyUsages(k Kind) []x509.ExtKeyUsage {
	if k == KindBroker {
		return []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth, x509.ExtKeyUsageClientAuth}
	}
	return []x509.ExtKeyUsage{x509.ExtKeyUsageClientAuth}
}

// Issue signs a certificate for a fresh ECDSA P-256 key and returns the
// chain and the key as PEM (what goes into tls.crt and tls.key). The
// certificate has CN = Identity.Name, O = "felix:<namespace>/<cluster>",
// the identity as its only felix:// URI SAN, a random 128-bit serial,
// key usage digitalSignature and the extended key usages of
// ExtKeyUsages, and Subject serialNumber = UID when UID is set. It is
// valid from Now-ClockSkew to Now+Validity, clipped
// to the CA's NotAfter. When the CA is not self-signed (an intermediate
// brought by the user), its certificate follows the leaf in certPEM so
// that peers trusting only the root can build the chain. rand nil means
// crypto/rand.
//
// Errors: ErrBadRequest (invalid identity, invalid UID, zero Now,
// non-positive Validity), ErrCAExpired (the CA's NotAfter is not after Now).
func (ca *CA) Issue(req LeafRequest, rand io.Reader) (certPEM, keyPEM []byte, err error) {
	return ca.issue(req, ExtKeyUsages(req.Identity.Kind), rand)
}

// issue is Issue with the extended key usages given (tests use it to
// forge certificates Issue would not sign).
func (ca *CA) issue(req LeafRequest, ekus []x509.ExtKeyUsage, rand io.Reader) (certPEM, keyPEM []byte, err error) {
	if err := req.Identity.Validate(); err != nil {
		return nil, nil, fmt.Errorf("%w: %w", ErrBadRequest, err)
	}
	if req.UID != "" {
		if err := ValidateUID(req.UID); err != nil {
			return nil, nil, fmt.Errorf("%w: %w", ErrBadRequest, err)
		}
	}
	if req.Now.IsZero() || req.Validity <= 0 {
		return nil, nil, fmt.Errorf("%w: a leaf needs a time and a positive validity", ErrBadRequest)
	}
	if !ca.Cert.NotAfter.After(req.Now) {
		return nil, nil, fmt.Errorf("%w: CA %q expired at %s", ErrCAExpired, ca.Cert.Subject, ca.Cert.NotAfter.UTC().Format(time.RFC3339))
	}
	notAfter := req.Now.Add(req.Validity)
	if notAfter.After(ca.Cert.NotAfter) {
		notAfter = ca.Cert.NotAfter
	}
	rand = randOrDefault(rand)
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand)
	if err != nil {
		return nil, nil, fmt.Errorf("pki: generate leaf key: %w", err)
	}
	serial, err := randomSerial(rand)
	if err != nil {
		return nil, nil, err
	}
	id := req.Identity
	tmpl := &x509.Certificate{
		SerialNumber: serial,
		Subject: pkix.Name{
			CommonName:   id.Name,
			Organization: []string{"felix:" + id.Namespace + "/" + id.Cluster},
			SerialNumber: req.UID,
		},
		NotBefore:             req.Now.Add(-ClockSkew),
		NotAfter:              notAfter,
		KeyUsage:              x509.KeyUsageDigitalSignature,
		ExtKeyUsage:           ekus,
		BasicConstraintsValid: true,
		URIs:                  []*url.URL{id.URI()},
		DNSNames:              req.DNSNames,
		IPAddresses:           req.IPs,
	}
	der, err := x509.CreateCertificate(rand, tmpl, ca.Cert, key.Public(), ca.Key)
	if err != nil {
		return nil, nil, fmt.Errorf("pki: sign leaf certificate: %w", err)
	}
	leaf, err := x509.ParseCertificate(der)
	if err != nil {
		return nil, nil, fmt.Errorf("pki: parse leaf certificate: %w", err)
	}
	chain := []*x509.Certificate{leaf}
	if !selfSigned(ca.Cert) {
		chain = append(chain, ca.Cert)
	}
	keyPEM, err = encodeKeyPEM(key)
	if err != nil {
		return nil, nil, err
	}
	return EncodeCertsPEM(chain...), keyPEM, nil
}
