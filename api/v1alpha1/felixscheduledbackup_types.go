package v1alpha1

import (
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// FelixScheduledBackupSpec says which cluster to back up, when, and how
// many of the backups to keep.
type FelixScheduledBackupSpec struct {
	// Cluster is the FelixCluster (same namespace) each scheduled
	// FelixBackup backs up.
	// +kubebuilder:validation:MinLength=1
	Cluster string `json:"cluster"`

	// Schedule is a five-field cron expression (minute hour day-of-month
	// month day-of-week), evaluated in UTC: "0 3 * * *" is every day at
	// 03:00 UTC. Items are `*`, values, ranges `a-b`, steps `/s` and
	// comma lists; months JAN..DEC and days SUN..SAT may be named. No
	// seconds field and no @daily-style macros. An expression the
	// operator cannot parse sets the Ready condition False with reason
	// InvalidSchedule.
	// +kubebuilder:validation:Pattern=`^\s*\S+(\s+\S+){4}\s*$`
	Schedule string `json:"schedule"`

	// Suspend stops new backups while true; retention still prunes.
	// Resuming takes at most one catch-up backup, for the latest time
	// missed while suspended.
	// +optional
	Suspend bool `json:"suspend,omitempty"`

	// Immediate takes a backup as soon as the scheduled backup is
	// created (its first reconcile), before the first scheduled time.
	// +optional
	Immediate bool `json:"immediate,omitempty"`

	// Retention bounds the FelixBackups this schedule keeps; without it
	// every backup is kept.
	// +optional
	Retention *BackupRetention `json:"retention,omitempty"`

	// BackupOwnerReference says whether the schedule owns the backups it
	// takes. None (the default): the backups outlive the schedule, and
	// deleting the schedule deletes no backup. Self: every backup carries
	// an owner reference to the schedule, so deleting the schedule deletes
	// its backups (and their VolumeSnapshots) through the garbage
	// collector.
	// +kubebuilder:default=None
	// +optional
	BackupOwnerReference BackupOwnerReference `json:"backupOwnerReference,omitempty"`

	// BackupLabels are added to every FelixBackup the schedule creates
	// (the operator's own felix.dev/scheduled-backup label wins on a
	// clash).
	// +optional
	BackupLabels map[string]string `json:"backupLabels,omitempty"`
}

// BackupRetention says which finished backups of a schedule are deleted.
// A backup is deleted when either bound says so, except that the newest
// Completed backup and any backup a FelixCluster of the namespace names in
// spec.restore.backup are always kept, and Pending or Running backups are
// never deleted.
// +kubebuilder:validation:XValidation:rule="has(self.keep) || has(self.maxAge)",message="retention needs keep, maxAge or both"
type BackupRetention struct {
	// Keep is how many of the newest Completed backups are kept; older
	// Completed ones are deleted. The newest Keep Failed backups are kept
	// too (for their conditions), older Failed ones deleted.
	// +kubebuilder:validation:Minimum=1
	// +optional
	Keep *int32 `json:"keep,omitempty"`

	// MaxAge deletes finished backups scheduled longer ago than this
	// (e.g. "168h"), even within Keep.
	// +optional
	MaxAge *metav1.Duration `json:"maxAge,omitempty"`
}

// FelixScheduledBackupStatus is the observed state of a
// FelixScheduledBackup.
type FelixScheduledBackupStatus struct {
	// ObservedGeneration is the spec generation the status describes.
	// +optional
	ObservedGeneration int64 `json:"observedGeneration,omitempty"`

	// LastScheduleTime is the last scheduled time the operator handled:
	// it created a backup for it, or skipped it because the previous
	// backup was still Pending or Running.
	// +optional
	LastScheduleTime *metav1.Time `json:"lastScheduleTime,omitempty"`

	// NextScheduleTime is the next time a backup is due; unset while
	// suspended or the schedule is invalid.
	// +optional
	NextScheduleTime *metav1.Time `json:"nextScheduleTime,omitempty"`

	// LastBackup is the FelixBackup created last.
	// +optional
	LastBackup string `json:"lastBackup,omitempty"`

	// LastSuccessfulBackup is the newest Completed FelixBackup of the
	// schedule.
	// +optional
	LastSuccessfulBackup string `json:"lastSuccessfulBackup,omitempty"`

	// Conditions: Ready (backups are being taken on schedule); False with
	// reason InvalidSchedule, ClusterNotFound or Suspended.
	// +listType=map
	// +listMapKey=type
	// +optional
	Conditions []metav1.Condition `json:"conditions,omitempty"`
}

// FelixScheduledBackup takes a FelixBackup of a cluster on a cron
// schedule and deletes old ones by its retention. Its name is at most 48
// characters: backups are named <name>-<yyyymmddhhmmss>.
//
// +kubebuilder:object:root=true
// +kubebuilder:subresource:status
// +kubebuilder:resource:shortName=fsb,categories=felix
// +kubebuilder:validation:XValidation:rule="size(self.metadata.name) <= 48",message="a FelixScheduledBackup name is at most 48 characters (its backups append -yyyymmddhhmmss)"
// +kubebuilder:printcolumn:name="Cluster",type=string,JSONPath=`.spec.cluster`
// +kubebuilder:printcolumn:name="Schedule",type=string,JSONPath=`.spec.schedule`
// +kubebuilder:printcolumn:name="Last",type=date,JSONPath=`.status.lastScheduleTime`
// +kubebuilder:printcolumn:name="Next",type=date,JSONPath=`.status.nextScheduleTime`
// +kubebuilder:printcolumn:name="Age",type=date,JSONPath=`.metadata.creationTimestamp`
type FelixScheduledBackup struct {
	metav1.TypeMeta   `json:",inline"`
	metav1.ObjectMeta `json:"metadata,omitempty"`

	Spec   FelixScheduledBackupSpec   `json:"spec"`
	Status FelixScheduledBackupStatus `json:"status,omitempty"`
}

// FelixScheduledBackupList is a list of FelixScheduledBackup.
//
// +kubebuilder:object:root=true
type FelixScheduledBackupList struct {
	metav1.TypeMeta `json:",inline"`
	metav1.ListMeta `json:"metadata,omitempty"`
	Items           []FelixScheduledBackup `json:"items"`
}

// BackupOwnerReference is who owns the backups a schedule takes.
// +kubebuilder:validation:Enum=None;Self
type BackupOwnerReference string

// Owners of scheduled backups.
const (
	// BackupOwnerNone: no owner; a backup stays until it is deleted (by
	// retention or by hand).
	BackupOwnerNone BackupOwnerReference = "None"
	// BackupOwnerSelf: the FelixScheduledBackup owns its backups.
	BackupOwnerSelf BackupOwnerReference = "Self"
)
