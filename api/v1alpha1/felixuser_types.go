package v1alpha1

import (
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// FelixUserSpec is a client identity of one FelixCluster and what it may
// do.
type FelixUserSpec struct {
	// Cluster is the FelixCluster (same namespace) the user belongs to.
	// +kubebuilder:validation:MinLength=1
	// +kubebuilder:validation:XValidation:rule="self == oldSelf",message="cluster cannot change"
	Cluster string `json:"cluster"`

	// Authentication is how the user proves who it is.
	// +kubebuilder:default={type: tls}
	// +optional
	Authentication UserAuthentication `json:"authentication,omitempty"`

	// Authorization is what the user may do; nothing when empty.
	// +optional
	Authorization UserAuthorization `json:"authorization,omitempty"`
}

// UserAuthentication chooses the credential the operator issues.
type UserAuthentication struct {
	// Type is tls: a client certificate of the cluster's CA, in the
	// Secret named like the user (keys tls.crt, tls.key, ca.crt).
	// +kubebuilder:validation:Enum=tls
	// +kubebuilder:default=tls
	// +optional
	Type string `json:"type,omitempty"`
}

// UserAuthorization lists a user's grants; an operation is allowed when
// any grant allows it.
type UserAuthorization struct {
	// Grants of operations on streams.
	// +kubebuilder:validation:MaxItems=256
	// +listType=atomic
	// +optional
	Grants []StreamGrant `json:"grants,omitempty"`
}

// FelixUserStatus is what the operator issued.
type FelixUserStatus struct {
	// ObservedGeneration is the generation the status describes.
	// +optional
	ObservedGeneration int64 `json:"observedGeneration,omitempty"`

	// SecretName is the Secret holding the user's credentials.
	// +optional
	SecretName string `json:"secretName,omitempty"`

	// Identity is the felix:// identity on the user's certificate.
	// +optional
	Identity string `json:"identity,omitempty"`

	// NotAfter is when the current certificate expires; the operator
	// renews it before then.
	// +optional
	NotAfter *metav1.Time `json:"notAfter,omitempty"`

	// Conditions: Ready.
	// +listType=map
	// +listMapKey=type
	// +optional
	Conditions []metav1.Condition `json:"conditions,omitempty"`
}

// FelixUser is a client of a FelixCluster: the operator issues it a
// certificate and brokers enforce its grants.
//
// +kubebuilder:object:root=true
// +kubebuilder:subresource:status
// +kubebuilder:resource:shortName=fu,categories=felix
// +kubebuilder:printcolumn:name="Cluster",type=string,JSONPath=`.spec.cluster`
// +kubebuilder:printcolumn:name="Secret",type=string,JSONPath=`.status.secretName`
// +kubebuilder:printcolumn:name="Ready",type=string,JSONPath=`.status.conditions[?(@.type=="Ready")].status`
// +kubebuilder:printcolumn:name="Expires",type=date,JSONPath=`.status.notAfter`,priority=1
// +kubebuilder:printcolumn:name="Age",type=date,JSONPath=`.metadata.creationTimestamp`
type FelixUser struct {
	metav1.TypeMeta   `json:",inline"`
	metav1.ObjectMeta `json:"metadata,omitempty"`

	Spec   FelixUserSpec   `json:"spec,omitempty"`
	Status FelixUserStatus `json:"status,omitempty"`
}

// FelixUserList is a list of FelixUsers.
//
// +kubebuilder:object:root=true
type FelixUserList struct {
	metav1.TypeMeta `json:",inline"`
	metav1.ListMeta `json:"metadata,omitempty"`
	Items           []FelixUser `json:"items"`
}
