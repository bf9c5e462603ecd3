package controllers

import (
	"context"
	"fmt"
	"slices"

	rbacv1 "k8s.io/api/rbac/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/log"

	felixv1 "felix.dev/felix/api/v1alpha1"
)

// DefaultBrokerAuthDelegatorRole is the ClusterRole (shipped in config/rbac
// and the chart) that lets brokers create TokenReviews and
// SubjectAccessReviews, to authenticate and authorize scrapers of their
// /metrics by bearer token. The ClusterRoleBinding of the same name is
// shipped with it, without subjects: the operator adds each cluster's
// broker ServiceAccount to it and removes it with the cluster. The
// operator may read and update that one binding only (config/rbac).
const DefaultBrokerAuthDelegatorRole = "felix-broker-auth-delegator"

// brokerAuthSubject is the cluster's broker ServiceAccount as a subject
// of the auth-delegator binding.
func brokerAuthSubject(namespace, cluster string) rbacv1.Subject {
	return rbacv1.Subject{Kind: rbacv1.ServiceAccountKind, Name: BrokerServiceAccountName(cluster), Namespace: namespace}
}

// ensureBrokerAuthBinding adds the cluster's broker ServiceAccount to the
// subjects of the shipped auth-delegator ClusterRoleBinding (named like
// BrokerAuthDelegatorRole), read from the cache (which holds that binding
// only, CacheOptions), so a steady state costs no request. The operator
// never creates the binding: when it is missing (not installed) brokers
// accept client certificates only on /metrics, and it is logged. Nothing
// when the reconciler has no BrokerAuthDelegatorRole.
func (r *FelixClusterReconciler) ensureBrokerAuthBinding(ctx context.Context, c *felixv1.FelixCluster) error {
	return r.editBrokerAuthSubjects(ctx, brokerAuthSubject(c.Namespace, c.Name), true)
}

// deleteBrokerAuthBinding removes the broker ServiceAccount of a cluster
// that is gone from the auth-delegator binding's subjects.
func (r *FelixClusterReconciler) deleteBrokerAuthBinding(ctx context.Context, namespace, cluster string) error {
	return r.editBrokerAuthSubjects(ctx, brokerAuthSubject(namespace, cluster), false)
}

// editBrokerAuthSubjects makes the binding hold (add) or not hold subject
// s, with optimistic concurrency: a stale copy yields errCacheLag.
func (r *FelixClusterReconciler) editBrokerAuthSubjects(ctx context.Context, s rbacv1.Subject, add bool) error {
	name := r.BrokerAuthDelegatorRole
	if name == "" {
		return nil
	}
	var crb rbacv1.ClusterRoleBinding
	if err := r.brokerAuthReader().Get(ctx, types.NamespacedName{Name: name}, &crb); err != nil {
		if apierrors.IsNotFound(err) {
			if add {
				log.FromContext(ctx).Info("the broker auth-delegator ClusterRoleBinding is not installed: brokers accept only client certificates on /metrics", "clusterRoleBinding", name)
			}
			return nil
		}
		return fmt.Errorf("get ClusterRoleBinding %s: %w", name, err)
	}
	if crb.RoleRef.Kind != "ClusterRole" || crb.RoleRef.Name != name {
		return fmt.Errorf("%w: ClusterRoleBinding %s binds %s %s, not ClusterRole %s", errNotOurs, name, crb.RoleRef.Kind, crb.RoleRef.Name, name)
	}
	i := slices.IndexFunc(crb.Subjects, func(x rbacv1.Subject) bool {
		return x.Kind == s.Kind && x.Name == s.Name && x.Namespace == s.Namespace && (x.APIGroup == "" || x.APIGroup == s.APIGroup)
	})
	switch {
	case add && i >= 0, !add && i < 0:
		return nil
	case add:
		crb.Subjects = append(crb.Subjects, s)
	default:
		crb.Subjects = slices.Delete(crb.Subjects, i, i+1)
	}
	err := r.Client.Update(ctx, &crb, client.FieldOwner(OperatorFieldManager))
	if apierrors.IsConflict(err) {
		return fmt.Errorf("update ClusterRoleBinding %s: %w", name, errCacheLag)
	}
	if err != nil {
		return fmt.Errorf("update ClusterRoleBinding %s: %w", name, err)
	}
	return nil
}

// brokerAuthReader reads the auth-delegator binding: the cache, which
// holds the binding named DefaultBrokerAuthDelegatorRole (CacheOptions),
// or the API server for another name.
func (r *FelixClusterReconciler) brokerAuthReader() client.Reader {
	if r.BrokerAuthDelegatorRole == DefaultBrokerAuthDelegatorRole {
		return r.Client
	}
	return r.reader()
}
