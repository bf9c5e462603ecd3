package pki

import (
	"bytes"
	"crypto"
	"crypto/ecdsa"
	"crypto/ed25519"
	"crypto/rsa"
	"crypto/tls"
	"crypto/x509"
	"encoding/pem"
	"fmt"
)

// PEM block types.
const (
	pemCertificate = "CERTIFICATE"
	pemPKCS8       = "PRIVATE KEY"
	pemEC          = "EC PRIVATE KEY"
	pemRSA         = "RSA PRIVATE KEY"
	pemECParams    = "EC PARAMETERS"
)

// pemBlocks splits b into PEM blocks, refusing anything but whitespace
// between and around them.
func pemBlocks(b []byte) ([]*pem.Block, error) {
	var blocks []*pem.Block
	rest := b
	for {
		rest = bytes.TrimLeft(rest, " \t\r\n")
		if len(rest) == 0 {
			return blocks, nil
		}
		if !bytes.HasPrefix(rest, []byte("-----BEGIN ")) {
			return nil, fmt.Errorf("%w: text outside PEM blocks", ErrBadPEM)
		}
		var blk *pem.Block
		blk, rest = pem.Decode(rest)
		if blk == nil {
			return nil, fmt.Errorf("%w: unterminated or corrupt PEM block", ErrBadPEM)
		}
		if len(blk.Headers) != 0 {
			return nil, fmt.Errorf("%w: PEM headers not allowed (%s block)", ErrBadPEM, blk.Type)
		}
		blocks = append(blocks, blk)
	}
}

// ParseCertsPEM parses every CERTIFICATE block of b, in order. It fails
// with ErrNoCertificates if there is none, and with ErrBadPEM if b holds
// anything else: text outside blocks, blocks of another type, headers,
// DER that does not parse.
func ParseCertsPEM(b []byte) ([]*x509.Certificate, error) {
	blocks, err := pemBlocks(b)
	if err != nil {
		return nil, err
	}
	if len(blocks) == 0 {
		return nil, ErrNoCertificates
	}
	certs := make([]*x509.Certificate, 0, len(blocks))
	for i, blk := range blocks {
		if blk.Type != pemCertificate {
			return nil, fmt.Errorf("%w: block %d is %q, want %q", ErrBadPEM, i, blk.Type, pemCertificate)
		}
		c, err := x509.ParseCertificate(blk.Bytes)
		if err != nil {
			return nil, fmt.Errorf("%w: certificate %d: %w", ErrBadPEM, i, err)
		}
		certs = append(certs, c)
	}
	return certs, nil
}

// EncodeCertsPEM encodes certs as consecutive CERTIFICATE blocks.
func EncodeCertsPEM(certs ...*x509.Certificate) []byte {
	var buf bytes.Buffer
	for _, c := range certs {
		// pem.Encode to a bytes.Buffer cannot fail.
		_ = pem.Encode(&buf, &pem.Block{Type: pemCertificate, Bytes: c.Raw})
	}
	return buf.Bytes()
}

// ParseKeyPEM parses the one private key of b: a PKCS8 "PRIVATE KEY", a
// SEC1 "EC PRIVATE KEY" or a PKCS1 "RSA PRIVATE KEY" block. An "EC
// PARAMETERS" block (as openssl writes before a SEC1 key) is skipped;
// anything else fails. Errors wrap ErrBadPEM (not PEM) or ErrBadKey.
func ParseKeyPEM(b []byte) (crypto.Signer, error) {
	blocks, err := pemBlocks(b)
	if err != nil {
		return nil, err
	}
	var key crypto.Signer
	for _, blk := range blocks {
		var k any
		var err error
		switch blk.Type {
		case pemECParams:
			continue
		case pemPKCS8:
			k, err = x509.ParsePKCS8PrivateKey(blk.Bytes)
		case pemEC:
			k, err = x509.ParseECPrivateKey(blk.Bytes)
		case pemRSA:
			k, err = x509.ParsePKCS1PrivateKey(blk.Bytes)
		default:
			return nil, fmt.Errorf("%w: unexpected %q block", ErrBadKey, blk.Type)
		}
		if err != nil {
			return nil, fmt.Errorf("%w: %s: %w", ErrBadKey, blk.Type, err)
		}
		if key != nil {
			return nil, fmt.Errorf("%w: more than one private key", ErrBadKey)
		}
		s, ok := k.(crypto.Signer)
		if !ok {
			return nil, fmt.Errorf("%w: %T cannot sign", ErrBadKey, k)
		}
		key = s
	}
	if key == nil {
		return nil, fmt.Errorf("%w: no private key block", ErrBadKey)
	}
	return key, nil
}

// encodeKeyPEM encodes key as a PKCS8 "PRIVATE KEY" block.
func encodeKeyPEM(key crypto.Signer) ([]byte, error) {
	der, err := x509.MarshalPKCS8PrivateKey(key)
	if err != nil {
		return nil, fmt.Errorf("%w: %w", ErrBadKey, err)
	}
	return pem.EncodeToMemory(&pem.Block{Type: pemPKCS8, Bytes: der}), nil
}

// keyMatches reports whether key is the private key of cert.
func keyMatches(cert *x509.Certificate, key crypto.Signer) bool {
	pub, ok := key.Public().(interface{ Equal(crypto.PublicKey) bool })
	if !ok {
		return false
	}
	switch cert.PublicKey.(type) {
	case *ecdsa.PublicKey, *rsa.PublicKey, ed25519.PublicKey:
	default:
		return false
	}
	return pub.Equal(cert.PublicKey)
}

// ParseLeaf parses a certificate chain (leaf first) and its private key
// into a tls.Certificate with Leaf set. Errors: those of ParseCertsPEM
// and ParseKeyPEM, and ErrKeyMismatch when the key is not the leaf's.
func ParseLeaf(certPEM, keyPEM []byte) (tls.Certificate, error) {
	certs, err := ParseCertsPEM(certPEM)
	if err != nil {
		return tls.Certificate{}, err
	}
	key, err := ParseKeyPEM(keyPEM)
	if err != nil {
		return tls.Certificate{}, err
	}
	if !keyMatches(certs[0], key) {
		return tls.Certificate{}, ErrKeyMismatch
	}
	tc := tls.Certificate{PrivateKey: key, Leaf: certs[0]}
	for _, c := range certs {
		tc.Certificate = append(tc.Certificate, c.Raw)
	}
	return tc, nil
}
