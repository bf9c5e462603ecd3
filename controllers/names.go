package controllers

import (
	"fmt"
	"time"

	felixv1 "felix.dev/felix/api/v1alpha1"
)

// Labels and annotations the operator puts on what it creates.
const (
	// LabelCluster names the FelixCluster an object belongs to.
	LabelCluster = "felix.dev/cluster"
	// LabelBroker names the broker (FelixBroker, pod, PVC, Lease) an object
	// belongs to.
	LabelBroker = "felix.dev/broker"
	// LabelStream names the FelixStream a FelixShard belongs to.
	LabelStream = "felix.dev/stream"
	// LabelName, LabelInstance, LabelComponent and LabelManagedBy are the
	// recommended Kubernetes labels.
	LabelName      = "app.kubernetes.io/name"
	LabelInstance  = "app.kubernetes.io/instance"
	LabelComponent = "app.kubernetes.io/component"
	LabelManagedBy = "app.kubernetes.io/managed-by"

	// AnnotationSpecHash on a broker pod is the hash of the pod spec the
	// operator built, so a spec change is visible.
	AnnotationSpecHash = "felix.dev/spec-hash"

	// ZoneLabel is the node label replicas are spread across.
	ZoneLabel = "topology.kubernetes.io/zone"

	// OperatorFieldManager is the field manager of every operator write;
	// brokers write FelixShard status.report as "felix-broker".
	OperatorFieldManager = "felix-operator"
)

// Ports of a broker pod.
const (
	// BrokerPort serves the Felix protocol.
	BrokerPort = 7100
	// BrokerHTTPPort serves /live and /ready, plain HTTP for probes.
	BrokerHTTPPort = 7101
	// BrokerPeerPort serves replication between brokers of one cluster,
	// mutual TLS with broker certificates only.
	BrokerPeerPort = 7102
	// BrokerMetricsPort serves /metrics over HTTPS to authenticated and
	// authorized scrapers.
	BrokerMetricsPort = 7103
	// TLSDir is where a broker's certificate Secret is mounted (tls.crt,
	// tls.key, ca.crt).
	TLSDir = "/etc/felix/tls"
	// DataDir is where a broker's volume is mounted.
	DataDir = "/var/lib/felix"
)

// Timing defaults, equal to the API defaults of FelixClusterSpec.
const (
	defaultHeartbeat  = 2 * time.Second
	defaultNodeExpiry = 10 * time.Second
)

// BrokerName is the name shared by a broker's FelixBroker, pod, PVC and
// heartbeat Lease: <cluster>-<ordinal>.
func BrokerName(cluster string, ordinal int32) string {
	return fmt.Sprintf("%s-%d", cluster, ordinal)
}

// CASecretName is the Secret holding the CA the operator manages for a
// cluster (ca.crt, ca.key).
func CASecretName(cluster string) string { return cluster + "-ca" }

// TrustBundleSecretName is the Secret (key ca.crt only) holding the trust
// bundle of a cluster whose certificates cert-manager issues: the CAs that
// signed its brokers' certificates, taken from the issued chains rather
// than the ca.crt cert-manager writes (the top of the issuer's chain, which
// may sign for others). Broker pods mount its ca.crt in place of theirs.
func TrustBundleSecretName(cluster string) string { return cluster + "-trust" }

// BrokerTLSSecretName is the Secret holding a broker's certificate
// (tls.crt, tls.key, ca.crt), mounted at TLSDir.
func BrokerTLSSecretName(broker string) string { return broker + "-tls" }

// UserSecretName is the Secret holding a FelixUser's credentials (tls.crt,
// tls.key, ca.crt): the user's own name, as Strimzi does for KafkaUsers.
func UserSecretName(user string) string { return user }

// NetworkPolicyName is the NetworkPolicy of a cluster's brokers.
func NetworkPolicyName(cluster string) string { return cluster + "-brokers" }

// PVCName is the name of a broker's data volume claim.
func PVCName(broker string) string { return "data-" + broker }

// BrokerServiceAccountName is the ServiceAccount (and Role and RoleBinding)
// the brokers of a cluster run under.
func BrokerServiceAccountName(cluster string) string { return cluster + "-broker" }

// HeadlessServiceName is the headless Service giving each broker pod a DNS
// name <pod>.<headless>.<namespace>.svc.
func HeadlessServiceName(cluster string) string { return cluster + "-brokers" }

// ClientServiceName is the Service clients connect to.
func ClientServiceName(cluster string) string { return cluster }

// ConfigMapName is the ConfigMap holding a cluster's broker settings.
func ConfigMapName(cluster string) string { return cluster + "-config" }

// PDBName is a cluster's PodDisruptionBudget.
func PDBName(cluster string) string { return cluster + "-brokers" }

// ShardName is the FelixShard of a stream's shard index.
func ShardName(stream string, index int32) string {
	return fmt.Sprintf("%s-%d", stream, index)
}

// clusterLabels are the labels of every object of a cluster.
func clusterLabels(cluster string) map[string]string {
	return map[string]string{
		LabelName:      "felix",
		LabelInstance:  cluster,
		LabelManagedBy: "felix-operator",
		LabelCluster:   cluster,
	}
}

// brokerLabels are the labels of a broker's pod, PVC, Lease and FelixBroker.
func brokerLabels(cluster, broker string) map[string]string {
	l := clusterLabels(cluster)
	l[LabelComponent] = "broker"
	l[LabelBroker] = broker
	return l
}

// brokerSelector selects every broker pod of a cluster.
func brokerSelector(cluster string) map[string]string {
	return map[string]string{
		LabelName:      "felix",
		LabelInstance:  cluster,
		LabelComponent: "broker",
	}
}

// timing returns a cluster's heartbeat interval and node expiry, with the
// API defaults when unset.
func timing(c *felixv1.FelixCluster) (heartbeat, nodeExpiry time.Duration) {
	heartbeat, nodeExpiry = defaultHeartbeat, defaultNodeExpiry
	if c == nil {
		return heartbeat, nodeExpiry
	}
	if d := c.Spec.HeartbeatInterval; d != nil && d.Duration > 0 {
		heartbeat = d.Duration
	}
	if d := c.Spec.NodeExpiry; d != nil && d.Duration > 0 {
		nodeExpiry = d.Duration
	}
	return heartbeat, nodeExpiry
}
