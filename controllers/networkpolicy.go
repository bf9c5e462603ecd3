package controllers

import (
	"context"
	"fmt"

	corev1 "k8s.io/api/core/v1"
	networkingv1 "k8s.io/api/networking/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/intstr"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/controller/controllerutil"

	felixv1 "felix.dev/felix/api/v1alpha1"
)

// LabelClient on a pod of the cluster's namespace admits it to the client
// port of the cluster named by its value, when the cluster's
// spec.security.networkPolicy.clients is empty.
const LabelClient = "felix.dev/client"

// brokerNetworkPolicy is the ingress policy of a cluster's broker pods, or
// nil when spec.security.networkPolicy.disabled. Each port admits:
//   - BrokerPeerPort: the cluster's own broker pods only;
//   - BrokerPort: spec.security.networkPolicy.clients, by default the pods
//     of the namespace labelled LabelClient=<cluster>;
//   - BrokerHTTPPort (probes) and BrokerMetricsPort (authenticated
//     scrapes): anyone.
//
// Any other port of a broker pod is closed to ingress. Egress is left
// alone (brokers reach the API server and each other).
func brokerNetworkPolicy(c *felixv1.FelixCluster) *networkingv1.NetworkPolicy {
	spec := c.Spec.Security.NetworkPolicy
	if spec.Disabled {
		return nil
	}
	tcp := func(port int32) []networkingv1.NetworkPolicyPort {
		p := intstr.FromInt32(port)
		proto := corev1.ProtocolTCP
		return []networkingv1.NetworkPolicyPort{{Protocol: &proto, Port: &p}}
	}
	clients := make([]networkingv1.NetworkPolicyPeer, 0, len(spec.Clients))
	for i := range spec.Clients {
		clients = append(clients, *spec.Clients[i].DeepCopy())
	}
	if len(clients) == 0 {
		clients = []networkingv1.NetworkPolicyPeer{{PodSelector: &metav1.LabelSelector{MatchLabels: map[string]string{LabelClient: c.Name}}}}
	}
	brokers := []networkingv1.NetworkPolicyPeer{{PodSelector: &metav1.LabelSelector{MatchLabels: brokerSelector(c.Name)}}}
	return &networkingv1.NetworkPolicy{
		ObjectMeta: metav1.ObjectMeta{Name: NetworkPolicyName(c.Name), Namespace: c.Namespace, Labels: clusterLabels(c.Name)},
		Spec: networkingv1.NetworkPolicySpec{
			PodSelector: metav1.LabelSelector{MatchLabels: brokerSelector(c.Name)},
			PolicyTypes: []networkingv1.PolicyType{networkingv1.PolicyTypeIngress},
			Ingress: []networkingv1.NetworkPolicyIngressRule{
				{Ports: tcp(BrokerPeerPort), From: brokers},
				{Ports: tcp(BrokerPort), From: clients},
				// No From: every source.
				{Ports: append(tcp(BrokerHTTPPort), tcp(BrokerMetricsPort)...)},
			},
		},
	}
}

// ensureNetworkPolicy writes the cluster's broker NetworkPolicy, or
// deletes the one the operator wrote when the cluster disables it. A
// NetworkPolicy of that name the cluster does not own is never deleted.
func (r *FelixClusterReconciler) ensureNetworkPolicy(ctx context.Context, c *felixv1.FelixCluster, obs *clusterObservation) error {
	want := brokerNetworkPolicy(c)
	if want != nil {
		return r.upsert(ctx, c, want, func(existing client.Object) {
			mergeLabels(existing, want.Labels)
			existing.(*networkingv1.NetworkPolicy).Spec = want.Spec
		}, obs)
	}
	var np networkingv1.NetworkPolicy
	err := r.Client.Get(ctx, client.ObjectKey{Namespace: c.Namespace, Name: NetworkPolicyName(c.Name)}, &np)
	switch {
	case apierrors.IsNotFound(err):
		return nil
	case err != nil:
		return err
	}
	if owned, _ := controllerutil.HasOwnerReference(np.OwnerReferences, c, r.Client.Scheme()); !owned {
		return nil
	}
	if err := r.Client.Delete(ctx, &np, client.Preconditions{UID: &np.UID}); err != nil && !apierrors.IsNotFound(err) {
		return fmt.Errorf("delete NetworkPolicy %s: %w", np.Name, err)
	}
	return nil
}
