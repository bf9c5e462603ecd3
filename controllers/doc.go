// Package controllers holds the Felix operator's reconcilers. The operator is
// the control plane: it runs broker pods, keeps the registry of brokers
// (storage id + incarnation), watches their heartbeats, reads each shard
// leader's report and decides placement. It never carries records.
package controllers

// RBAC the operator needs, generated into config/rbac/role.yaml.
// TokenReviews and SubjectAccessReviews authenticate and authorize
// scrapers of the operator's /metrics; they and nodes (zones) are
// cluster-scoped, so a namespace-scoped install grants them by a
// ClusterRole or goes without (docs/security.md).
//
// +kubebuilder:rbac:groups=felix.dev,resources=felixclusters;felixbrokers;felixstreams;felixshards;felixbackups;felixscheduledbackups,verbs=get;list;watch;create;update;patch;delete
// +kubebuilder:rbac:groups=felix.dev,resources=felixclusters/status;felixbrokers/status;felixstreams/status;felixshards/status;felixbackups/status;felixscheduledbackups/status,verbs=get;update;patch
// +kubebuilder:rbac:groups=felix.dev,resources=felixclusters/finalizers;felixbrokers/finalizers;felixstreams/finalizers;felixshards/finalizers;felixbackups/finalizers;felixscheduledbackups/finalizers,verbs=update
// +kubebuilder:rbac:groups=felix.dev,resources=felixusers,verbs=get;list;watch
// +kubebuilder:rbac:groups=coordination.k8s.io,resources=leases,verbs=get;list;watch;create;update;patch;delete
// +kubebuilder:rbac:groups="",resources=pods;services;configmaps;persistentvolumeclaims;serviceaccounts,verbs=get;list;watch;create;update;patch;delete
// +kubebuilder:rbac:groups="",resources=events,verbs=create;patch
// +kubebuilder:rbac:groups="",resources=nodes,verbs=get;list;watch
// +kubebuilder:rbac:groups=storage.k8s.io,resources=storageclasses,verbs=get
// +kubebuilder:rbac:groups=events.k8s.io,resources=events,verbs=create;patch
// +kubebuilder:rbac:groups=rbac.authorization.k8s.io,resources=clusterrolebindings,verbs=get;list;watch;update;patch,resourceNames=felix-broker-auth-delegator
// +kubebuilder:rbac:groups=rbac.authorization.k8s.io,resources=clusterroles,verbs=bind,resourceNames=felix-broker-auth-delegator
// +kubebuilder:rbac:groups=rbac.authorization.k8s.io,resources=roles;rolebindings,verbs=get;list;watch;create;update;patch;delete
// +kubebuilder:rbac:groups=networking.k8s.io,resources=networkpolicies,verbs=get;list;watch;create;update;patch;delete
// +kubebuilder:rbac:groups=policy,resources=poddisruptionbudgets,verbs=get;list;watch;create;update;patch;delete
// +kubebuilder:rbac:groups=authentication.k8s.io,resources=tokenreviews,verbs=create
// +kubebuilder:rbac:groups=authorization.k8s.io,resources=subjectaccessreviews,verbs=create
// +kubebuilder:rbac:groups=snapshot.storage.k8s.io,resources=volumesnapshots,verbs=get;list;watch;create;delete
