package v1alpha1

import (
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// FelixStreamSpec is a sharded, replicated log.
//
// A fenced stream ([FD-4], [TR-7]) keeps retention off, acknowledges on
// Quorum or All, and is fenced from creation to deletion: `fenced` cannot
// change in an update, so it can never be switched off and retention on
// while a holder runs.
// +kubebuilder:validation:XValidation:rule="!has(self.fenced) || !self.fenced || !has(self.retention) || (!has(self.retention.maxAge) && !has(self.retention.maxBytes))",message="a fenced stream must keep retention off: retention can delete the write that fences a stale writer [TR-7]"
// +kubebuilder:validation:XValidation:rule="!has(self.fenced) || !self.fenced || !has(self.ack) || self.ack != 'Leader'",message="a fenced stream must acknowledge on Quorum or All: under ack Leader an acknowledged fenced write can vanish at failover [FD-4]"
// +kubebuilder:validation:XValidation:rule="(has(self.fenced) && self.fenced) == (has(oldSelf.fenced) && oldSelf.fenced)",message="fenced cannot change after creation: a stream is fenced for its whole life, so its retention can never be turned on under a running holder; create a new stream instead [FD-4]"
type FelixStreamSpec struct {
	// Cluster is the FelixCluster whose brokers hold the stream.
	// +kubebuilder:validation:MinLength=1
	// +kubebuilder:validation:XValidation:rule="self == oldSelf",message="cluster cannot change after creation"
	Cluster string `json:"cluster"`

	// Shards is the number of independent logs of the stream. It may be
	// raised after creation, never lowered: the operator adds shards
	// <old>..<new-1> and leaves the existing ones (their replicas and
	// records) untouched. Records keep their shard and their order within
	// it; a producer that picks a shard from a key may send the key to
	// another shard after a raise (docs/operator.md, "Adding shards").
	// +kubebuilder:validation:Minimum=1
	// +kubebuilder:validation:Maximum=4096
	// +kubebuilder:validation:XValidation:rule="self >= oldSelf",message="shards can be added, never removed: a removed shard's records would be lost"
	// +kubebuilder:default=1
	// +optional
	Shards int32 `json:"shards,omitempty"`

	// Replicas is the number of copies of each shard, on distinct brokers:
	// 1, 3 or 5.
	// +kubebuilder:validation:XValidation:rule="self in [1, 3, 5]",message="replicas must be 1, 3 or 5"
	// +kubebuilder:validation:XValidation:rule="self == oldSelf",message="replicas cannot change after creation"
	// +kubebuilder:default=3
	// +optional
	Replicas int32 `json:"replicas,omitempty"`

	// Ack says when an append is acknowledged: Leader, Quorum or All. A
	// fenced stream refuses Leader ([FD-4]).
	// +kubebuilder:default=Quorum
	// +optional
	Ack AckMode `json:"ack,omitempty"`

	// Retention deletes old records by age or size. Absent means off, the
	// default. A fenced stream refuses it ([TR-7]).
	// +optional
	Retention *RetentionSpec `json:"retention,omitempty"`

	// Fenced marks a stream used for fencing by tail-conditional writers
	// (felixd): it must keep retention off and acknowledge on Quorum or
	// All, and it is fixed at creation ([FD-4], [TR-7]). Brokers keep a
	// fenced log that holds records fenced whatever the spec says later.
	// +optional
	Fenced bool `json:"fenced,omitempty"`
}

// RetentionSpec bounds what a stream keeps. Each limit is off when absent.
type RetentionSpec struct {
	// MaxAge deletes whole segments older than this.
	// +optional
	MaxAge *metav1.Duration `json:"maxAge,omitempty"`

	// MaxBytes deletes whole oldest segments beyond this size per shard.
	// +optional
	MaxBytes *resource.Quantity `json:"maxBytes,omitempty"`
}

// FelixStreamStatus is the observed state of a stream.
type FelixStreamStatus struct {
	// ObservedGeneration is the spec generation this status describes.
	// +optional
	ObservedGeneration int64 `json:"observedGeneration,omitempty"`

	// ReadyShards counts shards with an assigned leader that reports.
	// +optional
	ReadyShards int32 `json:"readyShards,omitempty"`

	// Conditions: Ready, Progressing, Degraded.
	// +listType=map
	// +listMapKey=type
	// +optional
	Conditions []metav1.Condition `json:"conditions,omitempty"`
}

// FelixStream is a sharded, replicated, durable log.
//
// +kubebuilder:object:root=true
// +kubebuilder:subresource:status
// +kubebuilder:resource:shortName=fs,categories=felix
// +kubebuilder:printcolumn:name="Cluster",type=string,JSONPath=`.spec.cluster`
// +kubebuilder:printcolumn:name="Shards",type=integer,JSONPath=`.spec.shards`
// +kubebuilder:printcolumn:name="Replicas",type=integer,JSONPath=`.spec.replicas`
// +kubebuilder:printcolumn:name="Ack",type=string,JSONPath=`.spec.ack`
// +kubebuilder:printcolumn:name="Ready-Shards",type=integer,JSONPath=`.status.readyShards`
// +kubebuilder:printcolumn:name="Fenced",type=boolean,JSONPath=`.spec.fenced`,priority=1
// +kubebuilder:printcolumn:name="Age",type=date,JSONPath=`.metadata.creationTimestamp`
type FelixStream struct {
	metav1.TypeMeta   `json:",inline"`
	metav1.ObjectMeta `json:"metadata,omitempty"`

	Spec   FelixStreamSpec   `json:"spec"`
	Status FelixStreamStatus `json:"status,omitempty"`
}

// FelixStreamList is a list of FelixStream.
//
// +kubebuilder:object:root=true
type FelixStreamList struct {
	metav1.TypeMeta `json:",inline"`
	metav1.ListMeta `json:"metadata,omitempty"`
	Items           []FelixStream `json:"items"`
}
