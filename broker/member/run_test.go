package member

import (
	"context"
	"crypto/tls"
	"errors"
	"net"
	"net/http"
	"slices"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/client"

	felixv1 "felix.dev/felix/api/v1alpha1"
	brokerclient "felix.dev/felix/broker/client"
	"felix.dev/felix/broker/datadir"
	"felix.dev/felix/broker/logstore"
	"felix.dev/felix/broker/metricsauth"
	"felix.dev/felix/broker/replica"
	"felix.dev/felix/broker/wire"
	"felix.dev/felix/internal/pki"
	"felix.dev/felix/internal/testenv"
	"felix.dev/felix/internal/version"
)

// grantRegistrations plays the operator's registration grant until ctx
// ends, copying address and peer address as controllers does.
func grantRegistrations(ctx context.Context, c client.Client, key types.NamespacedName) {
	for ctx.Err() == nil {
		var b felixv1.FelixBroker
		if err := c.Get(ctx, key, &b); err == nil && b.Status.RegistrationRequest != nil {
			r := b.Status.RegistrationRequest
			if r.SeenIncarnation == b.Status.Incarnation {
				b.Status.Incarnation, b.Status.StorageID = r.SeenIncarnation+1, r.StorageID
				b.Status.Address, b.Status.PeerAddress = r.Address, r.PeerAddress
			}
			b.Status.RegistrationRequest = nil
			_ = c.Status().Update(ctx, &b)
		}
		select {
		case <-ctx.Done():
		case <-time.After(20 * time.Millisecond):
		}
	}
}

// A secure member started as `felix broker` starts it (TLS source, client,
// peer, probe and metrics listeners): it refuses to start without TLS,
// registers its peer address, serves clients only after the FelixUsers
// are loaded and then authorizes by them, refuses a user on the peer
// port, and keeps /metrics off the probe port.
func TestRunSecureMember(t *testing.T) {
	env := testenv.Start(t)
	ctx, cancel := context.WithTimeout(context.Background(), 90*time.Second)
	defer cancel()
	const broker = "logs-0"
	must := func(err error) {
		t.Helper()
		if err != nil {
			t.Fatal(err)
		}
	}
	must(env.Client.Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: testNS}}))
	must(env.Client.Create(ctx, &felixv1.FelixCluster{ObjectMeta: metav1.ObjectMeta{Name: testCluster, Namespace: testNS},
		Spec: felixv1.FelixClusterSpec{Brokers: 1, Image: "felix:dev"}}))
	must(env.Client.Create(ctx, &felixv1.FelixBroker{ObjectMeta: metav1.ObjectMeta{Name: broker, Namespace: testNS},
		Spec: felixv1.FelixBrokerSpec{Cluster: testCluster}}))
	alice := &felixv1.FelixUser{ObjectMeta: metav1.ObjectMeta{Name: "alice", Namespace: testNS},
		Spec: felixv1.FelixUserSpec{Cluster: testCluster, Authorization: felixv1.UserAuthorization{
			Grants: []felixv1.StreamGrant{{Stream: "orders", Operations: []felixv1.StreamOperation{felixv1.OperationDescribe}}}}}}
	must(env.Client.Create(ctx, alice))
	key := types.NamespacedName{Namespace: testNS, Name: broker}
	go grantRegistrations(ctx, env.Client, key)

	ca, err := pki.NewCA("test-ca", time.Now(), 24*time.Hour, nil)
	must(err)
	dir := t.TempDir()
	writeCert(t, ca, identity(pki.KindBroker, broker), dir)
	src, err := pki.NewSource(pki.SourceOptions{Files: pki.DirFiles(dir)})
	must(err)

	base := Config{DataDir: t.TempDir(), Fsync: logstore.FsyncNone, REST: env.Config, Namespace: testNS, Cluster: testCluster,
		Broker: broker, HeartbeatInterval: 200 * time.Millisecond, NodeExpiry: 2 * time.Second, ShutdownTimeout: 5 * time.Second}

	// Without TLS (and not Insecure) it refuses to start.
	noTLS := base
	noTLS.Listen, noTLS.HTTP = listen(t), listen(t)
	if err := Run(ctx, noTLS); !errors.Is(err, ErrInsecure) {
		t.Fatalf("Run without TLS: %v, want ErrInsecure", err)
	}
	// With another broker's certificate it refuses too.
	other := base
	other.Listen, other.HTTP, other.PeerListen = listen(t), listen(t), listen(t)
	otherDir := t.TempDir()
	writeCert(t, ca, identity(pki.KindBroker, "logs-1"), otherDir)
	other.TLS, err = pki.NewSource(pki.SourceOptions{Files: pki.DirFiles(otherDir)})
	must(err)
	if err := Run(ctx, other); !errors.Is(err, ErrWrongIdentity) {
		t.Fatalf("Run with another broker's certificate: %v, want ErrWrongIdentity", err)
	}

	cfg := base
	cfg.Listen, cfg.HTTP, cfg.PeerListen, cfg.Metrics = listen(t), listen(t), listen(t), listen(t)
	cfg.AdvertisePeer = "10.0.0.7:7102"
	cfg.TLS, cfg.MetricsAuth = src, &metricsauth.Options{}
	cfg.Registry = prometheus.NewRegistry()
	started := make(chan struct{})
	cfg.Started = func(datadir.StorageID, int64, datadir.Decision) { close(started) }
	runCtx, stop := context.WithCancel(ctx)
	done := make(chan error, 1)
	go func() { done <- Run(runCtx, cfg) }()
	t.Cleanup(func() {
		stop()
		if err := <-done; err != nil {
			t.Errorf("Run: %v", err)
		}
	})
	select {
	case <-started:
	case err := <-done:
		t.Fatalf("Run ended: %v", err)
	case <-ctx.Done():
		t.Fatal("member did not start")
	}

	// The member's registry has felix_build_info and the per-shard
	// collector (a second one of the same metrics is refused).
	if v := gauge(t, cfg.Registry, version.BuildInfoName, "version", version.Version); v != 1 {
		t.Errorf("%s{version=%q} = %v; want 1", version.BuildInfoName, version.Version, v)
	}
	if err := cfg.Registry.Register(replica.NewShardCollector(nil)); err == nil {
		t.Error("the member registered no per-shard collector: another one was accepted")
	}

	var b felixv1.FelixBroker
	must(env.Client.Get(ctx, key, &b))
	if b.Status.PeerAddress != "10.0.0.7:7102" || b.Status.Address != cfg.Listen.Addr().String() {
		t.Fatalf("registered address %q, peer address %q", b.Status.Address, b.Status.PeerAddress)
	}

	clientAddr := cfg.Listen.Addr().String()
	dial := func(cert *tls.Certificate) (*brokerclient.Client, error) {
		dctx, dcancel := context.WithTimeout(ctx, 5*time.Second)
		defer dcancel()
		return brokerclient.Dial(dctx, clientAddr, brokerclient.Options{TLS: pki.ClientConfig(cert, roots(ca), testNS+"/"+testCluster, "")})
	}
	describeCode := func(cert *tls.Certificate) wire.Code {
		c, err := dial(cert)
		if err != nil {
			var we *wire.Error
			if errors.As(err, &we) {
				return we.Code
			}
			t.Fatalf("dial: %v", err)
		}
		defer func() { _ = c.Close() }()
		_, err = c.Describe(ctx, ordersShard)
		var we *wire.Error
		if errors.As(err, &we) {
			return we.Code
		}
		return 0
	}
	if code := describeCode(keyPairUID(t, ca, identity(pki.KindUser, "alice"), string(alice.UID))); code == wire.CodeNotAuthorized || code == wire.CodeUnauthenticated {
		t.Fatalf("alice (Describe granted): code %v", code)
	}
	if code := describeCode(keyPair(t, ca, identity(pki.KindUser, "mallory"))); code != wire.CodeNotAuthorized {
		t.Fatalf("a user with no FelixUser: code %v, want NotAuthorized", code)
	}
	if code := describeCode(nil); code != wire.CodeUnauthenticated {
		t.Fatalf("anonymous: code %v, want Unauthenticated", code)
	}

	// Metadata and the ShardUnknown hint come from the cluster's
	// FelixShards: orders-0, of which this broker holds no replica, is led
	// by logs-1, registered at 10.0.0.8:7100.
	leaderAddr := "10.0.0.8:7100"
	must(env.Client.Create(ctx, &felixv1.FelixBroker{ObjectMeta: metav1.ObjectMeta{Name: "logs-1", Namespace: testNS},
		Spec: felixv1.FelixBrokerSpec{Cluster: testCluster}}))
	var lb felixv1.FelixBroker
	must(env.Client.Get(ctx, types.NamespacedName{Namespace: testNS, Name: "logs-1"}, &lb))
	lb.Status.Address = leaderAddr
	must(env.Client.Status().Update(ctx, &lb))
	sh := &felixv1.FelixShard{ObjectMeta: metav1.ObjectMeta{Name: "orders-0", Namespace: testNS, Labels: map[string]string{"felix.dev/cluster": testCluster}},
		Spec: felixv1.FelixShardSpec{Stream: ordersShard.Stream, Index: int32(ordersShard.Shard), Replicas: []string{"logs-1"}}}
	must(env.Client.Create(ctx, sh))
	sh.Status.Assignment = &felixv1.Assignment{Leader: "logs-1", Epoch: 3}
	must(env.Client.Status().Update(ctx, sh))
	ac, err := dial(keyPairUID(t, ca, identity(pki.KindUser, "alice"), string(alice.UID)))
	must(err)
	defer func() { _ = ac.Close() }()
	var meta wire.MetadataOK
	for {
		meta, err = ac.Metadata(ctx, ordersShard.Stream)
		must(err)
		if a, epoch, ok := meta.LeaderAddress(ordersShard); ok && a == leaderAddr && epoch == 3 {
			break
		}
		select {
		case <-ctx.Done():
			t.Fatalf("metadata never named logs-1 at %s: %+v", leaderAddr, meta)
		case <-time.After(20 * time.Millisecond):
		}
	}
	if len(meta.Shards) != 1 || !slices.Equal(meta.Shards[0].Replicas, []string{"logs-1"}) {
		t.Fatalf("metadata shards %+v, want orders/0 with replicas [logs-1]", meta.Shards)
	}
	_, err = ac.Describe(ctx, ordersShard)
	var hint *wire.Error
	if !errors.As(err, &hint) || hint.Code != wire.CodeShardUnknown || hint.Leader != leaderAddr || hint.Epoch != 3 {
		t.Fatalf("describe of a shard held elsewhere: %v, want ShardUnknown naming %s at epoch 3", err, leaderAddr)
	}
	if _, err := ac.Metadata(ctx, "payments"); !errors.Is(err, brokerclient.ErrNotAuthorized) {
		t.Fatalf("metadata of a stream alice may not describe: %v, want NotAuthorized", err)
	}

	// The peer port: a user certificate fails the handshake.
	nc, err := tls.Dial("tcp", cfg.PeerListen.Addr().String(), pki.ClientConfig(keyPair(t, ca, identity(pki.KindUser, "alice")), roots(ca), testNS+"/"+testCluster, ""))
	if err == nil {
		_ = nc.SetDeadline(time.Now().Add(5 * time.Second))
		_, err = nc.Read(make([]byte, 1))
		_ = nc.Close()
	}
	var op *net.OpError
	if !errors.As(err, &op) || op.Op != "remote error" {
		t.Fatalf("user on the peer port: %v, want a TLS alert", err)
	}

	// Probes plain; /metrics only on the metrics port, and not anonymously.
	hc := &http.Client{Timeout: 5 * time.Second}
	for path, want := range map[string]int{"/live": 200, "/metrics": 404} {
		resp, err := hc.Get("http://" + cfg.HTTP.Addr().String() + path)
		must(err)
		_ = resp.Body.Close()
		if resp.StatusCode != want {
			t.Fatalf("probe port %s: %d, want %d", path, resp.StatusCode, want)
		}
	}
	hs := &http.Client{Timeout: 5 * time.Second, Transport: &http.Transport{TLSClientConfig: pki.ClientConfig(nil, roots(ca), testNS+"/"+testCluster, "")}}
	resp, err := hs.Get("https://" + cfg.Metrics.Addr().String() + "/metrics")
	must(err)
	_ = resp.Body.Close()
	if resp.StatusCode != http.StatusUnauthorized {
		t.Fatalf("metrics without a token: %d, want 401", resp.StatusCode)
	}
}
