package controllers_test

import (
	"context"
	"encoding/json"
	"path/filepath"
	"testing"
	"time"

	authorizationv1 "k8s.io/api/authorization/v1"
	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/util/yaml"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"felix.dev/felix/controllers"
	"felix.dev/felix/internal/testenv"
)

// TestBrokerAuthBinding: the operator binds the cluster's broker
// ServiceAccount to the shipped auth-delegator ClusterRole, so a broker
// pod's token may create SubjectAccessReviews (its /metrics authorizer),
// and removes the binding with the cluster.
func TestBrokerAuthBinding(t *testing.T) {
	ns := namespace(t)
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	var role rbacv1.ClusterRole
	docs := readYAMLDocs(t, filepath.Join(testenv.RepoRoot(), "config", "rbac", "broker_auth_delegator_role.yaml"))
	if err := yaml.Unmarshal(docs[0], &role); err != nil {
		t.Fatal(err)
	}
	if role.Name != controllers.DefaultBrokerAuthDelegatorRole {
		t.Fatalf("shipped role %q; the operator binds %q", role.Name, controllers.DefaultBrokerAuthDelegatorRole)
	}
	if err := suite.c.Create(ctx, &role); err != nil && !apierrors.IsAlreadyExists(err) {
		t.Fatal(err)
	}
	c := fastCluster(ns, "ad", 1)
	create(t, c)
	name := controllers.BrokerAuthBindingName(ns, "ad")
	eventually(t, 20*time.Second, "ClusterRoleBinding "+name, func() (bool, string) {
		var crb rbacv1.ClusterRoleBinding
		if err := suite.c.Get(ctx, client.ObjectKey{Name: name}, &crb); err != nil {
			return false, err.Error()
		}
		ok := crb.RoleRef.Name == role.Name && len(crb.Subjects) == 1 &&
			crb.Subjects[0].Name == controllers.BrokerServiceAccountName("ad") && crb.Subjects[0].Namespace == ns
		b, _ := json.Marshal(crb)
		return ok, string(b)
	})
	eventually(t, 20*time.Second, "pod ad-0", func() (bool, string) {
		var p corev1.Pod
		err := suite.c.Get(ctx, client.ObjectKey{Namespace: ns, Name: "ad-0"}, &p)
		return err == nil, errString(err)
	})
	cfg := brokerConfig(t, ctx, ns, "ad-broker", "ad-0")
	bc, err := brokerClient(cfg)
	if err != nil {
		t.Fatal(err)
	}
	eventually(t, 10*time.Second, "broker creates a SubjectAccessReview", func() (bool, string) {
		sar := &authorizationv1.SubjectAccessReview{Spec: authorizationv1.SubjectAccessReviewSpec{
			User: "someone", NonResourceAttributes: &authorizationv1.NonResourceAttributes{Path: "/metrics", Verb: "get"},
		}}
		err := bc.Create(ctx, sar)
		return err == nil, errString(err)
	})

	if err := suite.c.Delete(ctx, c); err != nil {
		t.Fatal(err)
	}
	eventually(t, 20*time.Second, "ClusterRoleBinding removed with the cluster", func() (bool, string) {
		var crb rbacv1.ClusterRoleBinding
		err := suite.c.Get(ctx, client.ObjectKey{Name: name}, &crb)
		return apierrors.IsNotFound(err), errString(err)
	})
}
