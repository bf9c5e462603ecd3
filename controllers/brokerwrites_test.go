package controllers_test

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"io"
	"k8s.io/client-go/util/retry"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"
	"time"

	admissionv1 "k8s.io/api/admissionregistration/v1"
	authenticationv1 "k8s.io/api/authentication/v1"
	coordinationv1 "k8s.io/api/coordination/v1"
	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/yaml"
	"k8s.io/client-go/rest"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"

	felixv1 "felix.dev/felix/api/v1alpha1"
	"felix.dev/felix/broker/controlplane"
	"felix.dev/felix/controllers"
	"felix.dev/felix/internal/testenv"
)

// brokerWritesPolicy reads the felix-broker-writes policy shipped in
// config/admission.
func brokerWritesPolicy(t *testing.T) (*admissionv1.ValidatingAdmissionPolicy, *admissionv1.ValidatingAdmissionPolicyBinding) {
	t.Helper()
	var (
		vap     *admissionv1.ValidatingAdmissionPolicy
		binding *admissionv1.ValidatingAdmissionPolicyBinding
	)
	for _, doc := range readYAMLDocs(t, filepath.Join(testenv.RepoRoot(), "config", "admission", "broker_writes.yaml")) {
		var meta metav1.TypeMeta
		if err := json.Unmarshal(doc, &meta); err != nil {
			t.Fatal(err)
		}
		switch meta.Kind {
		case "ValidatingAdmissionPolicy":
			vap = &admissionv1.ValidatingAdmissionPolicy{}
			if err := json.Unmarshal(doc, vap); err != nil {
				t.Fatal(err)
			}
		case "ValidatingAdmissionPolicyBinding":
			binding = &admissionv1.ValidatingAdmissionPolicyBinding{}
			if err := json.Unmarshal(doc, binding); err != nil {
				t.Fatal(err)
			}
		}
	}
	if vap == nil || binding == nil {
		t.Fatal("config/admission/broker_writes.yaml lacks the policy or its binding")
	}
	return vap, binding
}

// TestBrokerWritesPolicy_CoversEveryStatusField: the policy compares every
// status field a broker must not write, so a field added to the API is not
// silently writable by brokers.
func TestBrokerWritesPolicy_CoversEveryStatusField(t *testing.T) {
	vap, _ := brokerWritesPolicy(t)
	var text strings.Builder
	for _, v := range vap.Spec.Validations {
		text.WriteString(v.Expression)
	}
	for typ, allowed := range map[reflect.Type]string{
		reflect.TypeOf(felixv1.FelixShardStatus{}):  "report",
		reflect.TypeOf(felixv1.FelixBrokerStatus{}): "registrationRequest",
	} {
		for i := 0; i < typ.NumField(); i++ {
			name, _, _ := strings.Cut(typ.Field(i).Tag.Get("json"), ",")
			if name == allowed {
				continue
			}
			if want := "object.?status.?" + name + " == oldObject.?status.?" + name; !strings.Contains(text.String(), want) {
				t.Errorf("%s.%s: the policy does not keep brokers from writing it (no %q)", typ.Name(), name, want)
			}
		}
	}
}

// TestBrokerWritesPolicy_AgainstTheAPIServer installs the shipped policy
// (bound to this test's namespace only, so other tests' impersonated
// brokers are not affected) and writes as broker pods with tokens bound to
// pods the operator created, through the Role the operator wrote.
func TestBrokerWritesPolicy_AgainstTheAPIServer(t *testing.T) {
	ns := namespace(t)
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	installBrokerWritesPolicy(t, ctx, ns)

	create(t, fastCluster(ns, "va", 2))
	create(t, fastCluster(ns, "vb", 1))
	for _, b := range []string{"va-0", "va-1", "vb-0"} {
		eventually(t, 20*time.Second, "pod and Lease "+b, func() (bool, string) {
			var p corev1.Pod
			var l coordinationv1.Lease
			err := errors.Join(suite.c.Get(ctx, client.ObjectKey{Namespace: ns, Name: b}, &p), suite.c.Get(ctx, client.ObjectKey{Namespace: ns, Name: b}, &l))
			return err == nil, errString(err)
		})
	}
	for _, rb := range []string{"va-broker", "vb-broker"} {
		eventually(t, 20*time.Second, "RoleBinding "+rb, func() (bool, string) {
			var b rbacv1.RoleBinding
			err := suite.c.Get(ctx, client.ObjectKey{Namespace: ns, Name: rb}, &b)
			return err == nil, errString(err)
		})
	}

	va0 := brokerConfig(t, ctx, ns, "va-broker", "va-0")
	va1 := brokerConfig(t, ctx, ns, "va-broker", "va-1")
	vb0 := brokerConfig(t, ctx, ns, "vb-broker", "vb-0")
	unbound := brokerConfig(t, ctx, ns, "va-broker", "")

	// A shard of cluster va led by va-0, and a probe shard that shows when
	// the policy is in force (an unbound token's write is refused).
	for _, name := range []string{"x-0", "probe-0"} {
		create(t, &felixv1.FelixShard{
			ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name, Labels: map[string]string{controllers.LabelCluster: "va"}},
			Spec:       felixv1.FelixShardSpec{Stream: strings.TrimSuffix(name, "-0"), Index: 0, Replicas: []string{"va-0", "va-1"}},
		})
	}
	// The shard controller writes the shard's status too: retry a
	// conflicting write on a fresh copy.
	if err := retry.RetryOnConflict(retry.DefaultRetry, func() error {
		sh := getShard(t, ns, "x-0")
		sh.Status.Assignment = &felixv1.Assignment{Leader: "va-0", Epoch: 1, LeaderIncarnation: 1}
		return suite.c.Status().Update(ctx, sh)
	}); err != nil {
		t.Fatal(err)
	}
	eventually(t, 20*time.Second, "policy in force", func() (bool, string) {
		err := mergeStatus(ctx, unbound, &felixv1.FelixShard{}, ns, "probe-0", map[string]any{"caughtUp": "probe"})
		return isPolicyDenial(err), errString(err)
	})

	report := func(leader string) map[string]any {
		return map[string]any{"report": map[string]any{"leader": leader, "leaderIncarnation": 1, "epoch": 1, "position": 0, "takenAt": time.Now().UTC().Format(time.RFC3339)}}
	}

	// The leader's own report writer: allowed.
	cp := newClient(t, va0, ns, "va", "va-0")
	w := cp.NewReportWriter(controlplane.ReportOptions{MaxWritesPerSecond: 100})
	wctx, wcancel := context.WithCancel(ctx)
	defer wcancel()
	go func() { _ = w.Run(wctx) }()
	w.Set("x-0", felixv1.ShardReport{Leader: "va-0", LeaderIncarnation: 1, Epoch: 1, TakenAt: metav1.Now()})
	eventually(t, 10*time.Second, "leader's report written", func() (bool, string) {
		s := getShard(t, ns, "x-0")
		return s.Status.Report != nil && s.Status.Report.Leader == "va-0", "no report"
	})
	if n := w.Failures(); n != 0 {
		t.Errorf("%d report writes of the leader failed", n)
	}
	wcancel()

	denied := []struct {
		what string
		cfg  *rest.Config
		err  error
	}{
		{"another broker of the cluster reports as itself", va1, applyStatus(ctx, va1, ns, "FelixShard", "x-0", report("va-1"))},
		{"another broker of the cluster reports as the leader", va1, applyStatus(ctx, va1, ns, "FelixShard", "x-0", report("va-0"))},
		{"a broker of another cluster", vb0, applyStatus(ctx, vb0, ns, "FelixShard", "x-0", report("vb-0"))},
		{"a token not bound to a pod", unbound, applyStatus(ctx, unbound, ns, "FelixShard", "x-0", report("va-0"))},
		{"the leader reports under another name", va0, applyStatus(ctx, va0, ns, "FelixShard", "x-0", report("va-1"))},
		{"the leader writes status.caughtUp", va0, mergeStatus(ctx, va0, &felixv1.FelixShard{}, ns, "x-0", map[string]any{"caughtUp": "2/2"})},
		{"the leader writes status.assignment", va0, mergeStatus(ctx, va0, &felixv1.FelixShard{}, ns, "x-0", map[string]any{"assignment": map[string]any{"leader": "va-0", "epoch": 9}})},
		{"a broker writes another broker's FelixBroker", va0, mergeStatus(ctx, va0, &felixv1.FelixBroker{}, ns, "va-1", map[string]any{"registrationRequest": map[string]any{"storageID": newStorageID(), "seenIncarnation": 0}})},
		{"a broker sets its own incarnation", va0, mergeStatus(ctx, va0, &felixv1.FelixBroker{}, ns, "va-0", map[string]any{"incarnation": 7})},
		{"a broker renews another broker's Lease", va0, renewLease(ctx, va0, ns, "va-1")},
		{"an unbound token renews a Lease", unbound, renewLease(ctx, unbound, ns, "va-0")},
		{"a broker strips the cluster label from its own Lease", va0, editLease(ctx, va0, ns, "va-0", func(l *coordinationv1.Lease) { delete(l.Labels, controllers.LabelCluster) })},
		{"a broker relabels its own Lease", va0, editLease(ctx, va0, ns, "va-0", func(l *coordinationv1.Lease) { l.Labels["extra"] = "x" })},
		{"a broker drops the owner of its own Lease", va0, editLease(ctx, va0, ns, "va-0", func(l *coordinationv1.Lease) { l.OwnerReferences = nil })},
		{"a broker holds its own Lease as another", va0, editLease(ctx, va0, ns, "va-0", func(l *coordinationv1.Lease) { l.Spec.HolderIdentity = ptr.To("va-1") })},
		{"a broker annotates its own Lease", va0, editLease(ctx, va0, ns, "va-0", func(l *coordinationv1.Lease) { l.Annotations = map[string]string{"other": "x"} })},
		{"an unbound token registers", unbound, mergeStatus(ctx, unbound, &felixv1.FelixBroker{}, ns, "va-0", map[string]any{"registrationRequest": map[string]any{"storageID": newStorageID(), "seenIncarnation": 0}})},
	}
	for _, d := range denied {
		if !isPolicyDenial(d.err) {
			t.Errorf("%s: %v; want refused by felix-broker-writes", d.what, d.err)
		}
	}

	// A broker renews its own Lease and registers itself: allowed (the
	// operator answers the registration).
	if err := renewLease(ctx, va0, ns, "va-0"); err != nil {
		t.Errorf("va-0 renewing its own Lease: %v", err)
	}
	own := newClient(t, va0, ns, "va", "va-0")
	rctx, rcancel := context.WithTimeout(ctx, 20*time.Second)
	defer rcancel()
	if _, err := own.Register(rctx, newStorageID(), 0, "va-0:7100"); err != nil {
		t.Fatalf("va-0 registering itself: %v", err)
	}
	// The broker's own heartbeat (holder, times, transitions, duration,
	// its annotations) passes.
	if err := own.Renew(rctx, true); err != nil {
		t.Errorf("va-0's heartbeat: %v", err)
	}
}

// editLease updates a heartbeat Lease after edit changed it.
func editLease(ctx context.Context, cfg *rest.Config, ns, name string, edit func(*coordinationv1.Lease)) error {
	c, err := brokerClient(cfg)
	if err != nil {
		return err
	}
	var l coordinationv1.Lease
	if err := c.Get(ctx, client.ObjectKey{Namespace: ns, Name: name}, &l); err != nil {
		return err
	}
	now := metav1.NowMicro()
	l.Spec.RenewTime = &now
	l.Spec.HolderIdentity = ptr.To(name)
	edit(&l)
	return c.Update(ctx, &l)
}

// installBrokerWritesPolicy creates the shipped policy (once per API
// server) and a binding of it limited to namespace ns.
func installBrokerWritesPolicy(t *testing.T, ctx context.Context, ns string) {
	t.Helper()
	vap, binding := brokerWritesPolicy(t)
	if err := suite.c.Create(ctx, vap); err != nil && !apierrors.IsAlreadyExists(err) {
		t.Fatalf("install policy: %v", err)
	}
	var nsObj corev1.Namespace
	if err := suite.c.Get(ctx, client.ObjectKey{Name: ns}, &nsObj); err != nil {
		t.Fatal(err)
	}
	if nsObj.Labels == nil {
		nsObj.Labels = map[string]string{}
	}
	nsObj.Labels["felix.dev/policy-test"] = ns
	if err := suite.c.Update(ctx, &nsObj); err != nil {
		t.Fatal(err)
	}
	b := binding.DeepCopy()
	b.Name = binding.Name + "-" + ns
	b.Spec.MatchResources = &admissionv1.MatchResources{NamespaceSelector: &metav1.LabelSelector{MatchLabels: map[string]string{"felix.dev/policy-test": ns}}}
	if err := suite.c.Create(ctx, b); err != nil {
		t.Fatalf("bind policy: %v", err)
	}
	t.Cleanup(func() { _ = suite.c.Delete(context.Background(), b) })
}

// brokerConfig returns a REST config with a token of ServiceAccount sa
// bound to pod (unbound when pod is ""), as the kubelet mounts one.
func brokerConfig(t *testing.T, ctx context.Context, ns, sa, pod string) *rest.Config {
	t.Helper()
	tr := &authenticationv1.TokenRequest{Spec: authenticationv1.TokenRequestSpec{ExpirationSeconds: ptr.To[int64](3600)}}
	if pod != "" {
		var p corev1.Pod
		if err := suite.c.Get(ctx, client.ObjectKey{Namespace: ns, Name: pod}, &p); err != nil {
			t.Fatal(err)
		}
		tr.Spec.BoundObjectRef = &authenticationv1.BoundObjectReference{Kind: "Pod", APIVersion: "v1", Name: pod, UID: p.UID}
	}
	owner := &corev1.ServiceAccount{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: sa}}
	if err := suite.c.SubResource("token").Create(ctx, owner, tr); err != nil {
		t.Fatalf("token for %s bound to %q: %v", sa, pod, err)
	}
	return &rest.Config{Host: suite.env.Config.Host, TLSClientConfig: rest.TLSClientConfig{CAData: suite.env.Config.CAData}, BearerToken: tr.Status.Token}
}

func brokerClient(cfg *rest.Config) (client.Client, error) {
	return client.New(cfg, client.Options{Scheme: controllers.NewScheme()})
}

// applyStatus server-side applies status (as the broker's report writer
// does: field manager felix-broker, forced).
func applyStatus(ctx context.Context, cfg *rest.Config, ns, kind, name string, status map[string]any) error {
	c, err := brokerClient(cfg)
	if err != nil {
		return err
	}
	body, err := json.Marshal(map[string]any{
		"apiVersion": felixv1.GroupVersion.String(), "kind": kind,
		"metadata": map[string]any{"name": name, "namespace": ns},
		"status":   status,
	})
	if err != nil {
		return err
	}
	target := &felixv1.FelixShard{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name}}
	return c.Status().Patch(ctx, target, client.RawPatch(types.ApplyPatchType, body), client.FieldOwner(controlplane.FieldManager), client.ForceOwnership)
}

// renewLease updates a heartbeat Lease as controlplane's Renew does.
func renewLease(ctx context.Context, cfg *rest.Config, ns, name string) error {
	c, err := brokerClient(cfg)
	if err != nil {
		return err
	}
	var l coordinationv1.Lease
	if err := c.Get(ctx, client.ObjectKey{Namespace: ns, Name: name}, &l); err != nil {
		return err
	}
	now := metav1.NowMicro()
	l.Spec.RenewTime = &now
	l.Spec.HolderIdentity = ptr.To(name)
	return c.Update(ctx, &l)
}

// mergeStatus merge-patches status of obj (a FelixShard or FelixBroker).
func mergeStatus(ctx context.Context, cfg *rest.Config, obj client.Object, ns, name string, status map[string]any) error {
	c, err := brokerClient(cfg)
	if err != nil {
		return err
	}
	body, err := json.Marshal(map[string]any{"status": status})
	if err != nil {
		return err
	}
	obj.SetNamespace(ns)
	obj.SetName(name)
	return c.Status().Patch(ctx, obj, client.RawPatch(types.MergePatchType, body), client.FieldOwner(controlplane.FieldManager))
}

// isPolicyDenial reports whether err is a refusal by felix-broker-writes
// (not by RBAC).
func isPolicyDenial(err error) bool {
	var st apierrors.APIStatus
	if !apierrors.IsForbidden(err) || !errors.As(err, &st) {
		return false
	}
	return strings.Contains(st.Status().Message, "felix-broker-writes")
}

// readYAMLDocs returns every document of a YAML file as JSON.
func readYAMLDocs(t *testing.T, path string) [][]byte {
	t.Helper()
	data, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	dec := yaml.NewYAMLOrJSONDecoder(bytes.NewReader(data), 4096)
	var out [][]byte
	for {
		var doc map[string]any
		if err := dec.Decode(&doc); err != nil {
			if errors.Is(err, io.EOF) {
				return out
			}
			t.Fatalf("%s: %v", path, err)
		}
		if len(doc) == 0 {
			continue
		}
		b, err := json.Marshal(doc)
		if err != nil {
			t.Fatal(err)
		}
		out = append(out, b)
	}
}
