package pki

import (
	"crypto"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/x509"
	"crypto/x509/pkix"
	"fmt"
	"io"
	"math/big"
	"time"
)

// ClockSkew is how far before the issuing time a certificate's NotBefore
// is set, so that a peer whose clock lags a little still accepts it.
const ClockSkew = 5 * time.Minute

// CA is a certificate authority: one per FelixCluster, created by the
// operator (NewCA) or brought by the user (ParseCA).
type CA struct {
	// Cert is the CA certificate leaves are signed with.
	Cert *x509.Certificate
	// Key is Cert's private key.
	Key crypto.Signer
}

// NewCA creates a self-signed CA: a fresh ECDSA P-256 key, CA:TRUE with
// path length zero (it signs leaves only), key usage certSign and
// cRLSign, valid from now-ClockSkew to now+validity. rand nil means
// crypto/rand. Errors wrap ErrBadRequest for a zero now, non-positive
// validity or empty commonName.
func NewCA(commonName string, now time.Time, validity time.Duration, rand io.Reader) (*CA, error) {
	if commonName == "" || now.IsZero() || validity <= 0 {
		return nil, fmt.Errorf("%w: NewCA needs a common name, a time and a positive validity", ErrBadRequest)
	}
	rand = randOrDefault(rand)
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand)
	if err != nil {
		return nil, fmt.Errorf("pki: generate CA key: %w", err)
	}
	serial, err := randomSerial(rand)
	if err != nil {
		return nil, err
	}
	tmpl := &x509.Certificate{
		SerialNumber:          serial,
		Subject:               pkix.Name{CommonName: commonName},
		NotBefore:             now.Add(-ClockSkew),
		NotAfter:              now.Add(validity),
		IsCA:                  true,
		BasicConstraintsValid: true,
		MaxPathLen:            0,
		MaxPathLenZero:        true,
		KeyUsage:              x509.KeyUsageCertSign | x509.KeyUsageCRLSign,
	}
	der, err := x509.CreateCertificate(rand, tmpl, tmpl, key.Public(), key)
	if err != nil {
		return nil, fmt.Errorf("pki: sign CA certificate: %w", err)
	}
	cert, err := x509.ParseCertificate(der)
	if err != nil {
		return nil, fmt.Errorf("pki: parse CA certificate: %w", err)
	}
	return &CA{Cert: cert, Key: key}, nil
}

// ParseCA parses a CA brought as PEM (the first certificate of certPEM
// is the CA; any further ones are ignored) and its private key (PKCS8,
// SEC1 EC or PKCS1 RSA). Errors: those of ParseCertsPEM and ParseKeyPEM,
// ErrNotCA when the certificate is not a CA, ErrKeyMismatch when the key
// is not the certificate's.
func ParseCA(certPEM, keyPEM []byte) (*CA, error) {
	certs, err := ParseCertsPEM(certPEM)
	if err != nil {
		return nil, err
	}
	cert := certs[0]
	if !cert.BasicConstraintsValid || !cert.IsCA {
		return nil, fmt.Errorf("%w: %q has no CA:TRUE basic constraint", ErrNotCA, cert.Subject)
	}
	if cert.KeyUsage != 0 && cert.KeyUsage&x509.KeyUsageCertSign == 0 {
		return nil, fmt.Errorf("%w: %q key usage lacks certSign", ErrNotCA, cert.Subject)
	}
	key, err := ParseKeyPEM(keyPEM)
	if err != nil {
		return nil, err
	}
	if !keyMatches(cert, key) {
		return nil, ErrKeyMismatch
	}
	return &CA{Cert: cert, Key: key}, nil
}

// CertPEM returns the CA certificate as one CERTIFICATE block: what goes
// into ca.crt.
func (ca *CA) CertPEM() []byte { return EncodeCertsPEM(ca.Cert) }

// KeyPEM returns the CA key as a PKCS8 "PRIVATE KEY" block. It fails
// (ErrBadKey) for a signer PKCS8 cannot hold, such as a hardware key.
func (ca *CA) KeyPEM() ([]byte, error) { return encodeKeyPEM(ca.Key) }

// selfSigned reports whether c is its own issuer.
func selfSigned(c *x509.Certificate) bool {
	return string(c.RawIssuer) == string(c.RawSubject) && c.CheckSignatureFrom(c) == nil
}

func randOrDefault(r io.Reader) io.Reader {
	if r == nil {
		return rand.Reader
	}
	return r
}

// randomSerial returns a positive serial of 128 random bits.
func randomSerial(r io.Reader) (*big.Int, error) {
	limit := new(big.Int).Lsh(big.NewInt(1), 128)
	for {
		n, err := rand.Int(r, limit)
		if err != nil {
			return nil, fmt.Errorf("pki: random serial: %w", err)
		}
		if n.Sign() > 0 { // serials must be positive
			return n, nil
		}
	}
}
