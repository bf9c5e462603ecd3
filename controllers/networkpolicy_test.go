package controllers_test

import (
	"context"
	"fmt"
	"testing"
	"time"

	networkingv1 "k8s.io/api/networking/v1"
	"k8s.io/apimachinery/pkg/api/equality"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	felixv1 "felix.dev/felix/api/v1alpha1"
	"felix.dev/felix/controllers"
)

// ingressFor returns the sources the policy admits to a TCP port: nil
// sources with ok=true means everyone.
func ingressFor(np *networkingv1.NetworkPolicy, port int32) (from []networkingv1.NetworkPolicyPeer, ok bool) {
	for _, rule := range np.Spec.Ingress {
		for _, p := range rule.Ports {
			if p.Port != nil && p.Port.IntVal == port && (p.Protocol == nil || *p.Protocol == "TCP") {
				return rule.From, true
			}
		}
	}
	return nil, false
}

func getNetworkPolicy(ns, cluster string) (*networkingv1.NetworkPolicy, error) {
	var np networkingv1.NetworkPolicy
	err := suite.c.Get(context.Background(), client.ObjectKey{Namespace: ns, Name: controllers.NetworkPolicyName(cluster)}, &np)
	return &np, err
}

// TestNetworkPolicy_CreatedUpdatedDeleted: the operator writes the broker
// NetworkPolicy (peer port from the cluster's brokers, client port from
// the default client label, HTTP and metrics ports from anywhere), follows
// a change of spec.security.networkPolicy.clients, and deletes the policy
// when the cluster disables it.
func TestNetworkPolicy_CreatedUpdatedDeleted(t *testing.T) {
	ns := namespace(t)
	c := fastCluster(ns, "np", 1)
	create(t, c)

	brokerPods := &metav1.LabelSelector{MatchLabels: map[string]string{
		controllers.LabelName: "felix", controllers.LabelInstance: "np", controllers.LabelComponent: "broker",
	}}
	check := func(wantClients []networkingv1.NetworkPolicyPeer) func() (bool, string) {
		return func() (bool, string) {
			np, err := getNetworkPolicy(ns, "np")
			if err != nil {
				return false, err.Error()
			}
			if !equality.Semantic.DeepEqual(&np.Spec.PodSelector, brokerPods) {
				return false, fmt.Sprintf("podSelector %v", np.Spec.PodSelector)
			}
			if len(np.OwnerReferences) != 1 || np.OwnerReferences[0].UID != c.UID {
				return false, fmt.Sprintf("owners %v", np.OwnerReferences)
			}
			peers, ok := ingressFor(np, controllers.BrokerPeerPort)
			if !ok || len(peers) != 1 || peers[0].NamespaceSelector != nil || !equality.Semantic.DeepEqual(peers[0].PodSelector, brokerPods) {
				return false, fmt.Sprintf("peer port sources %v (rule %v)", peers, ok)
			}
			clients, ok := ingressFor(np, controllers.BrokerPort)
			if !ok || !equality.Semantic.DeepEqual(clients, wantClients) {
				return false, fmt.Sprintf("client port sources %v (rule %v)", clients, ok)
			}
			for _, port := range []int32{controllers.BrokerHTTPPort, controllers.BrokerMetricsPort} {
				if from, ok := ingressFor(np, port); !ok || len(from) != 0 {
					return false, fmt.Sprintf("port %d sources %v (rule %v), want everyone", port, from, ok)
				}
			}
			if len(np.Spec.PolicyTypes) != 1 || np.Spec.PolicyTypes[0] != networkingv1.PolicyTypeIngress {
				return false, fmt.Sprintf("policy types %v", np.Spec.PolicyTypes)
			}
			return true, ""
		}
	}
	defaultClients := []networkingv1.NetworkPolicyPeer{{PodSelector: &metav1.LabelSelector{MatchLabels: map[string]string{controllers.LabelClient: "np"}}}}
	eventually(t, 20*time.Second, "default NetworkPolicy", check(defaultClients))

	custom := []networkingv1.NetworkPolicyPeer{
		{NamespaceSelector: &metav1.LabelSelector{MatchLabels: map[string]string{"team": "payments"}}},
		{IPBlock: &networkingv1.IPBlock{CIDR: "10.1.0.0/16"}},
	}
	update(t, ns, "np", func(c *felixv1.FelixCluster) { c.Spec.Security.NetworkPolicy.Clients = custom })
	eventually(t, 20*time.Second, "NetworkPolicy with the cluster's clients", check(custom))

	update(t, ns, "np", func(c *felixv1.FelixCluster) { c.Spec.Security.NetworkPolicy.Disabled = true })
	eventually(t, 20*time.Second, "NetworkPolicy deleted", func() (bool, string) {
		_, err := getNetworkPolicy(ns, "np")
		return apierrors.IsNotFound(err), errString(err)
	})

	update(t, ns, "np", func(c *felixv1.FelixCluster) { c.Spec.Security.NetworkPolicy.Disabled = false })
	eventually(t, 20*time.Second, "NetworkPolicy back", check(custom))
}

// TestNetworkPolicy_ForeignPolicyKept: with the policy disabled, a
// NetworkPolicy of the same name the cluster does not own stays.
func TestNetworkPolicy_ForeignPolicyKept(t *testing.T) {
	ns := namespace(t)
	mine := &networkingv1.NetworkPolicy{
		ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: controllers.NetworkPolicyName("fp")},
		Spec:       networkingv1.NetworkPolicySpec{PolicyTypes: []networkingv1.PolicyType{networkingv1.PolicyTypeIngress}},
	}
	create(t, mine)
	c := fastCluster(ns, "fp", 1)
	c.Spec.Security.NetworkPolicy.Disabled = true
	create(t, c)
	waitForBrokers(t, ns, "fp", 1)
	eventually(t, 20*time.Second, "cluster reconciled", func() (bool, string) {
		var got felixv1.FelixCluster
		if err := suite.c.Get(context.Background(), client.ObjectKeyFromObject(c), &got); err != nil {
			return false, err.Error()
		}
		return got.Status.ObservedGeneration == got.Generation, "not observed"
	})
	if _, err := getNetworkPolicy(ns, "fp"); err != nil {
		t.Fatalf("a NetworkPolicy the cluster does not own was touched: %v", err)
	}
}

// update reads the cluster, applies f and writes it, retrying conflicts.
func update(t *testing.T, ns, name string, f func(*felixv1.FelixCluster)) {
	t.Helper()
	eventually(t, 10*time.Second, "cluster update", func() (bool, string) {
		var c felixv1.FelixCluster
		if err := suite.c.Get(context.Background(), client.ObjectKey{Namespace: ns, Name: name}, &c); err != nil {
			return false, err.Error()
		}
		f(&c)
		err := suite.c.Update(context.Background(), &c)
		return err == nil, errString(err)
	})
}
