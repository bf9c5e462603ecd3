package podrunner

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"testing"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/types"
)

// TestCopyAndRestoreVolume: a copy of a claim directory, taken before more
// writes, put back later, leaves exactly the copy's content in the same
// directory (not a new one), beside the claim's ownership file.
func TestCopyAndRestoreVolume(t *testing.T) {
	state := t.TempDir()
	r := &Runner{cfg: Config{StateDir: state}, workers: map[types.NamespacedName]*podWorker{}}
	dir := ClaimDir(state, "ns", "data-0")
	write := func(rel, content string) {
		t.Helper()
		p := filepath.Join(dir, rel)
		if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(p, []byte(content), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	write("storage-id", "old-id")
	write("logstore/000001.vlog", "old records")
	snap := filepath.Join(t.TempDir(), "snap")
	n, err := r.CopyVolume("ns", "data-0", snap)
	if err != nil || n != int64(len("old-id")+len("old records")) {
		t.Fatalf("CopyVolume = %d, %v", n, err)
	}
	write("storage-id", "new-id")
	write("logstore/000002.vlog", "new records")
	before, err := os.Stat(dir)
	if err != nil {
		t.Fatal(err)
	}
	if err := r.RestoreVolume("ns", "data-0", snap); err != nil {
		t.Fatal(err)
	}
	after, err := os.Stat(dir)
	if err != nil || !os.SameFile(before, after) {
		t.Fatalf("the claim directory was replaced, not refilled: %v", err)
	}
	for rel, want := range map[string]string{"storage-id": "old-id", "logstore/000001.vlog": "old records"} {
		b, err := os.ReadFile(filepath.Join(dir, rel))
		if err != nil || string(b) != want {
			t.Errorf("%s = %q, %v; want %q", rel, b, err, want)
		}
	}
	if _, err := os.Stat(filepath.Join(dir, "logstore", "000002.vlog")); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("a file written after the copy survived the restore: %v", err)
	}
	if _, err := os.Stat(dir + ".restore"); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("the staging directory was left behind: %v", err)
	}
	if err := r.RestoreVolume("ns", "missing", snap); err == nil {
		t.Errorf("RestoreVolume of a claim with no directory succeeded")
	}
}

// TestUnreachable: an answer from the API server (any status) is not
// "unreachable"; a transport failure is.
func TestUnreachable(t *testing.T) {
	for _, tc := range []struct {
		name string
		err  error
		want bool
	}{
		{"connection refused", fmt.Errorf("%w: envFrom configmap c: %w", errConfig, errors.New("dial tcp 127.0.0.1:1: connect: connection refused")), true},
		{"not found", fmt.Errorf("%w: %w", errConfig, apierrors.NewNotFound(schema.GroupResource{Resource: "configmaps"}, "c")), false},
		{"forbidden", apierrors.NewForbidden(schema.GroupResource{Resource: "secrets"}, "s", errors.New("no")), false},
	} {
		if got := unreachable(tc.err); got != tc.want {
			t.Errorf("%s: unreachable = %v, want %v", tc.name, got, tc.want)
		}
	}
}
