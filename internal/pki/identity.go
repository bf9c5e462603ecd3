package pki

import (
	"crypto/x509"
	"fmt"
	"net/url"
	"strings"
)

// Scheme is the URI scheme of a Felix identity.
const Scheme = "felix"

// Kind is what a certificate's holder is within its FelixCluster.
type Kind string

// The kinds of identity.
const (
	// KindBroker: a broker pod. Brokers serve clients and dial peers, so
	// their certificates are valid for server and client authentication.
	KindBroker Kind = "broker"
	// KindUser: a client of the cluster (CLI, application). Client
	// authentication only.
	KindUser Kind = "user"
	// KindOperator: the operator talking to brokers. Client
	// authentication only.
	KindOperator Kind = "operator"
)

// Valid reports whether k is one of the defined kinds.
func (k Kind) Valid() bool {
	switch k {
	case KindBroker, KindUser, KindOperator:
		return true
	}
	return false
}

// Identity names who a certificate speaks for: a broker, user or the
// operator of one FelixCluster. It is encoded as exactly one URI SAN
// felix://<namespace>/<cluster>/<kind>/<name>.
type Identity struct {
	Namespace string
	Cluster   string
	Kind      Kind
	Name      string
}

// URI returns the identity's felix:// URI. It does not validate: call
// Validate first for an Identity that did not come from ParseIdentity.
func (id Identity) URI() *url.URL {
	return &url.URL{
		Scheme: Scheme,
		Host:   id.Namespace,
		Path:   "/" + id.Cluster + "/" + string(id.Kind) + "/" + id.Name,
	}
}

// String returns the identity's URI as text.
func (id Identity) String() string { return id.URI().String() }

// SameCluster reports whether o belongs to the same FelixCluster as id
// (namespace and cluster equal).
func (id Identity) SameCluster(o Identity) bool {
	return id.Namespace == o.Namespace && id.Cluster == o.Cluster
}

// ClusterRef returns "namespace/cluster", the form ClientConfig and
// ParseClusterRef use.
func (id Identity) ClusterRef() string { return id.Namespace + "/" + id.Cluster }

// Validate reports whether every part of id is in canonical form:
// namespace and cluster lowercase RFC 1123 labels (at most 63
// characters), kind one of the defined kinds, name lowercase
// alphanumerics, '-' and '.', starting and ending alphanumeric, at most
// 253 characters. Errors wrap ErrInvalidIdentity.
func (id Identity) Validate() error {
	if !isLabel(id.Namespace) {
		return fmt.Errorf("%w: namespace %q is not a lowercase RFC 1123 label", ErrInvalidIdentity, id.Namespace)
	}
	if !isLabel(id.Cluster) {
		return fmt.Errorf("%w: cluster %q is not a lowercase RFC 1123 label", ErrInvalidIdentity, id.Cluster)
	}
	if !id.Kind.Valid() {
		return fmt.Errorf("%w: kind %q is not broker, user or operator", ErrInvalidIdentity, id.Kind)
	}
	if !isName(id.Name) {
		return fmt.Errorf("%w: name %q is not a lowercase DNS-style name", ErrInvalidIdentity, id.Name)
	}
	return nil
}

// ParseIdentity parses a felix:// URI strictly: scheme felix, the
// namespace as host (no userinfo, no port), a path of exactly
// /<cluster>/<kind>/<name> with no escapes, no query and no fragment,
// every part canonical (see Identity.Validate). Errors wrap
// ErrInvalidIdentity.
func ParseIdentity(u *url.URL) (Identity, error) {
	switch {
	case u == nil:
		return Identity{}, fmt.Errorf("%w: nil URI", ErrInvalidIdentity)
	case u.Scheme != Scheme:
		return Identity{}, fmt.Errorf("%w: scheme %q, want %q", ErrInvalidIdentity, u.Scheme, Scheme)
	case u.Opaque != "":
		return Identity{}, fmt.Errorf("%w: opaque URI", ErrInvalidIdentity)
	case u.User != nil:
		return Identity{}, fmt.Errorf("%w: userinfo not allowed", ErrInvalidIdentity)
	case strings.Contains(u.Host, ":"):
		return Identity{}, fmt.Errorf("%w: port not allowed", ErrInvalidIdentity)
	case u.RawQuery != "" || u.ForceQuery:
		return Identity{}, fmt.Errorf("%w: query not allowed", ErrInvalidIdentity)
	case u.Fragment != "" || u.RawFragment != "":
		return Identity{}, fmt.Errorf("%w: fragment not allowed", ErrInvalidIdentity)
	case u.RawPath != "":
		return Identity{}, fmt.Errorf("%w: escaped path not allowed", ErrInvalidIdentity)
	case !strings.HasPrefix(u.Path, "/"):
		return Identity{}, fmt.Errorf("%w: path %q must be /<cluster>/<kind>/<name>", ErrInvalidIdentity, u.Path)
	}
	parts := strings.Split(u.Path[1:], "/")
	if len(parts) != 3 {
		return Identity{}, fmt.Errorf("%w: path %q must be /<cluster>/<kind>/<name>", ErrInvalidIdentity, u.Path)
	}
	id := Identity{Namespace: u.Host, Cluster: parts[0], Kind: Kind(parts[1]), Name: parts[2]}
	if err := id.Validate(); err != nil {
		return Identity{}, err
	}
	return id, nil
}

// ParseIdentityString parses s as a URI, then as ParseIdentity does.
func ParseIdentityString(s string) (Identity, error) {
	u, err := url.Parse(s)
	if err != nil {
		return Identity{}, fmt.Errorf("%w: %w", ErrInvalidIdentity, err)
	}
	return ParseIdentity(u)
}

// ParseClusterRef parses "namespace/cluster" (both lowercase RFC 1123
// labels). Errors wrap ErrInvalidIdentity.
func ParseClusterRef(ref string) (namespace, cluster string, err error) {
	ns, c, ok := strings.Cut(ref, "/")
	if !ok || !isLabel(ns) || !isLabel(c) {
		return "", "", fmt.Errorf("%w: cluster reference %q is not namespace/cluster", ErrInvalidIdentity, ref)
	}
	return ns, c, nil
}

// IdentityOf returns the identity of cert: its one felix:// URI SAN.
// Other URI SANs are ignored. Errors: ErrNoIdentity (none, or the one
// present is not canonical: ErrInvalidIdentity wrapped as well),
// ErrAmbiguousIdentity (more than one).
func IdentityOf(cert *x509.Certificate) (Identity, error) {
	if cert == nil {
		return Identity{}, fmt.Errorf("%w: no certificate", ErrNoIdentity)
	}
	var found *url.URL
	for _, u := range cert.URIs {
		if !strings.EqualFold(u.Scheme, Scheme) {
			continue
		}
		if found != nil {
			return Identity{}, fmt.Errorf("%w: %s and %s", ErrAmbiguousIdentity, found, u)
		}
		found = u
	}
	if found == nil {
		return Identity{}, ErrNoIdentity
	}
	id, err := ParseIdentity(found)
	if err != nil {
		return Identity{}, fmt.Errorf("%w: %w", ErrNoIdentity, err)
	}
	return id, nil
}

// isLabel: a lowercase RFC 1123 label, [a-z0-9]([-a-z0-9]*[a-z0-9])?, at
// most 63 characters.
func isLabel(s string) bool {
	return len(s) <= 63 && isDNSish(s, false)
}

// isName: [a-z0-9]([-a-z0-9.]*[a-z0-9])?, at most 253 characters.
func isName(s string) bool {
	return len(s) <= 253 && isDNSish(s, true)
}

func isDNSish(s string, dots bool) bool {
	if s == "" {
		return false
	}
	for i := 0; i < len(s); i++ {
		c := s[i]
		alnum := c >= 'a' && c <= 'z' || c >= '0' && c <= '9'
		if alnum {
			continue
		}
		if i == 0 || i == len(s)-1 {
			return false
		}
		if c != '-' && (c != '.' || !dots) {
			return false
		}
	}
	return true
}
