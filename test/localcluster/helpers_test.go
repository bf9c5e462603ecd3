package localcluster_test

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	coordinationv1 "k8s.io/api/coordination/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	felixv1 "felix.dev/felix/api/v1alpha1"
	fclient "felix.dev/felix/broker/client"
	"felix.dev/felix/broker/controlplane"
	"felix.dev/felix/broker/record"
	"felix.dev/felix/broker/wire"
	"felix.dev/felix/controllers"
	"felix.dev/felix/internal/history"
	"felix.dev/felix/internal/localcluster"
	"felix.dev/felix/internal/testenv"
)

// eventually polls cond until it holds or the timeout passes, then fails
// the test with cond's last message.
func eventually(t *testing.T, what string, timeout time.Duration, cond func() (bool, string)) {
	t.Helper()
	deadline := time.Now().Add(timeout)
	last := ""
	for time.Now().Before(deadline) {
		ok, msg := cond()
		if ok {
			return
		}
		last = msg
		time.Sleep(200 * time.Millisecond)
	}
	t.Fatalf("timed out after %s waiting for %s; last: %s", timeout, what, last)
}

// startLocalWith builds the felix binary and starts a local cluster with
// options o (StateDir and Felix are filled in) that stops when the test
// ends.
func startLocalWith(t *testing.T, ctx context.Context, o localcluster.Options) *localcluster.Cluster {
	t.Helper()
	start := time.Now()
	bin := filepath.Join(t.TempDir(), "felix")
	build := exec.Command("go", "build", "-o", bin, "./cmd/felix")
	build.Dir = testenv.RepoRoot()
	if out, err := build.CombinedOutput(); err != nil {
		t.Fatalf("go build: %v\n%s", err, out)
	}
	o.StateDir, o.Felix = t.TempDir(), bin
	lc, err := localcluster.Start(ctx, o)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(lc.Stop)
	t.Logf("local cluster started in %s (build included)", time.Since(start).Round(time.Millisecond))
	return lc
}

// tenant is one namespace of a shared local cluster holding one
// FelixCluster; scenarios in different tenants do not share brokers.
type tenant struct {
	t       *testing.T
	ctx     context.Context
	lc      *localcluster.Cluster
	c       client.Client
	ns      string
	cluster string
	brokers int
	// user is the FelixUser every client of the tenant connects as.
	user *tenantUser
}

// clusterSpec is the FelixCluster every scenario uses: short timings so
// failovers take seconds, and leader balancing off, because scenarios
// check where leadership is after a failover and a planned promotion
// after the settle time would move it under them (seen in the partition
// scenario on a loaded machine); the balance scenario turns it on.
func clusterSpec(brokers int32, fsync felixv1.FsyncMode) felixv1.FelixClusterSpec {
	return felixv1.FelixClusterSpec{Brokers: brokers, Image: "felix:dev",
		LeaderBalance:     felixv1.LeaderBalanceSpec{Mode: felixv1.LeaderBalanceOff},
		Durability:        felixv1.DurabilitySpec{Fsync: fsync},
		HeartbeatInterval: &metav1.Duration{Duration: 500 * time.Millisecond},
		NodeExpiry:        &metav1.Duration{Duration: 2 * time.Second}}
}

// newTenant creates namespace ns and a FelixCluster "demo" of n brokers in
// it.
func newTenant(t *testing.T, ctx context.Context, lc *localcluster.Cluster, ns string, n int32, fsync felixv1.FsyncMode) *tenant {
	t.Helper()
	return newTenantCluster(t, ctx, lc, ns, "demo", n, fsync)
}

// newTenantCluster creates namespace ns and a FelixCluster named cluster
// of n brokers in it.
func newTenantCluster(t *testing.T, ctx context.Context, lc *localcluster.Cluster, ns, cluster string, n int32, fsync felixv1.FsyncMode) *tenant {
	t.Helper()
	tn := &tenant{t: t, ctx: ctx, lc: lc, c: lc.Env.Client, ns: ns, cluster: cluster, brokers: int(n)}
	if err := tn.c.Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns}}); err != nil {
		t.Fatal(err)
	}
	if err := tn.c.Create(ctx, &felixv1.FelixCluster{ObjectMeta: metav1.ObjectMeta{Name: tn.cluster, Namespace: ns},
		Spec: clusterSpec(n, fsync)}); err != nil {
		t.Fatal(err)
	}
	tn.user = newTenantUser(t, ctx, tn.c, ns, cluster)
	return tn
}

// on returns a copy of the tenant whose failures go to t (a subtest).
func (tn *tenant) on(t *testing.T) *tenant {
	c := *tn
	c.t = t
	return &c
}

func (tn *tenant) get(name string, obj client.Object) error {
	return tn.c.Get(tn.ctx, client.ObjectKey{Namespace: tn.ns, Name: name}, obj)
}

// shard is FelixShard <stream>-0, nil if it cannot be read.
func (tn *tenant) shard(stream string) *felixv1.FelixShard { return tn.shardNamed(stream + "-0") }

// shardNamed is FelixShard name, nil if it does not exist (yet).
func (tn *tenant) shardNamed(name string) *felixv1.FelixShard {
	var s felixv1.FelixShard
	if err := tn.get(name, &s); err != nil {
		return nil
	}
	return &s
}

// broker is the registered status of FelixBroker name.
func (tn *tenant) broker(name string) felixv1.FelixBrokerStatus {
	var b felixv1.FelixBroker
	_ = tn.get(name, &b)
	return b.Status
}

// restarts is the restart count of a broker pod's container.
func (tn *tenant) restarts(name string) int32 {
	var p corev1.Pod
	if err := tn.get(name, &p); err != nil || len(p.Status.ContainerStatuses) == 0 {
		return -1
	}
	return p.Status.ContainerStatuses[0].RestartCount
}

// stream creates a one-shard Quorum FelixStream over every broker and waits
// until its shard is led with every replica caught up.
func (tn *tenant) stream(name string) {
	tn.t.Helper()
	if err := tn.c.Create(tn.ctx, &felixv1.FelixStream{ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: tn.ns},
		Spec: felixv1.FelixStreamSpec{Cluster: tn.cluster, Shards: 1, Replicas: int32(tn.brokers), Ack: felixv1.AckQuorum}}); err != nil {
		tn.t.Fatal(err)
	}
	tn.caughtUp(name, 3*time.Minute)
}

// all is "n/n" for the tenant's replica count.
func (tn *tenant) all() string { return fmt.Sprintf("%d/%d", tn.brokers, tn.brokers) }

// caughtUp waits until the stream's shard is led with every replica
// caught up, and returns the shard.
func (tn *tenant) caughtUp(stream string, timeout time.Duration) *felixv1.FelixShard {
	tn.t.Helper()
	return tn.shardCaughtUp(stream+"-0", timeout)
}

// shardCaughtUp waits until FelixShard name is led with every replica
// caught up.
func (tn *tenant) shardCaughtUp(name string, timeout time.Duration) *felixv1.FelixShard {
	tn.t.Helper()
	var s *felixv1.FelixShard
	eventually(tn.t, name+" led with every replica caught up", timeout, func() (bool, string) {
		s = tn.shardNamed(name)
		if s == nil || s.Status.Assignment == nil {
			return false, "no assignment"
		}
		return s.Status.CaughtUp == tn.all(), shardState(s)
	})
	return s
}

// caughtUpSince waits until the stream's shard shows every replica caught
// up in a report that holds since since: taken after it, or vouched for
// after it by its leader. A leader rewrites a report only when what
// placement reads changes (a leader that was frozen and thawed may change
// nothing); its heartbeat Lease says whether its reports are current, and
// placement trusts an unchanged report up to that renewal, as this does.
func (tn *tenant) caughtUpSince(stream string, since time.Time, timeout time.Duration) {
	tn.t.Helper()
	eventually(tn.t, stream+": a fresh report with every replica caught up", timeout, func() (bool, string) {
		s := tn.shard(stream)
		if s == nil || s.Status.Assignment == nil || s.Status.Report == nil {
			return false, shardState(s)
		}
		if why := tn.staleReport(s); why != "" {
			return false, why + "; " + shardState(s)
		}
		if takenBefore(s.Status.Report.TakenAt.Time, since) && !tn.vouchedSince(s, since) {
			return false, "report taken before the fault healed, not vouched for since; " + shardState(s)
		}
		return s.Status.CaughtUp == tn.all(), shardState(s)
	})
}

// staleReport says why s's report cannot describe the replicas as they
// are now, or "" if it can: it must be the current assignment's leader's
// (same epoch and incarnation), and each replica it names must still have
// the storage id it names. Report times are whole seconds, so the time
// alone cannot tell a report written just before a fault from one written
// just after it (a wiped replica restarts and registers within a second).
func (tn *tenant) staleReport(s *felixv1.FelixShard) string {
	rep, a := s.Status.Report, s.Status.Assignment
	if rep.Leader != a.Leader || rep.Epoch != a.Epoch || rep.LeaderIncarnation != a.LeaderIncarnation {
		return "report not from the assigned leader's incarnation and epoch"
	}
	if b := tn.broker(rep.Leader); b.Incarnation != rep.LeaderIncarnation || b.StorageID != rep.LeaderStorageID {
		return "report from an earlier registration of its leader"
	}
	for _, f := range rep.Followers {
		if tn.broker(f.Name).StorageID != f.StorageID {
			return "report names an earlier storage id of " + f.Name
		}
	}
	return ""
}

// vouchedSince reports whether the leader of s's report, still its
// assigned leader at the report's epoch and incarnation, renewed its
// heartbeat after since saying its reports are current.
func (tn *tenant) vouchedSince(s *felixv1.FelixShard, since time.Time) bool {
	rep, a := s.Status.Report, s.Status.Assignment
	if rep.Leader != a.Leader || rep.Epoch != a.Epoch {
		return false
	}
	var l coordinationv1.Lease
	if err := tn.get(rep.Leader, &l); err != nil || l.Spec.RenewTime == nil {
		return false
	}
	return l.Annotations[controlplane.LeaseAnnotationReports] == controlplane.ReportsCurrent &&
		l.Annotations[controlplane.LeaseAnnotationIncarnation] == strconv.FormatInt(rep.LeaderIncarnation, 10) &&
		l.Spec.RenewTime.After(since)
}

// takenBefore reports whether a report taken at takenAt predates since.
// Report times are stored in whole seconds, so a report from since's own
// second counts as taken after it.
func takenBefore(takenAt, since time.Time) bool {
	return takenAt.Before(since.Truncate(time.Second))
}

// follower is a replica of the stream's shard that does not lead it.
func (tn *tenant) follower(stream string) (leader, follower string) {
	s := tn.shard(stream)
	leader = s.Status.Assignment.Leader
	for _, r := range s.Spec.Replicas {
		if r != leader {
			return leader, r
		}
	}
	tn.t.Fatalf("shard %s has no follower", s.Name)
	return "", ""
}

// payload is a record payload of about size bytes that starts with key.
func payload(key string, size int) string {
	if len(key) >= size {
		return key
	}
	return key + "." + strings.Repeat("x", size-len(key)-1)
}

// appendAcked appends n records (batches of batch) of about size bytes,
// named prefix-i, to whichever broker leads the stream now, and returns the
// acknowledged ones by offset. A batch whose outcome is unknown is not
// counted as acknowledged and is not retried.
func (tn *tenant) appendAcked(stream string, n, batch, size int, prefix string) map[uint64]string {
	tn.t.Helper()
	acked := map[uint64]string{}
	deadline := time.Now().Add(2 * time.Minute)
	for i := 0; i < n; {
		if time.Now().After(deadline) {
			tn.t.Fatalf("appending to %s: only %d of %d records acknowledged; %s", stream, i, n, shardState(tn.shard(stream)))
		}
		s := tn.shard(stream)
		if s == nil || s.Status.Assignment == nil {
			time.Sleep(100 * time.Millisecond)
			continue
		}
		ctx, cancel := context.WithTimeout(tn.ctx, 10*time.Second)
		cl, err := tn.dial(ctx, tn.broker(s.Status.Assignment.Leader).Address)
		if err != nil {
			cancel()
			time.Sleep(100 * time.Millisecond)
			continue
		}
		for i < n {
			k := min(batch, n-i)
			recs := make([]record.Record, k)
			for j := range recs {
				recs[j].Payload = []byte(payload(fmt.Sprintf("%s-%d", prefix, i+j), size))
			}
			ok, err := cl.Append(ctx, record.ShardID{Stream: stream}, recs, nil)
			if err != nil {
				break // not leader yet, recovering, or gone: look again
			}
			for j, r := range recs {
				acked[ok.First+uint64(j)] = string(r.Payload)
			}
			i += k
		}
		_ = cl.Close()
		cancel()
		if i < n {
			time.Sleep(100 * time.Millisecond)
		}
	}
	return acked
}

// readAll reads the whole data log of the stream's shard 0 from the broker
// at addr, retrying refusals until a deadline (a newly promoted leader
// serves once it has fenced the shard).
func (tn *tenant) readAll(addr, stream string) map[uint64]record.Record {
	tn.t.Helper()
	return tn.readShard(addr, record.ShardID{Stream: stream})
}

// readShard reads every committed record of shard from the broker at
// addr, retrying the whole read for up to a minute.
func (tn *tenant) readShard(addr string, shard record.ShardID) map[uint64]record.Record {
	tn.t.Helper()
	var out map[uint64]record.Record
	var err error
	eventually(tn.t, "a full read of "+shard.String()+" from "+addr, time.Minute, func() (bool, string) {
		out, err = tn.tryReadShard(addr, shard)
		if err != nil {
			return false, err.Error()
		}
		return true, ""
	})
	return out
}

func (tn *tenant) tryReadShard(addr string, shard record.ShardID) (map[uint64]record.Record, error) {
	ctx, cancel := context.WithTimeout(tn.ctx, 30*time.Second)
	defer cancel()
	cl, err := tn.dial(ctx, addr)
	if err != nil {
		return nil, err
	}
	defer cl.Close()
	out := map[uint64]record.Record{}
	req := wire.ReadRequest{Shard: shard, From: wire.FromEarliest, MaxRecords: 1000}
	for {
		r, err := cl.Read(ctx, req)
		if err != nil {
			return nil, err
		}
		for _, rec := range r.Records {
			out[rec.Offset] = rec
		}
		if len(r.Records) == 0 {
			return out, nil
		}
		req.From, req.Offset = wire.FromOffset, r.Next
	}
}

// checkAcked fails the test for every acknowledged record missing from got
// or holding another payload, and returns how many were checked.
func checkAcked(t *testing.T, acked map[uint64]string, got map[uint64]record.Record, where string) int {
	t.Helper()
	bad := 0
	for off, want := range acked {
		if g, ok := got[off]; !ok || string(g.Payload) != want {
			bad++
			if bad <= 10 {
				t.Errorf("acknowledged record at %d missing or different on %s (want %.20q, got %.20q)", off, where, want, g.Payload)
			}
		}
	}
	if bad > 10 {
		t.Errorf("... %d acknowledged records missing or different in all", bad)
	}
	return len(acked)
}

// leaderAddr is the registered address of the stream's current leader.
func (tn *tenant) leaderAddr(stream string) string {
	return tn.broker(tn.shard(stream).Status.Assignment.Leader).Address
}

// httpURL is the broker pod's plain HTTP endpoint (/live, /ready).
func (tn *tenant) httpURL(pod, path string) string {
	ip, ok := tn.lc.Runner.PodIP(tn.ns, pod)
	if !ok {
		return ""
	}
	return fmt.Sprintf("http://%s:%d%s", ip, controllers.BrokerHTTPPort, path)
}

func httpStatus(url string) int {
	if url == "" {
		return 0
	}
	resp, err := (&http.Client{Timeout: 2 * time.Second}).Get(url)
	if err != nil {
		return 0
	}
	_ = resp.Body.Close()
	return resp.StatusCode
}

// metrics scrapes a broker's /metrics (HTTPS on the metrics port,
// authenticated with the broker's own certificate) and returns the
// unlabelled samples.
func (tn *tenant) metrics(pod string) (map[string]float64, error) {
	resp, err := tn.scrape(pod)
	if err != nil {
		return nil, err
	}
	defer resp.Body.Close()
	out := map[string]float64{}
	sc := bufio.NewScanner(resp.Body)
	sc.Buffer(make([]byte, 1<<20), 1<<20)
	for sc.Scan() {
		line := sc.Text()
		if line == "" || line[0] == '#' {
			continue
		}
		f := strings.Fields(line)
		if len(f) != 2 {
			continue
		}
		v, err := strconv.ParseFloat(f[1], 64)
		if err == nil {
			out[f[0]] = v
		}
	}
	return out, sc.Err()
}

// procWritten is the bytes a pod's process has written (to files and
// sockets: wchar of /proc/<pid>/io) in process mode.
func (tn *tenant) procWritten(pod string) (int64, error) {
	var p corev1.Pod
	if err := tn.get(pod, &p); err != nil {
		return 0, err
	}
	if len(p.Status.ContainerStatuses) == 0 || p.Status.ContainerStatuses[0].State.Running == nil {
		return 0, errors.New("not running")
	}
	pid, ok := strings.CutPrefix(p.Status.ContainerStatuses[0].ContainerID, "podrunner://")
	if !ok {
		return 0, fmt.Errorf("container id %q", p.Status.ContainerStatuses[0].ContainerID)
	}
	b, err := os.ReadFile("/proc/" + pid + "/io")
	if err != nil {
		return 0, err
	}
	for _, line := range strings.Split(string(b), "\n") {
		if v, ok := strings.CutPrefix(line, "wchar: "); ok {
			return strconv.ParseInt(v, 10, 64)
		}
	}
	return 0, errors.New("no wchar in /proc/" + pid + "/io")
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

// timings collects how long each scenario took, printed at the end.
type timings struct {
	names []string
	took  map[string]time.Duration
}

// run runs f as subtest name and records how long it took.
func (ts *timings) run(t *testing.T, name string, f func(t *testing.T)) bool {
	start := time.Now()
	ok := t.Run(name, f)
	ts.add(name, time.Since(start))
	return ok
}

// add records a step's duration.
func (ts *timings) add(name string, d time.Duration) {
	if ts.took == nil {
		ts.took = map[string]time.Duration{}
	}
	ts.names = append(ts.names, name)
	ts.took[name] = d
}

// log prints every recorded step in order.
func (ts *timings) log(t *testing.T) {
	for _, n := range ts.names {
		t.Logf("timing: %-50s %s", n, ts.took[n].Round(100*time.Millisecond))
	}
}

// writer is a sequential Quorum append workload on one stream: one
// append at a time to whichever broker the shard's assignment names,
// never retried blindly (an append whose outcome is unknown is not
// counted).
type writer struct {
	mu      sync.Mutex
	acked   map[uint64]string
	order   []uint64
	unknown int
	stop    context.CancelFunc
	done    chan struct{}
}

// startWriter starts the workload on stream; its payloads are
// prefix-<n>, and it waits pace after each acknowledged append.
func startWriter(tn *tenant, stream, prefix string, pace time.Duration) *writer {
	return startWriterRecorded(tn, stream, prefix, pace, nil)
}

// startWriterRecorded is startWriter recording every append in rec (if
// not nil) as client 0.
func startWriterRecorded(tn *tenant, stream, prefix string, pace time.Duration, rec *history.Recorder) *writer {
	ctx, stop := context.WithCancel(tn.ctx)
	w := &writer{acked: map[uint64]string{}, stop: stop, done: make(chan struct{})}
	go func() {
		defer close(w.done)
		n := 0
		for ctx.Err() == nil {
			s := tn.shard(stream)
			if s == nil || s.Status.Assignment == nil {
				time.Sleep(50 * time.Millisecond)
				continue
			}
			dctx, dcancel := context.WithTimeout(ctx, 2*time.Second)
			cl, err := tn.dial(dctx, tn.broker(s.Status.Assignment.Leader).Address)
			dcancel()
			if err != nil {
				time.Sleep(50 * time.Millisecond)
				continue
			}
			for ctx.Err() == nil {
				p := fmt.Sprintf("%s-%d", prefix, n)
				n++
				actx, acancel := context.WithTimeout(ctx, 2*time.Second)
				call := rec.Invoke(0, history.Input{Shard: stream, Kind: history.Append, IDs: []string{p}})
				ok, err := cl.Append(actx, record.ShardID{Stream: stream}, []record.Record{{Payload: []byte(p)}}, nil)
				call.Complete(appendOutcome(ok, err))
				acancel()
				if err != nil {
					w.mu.Lock()
					w.unknown++
					w.mu.Unlock()
					break
				}
				w.mu.Lock()
				w.acked[ok.First] = p
				w.order = append(w.order, ok.First)
				w.mu.Unlock()
				time.Sleep(pace) // a steady, modest rate
			}
			_ = cl.Close()
			time.Sleep(50 * time.Millisecond)
		}
	}()
	return w
}

// count is the number of acknowledged appends so far.
func (w *writer) count() int {
	w.mu.Lock()
	defer w.mu.Unlock()
	return len(w.order)
}

// finish stops the workload and returns what it acknowledged; it may be
// called again (a deferred call after the test's own).
func (w *writer) finish() (acked map[uint64]string, order []uint64, unknown int) {
	w.stop()
	<-w.done
	return w.acked, w.order, w.unknown
}

// checkOnceInOrder fails the test if a payload appears twice in got or if
// the acknowledged offsets in order (acknowledgement order of one writer
// workload) ever go down.
func checkOnceInOrder(t *testing.T, got map[uint64]record.Record, order []uint64) {
	t.Helper()
	seen := map[string]uint64{}
	for off, r := range got {
		p := string(r.Payload)
		if prev, dup := seen[p]; dup {
			t.Errorf("payload %q read twice, at %d and %d", p, prev, off)
		}
		seen[p] = off
	}
	for i := 1; i < len(order); i++ {
		if order[i] <= order[i-1] {
			t.Errorf("acknowledged offsets out of order: %d after %d", order[i], order[i-1])
		}
	}
}

// staleAppends are single-record appends sent over one connection to a
// leader that is about to be cut off (frozen or partitioned); they are
// answered whenever it can answer, or time out.
type staleAppends struct {
	cl      *fclient.Client
	results chan staleResult
	n       int
}

type staleResult struct {
	payload string
	first   uint64
	err     error
	at      time.Time
}

// dialStale connects to broker leader before it is cut off; the caller
// cuts it off, calls send, and closes it when done.
func (tn *tenant) dialStale(leader string) *staleAppends {
	cl, err := tn.dial(tn.ctx, tn.broker(leader).Address)
	if err != nil {
		tn.t.Fatal(err)
	}
	return &staleAppends{cl: cl}
}

func (s *staleAppends) close() { _ = s.cl.Close() }

// send starts n appends of "stale-<i>" to stream, each given timeout.
func (s *staleAppends) send(ctx context.Context, stream string, n int, timeout time.Duration) {
	s.n, s.results = n, make(chan staleResult, n)
	for i := 0; i < n; i++ {
		go func(i int) {
			p := fmt.Sprintf("stale-%d", i)
			actx, cancel := context.WithTimeout(ctx, timeout)
			defer cancel()
			ok, err := s.cl.Append(actx, record.ShardID{Stream: stream}, []record.Record{{Payload: []byte(p)}}, nil)
			s.results <- staleResult{p, ok.First, err, time.Now()}
		}(i)
	}
}

// staleOutcome is what the appends sent to a cut-off leader got.
type staleOutcome struct {
	acked        map[uint64]string // payload by acknowledged offset
	refused      int               // refused or timed out
	firstRefusal error
	lastAnswer   time.Time
}

// wait collects every answer (each append ends by its timeout at worst).
func (s *staleAppends) wait() staleOutcome {
	o := staleOutcome{acked: map[uint64]string{}}
	for i := 0; i < s.n; i++ {
		r := <-s.results
		if r.at.After(o.lastAnswer) {
			o.lastAnswer = r.at
		}
		if r.err == nil {
			o.acked[r.first] = r.payload
			continue
		}
		o.refused++
		if o.firstRefusal == nil {
			o.firstRefusal = r.err
		}
	}
	return o
}
