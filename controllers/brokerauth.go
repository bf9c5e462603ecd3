package controllers

import (
	"context"
	"fmt"

	rbacv1 "k8s.io/api/rbac/v1"
	"k8s.io/apimachinery/pkg/api/equality"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
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

// ensureBrokerAuthBinding creates or repairs the cluster's
// auth-delegator binding, read from the cache (which holds only
// ClusterRoleBindings labelled with a Felix cluster, CacheOptions), so a
// steady state costs no request. Nothing when the reconciler has no
// BrokerAuthDelegatorRole.
func (r *FelixClusterReconciler) ensureBrokerAuthBinding(ctx context.Context, c *felixv1.FelixCluster) error {
	if r.BrokerAuthDelegatorRole == "" {
		return nil
	}
	want := brokerAuthBinding(c, r.BrokerAuthDelegatorRole)
	create := func() error {
		if err := r.Client.Create(ctx, want, client.FieldOwner(OperatorFieldManager)); err != nil && !apierrors.IsAlreadyExists(err) {
			return fmt.Errorf("create ClusterRoleBinding %s: %w", want.Name, err)
		}
		return nil
	}
	var have rbacv1.ClusterRoleBinding
	switch err := r.Client.Get(ctx, client.ObjectKey{Name: want.Name}, &have); {
	case apierrors.IsNotFound(err):
		return create()
	case err != nil:
		return err
	}
	if have.RoleRef != want.RoleRef {
		// The role reference is immutable (another --broker-auth-delegator-role):
		// replace the binding.
		if err := r.Client.Delete(ctx, &have, client.Preconditions{UID: &have.UID}); err != nil && !apierrors.IsNotFound(err) {
			return fmt.Errorf("replace ClusterRoleBinding %s: %w", want.Name, err)
		}
		return create()
	}
	if equality.Semantic.DeepEqual(have.Subjects, want.Subjects) && labelsContain(have.Labels, want.Labels) {
		return nil
	}
	have.Subjects = want.Subjects
	mergeLabels(&have, want.Labels)
	if err := r.Client.Update(ctx, &have, client.FieldOwner(OperatorFieldManager)); err != nil {
		return fmt.Errorf("update ClusterRoleBinding %s: %w", want.Name, err)
	}
	return nil
}

func labelsContain(have, want map[string]string) bool {
	for k, v := range want {
		if have[k] != v {
			return false
		}
	}
	return true
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
