package v1alpha1

import (
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// FelixClusterSpec is the desired state of a set of Felix brokers.
// +kubebuilder:validation:XValidation:rule="!has(self.nodeExpiry) || !has(self.heartbeatInterval) || duration(self.nodeExpiry) >= duration(self.heartbeatInterval) + duration(self.heartbeatInterval)",message="nodeExpiry must be at least twice heartbeatInterval, or one late heartbeat would mark a broker Down"
// +kubebuilder:validation:XValidation:rule="has(self.restore) == has(oldSelf.restore)",message="restore is set at creation only"
type FelixClusterSpec struct {
	// Brokers is the number of broker pods. Scaling down removes only
	// brokers that hold no shard replica.
	// +kubebuilder:validation:Minimum=1
	// +kubebuilder:validation:Maximum=64
	// +kubebuilder:default=3
	// +optional
	Brokers int32 `json:"brokers,omitempty"`

	// Image is the container image holding the felix binary; brokers run
	// `felix broker` from it. Empty means the broker image of the
	// operator's release (its --broker-image), resolved once, when the
	// cluster is first reconciled, and kept in status.image: upgrading the
	// operator does not roll the brokers unless spec.image changes or the
	// cluster carries the annotation felix.dev/follow-operator-image:
	// "true".
	// +optional
	Image string `json:"image,omitempty"`

	// Storage is the persistent volume each broker gets.
	// +kubebuilder:default={size: "1Gi"}
	// +optional
	Storage StorageSpec `json:"storage,omitempty"`

	// Durability says when brokers sync their logs.
	// +kubebuilder:default={fsync: OnCommit}
	// +optional
	Durability DurabilitySpec `json:"durability,omitempty"`

	// HeartbeatInterval is how often a broker renews its heartbeat lease.
	// +kubebuilder:default="2s"
	// +optional
	HeartbeatInterval *metav1.Duration `json:"heartbeatInterval,omitempty"`

	// NodeExpiry is how long a broker may go without renewing its lease
	// before the operator marks it Down. Leader reports expire after
	// 2 x nodeExpiry + heartbeatInterval ([CP-2]).
	// +kubebuilder:default="10s"
	// +optional
	NodeExpiry *metav1.Duration `json:"nodeExpiry,omitempty"`

	// LeaderBalance says whether the operator moves each shard's
	// leadership back to its preferred replica (the first of its replica
	// set; first replicas rotate across brokers and zones) after a
	// failover or a start left it elsewhere, so writes spread over the
	// brokers. Balanced by default.
	// +kubebuilder:default={mode: Preferred}
	// +optional
	LeaderBalance LeaderBalanceSpec `json:"leaderBalance,omitempty"`

	// Resources are the compute resources of each broker container.
	// +optional
	Resources corev1.ResourceRequirements `json:"resources,omitempty"`

	// Restore, set at creation only, starts the cluster from a completed
	// FelixBackup: each broker's PVC is created with the backup's
	// VolumeSnapshot of the same ordinal as its dataSource, and the
	// broker's first start is preceded by `felix restore-point` [ID-5].
	// Brokers beyond the backup's size start empty.
	// +optional
	Restore *RestoreSpec `json:"restore,omitempty"`

	// Security: TLS, client authentication and the NetworkPolicy. Secure
	// by default (see SecuritySpec).
	// +optional
	Security SecuritySpec `json:"security,omitempty"`

	// Template is what the broker pods take from the user: labels and
	// annotations, scheduling (nodeSelector, tolerations, affinity,
	// topologySpreadConstraints, priorityClassName), imagePullSecrets and
	// a restricted securityContext. A change rolls the brokers as an
	// image change does.
	// +optional
	Template BrokerPodTemplate `json:"template,omitempty"`
}

// LeaderBalanceMode says whether leadership moves to preferred replicas.
// +kubebuilder:validation:Enum=Preferred;Off
type LeaderBalanceMode string

const (
	// LeaderBalancePreferred: a shard's leadership moves to its preferred
	// replica in a planned promotion once that replica has been up for
	// the settle time and its current leader's fresh report counts it
	// caught up under its registered storage id ([CP-1]); the new leader
	// fences at a new epoch, as after a failover.
	LeaderBalancePreferred LeaderBalanceMode = "Preferred"
	// LeaderBalanceOff: leaders stay where promotions left them.
	LeaderBalanceOff LeaderBalanceMode = "Off"
)

// LeaderBalanceSpec configures leader balancing.
type LeaderBalanceSpec struct {
	// Mode is Preferred (the default) or Off.
	// +kubebuilder:default=Preferred
	// +optional
	Mode LeaderBalanceMode `json:"mode,omitempty"`

	// SettleTime is how long a preferred replica must have been
	// registered at its current incarnation before leadership moves back
	// to it, so a broker that just restarted is let settle and one that
	// restarts repeatedly is not handed its shards back each time.
	// +kubebuilder:default="30s"
	// +optional
	SettleTime *metav1.Duration `json:"settleTime,omitempty"`
}

// AnnotationFollowOperatorImage "true" on a FelixCluster without
// spec.image makes its brokers follow the operator's default broker image:
// an operator upgrade then rolls them to the new release's image.
const AnnotationFollowOperatorImage = "felix.dev/follow-operator-image"

// RestoreSpec names the backup a cluster starts from.
// +kubebuilder:validation:XValidation:rule="self == oldSelf",message="restore cannot change after creation"
type RestoreSpec struct {
	// Backup is a FelixBackup in the cluster's namespace. The cluster's
	// PVCs and pods wait until it is Completed.
	// +kubebuilder:validation:MinLength=1
	Backup string `json:"backup"`

	// EpochFloor, when set, makes every shard of the restored cluster
	// start at an epoch above it (and above the epoch the backup recorded
	// for the shard). It is needed only to restore a backup that recorded
	// no epochs (taken by an older operator), which is refused without
	// it: set it to at least the highest epoch any shard of the source
	// cluster ever reached (a larger value is always safe).
	// +kubebuilder:validation:Minimum=1
	// +optional
	EpochFloor int64 `json:"epochFloor,omitempty"`
}

// StorageSpec is the persistent volume of one broker.
type StorageSpec struct {
	// Size of each broker's volume. It can grow, never shrink: a larger
	// size expands every broker's claim in place when its StorageClass
	// allows volume expansion (allowVolumeExpansion: true); otherwise the
	// claims keep their size and the StorageResized condition says why.
	// +kubebuilder:default="1Gi"
	// +kubebuilder:validation:XValidation:rule="quantity(string(self)).compareTo(quantity(string(oldSelf))) >= 0",message="storage.size cannot shrink: a volume claim can only grow; to shrink, create a new cluster from a backup"
	// +optional
	Size *resource.Quantity `json:"size,omitempty"`

	// StorageClassName of the volume claims; the cluster default when empty.
	// It cannot change after creation.
	// +kubebuilder:validation:XValidation:rule="self == oldSelf",message="storageClassName cannot change after creation"
	// +optional
	StorageClassName *string `json:"storageClassName,omitempty"`
}

// DurabilitySpec says when brokers sync their logs.
// +kubebuilder:validation:XValidation:rule="!has(self.fsyncInterval) || self.fsync == 'Periodic'",message="fsyncInterval applies only to fsync: Periodic"
type DurabilitySpec struct {
	// Fsync is OnCommit (sync before every acknowledgement, shared by
	// concurrent appends), Periodic (sync every fsyncInterval) or None.
	// +kubebuilder:default=OnCommit
	// +optional
	Fsync FsyncMode `json:"fsync,omitempty"`

	// FsyncInterval is the sync interval under Periodic; 100ms when unset.
	// +optional
	FsyncInterval *metav1.Duration `json:"fsyncInterval,omitempty"`
}

// FelixClusterStatus is the observed state of a FelixCluster, computed once
// per reconcile.
type FelixClusterStatus struct {
	// ObservedGeneration is the spec generation this status describes.
	// +optional
	ObservedGeneration int64 `json:"observedGeneration,omitempty"`

	// ReadyBrokers counts brokers that are registered and Up.
	// +optional
	ReadyBrokers int32 `json:"readyBrokers,omitempty"`

	// Image is the image the broker pods are built from: spec.image, or
	// the operator's default as resolved when the cluster had none.
	// +optional
	Image string `json:"image,omitempty"`

	// Restore is what a restored cluster took from its backup before it
	// created any volume from it: the shard epochs the backup recorded
	// and spec.restore.epochFloor. Shards of the cluster are created only
	// once it is set, each starting above its recorded epoch and the
	// floor, so the cluster keeps working after the backup is deleted.
	// +optional
	Restore *RestoreStatus `json:"restore,omitempty"`

	// Storage is what the brokers' volume claims were asked for and
	// report.
	// +optional
	Storage *StorageStatus `json:"storage,omitempty"`

	// Conditions: Ready, Progressing, Degraded, StorageResized (and
	// TLSReady).
	// +listType=map
	// +listMapKey=type
	// +optional
	Conditions []metav1.Condition `json:"conditions,omitempty"`
}

// StorageStatus reports the brokers' volume claims against
// spec.storage.size.
type StorageStatus struct {
	// Size is spec.storage.size as the operator applies it to the claims.
	// +optional
	Size *resource.Quantity `json:"size,omitempty"`

	// Capacity is the smallest capacity the brokers' bound claims report:
	// every broker has at least this much. Absent while no claim reports
	// one.
	// +optional
	Capacity *resource.Quantity `json:"capacity,omitempty"`

	// Resizing names the brokers whose claim is asked for more than it
	// has yet (the volume or its file system is being expanded).
	// +optional
	Resizing []string `json:"resizing,omitempty"`
}

// RestoreStatus is the epoch record a restored cluster took from its
// backup.
type RestoreStatus struct {
	// Backup is the FelixBackup the record was taken from.
	Backup string `json:"backup"`
	// EpochFloor is spec.restore.epochFloor when the record was taken (0:
	// unset).
	// +optional
	EpochFloor int64 `json:"epochFloor,omitempty"`
	// Epochs are the backup's recorded shard epochs; absent when the
	// backup recorded none and the floor alone applies.
	// +optional
	Epochs *RecordedEpochs `json:"epochs,omitempty"`
}

// FirstEpoch is the epoch a shard (stream, index) of the restored
// cluster starts at: one above both the epoch the backup recorded for it
// (0 when not recorded: the shard did not exist at the backup) and the
// floor.
func (r *RestoreStatus) FirstEpoch(stream string, index int32) int64 {
	base := r.EpochFloor
	if r.Epochs != nil {
		for _, s := range r.Epochs.Shards {
			if s.Stream == stream && s.Index == index && s.Epoch > base {
				base = s.Epoch
			}
		}
	}
	return base + 1
}

// FelixCluster is a set of Felix brokers run by the operator.
//
// +kubebuilder:object:root=true
// +kubebuilder:subresource:status
// +kubebuilder:resource:shortName=fc,categories=felix
// +kubebuilder:printcolumn:name="Brokers",type=integer,JSONPath=`.spec.brokers`
// +kubebuilder:printcolumn:name="Ready-Brokers",type=integer,JSONPath=`.status.readyBrokers`
// +kubebuilder:printcolumn:name="Fsync",type=string,JSONPath=`.spec.durability.fsync`
// +kubebuilder:printcolumn:name="Image",type=string,JSONPath=`.status.image`,priority=1
// +kubebuilder:printcolumn:name="Size",type=string,JSONPath=`.spec.storage.size`,priority=1
// +kubebuilder:printcolumn:name="Capacity",type=string,JSONPath=`.status.storage.capacity`,priority=1
// +kubebuilder:printcolumn:name="Ready",type=string,JSONPath=`.status.conditions[?(@.type=="Ready")].status`
// +kubebuilder:printcolumn:name="Age",type=date,JSONPath=`.metadata.creationTimestamp`
type FelixCluster struct {
	metav1.TypeMeta   `json:",inline"`
	metav1.ObjectMeta `json:"metadata,omitempty"`

	Spec   FelixClusterSpec   `json:"spec"`
	Status FelixClusterStatus `json:"status,omitempty"`
}

// FelixClusterList is a list of FelixCluster.
//
// +kubebuilder:object:root=true
type FelixClusterList struct {
	metav1.TypeMeta `json:",inline"`
	metav1.ListMeta `json:"metadata,omitempty"`
	Items           []FelixCluster `json:"items"`
}
