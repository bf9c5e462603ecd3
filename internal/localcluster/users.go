package localcluster

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	felixv1 "felix.dev/felix/api/v1alpha1"
	"felix.dev/felix/controllers"
	"felix.dev/felix/internal/pki"
)

// DefaultUserTimeout is how long CreateUser and WaitUser wait for the
// operator to issue a user's certificate when UserOptions.Timeout is zero.
const DefaultUserTimeout = 2 * time.Minute

// userPoll is how often the wait for a user's Secret looks again.
const userPoll = 100 * time.Millisecond

// ErrUserNotIssued is returned (wrapped, with the user's last Ready
// condition) when the operator has not issued a user's certificate
// within the timeout.
var ErrUserNotIssued = errors.New("localcluster: user certificate not issued")

// ErrUserSecretIncomplete is returned (wrapped) when a user's Secret
// lacks one of tls.crt, tls.key and ca.crt.
var ErrUserSecretIncomplete = errors.New("localcluster: user Secret incomplete")

// AllGrants allows every operation on every stream: the grants of a test
// client that is not itself testing authorization. A grant has no "every
// stream" form (a prefix is at least one character), so it is one prefix
// grant per byte a stream name may start with (A-Z a-z 0-9 . _ -).
func AllGrants() []felixv1.StreamGrant {
	ops := []felixv1.StreamOperation{felixv1.OperationAppend, felixv1.OperationRead,
		felixv1.OperationTrim, felixv1.OperationDescribe}
	var out []felixv1.StreamGrant
	for _, r := range []string{"AZ", "az", "09", "..", "__", "--"} {
		for c := r[0]; c <= r[1]; c++ {
			out = append(out, felixv1.StreamGrant{Prefix: string(c), Operations: ops})
		}
	}
	return out
}

// UserOptions names a FelixUser and what it may do.
type UserOptions struct {
	// Namespace and Cluster are the FelixCluster the user belongs to.
	Namespace, Cluster string
	// Name is the FelixUser's name (and its Secret's).
	Name string
	// Grants are the user's grants (spec.authorization.grants).
	Grants []felixv1.StreamGrant
	// Dir, if set, receives the Secret's files (tls.crt, tls.key, ca.crt:
	// the layout the CLI's --tls-dir reads), created if missing.
	Dir string
	// Timeout bounds the wait for the certificate; zero means
	// DefaultUserTimeout.
	Timeout time.Duration
}

// User is a FelixUser's credentials as the operator issued them.
type User struct {
	Namespace, Cluster, Name string
	// Identity is the certificate's felix:// identity (status.identity).
	Identity string
	// Dir holds the Secret's files when UserOptions.Dir was set.
	Dir string
	// Secret is the user's Secret as read.
	Secret *corev1.Secret
	// TLS is a client configuration (pki.ClientConfig) presenting the
	// user's certificate and requiring a broker of the user's cluster.
	// The material is the one read: a long-running client that must
	// follow renewal reads Dir with a pki.Source instead.
	TLS *tls.Config
}

// UserObject is the FelixUser o describes: o.Name in o.Namespace, of
// o.Cluster, with o.Grants and TLS authentication.
func UserObject(o UserOptions) *felixv1.FelixUser {
	return &felixv1.FelixUser{
		ObjectMeta: metav1.ObjectMeta{Name: o.Name, Namespace: o.Namespace},
		Spec: felixv1.FelixUserSpec{Cluster: o.Cluster,
			Authentication: felixv1.UserAuthentication{Type: "tls"},
			Authorization:  felixv1.UserAuthorization{Grants: o.Grants}},
	}
}

// CreateUser creates FelixUser o.Name with o.Grants in c, waits until the
// operator has issued its certificate (Ready, and its Secret holding
// tls.crt, tls.key and ca.crt), and returns its credentials, written to
// o.Dir if set. A FelixUser that already exists is waited for as it is,
// its grants untouched.
func CreateUser(ctx context.Context, c client.Client, o UserOptions) (*User, error) {
	if err := c.Create(ctx, UserObject(o)); err != nil && !apierrors.IsAlreadyExists(err) {
		return nil, fmt.Errorf("localcluster: create FelixUser %s/%s: %w", o.Namespace, o.Name, err)
	}
	return WaitUser(ctx, c, o)
}

// WaitUser waits until the operator has issued the certificate of the
// existing FelixUser o.Name (o.Grants is ignored) and returns its
// credentials, written to o.Dir if set. It returns ErrUserNotIssued when
// the timeout passes first.
func WaitUser(ctx context.Context, c client.Client, o UserOptions) (*User, error) {
	timeout := o.Timeout
	if timeout == 0 {
		timeout = DefaultUserTimeout
	}
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	tick := time.NewTicker(userPoll)
	defer tick.Stop()
	for {
		u, why, err := issuedUser(ctx, c, o)
		if err != nil || u != nil {
			return u, err
		}
		select {
		case <-ctx.Done():
			return nil, fmt.Errorf("%w: FelixUser %s/%s after %s: %s", ErrUserNotIssued, o.Namespace, o.Name, timeout, why)
		case <-tick.C:
		}
	}
}

// issuedUser reads the user and its Secret once: the credentials when
// issued, else why not yet.
func issuedUser(ctx context.Context, c client.Client, o UserOptions) (*User, string, error) {
	var fu felixv1.FelixUser
	if err := c.Get(ctx, client.ObjectKey{Namespace: o.Namespace, Name: o.Name}, &fu); err != nil {
		if apierrors.IsNotFound(err) || ctx.Err() != nil {
			return nil, err.Error(), nil
		}
		return nil, "", err
	}
	ready := meta.FindStatusCondition(fu.Status.Conditions, felixv1.ConditionReady)
	switch {
	case ready == nil:
		return nil, "no Ready condition yet", nil
	case ready.Status != metav1.ConditionTrue:
		return nil, ready.Reason + ": " + ready.Message, nil
	case fu.Status.SecretName == "":
		return nil, "no status.secretName yet", nil
	}
	var s corev1.Secret
	if err := c.Get(ctx, client.ObjectKey{Namespace: o.Namespace, Name: fu.Status.SecretName}, &s); err != nil {
		if apierrors.IsNotFound(err) || ctx.Err() != nil {
			return nil, err.Error(), nil
		}
		return nil, "", err
	}
	for _, k := range []string{pki.CertFile, pki.KeyFile, pki.CAFile} {
		if len(s.Data[k]) == 0 {
			return nil, fmt.Sprintf("Secret %s has no %s yet", s.Name, k), nil
		}
	}
	u := &User{Namespace: o.Namespace, Cluster: fu.Spec.Cluster, Name: o.Name, Identity: fu.Status.Identity, Secret: &s}
	cfg, err := SecretClientConfig(&s, o.Namespace+"/"+fu.Spec.Cluster)
	if err != nil {
		return nil, "", err
	}
	u.TLS = cfg
	if o.Dir != "" {
		if err := WriteSecretFiles(&s, o.Dir); err != nil {
			return nil, "", err
		}
		u.Dir = o.Dir
	}
	return u, "", nil
}

// SecretClientConfig is the client configuration (pki.ClientConfig) of a
// certificate Secret (tls.crt, tls.key, ca.crt) for the client port of
// brokers of cluster ("namespace/name"; empty: any broker of the CA).
// It returns ErrUserSecretIncomplete when a key is missing.
func SecretClientConfig(s *corev1.Secret, cluster string) (*tls.Config, error) {
	for _, k := range []string{pki.CertFile, pki.KeyFile, pki.CAFile} {
		if len(s.Data[k]) == 0 {
			return nil, fmt.Errorf("%w: %s/%s has no %s", ErrUserSecretIncomplete, s.Namespace, s.Name, k)
		}
	}
	cert, err := pki.ParseLeaf(s.Data[pki.CertFile], s.Data[pki.KeyFile])
	if err != nil {
		return nil, fmt.Errorf("localcluster: Secret %s/%s: %w", s.Namespace, s.Name, err)
	}
	roots, err := pki.ParseCertsPEM(s.Data[pki.CAFile])
	if err != nil {
		return nil, fmt.Errorf("localcluster: Secret %s/%s %s: %w", s.Namespace, s.Name, pki.CAFile, err)
	}
	pool := x509.NewCertPool()
	for _, r := range roots {
		pool.AddCert(r)
	}
	return pki.ClientConfig(&cert, pool, cluster, ""), nil
}

// WriteSecretFiles writes a certificate Secret's tls.crt, tls.key and
// ca.crt into dir (created 0700 if missing), each replaced atomically; the
// key is readable by its owner only. It returns ErrUserSecretIncomplete
// when a key is missing.
func WriteSecretFiles(s *corev1.Secret, dir string) error {
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return err
	}
	for _, f := range []struct {
		name string
		mode os.FileMode
	}{{pki.CAFile, 0o644}, {pki.CertFile, 0o644}, {pki.KeyFile, 0o600}} {
		b := s.Data[f.name]
		if len(b) == 0 {
			return fmt.Errorf("%w: %s/%s has no %s", ErrUserSecretIncomplete, s.Namespace, s.Name, f.name)
		}
		tmp, err := os.CreateTemp(dir, "."+f.name+"-*")
		if err != nil {
			return err
		}
		_, werr := tmp.Write(b)
		cerr := tmp.Close()
		if err := errors.Join(werr, cerr, os.Chmod(tmp.Name(), f.mode)); err != nil {
			_ = os.Remove(tmp.Name())
			return err
		}
		if err := os.Rename(tmp.Name(), filepath.Join(dir, f.name)); err != nil {
			_ = os.Remove(tmp.Name())
			return err
		}
	}
	return nil
}

// BrokerClientConfig is a client configuration presenting broker's own
// certificate (its Secret <broker>-tls): what a test scrapes the broker's
// HTTPS /metrics port with, which accepts a broker or operator
// certificate of the cluster's CA besides a bearer token.
func BrokerClientConfig(ctx context.Context, c client.Reader, namespace, cluster, broker string) (*tls.Config, error) {
	var s corev1.Secret
	if err := c.Get(ctx, client.ObjectKey{Namespace: namespace, Name: controllers.BrokerTLSSecretName(broker)}, &s); err != nil {
		return nil, fmt.Errorf("localcluster: broker Secret: %w", err)
	}
	return SecretClientConfig(&s, namespace+"/"+cluster)
}

// CreateUser is the package's CreateUser against the cluster's API server.
func (c *Cluster) CreateUser(ctx context.Context, o UserOptions) (*User, error) {
	return CreateUser(ctx, c.Env.Client, o)
}
