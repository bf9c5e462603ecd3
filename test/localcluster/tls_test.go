package localcluster_test

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"net/http"
	"sync"
	"testing"
	"time"

	"sigs.k8s.io/controller-runtime/pkg/client"

	felixv1 "felix.dev/felix/api/v1alpha1"
	fclient "felix.dev/felix/broker/client"
	"felix.dev/felix/broker/record"
	"felix.dev/felix/broker/wire"
	"felix.dev/felix/controllers"
	"felix.dev/felix/internal/localcluster"
	"felix.dev/felix/internal/pki"
)

// tenantUser is the FelixUser a tenant's clients connect as: every
// operation on every stream of its cluster. It is created with the
// FelixCluster, so brokers see it in their first list of FelixUsers, and
// its certificate is waited for at the first dial.
type tenantUser struct {
	c    client.Client
	opts localcluster.UserOptions

	mu  sync.Mutex
	tls *tls.Config
}

// tenantUserName is the name of the FelixUser of a tenant's cluster.
func tenantUserName(cluster string) string { return cluster + "-client" }

// newTenantUser creates the FelixUser of cluster in ns.
func newTenantUser(t *testing.T, ctx context.Context, c client.Client, ns, cluster string) *tenantUser {
	t.Helper()
	u := &tenantUser{c: c, opts: localcluster.UserOptions{Namespace: ns, Cluster: cluster,
		Name: tenantUserName(cluster), Grants: localcluster.AllGrants()}}
	if err := c.Create(ctx, localcluster.UserObject(u.opts)); err != nil {
		t.Fatal(err)
	}
	return u
}

// config returns the user's client TLS configuration, waiting (within
// ctx) for the operator to issue its certificate the first time.
func (u *tenantUser) config(ctx context.Context) (*tls.Config, error) {
	u.mu.Lock()
	defer u.mu.Unlock()
	if u.tls != nil {
		return u.tls, nil
	}
	issued, err := localcluster.WaitUser(ctx, u.c, u.opts)
	if err != nil {
		return nil, err
	}
	u.tls = issued.TLS
	return u.tls, nil
}

// dial connects to the broker at addr over TLS as the tenant's user. It
// is the one way the tests' clients reach a broker's client port.
func (tn *tenant) dial(ctx context.Context, addr string) (*fclient.Client, error) {
	cfg, err := tn.user.config(ctx)
	if err != nil {
		return nil, err
	}
	return fclient.Dial(ctx, addr, fclient.Options{TLS: cfg})
}

// forCluster is the tenant's view of another FelixCluster of its
// namespace (created by the caller), with a FelixUser of its own.
func (tn *tenant) forCluster(cluster string) *tenant {
	tn.t.Helper()
	c := *tn
	c.cluster = cluster
	c.user = newTenantUser(tn.t, tn.ctx, tn.c, tn.ns, cluster)
	return &c
}

// scrape GETs a broker pod's /metrics on its HTTPS metrics port,
// presenting the broker's own certificate (the port accepts a broker or
// operator certificate of the cluster's CA, or a bearer token).
func (tn *tenant) scrape(pod string) (*http.Response, error) {
	ip, ok := tn.lc.Runner.PodIP(tn.ns, pod)
	if !ok {
		return nil, fmt.Errorf("pod %s/%s has no address", tn.ns, pod)
	}
	ctx, cancel := context.WithTimeout(tn.ctx, 5*time.Second)
	defer cancel()
	cfg, err := localcluster.BrokerClientConfig(ctx, tn.c, tn.ns, tn.cluster, pod)
	if err != nil {
		return nil, err
	}
	hc := &http.Client{Timeout: 5 * time.Second, Transport: &http.Transport{TLSClientConfig: cfg, DisableKeepAlives: true}}
	return hc.Get(fmt.Sprintf("https://%s:%d/metrics", ip, controllers.BrokerMetricsPort))
}

// scenarioAuthorization checks the secure default end to end: a FelixUser
// whose grants allow Append, Read and Describe on one stream may do those
// there, is refused a trim and any other stream (NotAuthorized), and a
// client with no certificate is refused at the Hello (Unauthenticated,
// anonymous access being off).
func scenarioAuthorization(tn *tenant) {
	t := tn.t
	tn.stream("authz")
	reader, err := tn.lc.CreateUser(tn.ctx, localcluster.UserOptions{Namespace: tn.ns, Cluster: tn.cluster,
		Name: tn.cluster + "-no-trim", Grants: []felixv1.StreamGrant{{Stream: "authz",
			Operations: []felixv1.StreamOperation{felixv1.OperationAppend, felixv1.OperationRead, felixv1.OperationDescribe}}}})
	if err != nil {
		t.Fatal(err)
	}
	shard := record.ShardID{Stream: "authz"}
	var tail uint64
	// The leader serves the user once its watch has seen the FelixUser.
	eventually(t, "an append by the user without Trim", time.Minute, func() (bool, string) {
		ctx, cancel := context.WithTimeout(tn.ctx, 5*time.Second)
		defer cancel()
		cl, err := fclient.Dial(ctx, tn.leaderAddr("authz"), fclient.Options{TLS: reader.TLS})
		if err != nil {
			return false, err.Error()
		}
		defer cl.Close()
		ok, err := cl.Append(ctx, shard, []record.Record{{Payload: []byte("a")}, {Payload: []byte("b")}}, nil)
		if err != nil {
			return false, err.Error()
		}
		tail = ok.Tail
		return true, ""
	})
	ctx, cancel := context.WithTimeout(tn.ctx, 10*time.Second)
	defer cancel()
	cl, err := fclient.Dial(ctx, tn.leaderAddr("authz"), fclient.Options{TLS: reader.TLS})
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()
	if _, err := cl.Describe(ctx, shard); err != nil {
		t.Errorf("describe with the grant: %v", err)
	}
	_, err = cl.Trim(ctx, wire.TrimRequest{Shard: shard, Floor: 1, ExpectTail: tail})
	if !errors.Is(err, fclient.ErrNotAuthorized) {
		t.Errorf("trim without the grant: %v, want NotAuthorized", err)
	}
	if _, err := cl.Append(ctx, record.ShardID{Stream: "other"}, []record.Record{{Payload: []byte("x")}}, nil); !errors.Is(err, fclient.ErrNotAuthorized) {
		t.Errorf("append to a stream without a grant: %v, want NotAuthorized", err)
	}
	// The tenant's own user (every grant) may trim.
	all, err := tn.dial(ctx, tn.leaderAddr("authz"))
	if err != nil {
		t.Fatal(err)
	}
	defer all.Close()
	if _, err := all.Trim(ctx, wire.TrimRequest{Shard: shard, Floor: 1, ExpectTail: tail}); err != nil {
		t.Errorf("trim with the grant: %v", err)
	}

	// No certificate: refused at the Hello.
	roots := x509.NewCertPool()
	roots.AppendCertsFromPEM(reader.Secret.Data[pki.CAFile])
	anon := pki.ClientConfig(nil, roots, tn.ns+"/"+tn.cluster, "")
	if c, err := fclient.Dial(ctx, tn.leaderAddr("authz"), fclient.Options{TLS: anon}); err == nil {
		_ = c.Close()
		t.Error("a client without a certificate was accepted")
	} else if !errors.Is(err, fclient.ErrUnauthenticated) {
		t.Errorf("dial without a certificate: %v, want Unauthenticated", err)
	}
}
