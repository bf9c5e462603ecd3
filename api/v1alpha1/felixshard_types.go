package v1alpha1

import (
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// AnnotationPreferredLeader on a FelixShard names the replica its
// leadership should move to and stay on: a switchover (`kubectl felix
// switchover`). The operator moves leadership in a planned promotion, the
// same one as leader balancing, only once that replica is up and its
// leader's fresh report counts it caught up under its registered storage
// id [CP-1]; until then the leader stays, and a name that is not one of
// the shard's replicas is ignored with a Warning event. It outranks
// spec.leaderBalance (which it works under Off too) until removed; after
// a failover, leadership returns to it the same way.
const AnnotationPreferredLeader = "felix.dev/preferred-leader"

// FelixShardSpec is one shard of a stream and its replica set. The operator
// creates it from the FelixStream and owns it.
// +kubebuilder:validation:XValidation:rule="has(self.firstEpoch) == has(oldSelf.firstEpoch)",message="firstEpoch is set at creation only"
type FelixShardSpec struct {
	// Stream is the FelixStream this shard belongs to.
	// +kubebuilder:validation:MinLength=1
	// +kubebuilder:validation:XValidation:rule="self == oldSelf",message="stream cannot change after creation"
	Stream string `json:"stream"`

	// Index is the shard's number within its stream, from 0.
	// +kubebuilder:validation:Minimum=0
	// +kubebuilder:validation:XValidation:rule="self == oldSelf",message="index cannot change after creation"
	Index int32 `json:"index"`

	// Replicas are the FelixBroker names holding a copy, all distinct.
	// +kubebuilder:validation:MinItems=1
	// +kubebuilder:validation:MaxItems=5
	// +kubebuilder:validation:XValidation:rule="self.all(x, self.exists_one(y, y == x))",message="replicas must name distinct brokers"
	// +listType=atomic
	Replicas []string `json:"replicas"`

	// FirstEpoch is the epoch of the shard's first assignment; later
	// promotions count up from it. Unset means 1. The operator sets it on
	// the shards of a cluster restored from a backup, above every epoch
	// the restored logs can hold for the shard (the epoch the backup
	// recorded plus one), so a new leader's fence follows the restored
	// records instead of going back to epoch 1.
	// +kubebuilder:validation:Minimum=1
	// +kubebuilder:validation:XValidation:rule="self == oldSelf",message="firstEpoch cannot change after creation"
	// +optional
	FirstEpoch int64 `json:"firstEpoch,omitempty"`
}

// Assignment is the operator's decision of who leads a shard.
type Assignment struct {
	// Leader is the FelixBroker name that leads.
	Leader string `json:"leader"`
	// Epoch increases with every promotion; the new leader fences the shard
	// at this epoch before it serves.
	// +kubebuilder:validation:Minimum=1
	Epoch int64 `json:"epoch"`
	// LeaderIncarnation is the leader's incarnation when it was assigned.
	// +optional
	LeaderIncarnation int64 `json:"leaderIncarnation,omitempty"`
	// AssignedAt is when this assignment was made.
	// +optional
	AssignedAt *metav1.Time `json:"assignedAt,omitempty"`
	// Counted lists the replicas that may count towards the new leader's
	// recovery and fence quorums, each under the storage id placement
	// counted it under ([CP-1]). A replica absent from it never counts for
	// the fence.
	// +listType=map
	// +listMapKey=name
	// +optional
	Counted []CountedReplica `json:"counted,omitempty"`
}

// CountedReplica is a replica placement counted, and the storage id it was
// counted under.
type CountedReplica struct {
	// Name is the FelixBroker name.
	Name string `json:"name"`
	// StorageID it was counted under; empty for a broker without storage
	// ids, counted from a fresh report.
	// +optional
	StorageID string `json:"storageID,omitempty"`
}

// FollowerReport is the leader's view of one follower ([RP-6]).
type FollowerReport struct {
	// Name is the FelixBroker name of the follower.
	Name string `json:"name"`
	// StorageID is the storage id the follower was counted under; empty for
	// a broker that predates storage ids.
	// +optional
	StorageID string `json:"storageID,omitempty"`
	// Confirmed is the last offset the follower answered holding.
	Confirmed int64 `json:"confirmed"`
	// CaughtUp is true when Confirmed reaches the report's Position.
	CaughtUp bool `json:"caughtUp"`
}

// MaxReportGroups is the most consumer groups a ShardReport lists; the
// leader lists those with the largest lag and counts the rest in
// GroupsOmitted.
const MaxReportGroups = 16

// MaxReportGroupNameLength is the longest group name a ShardReport lists
// (the broker's default group name limit); a group with a longer name is
// counted in GroupsOmitted instead.
const MaxReportGroupNameLength = 256

// GroupReport is one consumer group's position on the shard, as the
// leader saw it when it wrote the report (TakenAt). It is informational:
// placement never reads it.
type GroupReport struct {
	// Name is the consumer group.
	// +kubebuilder:validation:MinLength=1
	// +kubebuilder:validation:MaxLength=256
	Name string `json:"name"`
	// Committed is the group's committed offset: the next record its
	// owner will be handed.
	// +kubebuilder:validation:Minimum=0
	Committed int64 `json:"committed"`
	// Lag is how many records the group is behind the shard's tail:
	// tail - Committed, zero when caught up.
	// +kubebuilder:validation:Minimum=0
	Lag int64 `json:"lag"`
}

// ShardReport is what the leader broker tells the control plane.
type ShardReport struct {
	// Leader is the broker that made the report.
	Leader string `json:"leader"`
	// LeaderIncarnation is the incarnation of the leader when it reported.
	LeaderIncarnation int64 `json:"leaderIncarnation"`
	// LeaderStorageID is the reporting leader's own storage id; empty for
	// a broker that predates storage ids ([CP-1] counts the leader's own
	// copy under it).
	// +optional
	LeaderStorageID string `json:"leaderStorageID,omitempty"`
	// Epoch the leader was serving.
	Epoch int64 `json:"epoch"`
	// Position is the offset followers are measured against.
	Position int64 `json:"position"`
	// Committed is the leader's acknowledged position.
	// +optional
	Committed int64 `json:"committed,omitempty"`
	// Floor, set once the leader trimmed the shard's data log for its
	// stream's deletion, is the floor it trimmed to: no record below it
	// is readable any more. The stream's finalizer is removed once the
	// leader reports it with Committed = Floor + 1 (the trim itself is the
	// last record) at the shard's current epoch.
	// +optional
	Floor int64 `json:"floor,omitempty"`
	// TakenAt is when the leader took the report.
	TakenAt metav1.Time `json:"takenAt"`
	// ViewAt is when the leader took this view, on the leader's clock:
	// the start of the replication pass the view describes, so every
	// follower it calls caught up answered at or after it. It is a lower
	// bound on the view's age for [CP-1]; a report without it (an older
	// broker) never counts a follower registered without a storage id.
	// +optional
	ViewAt *metav1.MicroTime `json:"viewAt,omitempty"`
	// Followers, one entry per follower.
	// +listType=map
	// +listMapKey=name
	// +optional
	Followers []FollowerReport `json:"followers,omitempty"`
	// Groups are the shard's consumer groups with their lag, as of
	// TakenAt, the largest lag first: at most MaxReportGroups of them.
	// They ride along with the report: a change of group positions alone
	// does not make the leader write it (the live value is the
	// felix_broker_group_lag_records metric and `felix groups`), and
	// placement never reads them.
	// +kubebuilder:validation:MaxItems=16
	// +listType=map
	// +listMapKey=name
	// +optional
	Groups []GroupReport `json:"groups,omitempty"`
	// GroupsOmitted counts the shard's groups left out of Groups (beyond
	// MaxReportGroups, or named longer than MaxReportGroupNameLength).
	// +kubebuilder:validation:Minimum=0
	// +optional
	GroupsOmitted int32 `json:"groupsOmitted,omitempty"`
}

// FelixShardStatus has two owners: the operator writes Assignment,
// CaughtUp and Conditions; the leader broker writes Report.
type FelixShardStatus struct {
	// Assignment is written by the operator.
	// +optional
	Assignment *Assignment `json:"assignment,omitempty"`

	// Report is written by the leader broker.
	// +optional
	Report *ShardReport `json:"report,omitempty"`

	// CaughtUp is "<n>/<replicas>": the leader plus the followers the
	// current report counts as caught up under their registered storage id.
	// +optional
	CaughtUp string `json:"caughtUp,omitempty"`

	// Conditions: Ready, Waiting.
	// +listType=map
	// +listMapKey=type
	// +optional
	Conditions []metav1.Condition `json:"conditions,omitempty"`
}

// FelixShard is one shard of a FelixStream.
//
// +kubebuilder:object:root=true
// +kubebuilder:subresource:status
// +kubebuilder:resource:shortName=fsh,categories=felix
// +kubebuilder:printcolumn:name="Stream",type=string,JSONPath=`.spec.stream`
// +kubebuilder:printcolumn:name="Shard",type=integer,JSONPath=`.spec.index`
// +kubebuilder:printcolumn:name="Leader",type=string,JSONPath=`.status.assignment.leader`
// +kubebuilder:printcolumn:name="Epoch",type=integer,JSONPath=`.status.assignment.epoch`
// +kubebuilder:printcolumn:name="Caught-Up",type=string,JSONPath=`.status.caughtUp`
// +kubebuilder:printcolumn:name="Ready",type=string,JSONPath=`.status.conditions[?(@.type=="Ready")].status`
// +kubebuilder:printcolumn:name="Age",type=date,JSONPath=`.metadata.creationTimestamp`
type FelixShard struct {
	metav1.TypeMeta   `json:",inline"`
	metav1.ObjectMeta `json:"metadata,omitempty"`

	Spec   FelixShardSpec   `json:"spec"`
	Status FelixShardStatus `json:"status,omitempty"`
}

// FelixShardList is a list of FelixShard.
//
// +kubebuilder:object:root=true
type FelixShardList struct {
	metav1.TypeMeta `json:",inline"`
	metav1.ListMeta `json:"metadata,omitempty"`
	Items           []FelixShard `json:"items"`
}
