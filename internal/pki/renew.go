package pki

import (
	"crypto/x509"
	"time"
)

// RenewAt returns when cert should be replaced: once two thirds of its
// lifetime (NotBefore to NotAfter) have passed, or renewBefore ahead of
// NotAfter when renewBefore is positive and that is earlier. A nil cert
// returns the zero time (renew now).
func RenewAt(cert *x509.Certificate, renewBefore time.Duration) time.Time {
	if cert == nil {
		return time.Time{}
	}
	life := cert.NotAfter.Sub(cert.NotBefore)
	at := cert.NotBefore.Add(life - life/3)
	if renewBefore > 0 {
		if early := cert.NotAfter.Add(-renewBefore); early.Before(at) {
			at = early
		}
	}
	return at
}

// NeedsRenewal reports whether cert is due for renewal at now: now is at
// or after RenewAt(cert, renewBefore). A nil cert always needs it.
func NeedsRenewal(cert *x509.Certificate, renewBefore time.Duration, now time.Time) bool {
	return cert == nil || !now.Before(RenewAt(cert, renewBefore))
}
