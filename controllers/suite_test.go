package controllers_test

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"os"
	"strings"
	"sync"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	eventsv1 "k8s.io/api/events/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/rest"
	clocktesting "k8s.io/utils/clock/testing"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
	metricsserver "sigs.k8s.io/controller-runtime/pkg/metrics/server"

	"github.com/go-logr/logr"
	"github.com/prometheus/client_golang/prometheus"

	felixv1 "felix.dev/felix/api/v1alpha1"
	"felix.dev/felix/broker/controlplane"
	"felix.dev/felix/controllers"
	"felix.dev/felix/internal/snapshots"
	"felix.dev/felix/internal/testenv"
)

// suite is the API server and the operator every test of this package
// shares: a real kube-apiserver and etcd (envtest), and a manager running
// all Felix reconcilers against it. Tests isolate by namespace.
var suite struct {
	env *testenv.Env
	c   client.Client
	// metrics is the registry of the operator's metrics
	// (controllers.NewMetrics), a fresh one rather than
	// controller-runtime's global.
	metrics *prometheus.Registry
	// scheduleClock is the clock FelixScheduledBackup schedules run on
	// (controllers.Options.ScheduleClock); tests step it.
	scheduleClock *clocktesting.FakeClock
}

func TestMain(m *testing.M) {
	env, err := testenv.StartEnv()
	if err != nil {
		fmt.Fprintln(os.Stderr, "envtest:", err)
		os.Exit(1)
	}
	suite.env, suite.c = env, env.Client
	// The VolumeSnapshot CRDs, for FelixBackup; no snapshot controller runs,
	// tests mark snapshots ready themselves.
	err = snapshots.InstallCRDs(context.Background(), env.Config)
	if err == nil {
		suite.c, err = client.New(env.Config, client.Options{Scheme: controllers.NewScheme()})
	}
	if err != nil {
		fmt.Fprintln(os.Stderr, "snapshot CRDs:", err)
		_ = env.Stop()
		os.Exit(1)
	}
	ctrl.SetLogger(logr.Discard())
	mgr, err := ctrl.NewManager(env.Config, ctrl.Options{
		Scheme:  controllers.NewScheme(),
		Cache:   controllers.CacheOptions(),
		Metrics: metricsserver.Options{BindAddress: "0"},
		Logger:  logr.Discard(),
	})
	var metrics *controllers.Metrics
	if err == nil {
		suite.metrics = prometheus.NewRegistry()
		metrics, err = controllers.NewMetrics(suite.metrics, mgr.GetCache())
	}
	if err == nil {
		suite.scheduleClock = clocktesting.NewFakeClock(time.Now())
		err = controllers.Setup(mgr, controllers.Options{BrokerAuthDelegatorRole: controllers.DefaultBrokerAuthDelegatorRole, DefaultBrokerImage: suiteBrokerImage,
			RollWaitTimeout: suiteRollWaitTimeout, Metrics: metrics, ScheduleClock: suite.scheduleClock})
	}
	if err != nil {
		fmt.Fprintln(os.Stderr, "manager:", err)
		_ = env.Stop()
		os.Exit(1)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- mgr.Start(ctx) }()
	code := m.Run()
	cancel()
	<-done
	_ = env.Stop()
	os.Exit(code)
}

// namespace creates a fresh namespace for one test.
func namespace(t *testing.T) string {
	t.Helper()
	name := strings.ToLower(fmt.Sprintf("t-%s-%s", shortName(t.Name()), randHex(3)))
	ns := &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: name}}
	if err := suite.c.Create(context.Background(), ns); err != nil {
		t.Fatalf("create namespace: %v", err)
	}
	return name
}

func shortName(s string) string {
	s = strings.Map(func(r rune) rune {
		if r >= 'a' && r <= 'z' || r >= '0' && r <= '9' {
			return r
		}
		if r >= 'A' && r <= 'Z' {
			return r + 'a' - 'A'
		}
		return '-'
	}, s)
	if len(s) > 40 {
		s = s[len(s)-40:]
	}
	return strings.Trim(s, "-")
}

func randHex(n int) string {
	b := make([]byte, n)
	_, _ = rand.Read(b)
	return hex.EncodeToString(b)
}

// newStorageID returns a random storage id as the API spells it.
func newStorageID() string { return randHex(16) }

// eventually polls cond until it holds or the deadline passes.
func eventually(t *testing.T, timeout time.Duration, what string, cond func() (bool, string)) {
	t.Helper()
	deadline := time.Now().Add(timeout)
	last := ""
	for {
		ok, msg := cond()
		if ok {
			return
		}
		last = msg
		if time.Now().After(deadline) {
			t.Fatalf("timed out after %s waiting for %s: %s", timeout, what, last)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// fastCluster is a cluster with short timings so liveness tests run in
// seconds: heartbeat 500ms, node expiry 1.5s.
func fastCluster(ns, name string, brokers int32) *felixv1.FelixCluster {
	return &felixv1.FelixCluster{
		ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name},
		Spec: felixv1.FelixClusterSpec{
			Brokers:           brokers,
			Image:             "felix:test",
			HeartbeatInterval: &metav1.Duration{Duration: 500 * time.Millisecond},
			NodeExpiry:        &metav1.Duration{Duration: 1500 * time.Millisecond},
		},
	}
}

func create(t *testing.T, o client.Object) {
	t.Helper()
	if err := suite.c.Create(context.Background(), o); err != nil {
		t.Fatalf("create %T %s: %v", o, o.GetName(), err)
	}
}

func getBroker(t *testing.T, ns, name string) *felixv1.FelixBroker {
	t.Helper()
	var b felixv1.FelixBroker
	if err := suite.c.Get(context.Background(), types.NamespacedName{Namespace: ns, Name: name}, &b); err != nil {
		return nil
	}
	return &b
}

func getShard(t *testing.T, ns, name string) *felixv1.FelixShard {
	t.Helper()
	var s felixv1.FelixShard
	if err := suite.c.Get(context.Background(), types.NamespacedName{Namespace: ns, Name: name}, &s); err != nil {
		return nil
	}
	return &s
}

// waitForBrokers waits until the operator created the cluster's FelixBrokers.
func waitForBrokers(t *testing.T, ns, cluster string, n int32) {
	t.Helper()
	eventually(t, 20*time.Second, "FelixBrokers and Leases", func() (bool, string) {
		for i := int32(0); i < n; i++ {
			name := controllers.BrokerName(cluster, i)
			if getBroker(t, ns, name) == nil {
				return false, name + " missing"
			}
		}
		return true, ""
	})
}

// fakeBroker is the control-plane side of one broker: registered, and
// renewing its heartbeat until stopped.
type fakeBroker struct {
	name      string
	storageID string
	cp        *controlplane.Client
	reports   *controlplane.ReportWriter
	cancel    context.CancelFunc
	wg        sync.WaitGroup
}

func newClient(t *testing.T, cfg *rest.Config, ns, cluster, broker string) *controlplane.Client {
	t.Helper()
	return newClientTiming(t, cfg, ns, cluster, broker, 500*time.Millisecond, 1500*time.Millisecond)
}

func newClientTiming(t *testing.T, cfg *rest.Config, ns, cluster, broker string, heartbeat, nodeExpiry time.Duration) *controlplane.Client {
	t.Helper()
	cp, err := controlplane.New(controlplane.Config{
		REST: cfg, Namespace: ns, Cluster: cluster, Broker: broker,
		HeartbeatInterval: heartbeat, NodeExpiry: nodeExpiry,
		MinBackoff: 50 * time.Millisecond, MaxBackoff: 200 * time.Millisecond,
		RequestTimeout: 2 * time.Second,
	})
	if err != nil {
		t.Fatalf("controlplane.New: %v", err)
	}
	return cp
}

// startBroker registers a broker with a new storage id and starts its
// heartbeat and report writer.
func startBroker(t *testing.T, ns, cluster string, ordinal int32) *fakeBroker {
	t.Helper()
	return startBrokerTiming(t, ns, cluster, ordinal, 500*time.Millisecond, 1500*time.Millisecond, time.Hour)
}

// startBrokerTiming is startBroker with the broker's heartbeat interval,
// node expiry and report refresh interval (0: the default). startBroker
// refreshes hourly, so no refresh lands inside a test unless it asks.
func startBrokerTiming(t *testing.T, ns, cluster string, ordinal int32, heartbeat, nodeExpiry, refresh time.Duration) *fakeBroker {
	t.Helper()
	name := controllers.BrokerName(cluster, ordinal)
	fb := &fakeBroker{name: name, storageID: newStorageID(), cp: newClientTiming(t, suite.env.Config, ns, cluster, name, heartbeat, nodeExpiry)}
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	seen, err := fb.cp.CurrentIncarnation(ctx)
	if err != nil {
		t.Fatalf("%s: CurrentIncarnation: %v", name, err)
	}
	if _, err := fb.cp.Register(ctx, fb.storageID, seen, name+":7100"); err != nil {
		t.Fatalf("%s: Register: %v", name, err)
	}
	fb.run(t, refresh)
	return fb
}

// run starts the heartbeat and the report writer.
func (fb *fakeBroker) run(t *testing.T, refresh time.Duration) {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	fb.cancel = cancel
	fb.reports = fb.cp.NewReportWriter(controlplane.ReportOptions{MaxWritesPerSecond: 100, Refresh: refresh})
	fb.wg.Add(2)
	go func() { defer fb.wg.Done(); _ = fb.cp.RunHeartbeat(ctx, fb.reports.Current) }()
	go func() { defer fb.wg.Done(); _ = fb.reports.Run(ctx) }()
	t.Cleanup(fb.stop)
}

// stop ends the heartbeat (the broker "dies").
func (fb *fakeBroker) stop() {
	if fb.cancel != nil {
		fb.cancel()
		fb.wg.Wait()
	}
}

// hasEvent reports whether an event with reason regarding name exists.
func hasEvent(ns, name, reason string) (bool, string) {
	var list eventsv1.EventList
	if err := suite.c.List(context.Background(), &list, client.InNamespace(ns)); err != nil {
		return false, err.Error()
	}
	var seen []string
	for _, e := range list.Items {
		if e.Regarding.Name == name && e.Reason == reason {
			return true, ""
		}
		seen = append(seen, e.Regarding.Name+"/"+e.Reason)
	}
	return false, fmt.Sprintf("events: %v", seen)
}

func condition(conds []metav1.Condition, typ string) *metav1.Condition {
	for i := range conds {
		if conds[i].Type == typ {
			return &conds[i]
		}
	}
	return nil
}

func controlplaneReportOptions() controlplane.ReportOptions {
	return controlplane.ReportOptions{MaxWritesPerSecond: 100}
}
