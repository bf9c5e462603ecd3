package main

import (
	"bytes"
	"context"
	"errors"
	"flag"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	eventsv1 "k8s.io/api/events/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	clocktesting "k8s.io/utils/clock/testing"
	"sigs.k8s.io/controller-runtime/pkg/client"

	felixv1 "felix.dev/felix/api/v1alpha1"
	"felix.dev/felix/internal/testenv"
)

var update = flag.Bool("update", false, "rewrite the golden files")

// now is the fake clock's time: the fixture's times are set against it,
// so the ages printed are stable.
var now = time.Date(2026, 12, 2, 12, 0, 0, 0, time.UTC)

// plugin is one API server with the Felix CRDs, shared by the tests.
type plugin struct {
	env        *testenv.Env
	namespaces int
}

var (
	sharedOnce sync.Once
	shared     *plugin
)

func startPlugin(t *testing.T) *plugin {
	t.Helper()
	if testing.Short() {
		t.Skip("starts an API server")
	}
	sharedOnce.Do(func() {
		env, err := testenv.StartEnv()
		if err != nil {
			t.Fatalf("start API server: %v", err)
		}
		shared = &plugin{env: env}
	})
	if shared == nil {
		t.Fatal("API server did not start")
	}
	return shared
}

func TestMain(m *testing.M) {
	flag.Parse()
	code := m.Run()
	if shared != nil {
		_ = shared.env.Stop()
	}
	os.Exit(code)
}

// run runs kubectl-felix with args against the API server in namespace ns.
func (p *plugin) run(t *testing.T, ns string, args ...string) (string, error) {
	t.Helper()
	cmd := newRootCmd(clocktesting.NewFakePassiveClock(now))
	var out bytes.Buffer
	cmd.SetOut(&out)
	cmd.SetErr(&out)
	cmd.SetArgs(append([]string{"--kubeconfig", p.env.Kubeconfig, "-n", ns}, args...))
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	err := cmd.ExecuteContext(ctx)
	return out.String(), err
}

// namespace creates a namespace named after base, new at each call (so
// -count=N runs on one API server).
func (p *plugin) namespace(t *testing.T, base string) string {
	t.Helper()
	p.namespaces++
	name := fmt.Sprintf("%s-%d", base, p.namespaces)
	if err := p.env.Client.Create(context.Background(), &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: name}}); err != nil {
		t.Fatal(err)
	}
	return name
}

// create creates obj and, when status is set, writes its status.
func (p *plugin) create(t *testing.T, obj client.Object, status func()) {
	t.Helper()
	ctx := context.Background()
	if err := p.env.Client.Create(ctx, obj); err != nil {
		t.Fatalf("create %T %s: %v", obj, obj.GetName(), err)
	}
	if status != nil {
		status()
		if err := p.env.Client.Status().Update(ctx, obj); err != nil {
			t.Fatalf("status of %T %s: %v", obj, obj.GetName(), err)
		}
	}
}

func cond(t, status, reason, msg string) metav1.Condition {
	return metav1.Condition{Type: t, Status: metav1.ConditionStatus(status), Reason: reason, Message: msg,
		LastTransitionTime: metav1.NewTime(now.Add(-time.Hour))}
}

// fixture makes cluster demo as the operator would show it: three
// brokers (one Down), stream orders of two shards, one serving and one
// waiting, and two events.
func (p *plugin) fixture(t *testing.T, ns string) {
	t.Helper()
	c := &felixv1.FelixCluster{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "demo"},
		Spec: felixv1.FelixClusterSpec{Image: "felix:0.1.0", Brokers: 3}}
	p.create(t, c, func() {
		c.Status.ReadyBrokers, c.Status.Image = 2, "felix:0.1.0"
		c.Status.Conditions = []metav1.Condition{cond(felixv1.ConditionReady, "False", "BrokersNotReady", "2 of 3 brokers ready")}
	})
	ids := []string{"0a1b2c3d4e5f60718293a4b5c6d7e8f9", "1b2c3d4e5f60718293a4b5c6d7e8f90a", ""}
	for i, id := range ids {
		b := &felixv1.FelixBroker{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "demo-" + itoa(i)},
			Spec: felixv1.FelixBrokerSpec{Cluster: "demo", Ordinal: int32(i)}}
		p.create(t, b, func() {
			b.Status.StorageID, b.Status.Incarnation = id, int64(i+1)
			b.Status.State, b.Status.Address = felixv1.BrokerUp, "10.0.0."+itoa(i+1)+":7100"
			if id == "" {
				b.Status.State, b.Status.Address = felixv1.BrokerDown, ""
			}
		})
	}
	p.create(t, &felixv1.FelixStream{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "orders"},
		Spec: felixv1.FelixStreamSpec{Cluster: "demo", Shards: 2, Replicas: 3}}, nil)
	serving := &felixv1.FelixShard{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "orders-0"},
		Spec: felixv1.FelixShardSpec{Stream: "orders", Index: 0, Replicas: []string{"demo-0", "demo-1", "demo-2"}}}
	p.create(t, serving, func() {
		serving.Status.Assignment = &felixv1.Assignment{Leader: "demo-0", Epoch: 2, LeaderIncarnation: 1}
		serving.Status.Report = &felixv1.ShardReport{Leader: "demo-0", LeaderIncarnation: 1, Epoch: 2, Position: 40, Committed: 40,
			TakenAt: metav1.NewTime(now.Add(-150 * time.Second)), Followers: []felixv1.FollowerReport{
				{Name: "demo-1", StorageID: ids[1], Confirmed: 40, CaughtUp: true},
				{Name: "demo-2", StorageID: "2c3d4e5f60718293a4b5c6d7e8f90a1b", Confirmed: 31, CaughtUp: false}},
			Groups: []felixv1.GroupReport{{Name: "billing", Committed: 28, Lag: 12}, {Name: "audit", Committed: 40, Lag: 0}}, GroupsOmitted: 3}
		serving.Status.CaughtUp = "2/3"
		serving.Status.Conditions = []metav1.Condition{cond(felixv1.ConditionReady, "True", "LeaderReporting", "leader demo-0 serves at epoch 2"),
			cond(felixv1.ConditionWaiting, "False", "LeaderAssigned", "the shard has an eligible leader")}
	})
	waiting := &felixv1.FelixShard{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "orders-1"},
		Spec: felixv1.FelixShardSpec{Stream: "orders", Index: 1, Replicas: []string{"demo-1", "demo-2", "demo-0"}}}
	p.create(t, waiting, func() {
		waiting.Status.CaughtUp = "0/3"
		waiting.Status.Conditions = []metav1.Condition{cond(felixv1.ConditionReady, "False", "NoLeader", "no leader may serve the shard now"),
			cond(felixv1.ConditionWaiting, "True", "ReportExpired", "no eligible replica to lead (ReportExpired); the shard waits rather than guess [CP-3]: demo-1: ReportTooOld, demo-2: NotUp, demo-0: IDChanged")}
	})
	for i, ev := range []struct{ typ, reason, kind, name, note string }{
		{corev1.EventTypeNormal, "Assigned", "FelixShard", "orders-0", "demo-0 leads at epoch 1 (new shard)"},
		{corev1.EventTypeWarning, "Waiting", "FelixShard", "orders-1", "no eligible replica to lead (ReportExpired)"},
	} {
		p.create(t, &eventsv1.Event{
			ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "ev-" + itoa(i)},
			EventTime:  metav1.NewMicroTime(now.Add(time.Duration(i-3) * time.Minute)),
			Type:       ev.typ, Reason: ev.reason, Action: "Place", Note: ev.note,
			ReportingController: "felix.dev/operator", ReportingInstance: "felix-operator-0",
			Regarding: corev1.ObjectReference{Kind: ev.kind, Namespace: ns, Name: ev.name, APIVersion: felixv1.GroupVersion.String()},
		}, nil)
	}
}

func itoa(i int) string { return string(rune('0' + i)) }

// golden compares got with testdata/name, rewriting it under -update.
func golden(t *testing.T, name, got string) {
	t.Helper()
	path := filepath.Join("testdata", name)
	if *update {
		if err := os.WriteFile(path, []byte(got), 0o644); err != nil {
			t.Fatal(err)
		}
		return
	}
	want, err := os.ReadFile(path)
	if err != nil {
		t.Fatalf("%v (run with -update to write it)", err)
	}
	if got != string(want) {
		t.Fatalf("%s differs (-update rewrites it):\n--- got\n%s\n--- want\n%s", name, got, want)
	}
}

// TestStatusAndShards: status shows the cluster, its brokers, its shards,
// why a shard waits and the recent events; shards lists the shards.
func TestStatusAndShards(t *testing.T) {
	p := startPlugin(t)
	ns := p.namespace(t, "status")
	p.fixture(t, ns)
	out, err := p.run(t, ns, "status", "demo")
	if err != nil {
		t.Fatalf("status: %v\n%s", err, out)
	}
	golden(t, "status.golden", strings.ReplaceAll(out, ns, "status"))
	out, err = p.run(t, ns, "shards", "--stream", "orders")
	if err != nil {
		t.Fatalf("shards: %v\n%s", err, out)
	}
	golden(t, "shards.golden", out)

	// Without a name: every cluster of the namespace; a missing one is an
	// error naming it.
	if out, err := p.run(t, ns, "status"); err != nil || !strings.Contains(out, "Cluster:   demo") {
		t.Fatalf("status of the namespace: %v\n%s", err, out)
	}
	if out, err := p.run(t, ns, "status", "nope"); err == nil || !strings.Contains(err.Error(), "FelixCluster "+ns+"/nope") {
		t.Fatalf("status of a missing cluster: %v\n%s", err, out)
	}
}

// TestSwitchover: the command refuses a broker that is no replica, sets
// the annotation the operator acts on, waits for the new leader (the
// operator's part is played here by a status update), says why when the
// wait runs out, and --clear removes the annotation.
func TestSwitchover(t *testing.T) {
	p := startPlugin(t)
	ns := p.namespace(t, "switchover")
	p.fixture(t, ns)
	ctx := context.Background()

	out, err := p.run(t, ns, "switchover", "orders-0", "--to", "demo-7")
	var ee *exitError
	if !errors.As(err, &ee) || ee.code != exitUsage || !strings.Contains(err.Error(), "not a replica") {
		t.Fatalf("switchover to a non-replica: %v\n%s", err, out)
	}

	// demo-2 is not caught up in the leader's report: the wait runs out
	// and says so.
	out, err = p.run(t, ns, "switchover", "orders-0", "--to", "demo-2", "--wait", "1s")
	if !errors.As(err, &ee) || ee.code != exitTimeout || !strings.Contains(err.Error(), "does not count demo-2 caught up (confirmed 31 of 40)") {
		t.Fatalf("switchover to a replica behind: %v\n%s", err, out)
	}
	var sh felixv1.FelixShard
	if err := p.env.Client.Get(ctx, client.ObjectKey{Namespace: ns, Name: "orders-0"}, &sh); err != nil {
		t.Fatal(err)
	}
	if got := sh.Annotations[felixv1.AnnotationPreferredLeader]; got != "demo-2" {
		t.Fatalf("annotation %q, want demo-2", got)
	}

	// The operator's promotion, played by hand once the annotation names
	// demo-1.
	go func() {
		for range 200 {
			time.Sleep(50 * time.Millisecond)
			var sh felixv1.FelixShard
			if err := p.env.Client.Get(ctx, client.ObjectKey{Namespace: ns, Name: "orders-0"}, &sh); err != nil ||
				sh.Annotations[felixv1.AnnotationPreferredLeader] != "demo-1" {
				continue
			}
			sh.Status.Assignment = &felixv1.Assignment{Leader: "demo-1", Epoch: 3, LeaderIncarnation: 2}
			if p.env.Client.Status().Update(ctx, &sh) == nil {
				return
			}
		}
	}()
	out, err = p.run(t, ns, "switchover", "orders-0", "--to", "demo-1", "--wait", "20s")
	if err != nil || !strings.Contains(out, "orders-0: demo-1 leads at epoch 3") {
		t.Fatalf("switchover to demo-1: %v\n%s", err, out)
	}

	if out, err := p.run(t, ns, "switchover", "orders-0", "--clear"); err != nil {
		t.Fatalf("--clear: %v\n%s", err, out)
	}
	if err := p.env.Client.Get(ctx, client.ObjectKey{Namespace: ns, Name: "orders-0"}, &sh); err != nil {
		t.Fatal(err)
	}
	if _, ok := sh.Annotations[felixv1.AnnotationPreferredLeader]; ok {
		t.Fatalf("annotation left after --clear: %v", sh.Annotations)
	}
}

// TestBackupAndRestore: backup creates a FelixBackup named after the
// cluster and the clock and waits for its phase; restore copies the
// source cluster's spec into a new cluster that names the backup, and
// lists the streams to create.
func TestBackupAndRestore(t *testing.T) {
	p := startPlugin(t)
	ns := p.namespace(t, "backup")
	p.fixture(t, ns)
	ctx := context.Background()

	name := "demo-20261202120000"
	go func() {
		key := client.ObjectKey{Namespace: ns, Name: name}
		for range 100 {
			time.Sleep(100 * time.Millisecond)
			var b felixv1.FelixBackup
			if err := p.env.Client.Get(ctx, key, &b); err != nil {
				continue
			}
			b.Status.Phase = felixv1.BackupCompleted
			b.Status.Snapshots = []felixv1.BrokerSnapshot{{Broker: "demo-0", PVC: "data-demo-0", VolumeSnapshot: name + "-demo-0", ReadyToUse: true}}
			b.Status.Epochs = &felixv1.RecordedEpochs{RecordedAt: metav1.NewTime(now), Shards: []felixv1.ShardEpoch{
				{Stream: "orders", Index: 0, Epoch: 3}, {Stream: "orders", Index: 1, Epoch: 1}}}
			if p.env.Client.Status().Update(ctx, &b) == nil {
				return
			}
		}
	}()
	out, err := p.run(t, ns, "backup", "demo", "--wait", "30s")
	if err != nil || !strings.Contains(out, "felixbackup/"+name+" completed: 1 volume snapshots") {
		t.Fatalf("backup: %v\n%s", err, out)
	}

	out, err = p.run(t, ns, "restore", name, "--to", "demo-restored", "--dry-run")
	if err != nil || !strings.Contains(out, "backup: "+name) || !strings.Contains(out, "name: demo-restored") {
		t.Fatalf("restore --dry-run: %v\n%s", err, out)
	}
	out, err = p.run(t, ns, "restore", name, "--to", "demo-restored")
	if err != nil || !strings.Contains(out, "orders: 2 shards") {
		t.Fatalf("restore: %v\n%s", err, out)
	}
	var c felixv1.FelixCluster
	if err := p.env.Client.Get(ctx, client.ObjectKey{Namespace: ns, Name: "demo-restored"}, &c); err != nil {
		t.Fatal(err)
	}
	if c.Spec.Restore == nil || c.Spec.Restore.Backup != name || c.Spec.Brokers != 3 || c.Spec.Image != "felix:0.1.0" {
		t.Fatalf("restored cluster spec %+v", c.Spec)
	}
	if out, err := p.run(t, ns, "restore", "nope", "--to", "x"); err == nil {
		t.Fatalf("restore of a missing backup succeeded:\n%s", out)
	}
}
