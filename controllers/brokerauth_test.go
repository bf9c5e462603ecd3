package controllers_test

import (
	"context"
	"encoding/json"
	"path/filepath"
	"slices"
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

// installBrokerAuthRBAC creates the shipped auth-delegator ClusterRole and
// its subject-less ClusterRoleBinding (once per API server).
func installBrokerAuthRBAC(t *testing.T, ctx context.Context) {
	t.Helper()
	docs := readYAMLDocs(t, filepath.Join(testenv.RepoRoot(), "config", "rbac", "broker_auth_delegator_role.yaml"))
	if len(docs) != 2 {
		t.Fatalf("broker_auth_delegator_role.yaml: %d documents; want the ClusterRole and its ClusterRoleBinding", len(docs))
	}
	var role rbacv1.ClusterRole
	var crb rbacv1.ClusterRoleBinding
	if err := yaml.Unmarshal(docs[0], &role); err != nil {
		t.Fatal(err)
	}
	if err := yaml.Unmarshal(docs[1], &crb); err != nil {
		t.Fatal(err)
	}
	if role.Name != controllers.DefaultBrokerAuthDelegatorRole || crb.Name != role.Name || crb.RoleRef.Name != role.Name || len(crb.Subjects) != 0 {
		t.Fatalf("shipped role %q and binding %q (to %q, %d subjects); the operator maintains binding %q of role %q, without shipped subjects",
			role.Name, crb.Name, crb.RoleRef.Name, len(crb.Subjects), controllers.DefaultBrokerAuthDelegatorRole, controllers.DefaultBrokerAuthDelegatorRole)
	}
	for _, o := range []client.Object{&role, &crb} {
		if err := suite.c.Create(ctx, o); err != nil && !apierrors.IsAlreadyExists(err) {
			t.Fatal(err)
		}
	}
}

func hasBrokerSubject(ctx context.Context, ns, cluster string) (bool, string) {
	var crb rbacv1.ClusterRoleBinding
	if err := suite.c.Get(ctx, client.ObjectKey{Name: controllers.DefaultBrokerAuthDelegatorRole}, &crb); err != nil {
		return false, err.Error()
	}
	b, _ := json.Marshal(crb.Subjects)
	return slices.ContainsFunc(crb.Subjects, func(s rbacv1.Subject) bool {
		return s.Kind == rbacv1.ServiceAccountKind && s.Namespace == ns && s.Name == controllers.BrokerServiceAccountName(cluster)
	}), string(b)
}

// TestBrokerAuthBinding: the operator adds the cluster's broker
// ServiceAccount to the shipped auth-delegator ClusterRoleBinding, so a
// broker pod's token may create SubjectAccessReviews (its /metrics
// authorizer), and removes it with the cluster, leaving other clusters'
// subjects. It creates no ClusterRoleBinding of its own.
func TestBrokerAuthBinding(t *testing.T) {
	ns := namespace(t)
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	installBrokerAuthRBAC(t, ctx)
	c := fastCluster(ns, "ad", 1)
	create(t, c)
	create(t, fastCluster(ns, "ae", 1))
	for _, cl := range []string{"ad", "ae"} {
		eventually(t, 20*time.Second, "subject "+cl+"-broker", func() (bool, string) { return hasBrokerSubject(ctx, ns, cl) })
	}
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
	var all rbacv1.ClusterRoleBindingList
	if err := suite.c.List(ctx, &all); err != nil {
		t.Fatal(err)
	}
	for _, b := range all.Items {
		if b.Labels[controllers.LabelCluster] != "" {
			t.Errorf("the operator made ClusterRoleBinding %s", b.Name)
		}
	}

	if err := suite.c.Delete(ctx, c); err != nil {
		t.Fatal(err)
	}
	eventually(t, 20*time.Second, "subject ad-broker removed with the cluster", func() (bool, string) {
		ok, s := hasBrokerSubject(ctx, ns, "ad")
		return !ok, s
	})
	if ok, s := hasBrokerSubject(ctx, ns, "ae"); !ok {
		t.Errorf("the other cluster's subject went too: %s", s)
	}
}

// TestBrokerAuthRBAC_OneBindingOnly: the operator's generated role may
// read and update the auth-delegator ClusterRoleBinding by name and no
// other ClusterRoleBinding, and may not create or delete one.
func TestBrokerAuthRBAC_OneBindingOnly(t *testing.T) {
	var role rbacv1.ClusterRole
	docs := readYAMLDocs(t, filepath.Join(testenv.RepoRoot(), "config", "rbac", "role.yaml"))
	if err := yaml.Unmarshal(docs[0], &role); err != nil {
		t.Fatal(err)
	}
	found := false
	for _, r := range role.Rules {
		if !slices.Contains(r.Resources, "clusterrolebindings") && !slices.Contains(r.Resources, "*") {
			continue
		}
		found = true
		if !slices.Equal(r.ResourceNames, []string{controllers.DefaultBrokerAuthDelegatorRole}) {
			t.Errorf("rule %+v grants ClusterRoleBindings beyond %s", r, controllers.DefaultBrokerAuthDelegatorRole)
		}
		for _, v := range r.Verbs {
			if v == "create" || v == "delete" || v == "deletecollection" || v == "*" || v == "escalate" {
				t.Errorf("rule %+v grants %s on ClusterRoleBindings", r, v)
			}
		}
	}
	if !found {
		t.Error("no rule lets the operator maintain the auth-delegator binding")
	}
}
