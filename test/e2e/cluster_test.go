// Package e2e runs real `felix broker` processes as cluster members against a
// real kube-apiserver with the Felix operator's reconcilers, on loopback with
// real badger directories. The test starts the broker processes itself
// (standing in for the kubelet), so a test can give a broker flags no pod
// spec has. The scenarios that run on the whole product (operator process,
// podrunner-run pods) are in test/localcluster.
package e2e

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/go-logr/logr"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
	ctrlconfig "sigs.k8s.io/controller-runtime/pkg/config"
	metricsserver "sigs.k8s.io/controller-runtime/pkg/metrics/server"

	felixv1 "felix.dev/felix/api/v1alpha1"
	"felix.dev/felix/controllers"
	"felix.dev/felix/internal/testenv"
)

// cluster is an API server, the operator's reconcilers in this process, and
// broker processes started by the test (standing in for the kubelet).
type cluster struct {
	t         testing.TB
	env       *testenv.Env
	c         client.Client
	bin       string
	namespace string
	name      string
	dir       string
	fsync     felixv1.FsyncMode // the brokers' --fsync, as the cluster's spec says
	timing    clusterTiming     // the brokers' heartbeat, expiry and pass interval
	// insecure runs the brokers with --insecure-no-tls (FELIX_E2E_INSECURE=1);
	// otherwise they are secure, as the operator runs them.
	insecure bool
	secrets  *secretSync // the brokers' and users' Secrets, kept in directories

	mu          sync.Mutex
	brokers     map[string]*brokerProc
	metricsHTTP *http.Client
}

type brokerProc struct {
	name    string
	dataDir string
	cmd     *exec.Cmd
	addr    string
	http    string
	peer    string // the peer port (secure brokers)
	metrics string // the metrics port (secure brokers)
	id      string
	exited  chan struct{}
}

var skipNameValidation = true

var buildOnce struct {
	sync.Once
	path string
	err  error
}

// felixBinary builds ./cmd/felix once per test binary, from the source
// tree the test runs in; FELIX_E2E_BIN names a binary to use instead (to
// compare builds in one harness: a build of another commit runs only
// through it).
func felixBinary(t testing.TB) string {
	t.Helper()
	if bin := os.Getenv("FELIX_E2E_BIN"); bin != "" {
		return bin
	}
	buildOnce.Do(func() {
		dir, err := os.MkdirTemp("", "felix-e2e-bin-")
		if err != nil {
			buildOnce.err = err
			return
		}
		buildOnce.path = filepath.Join(dir, "felix")
		cmd := exec.Command("go", "build", "-o", buildOnce.path, "./cmd/felix")
		cmd.Dir = testenv.RepoRoot()
		if out, err := cmd.CombinedOutput(); err != nil {
			buildOnce.err = fmt.Errorf("go build: %v\n%s", err, out)
		}
	})
	if buildOnce.err != nil {
		t.Fatal(buildOnce.err)
	}
	return buildOnce.path
}

// clusterTiming is how often brokers renew their heartbeat, how long the
// control plane waits before it calls a silent broker down, and the
// replication pass interval (zero: the broker's default).
type clusterTiming struct{ heartbeat, expiry, pass time.Duration }

// Timings of the end-to-end tests: short, so a killed broker is noticed in
// under two seconds (failover tests), at the price of 10 heartbeat writes
// a second to the API server from three brokers.
var shortTiming = clusterTiming{heartbeat: 300 * time.Millisecond, expiry: 1500 * time.Millisecond, pass: 50 * time.Millisecond}

// productTiming is the FelixCluster and broker defaults, which benchmarks
// use: their API server (on the same cores as the brokers) then serves as
// many heartbeats as a deployment's does.
var productTiming = clusterTiming{heartbeat: felixv1.DefaultHeartbeatInterval, expiry: felixv1.DefaultNodeExpiry}

// newCluster starts the API server and the operator, and creates a
// FelixCluster of n brokers with short timings.
func newCluster(t testing.TB, n int32, fsync felixv1.FsyncMode) *cluster {
	t.Helper()
	return newTimedCluster(t, n, fsync, shortTiming)
}

// newTimedCluster is newCluster with the given timings.
func newTimedCluster(t testing.TB, n int32, fsync felixv1.FsyncMode, timing clusterTiming) *cluster {
	t.Helper()
	return newClusterWith(t, n, fsync, timing, nil)
}

// newClusterWith is newTimedCluster with spec changed by edit (when not
// nil) before the FelixCluster is created. Unless FELIX_E2E_INSECURE=1,
// it waits for the FelixUser e2e-admin's certificate, which the harness's
// clients connect with.
func newClusterWith(t testing.TB, n int32, fsync felixv1.FsyncMode, timing clusterTiming, edit func(*felixv1.FelixClusterSpec)) *cluster {
	t.Helper()
	env := testenv.Start(t)
	mgr, err := ctrl.NewManager(env.Config, ctrl.Options{
		Scheme: controllers.NewScheme(), Cache: controllers.CacheOptions(),
		Metrics: metricsserver.Options{BindAddress: "0"}, Logger: logr.Discard(),
		// Each test has its own API server and operator in this process.
		Controller: ctrlconfig.Controller{SkipNameValidation: &skipNameValidation},
	})
	if err != nil {
		t.Fatal(err)
	}
	if err := controllers.Setup(mgr, controllers.Options{}); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- mgr.Start(ctx) }()
	c := &cluster{t: t, env: env, c: env.Client, bin: felixBinary(t), namespace: "e2e", name: "demo",
		dir: t.TempDir(), fsync: fsync, timing: timing, insecure: insecureFromEnv(), brokers: map[string]*brokerProc{}}
	c.secrets = newSecretSync(ctx, env.Client, c.namespace, 200*time.Millisecond)
	t.Cleanup(func() {
		c.mu.Lock()
		for _, b := range c.brokers {
			if b.cmd.Process != nil {
				_ = b.cmd.Process.Signal(syscall.SIGCONT)
				_ = b.cmd.Process.Kill()
				<-b.exited
			}
		}
		c.mu.Unlock()
		cancel()
		<-done
	})
	if err := c.c.Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: c.namespace}}); err != nil {
		t.Fatal(err)
	}
	fc := &felixv1.FelixCluster{
		ObjectMeta: metav1.ObjectMeta{Name: c.name, Namespace: c.namespace},
		Spec: felixv1.FelixClusterSpec{Brokers: n, Image: "felix:dev",
			Durability:        felixv1.DurabilitySpec{Fsync: fsync},
			HeartbeatInterval: &metav1.Duration{Duration: timing.heartbeat},
			NodeExpiry:        &metav1.Duration{Duration: timing.expiry}},
	}
	if edit != nil {
		edit(&fc.Spec)
	}
	if err := c.c.Create(ctx, fc); err != nil {
		t.Fatal(err)
	}
	if !c.insecure {
		c.createUser(t, adminUser, prefixGrants(allOperations, adminPrefixes...))
	}
	return c
}

// startBroker starts (or restarts) broker <cluster>-<ordinal> as a process
// and waits until it serves.
func (c *cluster) startBroker(ordinal int, extra ...string) *brokerProc {
	c.t.Helper()
	name := fmt.Sprintf("%s-%d", c.name, ordinal)
	dataDir := filepath.Join(c.dir, name)
	cmd := exec.Command(c.bin, "broker",
		"--cluster", c.name, "--broker", name, "--namespace", c.namespace,
		"--kubeconfig", c.env.Kubeconfig, "--data-dir", dataDir,
		"--listen", "127.0.0.1:0", "--http", "127.0.0.1:0", "--fsync", string(c.fsync), // as the operator passes it
		"--heartbeat-interval", c.timing.heartbeat.String(), "--node-expiry", c.timing.expiry.String())
	if c.insecure {
		// Plaintext, replication over the client port (benchmarks'
		// comparison; never what the operator runs).
		cmd.Args = append(cmd.Args, "--insecure-no-tls")
	} else {
		// As the operator's pod spec has it: the broker's Secret mounted
		// (kept in step here, as the kubelet does), a peer port and an
		// HTTPS metrics port.
		tlsDir := c.brokerTLSDir(name)
		c.secrets.track(c.t, controllers.BrokerTLSSecretName(name), tlsDir)
		cmd.Args = append(cmd.Args, "--tls-dir", tlsDir, "--peer-listen", "127.0.0.1:0", "--metrics-listen", "127.0.0.1:0")
	}
	if c.timing.pass > 0 {
		cmd.Args = append(cmd.Args, "--pass-interval", c.timing.pass.String())
	}
	// Tests wait for positions in the stored report, which a broker
	// otherwise writes only at its 5-minute refresh (or with a change
	// placement reads); extra may set another refresh.
	cmd.Args = append(cmd.Args, "--report-refresh", "1s")
	cmd.Args = append(cmd.Args, extra...)
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		c.t.Fatal(err)
	}
	logf, err := os.OpenFile(filepath.Join(c.dir, name+".log"), os.O_CREATE|os.O_APPEND|os.O_WRONLY, 0o644)
	if err != nil {
		c.t.Fatal(err)
	}
	cmd.Stderr = logf
	if err := cmd.Start(); err != nil {
		c.t.Fatal(err)
	}
	b := &brokerProc{name: name, dataDir: dataDir, cmd: cmd, exited: make(chan struct{})}
	serving := make(chan map[string]any, 1)
	go func() {
		sc := bufio.NewScanner(stdout)
		for sc.Scan() {
			var m map[string]any
			if json.Unmarshal(sc.Bytes(), &m) == nil && m["msg"] == "serving" {
				serving <- m
			}
		}
	}()
	go func() { _ = cmd.Wait(); _ = logf.Close(); close(b.exited) }()
	c.mu.Lock()
	c.brokers[name] = b
	c.mu.Unlock()
	select {
	case m := <-serving:
		b.addr, b.http, b.id = m["listen"].(string), m["http"].(string), m["storageID"].(string)
		b.peer, _ = m["peer"].(string)
		b.metrics, _ = m["metrics"].(string)
	case <-b.exited:
		c.t.Fatalf("broker %s exited before serving; log: %s", name, c.brokerLog(name))
	case <-time.After(60 * time.Second):
		c.t.Fatalf("broker %s did not serve within 60s; log: %s", name, c.brokerLog(name))
	}
	return b
}

func (c *cluster) brokerLog(name string) string {
	b, _ := os.ReadFile(filepath.Join(c.dir, name+".log"))
	lines := strings.Split(strings.TrimSpace(string(b)), "\n")
	if len(lines) > 30 {
		lines = lines[len(lines)-30:]
	}
	return strings.Join(lines, "\n")
}

// kill9 kills a broker process with SIGKILL and waits for it to exit.
func (c *cluster) kill9(name string) {
	c.t.Helper()
	c.mu.Lock()
	b := c.brokers[name]
	c.mu.Unlock()
	_ = b.cmd.Process.Kill()
	<-b.exited
}

// shard returns the FelixShard of a stream shard.
func (c *cluster) shard(stream string, index int) *felixv1.FelixShard {
	var s felixv1.FelixShard
	if err := c.c.Get(context.Background(), client.ObjectKey{Namespace: c.namespace, Name: fmt.Sprintf("%s-%d", stream, index)}, &s); err != nil {
		return nil
	}
	return &s
}

// eventually polls cond until it holds or the deadline passes.
func (c *cluster) eventually(what string, timeout time.Duration, cond func() (bool, string)) {
	c.t.Helper()
	deadline := time.Now().Add(timeout)
	var last string
	for time.Now().Before(deadline) {
		ok, msg := cond()
		if ok {
			return
		}
		last = msg
		time.Sleep(100 * time.Millisecond)
	}
	c.t.Fatalf("timed out after %s waiting for %s; last: %s", timeout, what, last)
}

// addressOf returns the protocol address a broker serves on.
func (c *cluster) addressOf(name string) string {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.brokers[name].addr
}

func (c *cluster) createStream(t testing.TB, name string, replicas int32) {
	t.Helper()
	c.createStreamShards(t, name, replicas, 1)
}

// createStreamShards creates a Quorum stream of shards shards and waits
// until each has an assignment.
func (c *cluster) createStreamShards(t testing.TB, name string, replicas, shards int32) {
	t.Helper()
	st := &felixv1.FelixStream{ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: c.namespace},
		Spec: felixv1.FelixStreamSpec{Cluster: c.name, Shards: shards, Replicas: replicas, Ack: felixv1.AckQuorum}}
	if err := c.c.Create(context.Background(), st); err != nil {
		t.Fatal(err)
	}
	for i := 0; i < int(shards); i++ {
		c.eventually(fmt.Sprintf("an assignment for %s-%d", name, i), 60*time.Second, func() (bool, string) {
			sh := c.shard(name, i)
			return sh != nil && sh.Status.Assignment != nil, "no assignment yet"
		})
	}
}

// waitServing waits until shard 0 of stream name has a leader that
// serves: its report, written once the fence of its epoch committed, names
// the assigned epoch. Appends sent before then are refused (Unavailable)
// while the new leader recovers.
func (c *cluster) waitServing(t testing.TB, name string) {
	t.Helper()
	c.eventually("a serving leader for "+name, 60*time.Second, func() (bool, string) {
		sh := c.shard(name, 0)
		if sh == nil || sh.Status.Assignment == nil || sh.Status.Report == nil {
			return false, shardState(sh)
		}
		return sh.Status.Report.Epoch == sh.Status.Assignment.Epoch, shardState(sh)
	})
}

func (c *cluster) registered(t testing.TB, name string) felixv1.FelixBrokerStatus {
	t.Helper()
	var b felixv1.FelixBroker
	if err := c.c.Get(context.Background(), client.ObjectKey{Namespace: c.namespace, Name: name}, &b); err != nil {
		t.Fatal(err)
	}
	return b.Status
}

// shardState renders what a timeout message needs to explain a shard.
func shardState(sh *felixv1.FelixShard) string {
	if sh == nil {
		return "no shard"
	}
	s := fmt.Sprintf("caughtUp=%s", sh.Status.CaughtUp)
	if a := sh.Status.Assignment; a != nil {
		s += fmt.Sprintf(" assignment=%s@%d/inc%d counted=%v", a.Leader, a.Epoch, a.LeaderIncarnation, a.Counted)
	}
	if r := sh.Status.Report; r != nil {
		s += fmt.Sprintf(" report{leader=%s inc=%d epoch=%d pos=%d taken=%s followers=%+v}", r.Leader, r.LeaderIncarnation, r.Epoch, r.Position, r.TakenAt.Format(time.RFC3339), r.Followers)
	}
	for _, c := range sh.Status.Conditions {
		s += fmt.Sprintf(" %s=%s(%s: %s)", c.Type, c.Status, c.Reason, c.Message)
	}
	return s
}

// brokersCPU is the user and system CPU time the running brokers have
// used so far (Linux /proc; clock ticks of 10 ms).
func (c *cluster) brokersCPU(t testing.TB) time.Duration {
	t.Helper()
	c.mu.Lock()
	defer c.mu.Unlock()
	var total time.Duration
	for name, b := range c.brokers {
		raw, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", b.cmd.Process.Pid))
		if err != nil {
			t.Fatalf("cpu time of broker %s: %v", name, err)
		}
		// Fields after the command name (which may hold spaces, so cut at
		// its closing parenthesis): utime and stime are the 12th and 13th.
		f := strings.Fields(string(raw[bytes.LastIndexByte(raw, ')')+1:]))
		if len(f) < 13 {
			t.Fatalf("cpu time of broker %s: short /proc stat %q", name, raw)
		}
		for _, s := range f[11:13] {
			ticks, err := strconv.ParseInt(s, 10, 64)
			if err != nil {
				t.Fatalf("cpu time of broker %s: %v", name, err)
			}
			total += time.Duration(ticks) * 10 * time.Millisecond
		}
	}
	return total
}

// profileBrokers starts taking a CPU profile of every broker (started
// with --pprof) over half of run, and an execution trace of its first two
// seconds, after the client's warm-up, into dir/BROKER-tag.cpu.pprof and
// dir/BROKER-tag.trace; the returned function waits for them and then
// saves each broker's metrics into dir/BROKER-tag.metrics.txt.
func (c *cluster) profileBrokers(t testing.TB, dir, tag, warmup, run string) func() {
	t.Helper()
	d, err := time.ParseDuration(run)
	if err != nil {
		t.Fatalf("profile duration %q: %v", run, err)
	}
	w, err := time.ParseDuration(warmup)
	if err != nil {
		t.Fatalf("warm-up %q: %v", warmup, err)
	}
	secs := max(1, int(d.Seconds()/2))
	// A secure broker serves its profiles on the metrics port, behind the
	// scraper check; an insecure one on --http. No timeout: a profile
	// takes secs.
	pc := &http.Client{Transport: c.metricsClient(t).Transport}
	c.mu.Lock()
	defer c.mu.Unlock()
	var wg sync.WaitGroup
	for name, b := range c.brokers {
		for _, p := range []struct{ path, file string }{
			{fmt.Sprintf("profile?seconds=%d", secs), "cpu.pprof"},
			{"trace?seconds=2", "trace"},
		} {
			wg.Add(1)
			go func() {
				defer wg.Done()
				time.Sleep(w) // past the client's warm-up
				url := fmt.Sprintf("http://%s/debug/pprof/%s", b.http, p.path)
				if !c.insecure {
					url = fmt.Sprintf("https://%s/debug/pprof/%s", b.metrics, p.path)
				}
				if err := fetchWith(pc, url, filepath.Join(dir, name+"-"+tag+"."+p.file)); err != nil {
					t.Errorf("%s of %s: %v", p.file, name, err)
				}
			}()
		}
	}
	return func() {
		wg.Wait()
		hc := c.metricsClient(t)
		c.mu.Lock()
		defer c.mu.Unlock()
		for name, b := range c.brokers {
			if err := fetchWith(hc, c.metricsURL(b), filepath.Join(dir, name+"-"+tag+".metrics.txt")); err != nil {
				t.Errorf("metrics of %s: %v", name, err)
			}
		}
	}
}

// fetchWith saves the body of a GET of url with hc into path.
func fetchWith(hc *http.Client, url, path string) error {
	resp, err := hc.Get(url)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return fmt.Errorf("GET %s: %s", url, resp.Status)
	}
	out, err := os.Create(path)
	if err != nil {
		return err
	}
	if _, err := io.Copy(out, resp.Body); err != nil {
		_ = out.Close()
		return err
	}
	return out.Close()
}
