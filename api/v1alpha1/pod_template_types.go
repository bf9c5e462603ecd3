package v1alpha1

import (
	"strings"

	corev1 "k8s.io/api/core/v1"
)

// BrokerPodTemplate is what a FelixCluster lets its user set on every
// broker pod: scheduling, pull secrets, extra labels and annotations, and
// the user and groups the broker runs as. Everything else about the pod
// (command, ports, probes, volumes, the container's security context) is
// the operator's. A change to the template rolls the brokers as an image
// change does, one at a time, leaders last.
type BrokerPodTemplate struct {
	// Metadata: labels and annotations added to every broker pod. The
	// labels and annotations the operator owns cannot be set here (see
	// PodTemplateMetadata).
	// +optional
	Metadata PodTemplateMetadata `json:"metadata,omitempty"`

	// NodeSelector restricts the nodes broker pods are scheduled to.
	// +kubebuilder:validation:MaxProperties=64
	// +optional
	NodeSelector map[string]string `json:"nodeSelector,omitempty"`

	// Tolerations of the broker pods.
	// +kubebuilder:validation:MaxItems=64
	// +optional
	Tolerations []corev1.Toleration `json:"tolerations,omitempty"`

	// Affinity, when set, replaces the operator's default affinity (a
	// preferred pod anti-affinity by kubernetes.io/hostname between the
	// cluster's brokers) as a whole.
	// +optional
	Affinity *corev1.Affinity `json:"affinity,omitempty"`

	// TopologySpreadConstraints, when set (non-empty), replace the
	// operator's default spread: maxSkew 1 over
	// topology.kubernetes.io/zone, whenUnsatisfiable ScheduleAnyway,
	// between the cluster's brokers, matching the zone-aware placement of
	// shard replicas.
	// +kubebuilder:validation:MaxItems=16
	// +optional
	TopologySpreadConstraints []corev1.TopologySpreadConstraint `json:"topologySpreadConstraints,omitempty"`

	// PriorityClassName of the broker pods; the PriorityClass must exist.
	// +kubebuilder:validation:MaxLength=253
	// +optional
	PriorityClassName string `json:"priorityClassName,omitempty"`

	// ImagePullSecrets of the broker pods, Secrets in the cluster's
	// namespace.
	// +kubebuilder:validation:MaxItems=16
	// +optional
	ImagePullSecrets []corev1.LocalObjectReference `json:"imagePullSecrets,omitempty"`

	// SecurityContext overrides the user and groups of the broker pods
	// and their seccomp profile, within the restricted Pod Security
	// Standard (see BrokerSecurityContext).
	// +optional
	SecurityContext *BrokerSecurityContext `json:"securityContext,omitempty"`
}

// PodTemplateMetadata is the labels and annotations added to broker pods.
type PodTemplateMetadata struct {
	// Labels added to every broker pod. The operator's own labels
	// (app.kubernetes.io/name, instance, component and managed-by, and
	// every felix.dev/ key) are refused: the operator's Services,
	// PodDisruptionBudget, NetworkPolicy and spreading select pods by
	// them.
	// +kubebuilder:validation:MaxProperties=64
	// +kubebuilder:validation:XValidation:rule="self.all(k, !k.startsWith('felix.dev/') && !(k in ['app.kubernetes.io/name', 'app.kubernetes.io/instance', 'app.kubernetes.io/component', 'app.kubernetes.io/managed-by']))",message="labels felix.dev/* and app.kubernetes.io/name, instance, component and managed-by are the operator's"
	// +optional
	Labels map[string]string `json:"labels,omitempty"`

	// Annotations added to every broker pod. felix.dev/ keys are the
	// operator's and refused.
	// +kubebuilder:validation:MaxProperties=64
	// +kubebuilder:validation:XValidation:rule="self.all(k, !k.startsWith('felix.dev/'))",message="annotations felix.dev/* are the operator's"
	// +optional
	Annotations map[string]string `json:"annotations,omitempty"`
}

// IsReservedPodLabel reports whether a label key is the operator's on
// broker pods, so spec.template.metadata.labels may not set it. It is the
// rule the CRD's validation applies.
func IsReservedPodLabel(key string) bool {
	switch key {
	case "app.kubernetes.io/name", "app.kubernetes.io/instance", "app.kubernetes.io/component", "app.kubernetes.io/managed-by":
		return true
	}
	return strings.HasPrefix(key, "felix.dev/")
}

// IsReservedPodAnnotation reports whether an annotation key is the
// operator's on broker pods, so spec.template.metadata.annotations may not
// set it. It is the rule the CRD's validation applies.
func IsReservedPodAnnotation(key string) bool {
	return strings.HasPrefix(key, "felix.dev/")
}

// BrokerSecurityContext is the part of a broker pod's security context a
// user may change. It has no field that could leave the restricted Pod
// Security Standard: the broker container always runs with runAsNonRoot,
// without privilege escalation or any capability, on a read-only root
// filesystem, and is never privileged. Unknown fields (privileged,
// allowPrivilegeEscalation, runAsNonRoot...) are refused by a strict
// client (kubectl's default) and dropped otherwise.
type BrokerSecurityContext struct {
	// RunAsUser is the user the broker runs as; 65532 when unset. Never 0.
	// +kubebuilder:validation:Minimum=1
	// +optional
	RunAsUser *int64 `json:"runAsUser,omitempty"`

	// RunAsGroup is the broker's primary group; 65532 when unset. Never 0.
	// +kubebuilder:validation:Minimum=1
	// +optional
	RunAsGroup *int64 `json:"runAsGroup,omitempty"`

	// FSGroup owns the data volume and can read the certificate Secret
	// (mode 0440); 65532 when unset. Never 0.
	// +kubebuilder:validation:Minimum=1
	// +optional
	FSGroup *int64 `json:"fsGroup,omitempty"`

	// FSGroupChangePolicy: Always (the default) or OnRootMismatch, which
	// skips changing the ownership of a large volume that already has it.
	// +kubebuilder:validation:Enum=Always;OnRootMismatch
	// +optional
	FSGroupChangePolicy *corev1.PodFSGroupChangePolicy `json:"fsGroupChangePolicy,omitempty"`

	// SupplementalGroups added to the broker's process. Never 0.
	// +kubebuilder:validation:MaxItems=32
	// +kubebuilder:validation:items:Minimum=1
	// +optional
	SupplementalGroups []int64 `json:"supplementalGroups,omitempty"`

	// SeccompProfile of the broker pod; RuntimeDefault when unset.
	// +optional
	SeccompProfile *BrokerSeccompProfile `json:"seccompProfile,omitempty"`
}

// BrokerSeccompProfile is a seccomp profile the restricted Pod Security
// Standard allows: RuntimeDefault or a Localhost profile (never
// Unconfined).
// +kubebuilder:validation:XValidation:rule="self.type == 'Localhost' ? has(self.localhostProfile) && size(self.localhostProfile) > 0 : !has(self.localhostProfile)",message="localhostProfile is required with type Localhost and allowed only with it"
type BrokerSeccompProfile struct {
	// Type is RuntimeDefault or Localhost.
	// +kubebuilder:validation:Enum=RuntimeDefault;Localhost
	Type corev1.SeccompProfileType `json:"type"`

	// LocalhostProfile is the profile's path under the kubelet's seccomp
	// directory, with type Localhost only.
	// +kubebuilder:validation:MaxLength=4096
	// +optional
	LocalhostProfile *string `json:"localhostProfile,omitempty"`
}
