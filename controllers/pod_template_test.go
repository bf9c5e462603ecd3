package controllers

import (
	"reflect"
	"testing"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"

	felixv1 "felix.dev/felix/api/v1alpha1"
)

func templateCluster(t felixv1.BrokerPodTemplate) *felixv1.FelixCluster {
	return &felixv1.FelixCluster{
		ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: "pt"},
		Spec:       felixv1.FelixClusterSpec{Brokers: 3, Image: "felix:test", Template: t},
	}
}

// TestBrokerPod_DefaultScheduling: without a template, a broker pod
// prefers a node without another broker of its cluster and spreads over
// the zones the replica placement reads, as a preference only.
func TestBrokerPod_DefaultScheduling(t *testing.T) {
	pod := brokerPod(templateCluster(felixv1.BrokerPodTemplate{}), "pt-0")
	anti := pod.Spec.Affinity.PodAntiAffinity.PreferredDuringSchedulingIgnoredDuringExecution
	if len(anti) != 1 || anti[0].PodAffinityTerm.TopologyKey != HostnameLabel ||
		!reflect.DeepEqual(anti[0].PodAffinityTerm.LabelSelector.MatchLabels, brokerSelector("pt")) {
		t.Errorf("default anti-affinity %+v", anti)
	}
	if pod.Spec.Affinity.PodAntiAffinity.RequiredDuringSchedulingIgnoredDuringExecution != nil {
		t.Error("the default anti-affinity is required; want preferred only")
	}
	spread := pod.Spec.TopologySpreadConstraints
	if len(spread) != 1 {
		t.Fatalf("default spread %+v; want one constraint", spread)
	}
	s := spread[0]
	if s.TopologyKey != ZoneLabel || s.WhenUnsatisfiable != corev1.ScheduleAnyway || s.MaxSkew != 1 ||
		!reflect.DeepEqual(s.LabelSelector.MatchLabels, brokerSelector("pt")) {
		t.Errorf("default spread %+v; want maxSkew 1 over %s, ScheduleAnyway, the cluster's brokers", s, ZoneLabel)
	}
	for _, k := range []string{LabelName, LabelInstance, LabelComponent} {
		if pod.Labels[k] != s.LabelSelector.MatchLabels[k] {
			t.Errorf("the spread selects %s=%q; the pod has %q", k, s.LabelSelector.MatchLabels[k], pod.Labels[k])
		}
	}
	if pod.Spec.NodeSelector != nil || pod.Spec.Tolerations != nil || pod.Spec.PriorityClassName != "" || pod.Spec.ImagePullSecrets != nil {
		t.Errorf("scheduling fields set without a template: %+v", pod.Spec)
	}
}

// TestBrokerPod_TemplateFieldsLand: every field of spec.template lands on
// the pod; affinity and topologySpreadConstraints replace the defaults
// only when given.
func TestBrokerPod_TemplateFieldsLand(t *testing.T) {
	userAffinity := &corev1.Affinity{NodeAffinity: &corev1.NodeAffinity{
		RequiredDuringSchedulingIgnoredDuringExecution: &corev1.NodeSelector{NodeSelectorTerms: []corev1.NodeSelectorTerm{{
			MatchExpressions: []corev1.NodeSelectorRequirement{{Key: "disk", Operator: corev1.NodeSelectorOpIn, Values: []string{"ssd"}}},
		}}},
	}}
	userSpread := []corev1.TopologySpreadConstraint{{MaxSkew: 2, TopologyKey: "rack", WhenUnsatisfiable: corev1.DoNotSchedule,
		LabelSelector: &metav1.LabelSelector{MatchLabels: map[string]string{"a": "b"}}}}
	tolerations := []corev1.Toleration{{Key: "dedicated", Operator: corev1.TolerationOpEqual, Value: "felix", Effect: corev1.TaintEffectNoSchedule}}
	pull := []corev1.LocalObjectReference{{Name: "regcred"}}
	cases := []struct {
		name  string
		tmpl  felixv1.BrokerPodTemplate
		check func(t *testing.T, p *corev1.Pod)
	}{
		{"labels and annotations", felixv1.BrokerPodTemplate{Metadata: felixv1.PodTemplateMetadata{
			Labels:      map[string]string{"team": "payments", "app.kubernetes.io/part-of": "shop"},
			Annotations: map[string]string{"example.com/owner": "ops"},
		}}, func(t *testing.T, p *corev1.Pod) {
			if p.Labels["team"] != "payments" || p.Labels["app.kubernetes.io/part-of"] != "shop" {
				t.Errorf("labels %v", p.Labels)
			}
			if p.Annotations["example.com/owner"] != "ops" || p.Annotations[AnnotationSpecHash] == "" {
				t.Errorf("annotations %v", p.Annotations)
			}
		}},
		{"nodeSelector", felixv1.BrokerPodTemplate{NodeSelector: map[string]string{"pool": "felix"}}, func(t *testing.T, p *corev1.Pod) {
			if p.Spec.NodeSelector["pool"] != "felix" {
				t.Errorf("nodeSelector %v", p.Spec.NodeSelector)
			}
		}},
		{"tolerations", felixv1.BrokerPodTemplate{Tolerations: tolerations}, func(t *testing.T, p *corev1.Pod) {
			if !reflect.DeepEqual(p.Spec.Tolerations, tolerations) {
				t.Errorf("tolerations %v", p.Spec.Tolerations)
			}
		}},
		{"affinity replaces the default, the spread stays", felixv1.BrokerPodTemplate{Affinity: userAffinity}, func(t *testing.T, p *corev1.Pod) {
			if !reflect.DeepEqual(p.Spec.Affinity, userAffinity) {
				t.Errorf("affinity %+v; want the user's only", p.Spec.Affinity)
			}
			if !reflect.DeepEqual(p.Spec.TopologySpreadConstraints, defaultSpread("pt")) {
				t.Errorf("spread %+v; want the default", p.Spec.TopologySpreadConstraints)
			}
		}},
		{"spread replaces the default, the affinity stays", felixv1.BrokerPodTemplate{TopologySpreadConstraints: userSpread}, func(t *testing.T, p *corev1.Pod) {
			if !reflect.DeepEqual(p.Spec.TopologySpreadConstraints, userSpread) {
				t.Errorf("spread %+v; want the user's", p.Spec.TopologySpreadConstraints)
			}
			if !reflect.DeepEqual(p.Spec.Affinity, defaultAffinity("pt")) {
				t.Errorf("affinity %+v; want the default", p.Spec.Affinity)
			}
		}},
		{"priorityClassName", felixv1.BrokerPodTemplate{PriorityClassName: "felix-high"}, func(t *testing.T, p *corev1.Pod) {
			if p.Spec.PriorityClassName != "felix-high" {
				t.Errorf("priorityClassName %q", p.Spec.PriorityClassName)
			}
		}},
		{"imagePullSecrets", felixv1.BrokerPodTemplate{ImagePullSecrets: pull}, func(t *testing.T, p *corev1.Pod) {
			if !reflect.DeepEqual(p.Spec.ImagePullSecrets, pull) {
				t.Errorf("imagePullSecrets %v", p.Spec.ImagePullSecrets)
			}
		}},
		{"securityContext", felixv1.BrokerPodTemplate{SecurityContext: &felixv1.BrokerSecurityContext{
			RunAsUser: ptr.To[int64](1000), RunAsGroup: ptr.To[int64](2000), FSGroup: ptr.To[int64](3000),
			FSGroupChangePolicy: ptr.To(corev1.FSGroupChangeOnRootMismatch), SupplementalGroups: []int64{4000},
			SeccompProfile: &felixv1.BrokerSeccompProfile{Type: corev1.SeccompProfileTypeLocalhost, LocalhostProfile: ptr.To("felix.json")},
		}}, func(t *testing.T, p *corev1.Pod) {
			sc := p.Spec.SecurityContext
			if *sc.RunAsUser != 1000 || *sc.RunAsGroup != 2000 || *sc.FSGroup != 3000 || *sc.FSGroupChangePolicy != corev1.FSGroupChangeOnRootMismatch ||
				!reflect.DeepEqual(sc.SupplementalGroups, []int64{4000}) {
				t.Errorf("security context %+v", sc)
			}
			if sc.SeccompProfile.Type != corev1.SeccompProfileTypeLocalhost || *sc.SeccompProfile.LocalhostProfile != "felix.json" {
				t.Errorf("seccomp %+v", sc.SeccompProfile)
			}
		}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			c := templateCluster(tc.tmpl)
			p := brokerPod(c, "pt-1")
			tc.check(t, p)
			assertRestricted(t, p)
			if !reflect.DeepEqual(c.Spec.Template, tc.tmpl) {
				t.Error("building the pod changed the cluster's template")
			}
		})
	}
}

// TestBrokerPod_ReservedMetadataStaysTheOperators: labels and annotations
// the operator owns keep its values even when a template (written past
// validation) names them.
func TestBrokerPod_ReservedMetadataStaysTheOperators(t *testing.T) {
	c := templateCluster(felixv1.BrokerPodTemplate{Metadata: felixv1.PodTemplateMetadata{
		Labels: map[string]string{
			LabelName: "other", LabelInstance: "other", LabelComponent: "other", LabelManagedBy: "me",
			LabelCluster: "other", LabelBroker: "other", "felix.dev/extra": "x",
		},
		Annotations: map[string]string{AnnotationSpecHash: "forged", "felix.dev/extra": "x"},
	}})
	p := brokerPod(c, "pt-0")
	if want := brokerLabels("pt", "pt-0"); !reflect.DeepEqual(p.Labels, want) {
		t.Errorf("labels %v; want only the operator's %v", p.Labels, want)
	}
	if p.Annotations[AnnotationSpecHash] == "forged" || p.Annotations["felix.dev/extra"] != "" {
		t.Errorf("annotations %v", p.Annotations)
	}
}

// TestReservedPodLabels: every label and annotation the operator puts on a
// broker pod is one the API refuses in spec.template.metadata.
func TestReservedPodLabels(t *testing.T) {
	p := brokerPod(templateCluster(felixv1.BrokerPodTemplate{}), "pt-0")
	for k := range p.Labels {
		if !felixv1.IsReservedPodLabel(k) {
			t.Errorf("label %s of a broker pod is not reserved", k)
		}
	}
	for k := range p.Annotations {
		if !felixv1.IsReservedPodAnnotation(k) {
			t.Errorf("annotation %s of a broker pod is not reserved", k)
		}
	}
	for _, k := range []string{"team", "app.kubernetes.io/part-of", "app.kubernetes.io/version", "example.com/felix.dev"} {
		if felixv1.IsReservedPodLabel(k) {
			t.Errorf("label %s is reserved; want it the user's", k)
		}
	}
}

// TestBrokerPod_TemplateChangeChangesHash: every template change changes
// the spec hash, so it rolls the brokers as an image change does; the same
// template gives the same hash.
func TestBrokerPod_TemplateChangeChangesHash(t *testing.T) {
	hash := func(tmpl felixv1.BrokerPodTemplate) string {
		return brokerPod(templateCluster(tmpl), "pt-0").Annotations[AnnotationSpecHash]
	}
	base := hash(felixv1.BrokerPodTemplate{})
	if base != hash(felixv1.BrokerPodTemplate{}) {
		t.Fatal("the hash is not stable")
	}
	for name, tmpl := range map[string]felixv1.BrokerPodTemplate{
		"label":               {Metadata: felixv1.PodTemplateMetadata{Labels: map[string]string{"a": "b"}}},
		"annotation":          {Metadata: felixv1.PodTemplateMetadata{Annotations: map[string]string{"a": "b"}}},
		"nodeSelector":        {NodeSelector: map[string]string{"a": "b"}},
		"tolerations":         {Tolerations: []corev1.Toleration{{Key: "a", Operator: corev1.TolerationOpExists}}},
		"affinity":            {Affinity: &corev1.Affinity{}},
		"spread":              {TopologySpreadConstraints: []corev1.TopologySpreadConstraint{{MaxSkew: 1, TopologyKey: "rack", WhenUnsatisfiable: corev1.DoNotSchedule}}},
		"priorityClassName":   {PriorityClassName: "p"},
		"imagePullSecrets":    {ImagePullSecrets: []corev1.LocalObjectReference{{Name: "r"}}},
		"securityContext":     {SecurityContext: &felixv1.BrokerSecurityContext{RunAsUser: ptr.To[int64](1000)}},
		"seccomp localhost":   {SecurityContext: &felixv1.BrokerSecurityContext{SeccompProfile: &felixv1.BrokerSeccompProfile{Type: corev1.SeccompProfileTypeLocalhost, LocalhostProfile: ptr.To("p.json")}}},
		"supplementalGroups":  {SecurityContext: &felixv1.BrokerSecurityContext{SupplementalGroups: []int64{5}}},
		"fsGroupChangePolicy": {SecurityContext: &felixv1.BrokerSecurityContext{FSGroupChangePolicy: ptr.To(corev1.FSGroupChangeOnRootMismatch)}},
	} {
		if h := hash(tmpl); h == base {
			t.Errorf("%s: the spec hash did not change", name)
		}
	}
}

// TestBrokerPod_RestrictedProfileStays: whatever the template, the pod
// keeps the restricted Pod Security Standard; a seccomp type the API
// refuses (Unconfined) never reaches the pod.
func TestBrokerPod_RestrictedProfileStays(t *testing.T) {
	for name, sc := range map[string]*felixv1.BrokerSecurityContext{
		"none":       nil,
		"empty":      {},
		"unconfined": {SeccompProfile: &felixv1.BrokerSeccompProfile{Type: corev1.SeccompProfileTypeUnconfined}},
		"all groups": {RunAsUser: ptr.To[int64](7), RunAsGroup: ptr.To[int64](8), FSGroup: ptr.To[int64](9), SupplementalGroups: []int64{10, 11}},
	} {
		t.Run(name, func(t *testing.T) {
			assertRestricted(t, brokerPod(templateCluster(felixv1.BrokerPodTemplate{SecurityContext: sc}), "pt-0"))
		})
	}
}

// assertRestricted fails unless the pod meets the restricted Pod Security
// Standard.
func assertRestricted(t *testing.T, p *corev1.Pod) {
	t.Helper()
	psc := p.Spec.SecurityContext
	if psc == nil || psc.RunAsNonRoot == nil || !*psc.RunAsNonRoot || psc.RunAsUser == nil || *psc.RunAsUser == 0 {
		t.Errorf("pod security context %+v: want runAsNonRoot and a non-zero user", psc)
	}
	if psc == nil || psc.SeccompProfile == nil ||
		(psc.SeccompProfile.Type != corev1.SeccompProfileTypeRuntimeDefault && psc.SeccompProfile.Type != corev1.SeccompProfileTypeLocalhost) {
		t.Errorf("pod seccomp profile %+v: want RuntimeDefault or Localhost", psc)
	}
	for _, c := range append(append([]corev1.Container(nil), p.Spec.InitContainers...), p.Spec.Containers...) {
		sc := c.SecurityContext
		if sc == nil || sc.AllowPrivilegeEscalation == nil || *sc.AllowPrivilegeEscalation ||
			(sc.Privileged != nil && *sc.Privileged) || sc.RunAsNonRoot == nil || !*sc.RunAsNonRoot ||
			sc.Capabilities == nil || !reflect.DeepEqual(sc.Capabilities.Drop, []corev1.Capability{"ALL"}) || len(sc.Capabilities.Add) > 0 {
			t.Errorf("container %s security context %+v: not restricted", c.Name, sc)
		}
	}
	if p.Spec.HostNetwork || p.Spec.HostPID || p.Spec.HostIPC {
		t.Error("host namespaces")
	}
}

// TestBrokerPod_DefaultSpreadRollsNothing: the default zone spread is left
// out of the spec hash, so a pod an operator without spec.template made
// (same spec, no spread) is not outdated after the upgrade; a spread the
// user sets is hashed.
func TestBrokerPod_DefaultSpreadRollsNothing(t *testing.T) {
	c := templateCluster(felixv1.BrokerPodTemplate{})
	pod := brokerPod(c, "pt-0")
	if len(pod.Spec.TopologySpreadConstraints) == 0 {
		t.Fatal("no default spread on the pod")
	}
	older := pod.Spec.DeepCopy()
	older.TopologySpreadConstraints = nil
	if got, want := pod.Annotations[AnnotationSpecHash], specHash(older, &c.Spec.Template.Metadata); got != want {
		t.Errorf("spec hash %s, an older operator's pod has %s: the upgrade would roll every broker", got, want)
	}
	withSpread := pod.Spec.DeepCopy()
	if h := specHash(withSpread, &c.Spec.Template.Metadata); h == pod.Annotations[AnnotationSpecHash] {
		t.Error("a hash over the spread equals the hash without it")
	}
}
