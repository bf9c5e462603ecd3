package controllers_test

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	schedulingv1 "k8s.io/api/scheduling/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/yaml"

	felixv1 "felix.dev/felix/api/v1alpha1"
	"felix.dev/felix/controllers"
)

// livePod is the pod ns/name unless it is missing or being deleted.
func livePod(t *testing.T, ns, name string) *corev1.Pod {
	t.Helper()
	var p corev1.Pod
	if err := suite.c.Get(context.Background(), types.NamespacedName{Namespace: ns, Name: name}, &p); err != nil || p.DeletionTimestamp != nil {
		return nil
	}
	return &p
}

// TestCluster_PodTemplateOnPods: spec.template reaches the broker pods
// the operator creates through the API server.
func TestCluster_PodTemplateOnPods(t *testing.T) {
	ns := namespace(t)
	pc := &schedulingv1.PriorityClass{ObjectMeta: metav1.ObjectMeta{Name: "felix-" + ns}, Value: 1000}
	create(t, pc)
	t.Cleanup(func() { _ = suite.c.Delete(context.Background(), pc) })
	c := fastCluster(ns, "tmpl", 1)
	c.Spec.Template = felixv1.BrokerPodTemplate{
		Metadata: felixv1.PodTemplateMetadata{
			Labels:      map[string]string{"team": "payments"},
			Annotations: map[string]string{"example.com/owner": "ops"},
		},
		NodeSelector:      map[string]string{"pool": "felix"},
		Tolerations:       []corev1.Toleration{{Key: "dedicated", Operator: corev1.TolerationOpEqual, Value: "felix", Effect: corev1.TaintEffectNoSchedule}},
		PriorityClassName: pc.Name,
		ImagePullSecrets:  []corev1.LocalObjectReference{{Name: "regcred"}},
		SecurityContext: &felixv1.BrokerSecurityContext{
			RunAsUser: ptr.To[int64](1000), FSGroup: ptr.To[int64](2000),
			SeccompProfile: &felixv1.BrokerSeccompProfile{Type: corev1.SeccompProfileTypeLocalhost, LocalhostProfile: ptr.To("felix.json")},
		},
	}
	create(t, c)
	eventually(t, 20*time.Second, "the pod", func() (bool, string) { return livePod(t, ns, "tmpl-0") != nil, "missing" })
	p := livePod(t, ns, "tmpl-0")
	if p.Labels["team"] != "payments" || p.Labels[controllers.LabelCluster] != "tmpl" {
		t.Errorf("labels %v", p.Labels)
	}
	if p.Annotations["example.com/owner"] != "ops" || p.Annotations[controllers.AnnotationSpecHash] == "" {
		t.Errorf("annotations %v", p.Annotations)
	}
	if p.Spec.NodeSelector["pool"] != "felix" || len(p.Spec.Tolerations) == 0 || p.Spec.Tolerations[0].Key != "dedicated" ||
		p.Spec.PriorityClassName != pc.Name || len(p.Spec.ImagePullSecrets) != 1 || p.Spec.ImagePullSecrets[0].Name != "regcred" {
		t.Errorf("scheduling fields %+v", p.Spec)
	}
	sc := p.Spec.SecurityContext
	if *sc.RunAsUser != 1000 || *sc.FSGroup != 2000 || !*sc.RunAsNonRoot || sc.SeccompProfile.Type != corev1.SeccompProfileTypeLocalhost {
		t.Errorf("security context %+v", sc)
	}
	if s := p.Spec.TopologySpreadConstraints; len(s) != 1 || s[0].TopologyKey != controllers.ZoneLabel || s[0].WhenUnsatisfiable != corev1.ScheduleAnyway {
		t.Errorf("spread %+v; want the default over zones", s)
	}
	if a := p.Spec.Affinity; a == nil || a.PodAntiAffinity == nil || len(a.PodAntiAffinity.PreferredDuringSchedulingIgnoredDuringExecution) != 1 {
		t.Errorf("affinity %+v; want the default anti-affinity", a)
	}
}

// TestCluster_PodTemplateValidation: the API server refuses templates
// that would set the operator's labels or annotations or leave the
// restricted Pod Security Standard.
func TestCluster_PodTemplateValidation(t *testing.T) {
	ns := namespace(t)
	cases := []struct {
		name string
		tmpl felixv1.BrokerPodTemplate
		want string
	}{
		{"felix.dev label", felixv1.BrokerPodTemplate{Metadata: felixv1.PodTemplateMetadata{Labels: map[string]string{"felix.dev/cluster": "x"}}}, "the operator's"},
		{"app.kubernetes.io/instance label", felixv1.BrokerPodTemplate{Metadata: felixv1.PodTemplateMetadata{Labels: map[string]string{"app.kubernetes.io/instance": "x"}}}, "the operator's"},
		{"app.kubernetes.io/component label", felixv1.BrokerPodTemplate{Metadata: felixv1.PodTemplateMetadata{Labels: map[string]string{"app.kubernetes.io/component": "x"}}}, "the operator's"},
		{"felix.dev annotation", felixv1.BrokerPodTemplate{Metadata: felixv1.PodTemplateMetadata{Annotations: map[string]string{"felix.dev/spec-hash": "x"}}}, "the operator's"},
		{"root user", felixv1.BrokerPodTemplate{SecurityContext: &felixv1.BrokerSecurityContext{RunAsUser: ptr.To[int64](0)}}, "runAsUser"},
		{"root group", felixv1.BrokerPodTemplate{SecurityContext: &felixv1.BrokerSecurityContext{RunAsGroup: ptr.To[int64](0)}}, "runAsGroup"},
		{"root supplemental group", felixv1.BrokerPodTemplate{SecurityContext: &felixv1.BrokerSecurityContext{SupplementalGroups: []int64{0}}}, "supplementalGroups"},
		{"unconfined seccomp", felixv1.BrokerPodTemplate{SecurityContext: &felixv1.BrokerSecurityContext{SeccompProfile: &felixv1.BrokerSeccompProfile{Type: corev1.SeccompProfileTypeUnconfined}}}, "Unsupported value"},
		{"localhost without a profile", felixv1.BrokerPodTemplate{SecurityContext: &felixv1.BrokerSecurityContext{SeccompProfile: &felixv1.BrokerSeccompProfile{Type: corev1.SeccompProfileTypeLocalhost}}}, "localhostProfile"},
	}
	for i, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			c := fastCluster(ns, "bad-"+itoa(i), 1)
			c.Spec.Template = tc.tmpl
			err := suite.c.Create(context.Background(), c)
			if !apierrors.IsInvalid(err) || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("create: %v; want Invalid naming %q", err, tc.want)
			}
		})
	}
	// Fields that would leave the profile do not exist in the schema: a
	// strict client (kubectl's default) is refused.
	for _, field := range []string{"privileged", "allowPrivilegeEscalation", "runAsNonRoot"} {
		t.Run(field, func(t *testing.T) {
			u := &unstructured.Unstructured{Object: map[string]any{
				"apiVersion": felixv1.GroupVersion.String(), "kind": "FelixCluster",
				"metadata": map[string]any{"namespace": ns, "name": "strict-" + strings.ToLower(field)},
				"spec": map[string]any{"brokers": int64(1), "image": "felix:test", "template": map[string]any{
					"securityContext": map[string]any{field: field != "runAsNonRoot"},
				}},
			}}
			err := suite.c.Create(context.Background(), u, client.FieldValidation(metav1.FieldValidationStrict))
			if err == nil || !strings.Contains(err.Error(), "unknown field") {
				t.Fatalf("create with %s: %v; want an unknown field error", field, err)
			}
		})
	}
	// Labels of the recommended set the operator does not set are the user's.
	ok := fastCluster(ns, "ok", 1)
	ok.Spec.Template.Metadata.Labels = map[string]string{"app.kubernetes.io/part-of": "shop"}
	create(t, ok)
}

// TestCluster_PodTemplateChangeRolls: a template change rolls the brokers
// one at a time, as an image change does.
func TestCluster_PodTemplateChangeRolls(t *testing.T) {
	ns := namespace(t)
	ctx := context.Background()
	create(t, fastCluster(ns, "troll", 2))
	waitForBrokers(t, ns, "troll", 2)
	startBroker(t, ns, "troll", 0)
	startBroker(t, ns, "troll", 1)
	eventually(t, 10*time.Second, "pods", func() (bool, string) {
		return livePod(t, ns, "troll-0") != nil && livePod(t, ns, "troll-1") != nil, "missing"
	})
	markPodReady(t, ns, "troll-0")
	markPodReady(t, ns, "troll-1")

	c := getCluster(t, ns, "troll")
	orig := c.DeepCopy()
	c.Spec.Template.Metadata.Labels = map[string]string{"tier": "v2"}
	c.Spec.Template.NodeSelector = map[string]string{"pool": "felix"}
	if err := suite.c.Patch(ctx, c, client.MergeFrom(orig)); err != nil {
		t.Fatal(err)
	}
	tier := func(name string) string {
		if p := livePod(t, ns, name); p != nil {
			return p.Labels["tier"] + "/" + p.Spec.NodeSelector["pool"]
		}
		return ""
	}
	eventually(t, 10*time.Second, "one pod replaced", func() (bool, string) {
		a, b := tier("troll-0"), tier("troll-1")
		return (a == "v2/felix") != (b == "v2/felix"), a + "," + b
	})
	time.Sleep(500 * time.Millisecond)
	a, b := tier("troll-0"), tier("troll-1")
	if a == "v2/felix" && b == "v2/felix" {
		t.Fatal("both brokers replaced while one was not ready")
	}
	fresh := "troll-0"
	if b == "v2/felix" {
		fresh = "troll-1"
	}
	markPodReady(t, ns, fresh)
	eventually(t, 10*time.Second, "both pods on the new template", func() (bool, string) {
		a, b := tier("troll-0"), tier("troll-1")
		return a == "v2/felix" && b == "v2/felix", a + "," + b
	})
	eventually(t, 10*time.Second, "BrokerReplaced event", func() (bool, string) { return hasEvent(ns, "troll", "BrokerReplaced") })
}

// TestCluster_PodTemplateExamplesValid: the pod template sample and the
// example of docs/operator.md are accepted by the API server under strict
// field validation (no unknown field, every rule passes).
func TestCluster_PodTemplateExamplesValid(t *testing.T) {
	ns := namespace(t)
	sample, err := os.ReadFile(filepath.Join("..", "config", "samples", "felix_v1alpha1_felixcluster_template.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	doc, err := os.ReadFile(filepath.Join("..", "docs", "operator.md"))
	if err != nil {
		t.Fatal(err)
	}
	_, section, ok := strings.Cut(string(doc), "## The broker pod template")
	_, block, ok2 := strings.Cut(section, "```yaml\n")
	block, _, ok3 := strings.Cut(block, "```")
	if !ok || !ok2 || !ok3 {
		t.Fatal(`docs/operator.md: no yaml example under "## The broker pod template"`)
	}
	for name, data := range map[string][]byte{"sample": sample, "docs/operator.md": []byte(block)} {
		u := &unstructured.Unstructured{}
		if err := yaml.Unmarshal(data, &u.Object); err != nil {
			t.Fatalf("%s: %v", name, err)
		}
		u.SetNamespace(ns)
		if err := suite.c.Create(context.Background(), u, client.DryRunAll, client.FieldValidation(metav1.FieldValidationStrict)); err != nil {
			t.Errorf("%s: %v", name, err)
		}
		if tmpl, _, _ := unstructured.NestedMap(u.Object, "spec", "template"); len(tmpl) == 0 {
			t.Errorf("%s: no spec.template", name)
		}
	}
}
