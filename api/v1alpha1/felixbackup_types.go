package v1alpha1

import (
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// BackupPhase is where a FelixBackup stands.
// +kubebuilder:validation:Enum=Pending;Running;Completed;Failed
type BackupPhase string

// Backup phases.
const (
	// BackupPending: the operator has not acted on the backup yet.
	BackupPending BackupPhase = "Pending"
	// BackupRunning: VolumeSnapshots are created and not all ready.
	BackupRunning BackupPhase = "Running"
	// BackupCompleted: every broker's VolumeSnapshot is readyToUse; a
	// FelixCluster may restore from the backup.
	BackupCompleted BackupPhase = "Completed"
	// BackupFailed: the backup cannot complete (cluster missing, a
	// snapshot reported an error); it is never retried, take a new one.
	BackupFailed BackupPhase = "Failed"
)

// FelixBackupSpec says which cluster to back up. A backup is taken once:
// the spec cannot change after creation.
// +kubebuilder:validation:XValidation:rule="self == oldSelf",message="a FelixBackup spec cannot change; create a new backup"
type FelixBackupSpec struct {
	// Cluster is the FelixCluster (same namespace) whose broker volumes
	// are snapshotted, one VolumeSnapshot per broker PVC.
	// +kubebuilder:validation:MinLength=1
	Cluster string `json:"cluster"`
}

// BrokerSnapshot is the VolumeSnapshot of one broker's volume.
type BrokerSnapshot struct {
	// Broker is the broker (and pod) name, <cluster>-<ordinal>.
	Broker string `json:"broker"`
	// Ordinal is the broker's ordinal; a restored cluster's broker of the
	// same ordinal starts from this snapshot.
	Ordinal int32 `json:"ordinal"`
	// PVC is the claim that was snapshotted.
	PVC string `json:"pvc"`
	// VolumeSnapshot is the snapshot's name (same namespace).
	VolumeSnapshot string `json:"volumeSnapshot"`
	// ReadyToUse mirrors the VolumeSnapshot's status.readyToUse.
	// +optional
	ReadyToUse bool `json:"readyToUse,omitempty"`
}

// FelixBackupStatus is the observed state of a FelixBackup.
type FelixBackupStatus struct {
	// Phase is Pending, Running, Completed or Failed.
	// +optional
	Phase BackupPhase `json:"phase,omitempty"`

	// Snapshots are the per-broker VolumeSnapshots; the set is fixed at
	// the first reconcile (the cluster's size then).
	// +listType=map
	// +listMapKey=ordinal
	// +optional
	Snapshots []BrokerSnapshot `json:"snapshots,omitempty"`

	// StartedAt is when the snapshots were requested.
	// +optional
	StartedAt *metav1.Time `json:"startedAt,omitempty"`

	// CompletedAt is when the last snapshot became ready (or the backup
	// failed).
	// +optional
	CompletedAt *metav1.Time `json:"completedAt,omitempty"`

	// Epochs records, per shard of the cluster, the shard's assignment
	// epoch read after every snapshot was ready. Epochs only grow, and a
	// replica writes a record of epoch E only after the operator assigned
	// E, so each recorded epoch bounds every epoch the snapshots can hold
	// for that shard; a restored cluster starts the shard above it. Set in
	// the same write that marks the backup Completed; absent from backups
	// taken by operators that did not record epochs, which a restore
	// refuses unless spec.restore.epochFloor is set.
	// +optional
	Epochs *RecordedEpochs `json:"epochs,omitempty"`

	// Conditions: Ready (the backup is usable for a restore).
	// +listType=map
	// +listMapKey=type
	// +optional
	Conditions []metav1.Condition `json:"conditions,omitempty"`
}

// RecordedEpochs is the shard epochs of a backed-up cluster, read after
// its snapshots were cut.
type RecordedEpochs struct {
	// RecordedAt is when the epochs were read (after every snapshot was
	// readyToUse).
	RecordedAt metav1.Time `json:"recordedAt"`
	// Shards lists every FelixShard of the cluster at RecordedAt; a shard
	// that is not listed did not exist then.
	// +listType=map
	// +listMapKey=stream
	// +listMapKey=index
	// +optional
	Shards []ShardEpoch `json:"shards,omitempty"`
}

// ShardEpoch is one shard's assignment epoch.
type ShardEpoch struct {
	// Stream is the shard's FelixStream name; brokers name a shard's logs
	// by stream and index, so a restored cluster's stream of the same
	// name finds them.
	Stream string `json:"stream"`
	// Index is the shard's index within its stream.
	// +kubebuilder:validation:Minimum=0
	Index int32 `json:"index"`
	// Epoch is status.assignment.epoch of the shard (0 when it was never
	// assigned a leader): no record in the shard's logs has a later epoch.
	// +kubebuilder:validation:Minimum=0
	Epoch int64 `json:"epoch"`
}

// FelixBackup is a crash-consistent, per-broker set of VolumeSnapshots of a
// FelixCluster's broker volumes, taken on request by the operator.
//
// +kubebuilder:object:root=true
// +kubebuilder:subresource:status
// +kubebuilder:resource:shortName=fbk,categories=felix
// +kubebuilder:printcolumn:name="Cluster",type=string,JSONPath=`.spec.cluster`
// +kubebuilder:printcolumn:name="Phase",type=string,JSONPath=`.status.phase`
// +kubebuilder:printcolumn:name="Started",type=date,JSONPath=`.status.startedAt`
// +kubebuilder:printcolumn:name="Completed",type=date,JSONPath=`.status.completedAt`
// +kubebuilder:printcolumn:name="Age",type=date,JSONPath=`.metadata.creationTimestamp`
type FelixBackup struct {
	metav1.TypeMeta   `json:",inline"`
	metav1.ObjectMeta `json:"metadata,omitempty"`

	Spec   FelixBackupSpec   `json:"spec"`
	Status FelixBackupStatus `json:"status,omitempty"`
}

// FelixBackupList is a list of FelixBackup.
//
// +kubebuilder:object:root=true
type FelixBackupList struct {
	metav1.TypeMeta `json:",inline"`
	metav1.ListMeta `json:"metadata,omitempty"`
	Items           []FelixBackup `json:"items"`
}
