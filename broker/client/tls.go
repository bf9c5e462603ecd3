package client

import (
	"crypto/tls"

	"felix.dev/felix/internal/pki"
)

// TLSFiles names a client's certificate material: the layout of a
// FelixUser Secret (tls.crt, tls.key, ca.crt), mounted or extracted.
type TLSFiles struct {
	// Cert is the client certificate chain, leaf first; empty with Key
	// empty connects anonymously (over TLS).
	Cert string
	// Key is Cert's private key.
	Key string
	// CA is the trust bundle the broker's certificate must verify
	// against (required).
	CA string
}

// TLSFromFiles reads f and returns the Options.TLS of a client of a
// broker's client port: it presents f's certificate (none without one)
// and accepts only a broker certificate that verifies against f.CA, of
// cluster ("namespace/name") when that is non-empty, else of the client
// certificate's own cluster when it carries a felix identity. The broker is
// verified by its felix:// identity, not by the address dialed; a
// non-empty serverName is sent as SNI and must also be a DNS name of the
// broker's certificate. The files are read once: a long-running client
// that must follow certificate rotation calls it again before each Dial.
// Errors wrap the internal/pki sentinels (incomplete files, unreadable
// or mismatched PEM, a malformed cluster); failures of the broker's
// certificate surface from Dial as a *HandshakeError.
func TLSFromFiles(f TLSFiles, cluster, serverName string) (*tls.Config, error) {
	return pki.LoadClientFiles(pki.Files{Cert: f.Cert, Key: f.Key, CA: f.CA}, cluster, serverName)
}

// TLSFromFilesForHost is TLSFromFiles for a client that dials host: a
// broker serving a certificate without a felix identity (a standalone
// broker's own) is accepted if it is valid for serverName, or for host
// when serverName is empty (pki.ClientConfigForHost).
func TLSFromFilesForHost(f TLSFiles, cluster, serverName, host string) (*tls.Config, error) {
	return pki.LoadClientFilesForHost(pki.Files{Cert: f.Cert, Key: f.Key, CA: f.CA}, cluster, serverName, host)
}

// TLSFromDir is TLSFromFiles with dir/tls.crt, dir/tls.key and
// dir/ca.crt: a FelixUser Secret's keys.
func TLSFromDir(dir, cluster, serverName string) (*tls.Config, error) {
	f := pki.DirFiles(dir)
	return TLSFromFiles(TLSFiles{Cert: f.Cert, Key: f.Key, CA: f.CA}, cluster, serverName)
}

// HandshakeError is the error of a Dial whose TLS handshake failed: the
// broker's certificate did not verify (Err matches pki's ErrUntrusted,
// ErrNotBroker, ErrWrongCluster, ErrNoIdentity...), or the broker
// refused the connection's TLS parameters.
type HandshakeError struct {
	Addr string
	Err  error
}

func (e *HandshakeError) Error() string {
	return "client: TLS handshake with " + e.Addr + ": " + e.Err.Error()
}

// Unwrap returns the cause.
func (e *HandshakeError) Unwrap() error { return e.Err }
