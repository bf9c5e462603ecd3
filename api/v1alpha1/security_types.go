package v1alpha1

import (
	networkingv1 "k8s.io/api/networking/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// SecuritySpec is how a cluster's brokers authenticate peers and clients
// and who may reach them. Everything is on by default: brokers serve TLS
// only, peers authenticate each other with certificates of the cluster's
// CA, clients must present a FelixUser's certificate, and a NetworkPolicy
// admits only peers to the peer port.
type SecuritySpec struct {
	// TLS says where the cluster's certificates come from. By default the
	// operator makes a CA for the cluster (Secret <cluster>-ca) and issues
	// every broker and FelixUser certificate from it.
	// +optional
	TLS TLSSpec `json:"tls,omitempty"`

	// AllowAnonymous lets clients connect without a certificate (still
	// over TLS). They get AnonymousGrants and nothing else. Off by
	// default.
	// +optional
	AllowAnonymous bool `json:"allowAnonymous,omitempty"`

	// AnonymousGrants are the operations anonymous clients may perform
	// when AllowAnonymous is set.
	// +kubebuilder:validation:MaxItems=64
	// +listType=atomic
	// +optional
	AnonymousGrants []StreamGrant `json:"anonymousGrants,omitempty"`

	// NetworkPolicy is the policy the operator writes for the brokers.
	// +optional
	NetworkPolicy NetworkPolicySpec `json:"networkPolicy,omitempty"`
}

// TLSSpec chooses the certificate source. At most one of CASecret and
// IssuerRef is set; with neither the operator manages a CA itself.
// +kubebuilder:validation:XValidation:rule="!(has(self.caSecret) && has(self.issuerRef))",message="set at most one of caSecret and issuerRef"
// +kubebuilder:validation:XValidation:rule="!has(self.issuerRef) || !has(self.issuerRef.kind) || self.issuerRef.kind != 'ClusterIssuer' || (has(self.allowClusterIssuer) && self.allowClusterIssuer)",message="issuerRef.kind ClusterIssuer needs allowClusterIssuer: true (anyone who may request certificates from a shared issuer can obtain this cluster's broker identities)"
type TLSSpec struct {
	// CASecret names a Secret in the cluster's namespace holding the CA
	// the operator signs with (keys ca.crt and ca.key, or tls.crt and
	// tls.key). The operator never writes it.
	// +optional
	CASecret *SecretReference `json:"caSecret,omitempty"`

	// IssuerRef makes cert-manager issue the certificates: the operator
	// writes cert-manager Certificate objects naming this issuer and
	// mounts the Secrets cert-manager fills. cert-manager is optional;
	// only this setting needs it. The issuer must sign with a CA
	// dedicated to this FelixCluster: every certificate it signs that
	// names the cluster's identities is trusted by the cluster.
	// +optional
	IssuerRef *IssuerReference `json:"issuerRef,omitempty"`

	// AllowClusterIssuer accepts an IssuerRef of kind ClusterIssuer. Off
	// by default: whoever may create cert-manager Certificates in any
	// namespace can have a ClusterIssuer sign a certificate naming this
	// cluster's brokers, which its peers and clients would accept. Set it
	// only for a ClusterIssuer whose CA signs for this FelixCluster alone
	// and that no one else may request certificates from (for example,
	// cert-manager's approver policy limits it to this namespace).
	// +optional
	AllowClusterIssuer bool `json:"allowClusterIssuer,omitempty"`

	// CertificateDuration is the lifetime of the broker and user
	// certificates the operator issues.
	// +kubebuilder:default="2160h"
	// +optional
	CertificateDuration *metav1.Duration `json:"certificateDuration,omitempty"`

	// RenewBefore is how long before expiry a certificate is reissued;
	// when unset, once two thirds of its lifetime has passed.
	// +optional
	RenewBefore *metav1.Duration `json:"renewBefore,omitempty"`
}

// SecretReference names a Secret in the same namespace.
type SecretReference struct {
	// Name of the Secret.
	// +kubebuilder:validation:MinLength=1
	Name string `json:"name"`
}

// IssuerReference names a cert-manager issuer.
type IssuerReference struct {
	// Name of the issuer.
	// +kubebuilder:validation:MinLength=1
	Name string `json:"name"`
	// Kind is Issuer (same namespace) or ClusterIssuer.
	// +kubebuilder:validation:Enum=Issuer;ClusterIssuer
	// +kubebuilder:default=Issuer
	// +optional
	Kind string `json:"kind,omitempty"`
	// Group of the issuer.
	// +kubebuilder:default="cert-manager.io"
	// +optional
	Group string `json:"group,omitempty"`
}

// NetworkPolicySpec shapes the NetworkPolicy of a cluster's brokers: the
// peer port admits the cluster's brokers only, the client port the pods
// Clients selects, the HTTP port (probes, metrics) everyone.
type NetworkPolicySpec struct {
	// Disabled stops the operator from writing the NetworkPolicy (and
	// deletes one it wrote).
	// +optional
	Disabled bool `json:"disabled,omitempty"`

	// Clients may reach the client port. When empty: pods of the
	// cluster's namespace labelled felix.dev/client=<cluster>.
	// +listType=atomic
	// +optional
	Clients []networkingv1.NetworkPolicyPeer `json:"clients,omitempty"`
}

// StreamOperation is one operation a grant allows.
// +kubebuilder:validation:Enum=Append;Read;Trim;Describe
type StreamOperation string

// Stream operations. Trim is never implied by Append.
const (
	OperationAppend   StreamOperation = "Append"
	OperationRead     StreamOperation = "Read"
	OperationTrim     StreamOperation = "Trim"
	OperationDescribe StreamOperation = "Describe"
)

// StreamGrant allows operations on the streams it names: exactly one of
// Stream (one name) and Prefix (every name starting with it).
// +kubebuilder:validation:XValidation:rule="has(self.stream) != has(self.prefix)",message="set exactly one of stream and prefix"
type StreamGrant struct {
	// Stream is one stream name.
	// +kubebuilder:validation:Pattern=`^[A-Za-z0-9._-]{1,255}$`
	// +optional
	Stream string `json:"stream,omitempty"`

	// Prefix matches every stream whose name starts with it; "*" alone
	// is not special (use an empty-looking grant deliberately: a prefix
	// must be at least one character).
	// +kubebuilder:validation:Pattern=`^[A-Za-z0-9._-]{1,255}$`
	// +optional
	Prefix string `json:"prefix,omitempty"`

	// Operations allowed.
	// +kubebuilder:validation:MinItems=1
	// +kubebuilder:validation:MaxItems=4
	// +listType=set
	Operations []StreamOperation `json:"operations"`
}
