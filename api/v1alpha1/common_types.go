package v1alpha1

// Condition types used across Felix kinds.
const (
	// ConditionReady is True when the object serves its purpose: a cluster
	// whose brokers are all Up, a stream whose shards all have a leader, a
	// shard whose leader is assigned and reporting.
	ConditionReady = "Ready"
	// ConditionProgressing is True while the operator is moving the object
	// toward its spec (creating pods, registering brokers, placing shards).
	ConditionProgressing = "Progressing"
	// ConditionDegraded is True when the object works with less redundancy
	// than its spec asks for, or is blocked; its message says why.
	ConditionDegraded = "Degraded"
	// ConditionWaiting is True on a shard that has no eligible replica to
	// promote and waits rather than guess ([CP-3]).
	ConditionWaiting = "Waiting"
	// ConditionStorageResized is True on a cluster when every broker's
	// volume claim asks for spec.storage.size and reports at least that
	// capacity; False while a claim is being expanded or cannot be (its
	// reason says why).
	ConditionStorageResized = "StorageResized"
)

// FsyncMode says when a broker syncs its log to stable storage.
// +kubebuilder:validation:Enum=OnCommit;Periodic;None
type FsyncMode string

const (
	// FsyncOnCommit syncs before every acknowledgement; concurrent appends
	// share one sync. Survives machine crashes without losing acknowledged
	// records.
	FsyncOnCommit FsyncMode = "OnCommit"
	// FsyncPeriodic syncs on an interval; a machine crash can lose the
	// acknowledged tail (the storage id rotates then, [ID-3]).
	FsyncPeriodic FsyncMode = "Periodic"
	// FsyncNone never syncs explicitly; the kernel writes back on its own.
	FsyncNone FsyncMode = "None"
)

// AckMode says how many replicas hold a record before its append is
// acknowledged.
// +kubebuilder:validation:Enum=Leader;Quorum;All
type AckMode string

const (
	// AckLeader acknowledges once the leader holds the record.
	AckLeader AckMode = "Leader"
	// AckQuorum acknowledges once a majority of replicas, counted under the
	// storage id they were learned under, hold the record ([RP-5]).
	AckQuorum AckMode = "Quorum"
	// AckAll acknowledges once every replica holds the record.
	AckAll AckMode = "All"
)

// BrokerState is the control plane's view of a broker's liveness.
// +kubebuilder:validation:Enum=Up;Down;Left
type BrokerState string

const (
	// BrokerUp: the broker renewed its heartbeat lease within the node
	// expiry timeout.
	BrokerUp BrokerState = "Up"
	// BrokerDown: no renewal within the node expiry timeout.
	BrokerDown BrokerState = "Down"
	// BrokerLeft: the broker was removed from the cluster.
	BrokerLeft BrokerState = "Left"
)
