package controllers

import (
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"

	coordinationv1 "k8s.io/api/coordination/v1"
	corev1 "k8s.io/api/core/v1"
	policyv1 "k8s.io/api/policy/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/utils/ptr"

	felixv1 "felix.dev/felix/api/v1alpha1"
)

// brokerUID is the non-root user and group broker containers run as
// (the distroless "nonroot" user).
const brokerUID = 65532

// brokerServiceAccount is the identity every broker of the cluster runs
// under.
func brokerServiceAccount(c *felixv1.FelixCluster) *corev1.ServiceAccount {
	return &corev1.ServiceAccount{ObjectMeta: metav1.ObjectMeta{
		Name: BrokerServiceAccountName(c.Name), Namespace: c.Namespace, Labels: clusterLabels(c.Name),
	}}
}

// brokerRole grants brokers the least they need: read their own
// FelixBroker and patch its status (registration), renew their own
// heartbeat Lease, watch FelixShards (assignments) and patch their status
// (reports), read FelixStreams, and read FelixUsers and their FelixCluster
// (authorization; a list or watch of the cluster must select it by
// metadata.name). Per-object rules name the cluster's brokers; brokers of
// one cluster share one ServiceAccount, so the Role does not separate them
// from each other: the felix-broker-writes admission policy does
// (config/admission), letting a pod write only its own FelixBroker and
// the reports of the shards it leads.
func brokerRole(c *felixv1.FelixCluster, brokers []string) *rbacv1.Role {
	names := append([]string(nil), brokers...)
	group := felixv1.GroupVersion.Group
	return &rbacv1.Role{
		ObjectMeta: metav1.ObjectMeta{Name: BrokerServiceAccountName(c.Name), Namespace: c.Namespace, Labels: clusterLabels(c.Name)},
		Rules: []rbacv1.PolicyRule{
			{APIGroups: []string{group}, Resources: []string{"felixbrokers"}, ResourceNames: names, Verbs: []string{"get", "watch"}},
			{APIGroups: []string{group}, Resources: []string{"felixbrokers/status"}, ResourceNames: names, Verbs: []string{"get", "patch"}},
			{APIGroups: []string{coordinationv1.GroupName}, Resources: []string{"leases"}, ResourceNames: names, Verbs: []string{"get", "update"}},
			{APIGroups: []string{group}, Resources: []string{"felixshards", "felixstreams", "felixusers"}, Verbs: []string{"get", "list", "watch"}},
			{APIGroups: []string{group}, Resources: []string{"felixshards/status"}, Verbs: []string{"patch"}},
			{APIGroups: []string{group}, Resources: []string{"felixclusters"}, ResourceNames: []string{c.Name}, Verbs: []string{"get", "list", "watch"}},
		},
	}
}

// brokerRoleBinding binds brokerRole to the brokers' ServiceAccount.
func brokerRoleBinding(c *felixv1.FelixCluster) *rbacv1.RoleBinding {
	name := BrokerServiceAccountName(c.Name)
	return &rbacv1.RoleBinding{
		ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: c.Namespace, Labels: clusterLabels(c.Name)},
		RoleRef:    rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "Role", Name: name},
		Subjects:   []rbacv1.Subject{{Kind: rbacv1.ServiceAccountKind, Name: name, Namespace: c.Namespace}},
	}
}

// headlessService gives each broker pod a stable DNS name; it publishes
// not-ready addresses so brokers find each other while they start.
func headlessService(c *felixv1.FelixCluster) *corev1.Service {
	return &corev1.Service{
		ObjectMeta: metav1.ObjectMeta{Name: HeadlessServiceName(c.Name), Namespace: c.Namespace, Labels: clusterLabels(c.Name)},
		Spec: corev1.ServiceSpec{
			ClusterIP:                corev1.ClusterIPNone,
			PublishNotReadyAddresses: true,
			Selector:                 brokerSelector(c.Name),
			Ports:                    brokerServicePorts(),
		},
	}
}

// clientService is the address clients bootstrap from (ready brokers only).
func clientService(c *felixv1.FelixCluster) *corev1.Service {
	return &corev1.Service{
		ObjectMeta: metav1.ObjectMeta{Name: ClientServiceName(c.Name), Namespace: c.Namespace, Labels: clusterLabels(c.Name)},
		Spec: corev1.ServiceSpec{
			Type:     corev1.ServiceTypeClusterIP,
			Selector: brokerSelector(c.Name),
			Ports:    brokerServicePorts(),
		},
	}
}

func brokerServicePorts() []corev1.ServicePort {
	return []corev1.ServicePort{
		{Name: "felix", Port: BrokerPort, TargetPort: intstr.FromString("felix"), Protocol: corev1.ProtocolTCP},
		{Name: "http", Port: BrokerHTTPPort, TargetPort: intstr.FromString("http"), Protocol: corev1.ProtocolTCP},
	}
}

// configMap holds the cluster-wide broker settings; pods take it as
// environment (FELIX_*), and the flags in the pod command repeat them.
func configMap(c *felixv1.FelixCluster) *corev1.ConfigMap {
	hb, exp := timing(c)
	data := map[string]string{
		"FELIX_CLUSTER":            c.Name,
		"FELIX_FSYNC":              string(fsyncMode(c)),
		"FELIX_HEARTBEAT_INTERVAL": hb.String(),
		"FELIX_NODE_EXPIRY":        exp.String(),
		"FELIX_HEADLESS_SERVICE":   HeadlessServiceName(c.Name),
	}
	if iv := c.Spec.Durability.FsyncInterval; iv != nil {
		data["FELIX_FSYNC_INTERVAL"] = iv.Duration.String()
	}
	return &corev1.ConfigMap{
		ObjectMeta: metav1.ObjectMeta{Name: ConfigMapName(c.Name), Namespace: c.Namespace, Labels: clusterLabels(c.Name)},
		Data:       data,
	}
}

func fsyncMode(c *felixv1.FelixCluster) felixv1.FsyncMode {
	if c.Spec.Durability.Fsync == "" {
		return felixv1.FsyncOnCommit
	}
	return c.Spec.Durability.Fsync
}

// podDisruptionBudget lets voluntary disruptions take one broker at a time.
// It says so as minAvailable: brokers-1, an integer, and not as
// maxUnavailable: 1, because the disruption controller turns
// maxUnavailable into a pod count through the scale subresource of the
// pods' controller, which a FelixCluster does not have: a real
// controller-manager then allows no disruption at all ("does not implement
// the scale subresource"), and kubectl drain waits forever.
func podDisruptionBudget(c *felixv1.FelixCluster) *policyv1.PodDisruptionBudget {
	minAvailable := intstr.FromInt32(max(c.Spec.Brokers-1, 0))
	return &policyv1.PodDisruptionBudget{
		ObjectMeta: metav1.ObjectMeta{Name: PDBName(c.Name), Namespace: c.Namespace, Labels: clusterLabels(c.Name)},
		Spec: policyv1.PodDisruptionBudgetSpec{
			MinAvailable: &minAvailable,
			Selector:     &metav1.LabelSelector{MatchLabels: brokerSelector(c.Name)},
		},
	}
}

// felixBroker is the registration record of one broker.
func felixBroker(c *felixv1.FelixCluster, ordinal int32) *felixv1.FelixBroker {
	name := BrokerName(c.Name, ordinal)
	return &felixv1.FelixBroker{
		ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: c.Namespace, Labels: brokerLabels(c.Name, name)},
		Spec:       felixv1.FelixBrokerSpec{Cluster: c.Name, Ordinal: ordinal},
	}
}

// heartbeatLease is a broker's heartbeat Lease; the operator creates it
// so brokers need only get and update on it.
func heartbeatLease(c *felixv1.FelixCluster, broker string, nodeExpirySeconds int32) *coordinationv1.Lease {
	return &coordinationv1.Lease{
		ObjectMeta: metav1.ObjectMeta{Name: broker, Namespace: c.Namespace, Labels: brokerLabels(c.Name, broker)},
		Spec:       coordinationv1.LeaseSpec{LeaseDurationSeconds: ptr.To(nodeExpirySeconds)},
	}
}

// brokerPVC is a broker's data volume claim.
func brokerPVC(c *felixv1.FelixCluster, broker string) *corev1.PersistentVolumeClaim {
	size := resource.MustParse("1Gi")
	if c.Spec.Storage.Size != nil && !c.Spec.Storage.Size.IsZero() {
		size = *c.Spec.Storage.Size
	}
	return &corev1.PersistentVolumeClaim{
		ObjectMeta: metav1.ObjectMeta{Name: PVCName(broker), Namespace: c.Namespace, Labels: brokerLabels(c.Name, broker)},
		Spec: corev1.PersistentVolumeClaimSpec{
			AccessModes:      []corev1.PersistentVolumeAccessMode{corev1.ReadWriteOnce},
			StorageClassName: c.Spec.Storage.StorageClassName,
			Resources:        corev1.VolumeResourceRequirements{Requests: corev1.ResourceList{corev1.ResourceStorage: size}},
		},
	}
}

// brokerArgs is the `felix broker` command line of a broker pod.
func brokerArgs(c *felixv1.FelixCluster) []string {
	hb, exp := timing(c)
	args := []string{
		"broker",
		"--cluster", c.Name,
		"--broker", "$(POD_NAME)",
		"--namespace", "$(NAMESPACE)",
		"--data-dir", DataDir,
		"--listen", fmt.Sprintf(":%d", BrokerPort),
		"--http", fmt.Sprintf(":%d", BrokerHTTPPort),
		// The pod IP, not a DNS name: a broker registers its address at
		// every start, and the address works wherever pods are routable
		// (including the local cluster, which has no cluster DNS).
		"--advertise", fmt.Sprintf("$(POD_IP):%d", BrokerPort),
		// Certificates (tls.crt, tls.key, ca.crt), reloaded on change; the
		// peer port (mutual TLS, brokers only) and the HTTPS metrics port.
		"--tls-dir", TLSDir,
		"--peer-listen", fmt.Sprintf(":%d", BrokerPeerPort),
		"--advertise-peer", fmt.Sprintf("$(POD_IP):%d", BrokerPeerPort),
		"--metrics-listen", fmt.Sprintf(":%d", BrokerMetricsPort),
		"--fsync", string(fsyncMode(c)),
		"--heartbeat-interval", hb.String(),
		"--node-expiry", exp.String(),
	}
	if iv := c.Spec.Durability.FsyncInterval; iv != nil && fsyncMode(c) == felixv1.FsyncPeriodic {
		args = append(args, "--fsync-interval", iv.Duration.String())
	}
	return args
}

// brokerPod is the pod of one broker, managed by the operator directly (no
// StatefulSet) so that it controls identity and restores. It runs as a
// non-root user with a read-only root filesystem; the data volume and a
// small /tmp are the only writable paths. Its certificate Secret is
// mounted read-only at TLSDir. spec.template adds labels, annotations,
// scheduling and pull secrets and may change the user and groups
// (applyPodTemplate, brokerPodSecurityContext); the spec-hash annotation
// covers all of it.
func brokerPod(c *felixv1.FelixCluster, broker string) *corev1.Pod {
	labels := brokerLabels(c.Name, broker)
	fieldEnv := func(name, path string) corev1.EnvVar {
		return corev1.EnvVar{Name: name, ValueFrom: &corev1.EnvVarSource{FieldRef: &corev1.ObjectFieldSelector{FieldPath: path}}}
	}
	probe := func(path string, period, failures int32) *corev1.Probe {
		return &corev1.Probe{
			ProbeHandler:     corev1.ProbeHandler{HTTPGet: &corev1.HTTPGetAction{Path: path, Port: intstr.FromString("http")}},
			PeriodSeconds:    period,
			TimeoutSeconds:   2,
			FailureThreshold: failures,
		}
	}
	pod := &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: broker, Namespace: c.Namespace, Labels: labels},
		Spec: corev1.PodSpec{
			Hostname:                      broker,
			Subdomain:                     HeadlessServiceName(c.Name),
			ServiceAccountName:            BrokerServiceAccountName(c.Name),
			RestartPolicy:                 corev1.RestartPolicyAlways,
			TerminationGracePeriodSeconds: ptr.To[int64](30),
			SecurityContext:               brokerPodSecurityContext(c),
			Containers: []corev1.Container{{
				Name:    "broker",
				Image:   c.Spec.Image,
				Command: []string{"felix"},
				Args:    brokerArgs(c),
				Ports: []corev1.ContainerPort{
					{Name: "felix", ContainerPort: BrokerPort, Protocol: corev1.ProtocolTCP},
					{Name: "http", ContainerPort: BrokerHTTPPort, Protocol: corev1.ProtocolTCP},
					{Name: "peer", ContainerPort: BrokerPeerPort, Protocol: corev1.ProtocolTCP},
					{Name: "metrics", ContainerPort: BrokerMetricsPort, Protocol: corev1.ProtocolTCP},
				},
				Env: []corev1.EnvVar{
					fieldEnv("POD_NAME", "metadata.name"),
					fieldEnv("POD_IP", "status.podIP"),
					fieldEnv("NAMESPACE", "metadata.namespace"),
				},
				EnvFrom: []corev1.EnvFromSource{{ConfigMapRef: &corev1.ConfigMapEnvSource{
					LocalObjectReference: corev1.LocalObjectReference{Name: ConfigMapName(c.Name)},
				}}},
				Resources: c.Spec.Resources,
				// /ready is down while the broker holds for the control
				// plane or opens its stores; /live stays up then ([ID-4]).
				ReadinessProbe: probe("/ready", 5, 1),
				LivenessProbe:  probe("/live", 10, 6),
				SecurityContext: &corev1.SecurityContext{
					RunAsNonRoot:             ptr.To(true),
					ReadOnlyRootFilesystem:   ptr.To(true),
					AllowPrivilegeEscalation: ptr.To(false),
					Capabilities:             &corev1.Capabilities{Drop: []corev1.Capability{"ALL"}},
				},
				VolumeMounts: []corev1.VolumeMount{
					{Name: "data", MountPath: DataDir},
					{Name: "tmp", MountPath: "/tmp"},
					{Name: "tls", MountPath: TLSDir, ReadOnly: true},
				},
			}},
			Volumes: []corev1.Volume{
				{Name: "data", VolumeSource: corev1.VolumeSource{PersistentVolumeClaim: &corev1.PersistentVolumeClaimVolumeSource{ClaimName: PVCName(broker)}}},
				{Name: "tmp", VolumeSource: corev1.VolumeSource{EmptyDir: &corev1.EmptyDirVolumeSource{SizeLimit: ptr.To(resource.MustParse("64Mi"))}}},
				// The broker's certificate Secret, readable by the pod's
				// fsGroup (the broker's group) only. The kubelet swaps the
				// files atomically on renewal; the broker reloads them.
				{Name: "tls", VolumeSource: tlsVolume(c, broker)},
			},
		},
	}
	applyPodTemplate(c, pod)
	if pod.Annotations == nil {
		pod.Annotations = map[string]string{}
	}
	// The default zone spread came with an operator release: left out of
	// the hash while the user sets none, so that upgrading the operator
	// does not roll every broker by surprise (docs/operator.md, "The
	// broker pod template"); pods get it as they are recreated.
	hashed := pod.Spec.DeepCopy()
	if len(c.Spec.Template.TopologySpreadConstraints) == 0 {
		hashed.TopologySpreadConstraints = nil
	}
	pod.Annotations[AnnotationSpecHash] = specHash(hashed, &c.Spec.Template.Metadata)
	return pod
}

// specHash is a short stable hash of a pod spec and the labels and
// annotations spec.template adds to the pod, so a change of either rolls
// the brokers.
func specHash(spec *corev1.PodSpec, meta *felixv1.PodTemplateMetadata) string {
	b, err := json.Marshal(spec)
	if err != nil {
		return "unhashable"
	}
	h := sha256.New()
	h.Write(b)
	if len(meta.Labels)+len(meta.Annotations) > 0 {
		m, err := json.Marshal(meta)
		if err != nil {
			return "unhashable"
		}
		h.Write(m)
	}
	return hex.EncodeToString(h.Sum(nil)[:8])
}

// nodeExpirySeconds rounds a node expiry up to whole seconds for the Lease.
func nodeExpirySeconds(c *felixv1.FelixCluster) int32 {
	_, exp := timing(c)
	s := int32((exp + 999_999_999) / 1_000_000_000)
	if s < 1 {
		s = 1
	}
	return s
}

// tlsVolume is the broker's certificate Secret, readable by the pod's
// fsGroup (the broker's group) only. With cert-manager, ca.crt comes from
// the cluster's trust bundle Secret (TrustBundleSecretName) instead of the
// one cert-manager wrote, so the broker trusts the CA that signs the
// cluster's certificates and not the root above it.
func tlsVolume(c *felixv1.FelixCluster, broker string) corev1.VolumeSource {
	mode := ptr.To[int32](0o440)
	if sourceOf(c) != tlsCertManager {
		return corev1.VolumeSource{Secret: &corev1.SecretVolumeSource{SecretName: BrokerTLSSecretName(broker), DefaultMode: mode}}
	}
	ref := func(name string, keys ...string) corev1.VolumeProjection {
		items := make([]corev1.KeyToPath, 0, len(keys))
		for _, k := range keys {
			items = append(items, corev1.KeyToPath{Key: k, Path: k})
		}
		return corev1.VolumeProjection{Secret: &corev1.SecretProjection{LocalObjectReference: corev1.LocalObjectReference{Name: name}, Items: items}}
	}
	return corev1.VolumeSource{Projected: &corev1.ProjectedVolumeSource{DefaultMode: mode, Sources: []corev1.VolumeProjection{
		ref(BrokerTLSSecretName(broker), SecretKeyTLSCert, SecretKeyTLSKey),
		ref(TrustBundleSecretName(c.Name), SecretKeyCACert),
	}}}
}
