// Package pki is the certificate authority, certificate issuing,
// identities and TLS configurations of Felix's operator-managed mutual
// TLS: one CA per FelixCluster (or one the user brings), broker, user and
// operator certificates kept in Secrets, renewed before they expire and
// picked up by running brokers without a restart. Only the standard
// library's crypto is used; keys are ECDSA P-256 (a CA brought by the
// user may be RSA).
//
// # Identity
//
// A certificate speaks for exactly one Identity, carried as exactly one
// URI SAN:
//
//	felix://<namespace>/<cluster>/<kind>/<name>
//
// where namespace and cluster are the FelixCluster's (lowercase RFC 1123
// labels), kind is broker, user or operator, and name is the broker's
// pod name, the user's name or the operator's (lowercase alphanumerics,
// '-' and '.', at most 253 characters). ParseIdentity accepts only this
// canonical form: no userinfo, port, query, fragment or escapes, so an
// identity has exactly one spelling and comparing Identity values is
// comparing who is speaking. A certificate with no felix:// URI SAN has
// no identity (ErrNoIdentity); one with two is refused
// (ErrAmbiguousIdentity). The subject (CN = name, O =
// "felix:<namespace>/<cluster>") is for people reading certificates;
// nothing checks it.
//
// # Object uid
//
// A certificate may also be bound to one Kubernetes object: the
// object's metadata.uid (LeafRequest.UID) is written as the subject's
// serialNumber attribute (OID 2.5.4.5; not the certificate's serial
// number), and UIDOf reads it back (VerifyClientUID returns it with the
// identity). The identity says which name a certificate speaks for; the
// uid says which object of that name it was issued to, so that an
// object deleted and recreated under the same name gets a new uid and is
// not matched by the earlier object's certificates. The operator binds
// every FelixUser certificate to its FelixUser; a uid is 1 to
// MaxUIDLength ASCII letters, digits and '-' (ValidateUID), and a
// serialNumber of any other form is no uid. It is a subject attribute,
// not a URI SAN, so a certificate still carries exactly one felix:// URI
// and cert-manager can write it too (spec.subject.serialNumber).
//
// Brokers' certificates are valid for server and client authentication
// (they serve clients and dial their peers); users' and the operator's
// for client authentication only, so a user certificate cannot be used
// to impersonate a broker to a client.
//
// # Why peers do not check hostnames
//
// Brokers reach each other by pod IP, and pod IPs change with every
// reschedule: a certificate cannot name them ahead of time, and a DNS
// name would only say where a pod is, not which broker it is. So between
// peers the hostname check is replaced by an identity check: the chain
// must verify against the cluster's trust bundle, and the felix identity
// must be a broker of the same cluster (PeerServerConfig), and exactly
// the broker dialed (PeerDialConfig). Clients do the same (ClientConfig)
// and check a DNS name only when given one, for certificates issued with
// DNSNames (a Service name, say).
//
// Verification is done by the package, in VerifyConnection (or
// VerifyClient), against the Source's current trust bundle and clock,
// not by crypto/tls against a fixed pool: that is how a rotated CA or
// leaf is picked up by the next handshake. The client port requests a
// client certificate without requiring it, so that a broker can answer
// an unauthenticated client with a wire error code instead of a failed
// handshake; the application calls VerifyClient on every connection.
// Server configurations disable session resumption: every connection is
// a full handshake checked against the current material.
//
// # Renewal
//
// A certificate is renewed once two thirds of its lifetime (NotBefore to
// NotAfter) have passed, or renewBefore ahead of NotAfter when that is
// earlier (RenewAt, NeedsRenewal). NotBefore is backdated by ClockSkew
// (five minutes) so that a peer whose clock lags a little accepts a
// fresh certificate; a leaf never outlives its CA (Issue clips NotAfter
// to the CA's). Rotating a CA: add the new CA to every ca.crt bundle
// first, then reissue leaves from it, then drop the old CA; a bundle
// with several CAs accepts the leaves of each.
//
// # Secret layout
//
// A certificate Secret has the kubernetes.io/tls layout plus the trust
// bundle, and is mounted as a directory (DirFiles):
//
//	tls.crt  the certificate chain, leaf first (PEM CERTIFICATE blocks)
//	tls.key  its private key (PEM, PKCS8 as Issue writes it)
//	ca.crt   the trust bundle: every CA whose leaves are accepted
//
// The kubelet updates a mounted Secret by writing a new timestamped
// directory and atomically swapping the ..data symlink the file names
// point through. A Source re-reads the files at most once per MinCheck
// (a stat, then a hash of the content when anything changed) and loads
// new content only if it is consistent (the key is the leaf's, the leaf
// has one identity and chains to ca.crt); otherwise it keeps serving the
// last good material and reports the failure (Failures, LastError,
// OnReload). Files written one by one in place can be seen half written;
// the consistency check is what makes that harmless.
package pki
