package pki

import "errors"

// Identity errors.
var (
	// ErrInvalidIdentity: a felix:// URI (or an Identity, or a
	// "namespace/cluster" reference) is not in the canonical form the
	// package doc describes. ParseIdentity, Identity.Validate and
	// ParseClusterRef wrap it with the part that failed.
	ErrInvalidIdentity = errors.New("pki: invalid felix identity")
	// ErrNoIdentity: a certificate carries no felix:// URI SAN, or the one
	// it carries does not parse (then ErrInvalidIdentity is wrapped too).
	ErrNoIdentity = errors.New("pki: certificate has no felix identity")
	// ErrAmbiguousIdentity: a certificate carries more than one felix://
	// URI SAN, so it does not say who it speaks for.
	ErrAmbiguousIdentity = errors.New("pki: certificate has more than one felix identity")
	// ErrInvalidUID: an object uid to be written into a certificate is
	// empty, too long or holds characters other than ASCII letters,
	// digits and '-' (ValidateUID).
	ErrInvalidUID = errors.New("pki: invalid object uid")
)

// Decoding errors.
var (
	// ErrBadPEM: PEM input holds something other than the blocks asked
	// for (text outside blocks, a block of another type, headers), or a
	// block's DER does not parse.
	ErrBadPEM = errors.New("pki: malformed PEM")
	// ErrNoCertificates: PEM input holds no CERTIFICATE block.
	ErrNoCertificates = errors.New("pki: no certificate in PEM")
	// ErrBadKey: PEM input holds no private key, more than one, or one of
	// a kind the package does not accept (PKCS8, SEC1 EC, PKCS1 RSA are
	// accepted; the key must be able to sign).
	ErrBadKey = errors.New("pki: unusable private key")
	// ErrKeyMismatch: a private key is not the key of the certificate it
	// was paired with (for a Source, typically a half-written update).
	ErrKeyMismatch = errors.New("pki: private key does not match certificate")
	// ErrNotCA: a certificate offered as a CA is not marked as one (basic
	// constraints CA:TRUE, and key usage certSign when a key usage is set).
	ErrNotCA = errors.New("pki: certificate is not a CA")
)

// Issuing errors.
var (
	// ErrBadRequest: a NewCA or LeafRequest argument is unusable: zero
	// Now, validity not positive, invalid identity, invalid UID (then
	// ErrInvalidUID is wrapped too).
	ErrBadRequest = errors.New("pki: bad certificate request")
	// ErrCAExpired: the CA's NotAfter is not after the requested Now, so
	// no leaf it signs could be valid.
	ErrCAExpired = errors.New("pki: CA has expired")
)

// Source errors.
var (
	// ErrIncompleteFiles: Files names a certificate without its key (or
	// the other way round), or names no trust bundle where one is needed.
	ErrIncompleteFiles = errors.New("pki: incomplete certificate files")
	// ErrNotSignedByBundle: the certificate chain in tls.crt does not end
	// at (or below) a certificate of ca.crt: the files are inconsistent,
	// and a Source keeps the material it had.
	ErrNotSignedByBundle = errors.New("pki: certificate is not signed by the trust bundle")
	// ErrNoMaterial: a Source has no certificate to serve (a zero or nil
	// Source; NewSource never returns one).
	ErrNoMaterial = errors.New("pki: no certificate material loaded")
	// ErrIdentityChanged: reloaded files carry another felix identity
	// than the one the Source serves (a Secret of another broker mounted
	// by mistake); the Source keeps serving its identity.
	ErrIdentityChanged = errors.New("pki: reloaded certificate has another identity")
	// ErrLeafNotValid: a reloaded leaf (or a certificate of its chain) is
	// not valid at the Source's clock: not yet valid or expired.
	ErrLeafNotValid = errors.New("pki: reloaded certificate is not valid now")
)

// Peer verification errors. Every one of them fails the handshake (peer
// port, dialing a peer, clients) or is returned by VerifyClient (client
// port), wrapped with the details.
var (
	// ErrNoCertificate: the peer sent no certificate.
	ErrNoCertificate = errors.New("pki: peer sent no certificate")
	// ErrUntrusted: the peer's chain does not verify against the current
	// trust bundle: another CA, expired or not yet valid, wrong extended
	// key usage, or (for ClientConfig with a server name) not valid for
	// that name. The x509 error is wrapped too.
	ErrUntrusted = errors.New("pki: peer certificate not trusted")
	// ErrNoTrustBundle: a configuration has no trust bundle to verify
	// against (ClientConfig with nil roots).
	ErrNoTrustBundle = errors.New("pki: no trust bundle")
	// ErrWrongCluster: the peer's identity belongs to another namespace or
	// FelixCluster than expected.
	ErrWrongCluster = errors.New("pki: peer identity is of another cluster")
	// ErrNotBroker: the peer's identity is not a broker where only a
	// broker may answer (peer port, a client dialing a broker).
	ErrNotBroker = errors.New("pki: peer identity is not a broker")
	// ErrWrongPeer: the peer is a broker of the right cluster but not the
	// one that was dialed.
	ErrWrongPeer = errors.New("pki: peer is not the broker dialed")
)
