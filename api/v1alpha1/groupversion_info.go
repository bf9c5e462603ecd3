// Package v1alpha1 holds the Felix API, group felix.dev, version v1alpha1:
// FelixCluster (brokers), FelixBroker (one registration record per broker),
// FelixStream (a sharded log), FelixShard (one per stream shard) and
// FelixBackup (VolumeSnapshots of a cluster's broker volumes),
// FelixScheduledBackup (FelixBackups on a cron schedule, with retention)
// and FelixUser (a client identity with its grants).
//
// +kubebuilder:object:generate=true
// +groupName=felix.dev
package v1alpha1

import (
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
)

// GroupVersion is the group and version of every kind in this package.
var GroupVersion = schema.GroupVersion{Group: "felix.dev", Version: "v1alpha1"}

// AddToScheme registers every kind of this package with a scheme.
func AddToScheme(s *runtime.Scheme) error {
	s.AddKnownTypes(GroupVersion,
		&FelixCluster{}, &FelixClusterList{},
		&FelixBroker{}, &FelixBrokerList{},
		&FelixStream{}, &FelixStreamList{},
		&FelixShard{}, &FelixShardList{},
		&FelixBackup{}, &FelixBackupList{},
		&FelixScheduledBackup{}, &FelixScheduledBackupList{},
		&FelixUser{}, &FelixUserList{},
	)
	metav1.AddToGroupVersion(s, GroupVersion)
	return nil
}
