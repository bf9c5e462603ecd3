package controllers

import (
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"

	felixv1 "felix.dev/felix/api/v1alpha1"
)

// HostnameLabel is the node label the default anti-affinity spreads
// brokers across.
const HostnameLabel = "kubernetes.io/hostname"

// defaultAffinity is the affinity of broker pods whose cluster sets none
// in spec.template: a preferred anti-affinity between the cluster's
// brokers by node.
func defaultAffinity(cluster string) *corev1.Affinity {
	return &corev1.Affinity{PodAntiAffinity: &corev1.PodAntiAffinity{
		PreferredDuringSchedulingIgnoredDuringExecution: []corev1.WeightedPodAffinityTerm{{
			Weight: 100,
			PodAffinityTerm: corev1.PodAffinityTerm{
				LabelSelector: &metav1.LabelSelector{MatchLabels: brokerSelector(cluster)},
				TopologyKey:   HostnameLabel,
			},
		}},
	}}
}

// defaultSpread is the topology spread of broker pods whose cluster sets
// none in spec.template: the cluster's brokers over the zones
// (ZoneLabel, the label the replica placement reads), at most one apart,
// as a preference only (ScheduleAnyway), so brokers still schedule on a
// single-zone cluster or when a zone is full.
func defaultSpread(cluster string) []corev1.TopologySpreadConstraint {
	return []corev1.TopologySpreadConstraint{{
		MaxSkew:           1,
		TopologyKey:       ZoneLabel,
		WhenUnsatisfiable: corev1.ScheduleAnyway,
		LabelSelector:     &metav1.LabelSelector{MatchLabels: brokerSelector(cluster)},
	}}
}

// brokerPodSecurityContext is the pod security context of a broker: user
// and groups 65532, runAsNonRoot and the RuntimeDefault seccomp profile,
// with the overrides of spec.template.securityContext (whose fields all
// stay within the restricted Pod Security Standard). runAsNonRoot is
// always set.
func brokerPodSecurityContext(c *felixv1.FelixCluster) *corev1.PodSecurityContext {
	sc := &corev1.PodSecurityContext{
		RunAsNonRoot:   ptr.To(true),
		RunAsUser:      ptr.To[int64](brokerUID),
		RunAsGroup:     ptr.To[int64](brokerUID),
		FSGroup:        ptr.To[int64](brokerUID),
		SeccompProfile: &corev1.SeccompProfile{Type: corev1.SeccompProfileTypeRuntimeDefault},
	}
	o := c.Spec.Template.SecurityContext
	if o == nil {
		return sc
	}
	if o.RunAsUser != nil {
		sc.RunAsUser = ptr.To(*o.RunAsUser)
	}
	if o.RunAsGroup != nil {
		sc.RunAsGroup = ptr.To(*o.RunAsGroup)
	}
	if o.FSGroup != nil {
		sc.FSGroup = ptr.To(*o.FSGroup)
	}
	if o.FSGroupChangePolicy != nil {
		sc.FSGroupChangePolicy = ptr.To(*o.FSGroupChangePolicy)
	}
	if len(o.SupplementalGroups) > 0 {
		sc.SupplementalGroups = append([]int64(nil), o.SupplementalGroups...)
	}
	if p := o.SeccompProfile; p != nil && (p.Type == corev1.SeccompProfileTypeRuntimeDefault || p.Type == corev1.SeccompProfileTypeLocalhost) {
		sc.SeccompProfile = &corev1.SeccompProfile{Type: p.Type}
		if p.Type == corev1.SeccompProfileTypeLocalhost && p.LocalhostProfile != nil {
			sc.SeccompProfile.LocalhostProfile = ptr.To(*p.LocalhostProfile)
		}
	}
	return sc
}

// applyPodTemplate puts spec.template on a broker pod built by brokerPod:
// scheduling, pull secrets and the user's labels and annotations. The
// operator's labels and annotations win over the user's (the CRD refuses
// reserved keys; this also holds for objects written before it did). The
// default affinity and spread stay unless the template replaces them.
func applyPodTemplate(c *felixv1.FelixCluster, pod *corev1.Pod) {
	t := c.Spec.Template.DeepCopy()
	for k, v := range t.Metadata.Labels {
		if _, own := pod.Labels[k]; !own && !felixv1.IsReservedPodLabel(k) {
			pod.Labels[k] = v
		}
	}
	for k, v := range t.Metadata.Annotations {
		if felixv1.IsReservedPodAnnotation(k) {
			continue
		}
		if pod.Annotations == nil {
			pod.Annotations = map[string]string{}
		}
		pod.Annotations[k] = v
	}
	s := &pod.Spec
	s.NodeSelector = t.NodeSelector
	s.Tolerations = t.Tolerations
	s.PriorityClassName = t.PriorityClassName
	s.ImagePullSecrets = t.ImagePullSecrets
	s.Affinity = defaultAffinity(c.Name)
	if t.Affinity != nil {
		s.Affinity = t.Affinity
	}
	s.TopologySpreadConstraints = defaultSpread(c.Name)
	if len(t.TopologySpreadConstraints) > 0 {
		s.TopologySpreadConstraints = t.TopologySpreadConstraints
	}
}
