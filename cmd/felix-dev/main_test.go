package main

import (
	"path/filepath"
	"testing"

	felixv1 "felix.dev/felix/api/v1alpha1"
	"felix.dev/felix/broker/auth"
	"felix.dev/felix/broker/controlplane"
)

// allows reports whether grants allow op on stream, as a broker reads
// them.
func allows(t *testing.T, grants []felixv1.StreamGrant, stream string, op felixv1.StreamOperation) bool {
	t.Helper()
	gs, unknown := controlplane.Grants(grants)
	if len(unknown) != 0 {
		t.Fatalf("grants a broker does not know: %v", unknown)
	}
	o, err := auth.ParseOperation(string(op))
	if err != nil {
		t.Fatal(err)
	}
	for _, g := range gs {
		if g.Matches(o, stream) {
			return true
		}
	}
	return false
}

// The tour relies on demo being refused a trim and demo-admin allowed
// one, both in the samples' cluster, with their files where it says.
func TestDemoUsers(t *testing.T) {
	state := t.TempDir()
	us := demoUsers(state)
	if len(us) != 2 || us[0].Name != "demo" || us[1].Name != "demo-admin" {
		t.Fatalf("demo users: %+v", us)
	}
	for _, u := range us {
		if u.Namespace != "default" || u.Cluster != "demo" {
			t.Errorf("%s: in %s/%s, want the samples' cluster default/demo", u.Name, u.Namespace, u.Cluster)
		}
		if want := filepath.Join(state, "users", u.Name); u.Dir != want {
			t.Errorf("%s: files in %s, want %s", u.Name, u.Dir, want)
		}
	}
	demo, admin := us[0].Grants, us[1].Grants
	for _, stream := range []string{"events", "counter-output"} {
		for _, op := range []felixv1.StreamOperation{felixv1.OperationAppend, felixv1.OperationRead, felixv1.OperationDescribe} {
			if !allows(t, demo, stream, op) {
				t.Errorf("demo may not %s %s", op, stream)
			}
		}
		if allows(t, demo, stream, felixv1.OperationTrim) {
			t.Errorf("demo may trim %s: the tour's refused trim would succeed", stream)
		}
		if !allows(t, admin, stream, felixv1.OperationTrim) {
			t.Errorf("demo-admin may not trim %s", stream)
		}
	}
}
