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

	// Conditions: Ready (the backup is usable for a restore).
	// +listType=map
	// +listMapKey=type
	// +optional
	Conditions []metav1.Condition `json:"conditions,omitempty"`
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
