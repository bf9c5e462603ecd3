package v1alpha1

import (
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// FelixBrokerSpec names the broker; the operator creates one FelixBroker per
// broker pod and owns it.
type FelixBrokerSpec struct {
	// Cluster is the FelixCluster this broker belongs to.
	// +kubebuilder:validation:MinLength=1
	// +kubebuilder:validation:XValidation:rule="self == oldSelf",message="cluster cannot change after creation"
	Cluster string `json:"cluster"`

	// Ordinal is the broker's index in its cluster (pod <cluster>-<ordinal>).
	// +kubebuilder:validation:Minimum=0
	// +kubebuilder:validation:XValidation:rule="self == oldSelf",message="ordinal cannot change after creation"
	Ordinal int32 `json:"ordinal"`
}

// FelixBrokerStatus is the registration record of a broker ([ID-4]).
type FelixBrokerStatus struct {
	// StorageID is the storage id the broker registered with: 32 lowercase
	// hex digits naming the data in its directory, not the node ([ID-1]).
	// +kubebuilder:validation:Pattern=`^[0-9a-f]{32}$`
	// +optional
	StorageID string `json:"storageID,omitempty"`

	// Incarnation counts registrations of this broker; the operator assigns
	// incarnation+1 on each registration ([ID-2]). A data directory whose
	// registration file is behind it was restored from an older copy.
	// +kubebuilder:validation:Minimum=0
	// +optional
	Incarnation int64 `json:"incarnation,omitempty"`

	// RegistrationRequest is written by the broker to ask for a new
	// incarnation with the storage id it presents; the operator answers by
	// setting Incarnation and StorageID.
	// +optional
	RegistrationRequest *RegistrationRequest `json:"registrationRequest,omitempty"`

	// RegisteredAt is when the current incarnation was assigned.
	// +optional
	RegisteredAt *metav1.Time `json:"registeredAt,omitempty"`

	// Address is the host:port the broker serves the Felix protocol on.
	// +optional
	Address string `json:"address,omitempty"`

	// PeerAddress is the host:port of the broker's peer (replication)
	// port, where only brokers of the same cluster, authenticated by their
	// certificates, are accepted.
	// +optional
	PeerAddress string `json:"peerAddress,omitempty"`

	// State is Up, Down (no heartbeat within the node expiry timeout) or
	// Left (removed from the cluster).
	// +optional
	State BrokerState `json:"state,omitempty"`

	// LastHeartbeat is the last renewal of the broker's heartbeat lease seen
	// by the operator.
	// +optional
	LastHeartbeat *metav1.Time `json:"lastHeartbeat,omitempty"`

	// Conditions: Ready.
	// +listType=map
	// +listMapKey=type
	// +optional
	Conditions []metav1.Condition `json:"conditions,omitempty"`
}

// RegistrationRequest is a broker's request to register a storage id.
type RegistrationRequest struct {
	// StorageID the broker presents.
	// +kubebuilder:validation:Pattern=`^[0-9a-f]{32}$`
	StorageID string `json:"storageID"`
	// SeenIncarnation is the incarnation the broker read before asking; the
	// operator grants SeenIncarnation+1 only if it still equals Incarnation.
	// +kubebuilder:validation:Minimum=0
	SeenIncarnation int64 `json:"seenIncarnation"`
	// Address the broker will serve on.
	// +optional
	Address string `json:"address,omitempty"`
	// PeerAddress the broker will accept peers on.
	// +optional
	PeerAddress string `json:"peerAddress,omitempty"`
}

// AnnotationDrainLeadership on a FelixBroker asks the operator to move the
// leadership of every shard the broker leads to another replica, each in
// a planned promotion once a replica is caught up under its registered
// storage id [CP-1], and to give the broker no leadership back (leader
// balancing, switchovers) while it is set. The rolling update sets it to
// RollingUpdateDrain on the broker it restarts next and removes it once
// the broker runs the new spec; any other value is an operator's own
// (maintenance) and stays until removed.
const AnnotationDrainLeadership = "felix.dev/drain-leadership"

// RollingUpdateDrain is the value of AnnotationDrainLeadership the rolling
// update sets and removes.
const RollingUpdateDrain = "rolling-update"

// FelixBroker is the registration record of one broker.
//
// +kubebuilder:object:root=true
// +kubebuilder:subresource:status
// +kubebuilder:resource:shortName=fb,categories=felix
// +kubebuilder:printcolumn:name="Cluster",type=string,JSONPath=`.spec.cluster`
// +kubebuilder:printcolumn:name="State",type=string,JSONPath=`.status.state`
// +kubebuilder:printcolumn:name="Incarnation",type=integer,JSONPath=`.status.incarnation`
// +kubebuilder:printcolumn:name="Storage-ID",type=string,JSONPath=`.status.storageID`
// +kubebuilder:printcolumn:name="Address",type=string,JSONPath=`.status.address`,priority=1
// +kubebuilder:printcolumn:name="Heartbeat",type=date,JSONPath=`.status.lastHeartbeat`
// +kubebuilder:printcolumn:name="Age",type=date,JSONPath=`.metadata.creationTimestamp`
type FelixBroker struct {
	metav1.TypeMeta   `json:",inline"`
	metav1.ObjectMeta `json:"metadata,omitempty"`

	Spec   FelixBrokerSpec   `json:"spec"`
	Status FelixBrokerStatus `json:"status,omitempty"`
}

// FelixBrokerList is a list of FelixBroker.
//
// +kubebuilder:object:root=true
type FelixBrokerList struct {
	metav1.TypeMeta `json:",inline"`
	metav1.ListMeta `json:"metadata,omitempty"`
	Items           []FelixBroker `json:"items"`
}
