package controllers

import (
	"context"
	"encoding/json"
	"fmt"

	rbacv1 "k8s.io/api/rbac/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/client"

	felixv1 "felix.dev/felix/api/v1alpha1"
)

// DefaultBrokerAuthDelegatorRole is the ClusterRole (shipped in config/rbac
// and the chart) that lets brokers create TokenReviews and
// SubjectAccessReviews, to authenticate and authorize scrapers of their
// /metrics by bearer token.
const DefaultBrokerAuthDelegatorRole = "felix-broker-auth-delegator"

// BrokerAuthBindingName is the ClusterRoleBinding of a cluster's broker
// ServiceAccount to the auth-delegator ClusterRole:
// felix-broker.<namespace>.<cluster> (a namespace name has no dot, so
// no two clusters share one).
func BrokerAuthBindingName(namespace, cluster string) string {
	return "felix-broker." + namespace + "." + cluster
}

// brokerAuthBinding binds role to the cluster's broker ServiceAccount. It
// is cluster-scoped, so it cannot be owned by the FelixCluster: the
// operator deletes it when it sees the cluster gone, and it carries the
// cluster's labels plus its namespace for cleaning up by hand.
func brokerAuthBinding(c *felixv1.FelixCluster, role string) *rbacv1.ClusterRoleBinding {
	labels := clusterLabels(c.Name)
	labels[labelClusterNamespace] = c.Namespace
	return &rbacv1.ClusterRoleBinding{
		TypeMeta:   metav1.TypeMeta{APIVersion: rbacv1.SchemeGroupVersion.String(), Kind: "ClusterRoleBinding"},
		ObjectMeta: metav1.ObjectMeta{Name: BrokerAuthBindingName(c.Namespace, c.Name), Labels: labels},
		RoleRef:    rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "ClusterRole", Name: role},
		Subjects:   []rbacv1.Subject{{Kind: rbacv1.ServiceAccountKind, Name: BrokerServiceAccountName(c.Name), Namespace: c.Namespace}},
	}
}

// labelClusterNamespace on a cluster-scoped object names the namespace of
// the FelixCluster it belongs to.
const labelClusterNamespace = "felix.dev/cluster-namespace"

// ensureBrokerAuthBinding server-side applies the cluster's auth-delegator
// binding (no read, so no cluster-wide cache of ClusterRoleBindings).
// Nothing when the reconciler has no BrokerAuthDelegatorRole.
func (r *FelixClusterReconciler) ensureBrokerAuthBinding(ctx context.Context, c *felixv1.FelixCluster) error {
	if r.BrokerAuthDelegatorRole == "" {
		return nil
	}
	crb := brokerAuthBinding(c, r.BrokerAuthDelegatorRole)
	body, err := json.Marshal(crb)
	if err != nil {
		return err
	}
	target := &rbacv1.ClusterRoleBinding{ObjectMeta: metav1.ObjectMeta{Name: crb.Name}}
	if err := r.Client.Patch(ctx, target, client.RawPatch(types.ApplyPatchType, body), client.FieldOwner(OperatorFieldManager), client.ForceOwnership); err != nil {
		return fmt.Errorf("ClusterRoleBinding %s: %w", crb.Name, err)
	}
	return nil
}

// deleteBrokerAuthBinding removes the binding of a cluster that is gone.
func (r *FelixClusterReconciler) deleteBrokerAuthBinding(ctx context.Context, namespace, cluster string) error {
	if r.BrokerAuthDelegatorRole == "" {
		return nil
	}
	crb := &rbacv1.ClusterRoleBinding{ObjectMeta: metav1.ObjectMeta{Name: BrokerAuthBindingName(namespace, cluster)}}
	if err := r.Client.Delete(ctx, crb); err != nil && !apierrors.IsNotFound(err) {
		return fmt.Errorf("delete ClusterRoleBinding %s: %w", crb.Name, err)
	}
	return nil
}
