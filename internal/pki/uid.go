package pki

import (
	"crypto/x509"
	"fmt"
)

// MaxUIDLength bounds an object uid carried by a certificate. Kubernetes
// uids are 36-character UUIDs; the bound leaves room for other forms
// without letting a certificate carry arbitrary text.
const MaxUIDLength = 128

// ValidateUID reports whether uid can be written into a certificate:
// 1 to MaxUIDLength characters, each an ASCII letter, digit or '-' (a
// Kubernetes uid, an RFC 4122 UUID, is of this form). Errors wrap
// ErrInvalidUID.
func ValidateUID(uid string) error {
	if uid == "" || len(uid) > MaxUIDLength {
		return fmt.Errorf("%w: length %d, want 1 to %d", ErrInvalidUID, len(uid), MaxUIDLength)
	}
	for i := 0; i < len(uid); i++ {
		c := uid[i]
		if c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' || c == '-' {
			continue
		}
		return fmt.Errorf("%w: character %q at %d", ErrInvalidUID, c, i)
	}
	return nil
}

// UIDOf returns the uid of the Kubernetes object cert was issued for:
// its subject's serialNumber attribute (OID 2.5.4.5), where Issue writes
// LeafRequest.UID. It is "" when cert is nil, the attribute is absent,
// or its value is not a valid uid (ValidateUID): a certificate that does
// not carry a well-formed uid is bound to no object.
func UIDOf(cert *x509.Certificate) string {
	if cert == nil {
		return ""
	}
	uid := cert.Subject.SerialNumber
	if ValidateUID(uid) != nil {
		return ""
	}
	return uid
}
