// Package api_test checks the Felix CRDs against a real kube-apiserver: they
// install, the samples are accepted, invalid specs are refused with a message
// a person understands, and `kubectl get felixshards` prints its columns.
package api_test

import (
	"bytes"
	"context"
	"errors"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/util/yaml"
	"sigs.k8s.io/controller-runtime/pkg/client"

	felixv1 "felix.dev/felix/api/v1alpha1"
	"felix.dev/felix/internal/testenv"
)

var env *testenv.Env

func TestMain(m *testing.M) {
	var err error
	env, err = testenv.StartEnv()
	if err != nil {
		// The envtest suites are part of the test command: a missing API
		// server is a failure, not a skip.
		os.Stderr.WriteString("api tests: " + err.Error() + "\n")
		os.Exit(1)
	}
	code := m.Run()
	_ = env.Stop()
	os.Exit(code)
}

func ctx(t *testing.T) context.Context {
	c, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	t.Cleanup(cancel)
	return c
}

func TestCRDsInstall(t *testing.T) {
	lists := []client.ObjectList{
		&felixv1.FelixClusterList{}, &felixv1.FelixBrokerList{},
		&felixv1.FelixStreamList{}, &felixv1.FelixShardList{},
	}
	for _, l := range lists {
		if err := env.Client.List(ctx(t), l); err != nil {
			t.Errorf("list %T: %v", l, err)
		}
	}
}

// readObjects decodes every document of a YAML file.
func readObjects(t *testing.T, path string) []*unstructured.Unstructured {
	t.Helper()
	data, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	dec := yaml.NewYAMLOrJSONDecoder(bytes.NewReader(data), 4096)
	var out []*unstructured.Unstructured
	for {
		u := &unstructured.Unstructured{}
		if err := dec.Decode(&u.Object); err != nil {
			if errors.Is(err, io.EOF) {
				return out
			}
			t.Fatalf("%s: %v", path, err)
		}
		if len(u.Object) > 0 {
			out = append(out, u)
		}
	}
}

func TestSamplesAccepted(t *testing.T) {
	files, err := filepath.Glob(filepath.Join(testenv.RepoRoot(), "config", "samples", "*.yaml"))
	if err != nil || len(files) == 0 {
		t.Fatalf("no samples found: %v", err)
	}
	ns := "samples"
	createNamespace(t, ns)
	for _, f := range files {
		for _, u := range readObjects(t, f) {
			u.SetNamespace(ns)
			if err := env.Client.Create(ctx(t), u); err != nil {
				t.Errorf("%s: %s/%s refused: %v", filepath.Base(f), u.GetKind(), u.GetName(), err)
			}
		}
	}
}

func createNamespace(t *testing.T, name string) {
	t.Helper()
	u := &unstructured.Unstructured{}
	u.SetAPIVersion("v1")
	u.SetKind("Namespace")
	u.SetName(name)
	if err := env.Client.Create(ctx(t), u); err != nil {
		t.Fatalf("namespace %s: %v", name, err)
	}
}

func TestDefaultsApplied(t *testing.T) {
	createNamespace(t, "defaults")
	c := &felixv1.FelixCluster{
		ObjectMeta: metav1.ObjectMeta{Name: "d", Namespace: "defaults"},
		Spec:       felixv1.FelixClusterSpec{Image: "felix:dev"},
	}
	if err := env.Client.Create(ctx(t), c); err != nil {
		t.Fatal(err)
	}
	if c.Spec.Brokers != 3 || c.Spec.Durability.Fsync != felixv1.FsyncOnCommit ||
		c.Spec.HeartbeatInterval == nil || c.Spec.HeartbeatInterval.Duration != 2*time.Second || c.Spec.NodeExpiry == nil || c.Spec.NodeExpiry.Duration != 10*time.Second ||
		c.Spec.Storage.Size == nil || c.Spec.Storage.Size.String() != "1Gi" {
		t.Errorf("defaults not applied: %+v", c.Spec)
	}
	s := &felixv1.FelixStream{
		ObjectMeta: metav1.ObjectMeta{Name: "s", Namespace: "defaults"},
		Spec:       felixv1.FelixStreamSpec{Cluster: "d"},
	}
	if err := env.Client.Create(ctx(t), s); err != nil {
		t.Fatal(err)
	}
	if s.Spec.Shards != 1 || s.Spec.Replicas != 3 || s.Spec.Ack != felixv1.AckQuorum || s.Spec.Retention != nil {
		t.Errorf("stream defaults not applied: %+v", s.Spec)
	}
}

func TestInvalidSpecsRejected(t *testing.T) {
	createNamespace(t, "invalid")
	cases := []struct {
		name string
		yaml string
		want string
	}{
		{"replicas not 1, 3 or 5", `
apiVersion: felix.dev/v1alpha1
kind: FelixStream
metadata: {name: r4}
spec: {cluster: demo, replicas: 4}`, "replicas must be 1, 3 or 5"},
		{"zero shards", `
apiVersion: felix.dev/v1alpha1
kind: FelixStream
metadata: {name: s0}
spec: {cluster: demo, shards: 0}`, "spec.shards: Invalid value: 0: spec.shards in body should be greater than or equal to 1"},
		{"TR-7 retention on a fenced stream", `
apiVersion: felix.dev/v1alpha1
kind: FelixStream
metadata: {name: fenced-retention}
spec: {cluster: demo, fenced: true, retention: {maxAge: 24h}}`, "a fenced stream must keep retention off"},
		{"FD-4 ack Leader on a fenced stream", `
apiVersion: felix.dev/v1alpha1
kind: FelixStream
metadata: {name: fenced-leader}
spec: {cluster: demo, fenced: true, ack: Leader}`, "a fenced stream must acknowledge on Quorum or All"},
		{"unknown ack mode", `
apiVersion: felix.dev/v1alpha1
kind: FelixStream
metadata: {name: ack}
spec: {cluster: demo, ack: Majority}`, `supported values: "Leader", "Quorum", "All"`},
		{"missing cluster", `
apiVersion: felix.dev/v1alpha1
kind: FelixStream
metadata: {name: nocluster}
spec: {shards: 1}`, "spec.cluster: Required value"},
		{"unknown fsync mode", `
apiVersion: felix.dev/v1alpha1
kind: FelixCluster
metadata: {name: fsync}
spec: {image: felix:dev, durability: {fsync: Sometimes}}`, `supported values: "OnCommit", "Periodic", "None"`},
		{"fsyncInterval without Periodic", `
apiVersion: felix.dev/v1alpha1
kind: FelixCluster
metadata: {name: interval}
spec: {image: felix:dev, durability: {fsync: OnCommit, fsyncInterval: 1s}}`, "fsyncInterval applies only to fsync: Periodic"},
		{"node expiry shorter than two heartbeats", `
apiVersion: felix.dev/v1alpha1
kind: FelixCluster
metadata: {name: expiry}
spec: {image: felix:dev, heartbeatInterval: 5s, nodeExpiry: 6s}`, "nodeExpiry must be at least twice heartbeatInterval"},
		{"no brokers", `
apiVersion: felix.dev/v1alpha1
kind: FelixCluster
metadata: {name: nobrokers}
spec: {image: felix:dev, brokers: 0}`, "spec.brokers in body should be greater than or equal to 1"},
		{"shard with duplicate replicas", `
apiVersion: felix.dev/v1alpha1
kind: FelixShard
metadata: {name: dup}
spec: {stream: events, index: 0, replicas: [demo-0, demo-0, demo-1]}`, "replicas must name distinct brokers"},
		{"shard with six replicas", `
apiVersion: felix.dev/v1alpha1
kind: FelixShard
metadata: {name: six}
spec: {stream: events, index: 0, replicas: [a, b, c, d, e, f]}`, "must have at most 5 items"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			u := &unstructured.Unstructured{}
			if err := yaml.NewYAMLOrJSONDecoder(strings.NewReader(tc.yaml), 4096).Decode(&u.Object); err != nil {
				t.Fatal(err)
			}
			u.SetNamespace("invalid")
			err := env.Client.Create(ctx(t), u)
			if err == nil {
				t.Fatalf("accepted; want refusal containing %q", tc.want)
			}
			if !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("refused with %q; want it to contain %q", err, tc.want)
			}
		})
	}
}

// TestTR7_RetentionAllowedOnUnfencedStream: retention is refused only on a
// fenced stream; an ordinary stream may set it.
func TestTR7_RetentionAllowedOnUnfencedStream(t *testing.T) {
	createNamespace(t, "retention")
	for _, y := range []string{
		`{"apiVersion":"felix.dev/v1alpha1","kind":"FelixStream","metadata":{"name":"a"},"spec":{"cluster":"demo","retention":{"maxAge":"24h"}}}`,
		`{"apiVersion":"felix.dev/v1alpha1","kind":"FelixStream","metadata":{"name":"b"},"spec":{"cluster":"demo","fenced":false,"retention":{"maxBytes":"1Gi"}}}`,
		`{"apiVersion":"felix.dev/v1alpha1","kind":"FelixStream","metadata":{"name":"c"},"spec":{"cluster":"demo","fenced":true}}`,
	} {
		u := &unstructured.Unstructured{}
		if err := yaml.NewYAMLOrJSONDecoder(strings.NewReader(y), 4096).Decode(&u.Object); err != nil {
			t.Fatal(err)
		}
		u.SetNamespace("retention")
		if err := env.Client.Create(ctx(t), u); err != nil {
			t.Errorf("%s refused: %v", u.GetName(), err)
		}
	}
}

// TestFD4_FencedFixedAtCreation: `fenced` can change in no update, so it
// cannot be switched off together with turning retention on (the way
// around "retention stays off" while a holder runs), nor switched on
// later; a fenced stream refuses ack Leader on update too. The other
// fields of a fenced stream stay mutable.
func TestFD4_FencedFixedAtCreation(t *testing.T) {
	createNamespace(t, "fenced")
	size := resource.MustParse("1Gi")
	fenced := &felixv1.FelixStream{ObjectMeta: metav1.ObjectMeta{Name: "fenced", Namespace: "fenced"},
		Spec: felixv1.FelixStreamSpec{Cluster: "demo", Fenced: true}}
	plain := &felixv1.FelixStream{ObjectMeta: metav1.ObjectMeta{Name: "plain", Namespace: "fenced"},
		Spec: felixv1.FelixStreamSpec{Cluster: "demo", Ack: felixv1.AckLeader}}
	for _, s := range []*felixv1.FelixStream{fenced, plain} {
		if err := env.Client.Create(ctx(t), s); err != nil {
			t.Fatalf("create %s: %v", s.Name, err)
		}
	}
	for _, tc := range []struct {
		name   string
		s      *felixv1.FelixStream
		mutate func(*felixv1.FelixStreamSpec)
		want   string
	}{
		{"unfence and retention on in one update", fenced, func(s *felixv1.FelixStreamSpec) {
			s.Fenced, s.Retention = false, &felixv1.RetentionSpec{MaxBytes: &size}
		}, "fenced cannot change after creation"},
		{"unfence", fenced, func(s *felixv1.FelixStreamSpec) { s.Fenced = false }, "fenced cannot change after creation"},
		{"ack Leader", fenced, func(s *felixv1.FelixStreamSpec) { s.Ack = felixv1.AckLeader }, "a fenced stream must acknowledge on Quorum or All"},
		{"fence later", plain, func(s *felixv1.FelixStreamSpec) { s.Fenced, s.Ack = true, felixv1.AckQuorum }, "fenced cannot change after creation"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			cp := tc.s.DeepCopy()
			tc.mutate(&cp.Spec)
			err := env.Client.Update(ctx(t), cp)
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("update: %v; want %q", err, tc.want)
			}
		})
	}
	cp := fenced.DeepCopy()
	cp.Spec.Ack = felixv1.AckAll
	if err := env.Client.Update(ctx(t), cp); err != nil {
		t.Fatalf("ack All on a fenced stream should be accepted: %v", err)
	}
}

func TestImmutableFields(t *testing.T) {
	createNamespace(t, "immutable")
	s := &felixv1.FelixStream{
		ObjectMeta: metav1.ObjectMeta{Name: "s", Namespace: "immutable"},
		Spec:       felixv1.FelixStreamSpec{Cluster: "demo", Shards: 2, Replicas: 3},
	}
	if err := env.Client.Create(ctx(t), s); err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		name   string
		mutate func(*felixv1.FelixStream)
		want   string
	}{
		{"shards lowered", func(s *felixv1.FelixStream) { s.Spec.Shards = 1 }, "shards can be added, never removed: a removed shard's records would be lost"},
		{"replicas", func(s *felixv1.FelixStream) { s.Spec.Replicas = 5 }, "replicas cannot change after creation"},
		{"cluster", func(s *felixv1.FelixStream) { s.Spec.Cluster = "other" }, "cluster cannot change after creation"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			cp := s.DeepCopy()
			tc.mutate(cp)
			err := env.Client.Update(ctx(t), cp)
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("update: %v; want %q", err, tc.want)
			}
		})
	}
	// Mutable fields still change.
	cp := s.DeepCopy()
	cp.Spec.Ack = felixv1.AckAll
	if err := env.Client.Update(ctx(t), cp); err != nil {
		t.Fatalf("ack should be mutable: %v", err)
	}
	// Shards may be raised (and kept), within the maximum.
	for _, n := range []int32{4, 4} {
		cp.Spec.Shards = n
		if err := env.Client.Update(ctx(t), cp); err != nil {
			t.Fatalf("raising shards to %d should be accepted: %v", n, err)
		}
	}
	cp.Spec.Shards = 4097
	if err := env.Client.Update(ctx(t), cp); err == nil || !strings.Contains(err.Error(), "less than or equal to 4096") {
		t.Fatalf("shards 4097: %v; want the maximum 4096", err)
	}
	cp.Spec.Shards = 3
	if err := env.Client.Update(ctx(t), cp); err == nil || !strings.Contains(err.Error(), "shards can be added, never removed") {
		t.Fatalf("lowering shards 4 to 3: %v; want it refused", err)
	}
}

func TestFelixShardPrinterColumns(t *testing.T) {
	kubectl, err := exec.LookPath("kubectl")
	if err != nil {
		t.Fatalf("kubectl not found: %v", err)
	}
	createNamespace(t, "printer")
	sh := &felixv1.FelixShard{
		ObjectMeta: metav1.ObjectMeta{Name: "events-0", Namespace: "printer"},
		Spec: felixv1.FelixShardSpec{Stream: "events", Index: 0,
			Replicas: []string{"demo-0", "demo-1", "demo-2", "demo-3", "demo-4"}},
	}
	if err := env.Client.Create(ctx(t), sh); err != nil {
		t.Fatal(err)
	}
	sh.Status = felixv1.FelixShardStatus{
		Assignment: &felixv1.Assignment{Leader: "demo-0", Epoch: 7},
		CaughtUp:   "3/5",
		Conditions: []metav1.Condition{{Type: felixv1.ConditionReady, Status: metav1.ConditionTrue,
			Reason: "Serving", Message: "leader reports", LastTransitionTime: metav1.Now()}},
	}
	if err := env.Client.Status().Update(ctx(t), sh); err != nil {
		t.Fatal(err)
	}
	out, err := exec.Command(kubectl, "--kubeconfig", env.Kubeconfig, "get", "felixshards", "-n", "printer").CombinedOutput()
	if err != nil {
		t.Fatalf("kubectl: %v\n%s", err, out)
	}
	lines := strings.Split(strings.TrimSpace(string(out)), "\n")
	if len(lines) != 2 {
		t.Fatalf("want header and one row, got:\n%s", out)
	}
	header := strings.Fields(lines[0])
	wantHeader := []string{"NAME", "STREAM", "SHARD", "LEADER", "EPOCH", "CAUGHT-UP", "READY", "AGE"}
	if strings.Join(header, " ") != strings.Join(wantHeader, " ") {
		t.Errorf("header %v, want %v", header, wantHeader)
	}
	row := strings.Fields(lines[1])
	wantRow := []string{"events-0", "events", "0", "demo-0", "7", "3/5", "True"}
	if len(row) < len(wantRow) || strings.Join(row[:len(wantRow)], " ") != strings.Join(wantRow, " ") {
		t.Errorf("row %v, want prefix %v", row, wantRow)
	}
	// The short name works too.
	if out, err := exec.Command(kubectl, "--kubeconfig", env.Kubeconfig, "get", "fsh", "-n", "printer", "-o", "name").CombinedOutput(); err != nil ||
		strings.TrimSpace(string(out)) != "felixshard.felix.dev/events-0" {
		t.Errorf("kubectl get fsh: %v %s", err, out)
	}
}
