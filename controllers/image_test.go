package controllers_test

import (
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	felixv1 "felix.dev/felix/api/v1alpha1"
	"felix.dev/felix/controllers"
)

// suiteBrokerImage is the envtest operator's default broker image.
const suiteBrokerImage = "felix:suite-default"

// TestBrokerImage: spec.image wins; without it the image resolved before
// (status.image) stays across an operator upgrade unless the cluster
// follows the operator's image; a new cluster takes the operator's.
func TestBrokerImage(t *testing.T) {
	cases := []struct {
		name                 string
		spec, status, follow string
		def, want            string
	}{
		{"spec wins", "felix:1.2", "felix:1.0", "true", "felix:2.0", "felix:1.2"},
		{"new cluster takes the operator's", "", "", "", "felix:2.0", "felix:2.0"},
		{"resolved before: kept across an operator upgrade", "", "felix:1.0", "", "felix:2.0", "felix:1.0"},
		{"following the operator", "", "felix:1.0", "true", "felix:2.0", "felix:2.0"},
		{"following an operator without a default keeps the old", "", "felix:1.0", "true", "", "felix:1.0"},
		{"nothing names one", "", "", "", "", ""},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			c := &felixv1.FelixCluster{Spec: felixv1.FelixClusterSpec{Image: tc.spec}, Status: felixv1.FelixClusterStatus{Image: tc.status}}
			if tc.follow != "" {
				c.Annotations = map[string]string{felixv1.AnnotationFollowOperatorImage: tc.follow}
			}
			if got := controllers.BrokerImage(c, tc.def); got != tc.want {
				t.Fatalf("brokerImage = %q, want %q", got, tc.want)
			}
		})
	}
}

// TestCluster_ImageDefaultsToTheOperators: a FelixCluster with only a
// broker count is valid; its pods run the operator's default image, which
// status.image records.
func TestCluster_ImageDefaultsToTheOperators(t *testing.T) {
	ns := namespace(t)
	create(t, &felixv1.FelixCluster{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "noimg"},
		Spec: felixv1.FelixClusterSpec{Brokers: 1}})
	eventually(t, 10*time.Second, "the pod on the operator's image", func() (bool, string) {
		img := podImage(ns, "noimg-0")
		return img == suiteBrokerImage, img
	})
	eventually(t, 10*time.Second, "status.image", func() (bool, string) {
		c := getCluster(t, ns, "noimg")
		return c.Status.Image == suiteBrokerImage, c.Status.Image
	})
	if c := getCluster(t, ns, "noimg"); c.Spec.Image != "" {
		t.Fatalf("the operator wrote spec.image %q: the spec is the user's", c.Spec.Image)
	}
}
