package felixd

import (
	"context"
	"errors"
	"testing"

	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"

	felixv1 "felix.dev/felix/api/v1alpha1"
)

// testCheckStreamAPI is the API half of TestFD4_RefusesStreamWithRetention.
func testCheckStreamAPI(t *testing.T) {
	e := apiServer(t)
	ctx := context.Background()
	ns := "default"
	size := resource.MustParse("1Gi")
	// The decision, on every shape of spec.
	for _, tc := range []struct {
		name    string
		spec    felixv1.FelixStreamSpec
		refused bool
	}{
		{"fenced-ack-leader", felixv1.FelixStreamSpec{Cluster: "c", Fenced: true, Ack: felixv1.AckLeader}, true},
		{"fenced-ack-quorum", felixv1.FelixStreamSpec{Cluster: "c", Fenced: true, Ack: felixv1.AckQuorum}, false},
		{"fenced-ack-all", felixv1.FelixStreamSpec{Cluster: "c", Fenced: true, Ack: felixv1.AckAll}, false},
		{"fenced-retention-off", felixv1.FelixStreamSpec{Cluster: "c", Fenced: true}, false},
		{"fenced-empty-retention", felixv1.FelixStreamSpec{Cluster: "c", Fenced: true, Retention: &felixv1.RetentionSpec{}}, false},
		{"fenced-retention-on", felixv1.FelixStreamSpec{Cluster: "c", Fenced: true, Retention: &felixv1.RetentionSpec{MaxBytes: &size}}, true},
		{"unfenced-size-retention", felixv1.FelixStreamSpec{Cluster: "c", Retention: &felixv1.RetentionSpec{MaxBytes: &size}}, true},
		{"unfenced-age-retention", felixv1.FelixStreamSpec{Cluster: "c", Retention: &felixv1.RetentionSpec{MaxAge: &metav1.Duration{Duration: 3600e9}}}, true},
		{"unfenced-retention-off", felixv1.FelixStreamSpec{Cluster: "c"}, true},
	} {
		t.Run("spec/"+tc.name, func(t *testing.T) {
			err := checkStreamSpec(types.NamespacedName{Namespace: ns, Name: tc.name}, &tc.spec)
			if got := IsStreamRefused(err); got != tc.refused {
				t.Fatalf("checkStreamSpec: %v, refused %v, want %v", err, got, tc.refused)
			}
		})
	}
	// Through the API server: the objects it accepts. (A stream with
	// retention on cannot be created at present: the API's CEL rule reads
	// self.fenced, which is absent when false, so it refuses every
	// retention; see the report of issue 11.)
	for _, tc := range []struct {
		name    string
		spec    felixv1.FelixStreamSpec
		refused bool
	}{
		{"fenced-retention-off", felixv1.FelixStreamSpec{Cluster: "c", Fenced: true}, false},
		{"fenced-empty-retention", felixv1.FelixStreamSpec{Cluster: "c", Fenced: true, Retention: &felixv1.RetentionSpec{}}, false},
		{"unfenced-retention-off", felixv1.FelixStreamSpec{Cluster: "c"}, true},
	} {
		t.Run("api/"+tc.name, func(t *testing.T) {
			s := &felixv1.FelixStream{ObjectMeta: metav1.ObjectMeta{Name: "fd4-" + tc.name, Namespace: ns}, Spec: tc.spec}
			if err := e.Client.Create(ctx, s); err != nil {
				t.Fatalf("create: %v", err)
			}
			err := CheckStream(ctx, e.Client, types.NamespacedName{Namespace: ns, Name: s.Name})
			if got := errors.Is(err, ErrRetention); got != tc.refused {
				t.Fatalf("CheckStream: %v, refused %v, want %v", err, got, tc.refused)
			}
		})
	}
	t.Run("missing", func(t *testing.T) {
		if err := CheckStream(ctx, e.Client, types.NamespacedName{Namespace: ns, Name: "absent"}); err == nil {
			t.Fatal("a missing FelixStream passed the check")
		}
	})
	// The API itself refuses retention on a fenced stream [TR-7].
	t.Run("api-refuses-fenced-with-retention", func(t *testing.T) {
		s := &felixv1.FelixStream{ObjectMeta: metav1.ObjectMeta{Name: "fd4-both", Namespace: ns},
			Spec: felixv1.FelixStreamSpec{Cluster: "c", Fenced: true, Retention: &felixv1.RetentionSpec{MaxBytes: &size}}}
		if err := e.Client.Create(ctx, s); err == nil {
			t.Fatal("the API accepted retention on a fenced stream")
		}
	})
}
