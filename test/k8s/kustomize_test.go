package k8s_test

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"felix.dev/felix/internal/testenv"
)

// kustomizeNS is the namespace of TestKustomizeInstall's cluster.
const kustomizeNS = "felix-kustomize"

// kustomizeInstall installs the operator the other documented way,
// `kubectl apply -k config/default` (through an overlay that only sets the
// image, as `kustomize edit set image` would), brings up a one-broker
// cluster with a stream under the restricted Pod Security Standard, and
// removes it all again, so that TestRealNode's helm install that follows
// starts on a clean node.
func kustomizeInstall(t *testing.T, e env) {
	repo, tag, _ := strings.Cut(e.image, ":")
	overlay := t.TempDir()
	// kustomize refuses an absolute path to a base ("new root cannot be
	// absolute"): the overlay names config/default relative to itself.
	base, err := filepath.Rel(overlay, filepath.Join(testenv.RepoRoot(), "config", "default"))
	if err != nil {
		t.Fatal(err)
	}
	kust := fmt.Sprintf(`apiVersion: kustomize.config.k8s.io/v1beta1
kind: Kustomization
resources:
- %s
images:
- name: felix
  newName: %s
  newTag: %q
`, filepath.ToSlash(base), repo, tag)
	if err := os.WriteFile(filepath.Join(overlay, "kustomization.yaml"), []byte(kust), 0o644); err != nil {
		t.Fatal(err)
	}
	uninstall := func() {
		// The cluster's namespace first, while the operator still removes
		// the streams' finalizers (docs/install.md, "Uninstall").
		e.exec("", e.kubectlBin, "delete", "namespace", kustomizeNS, "--ignore-not-found", "--wait=true", "--timeout=3m")
		e.exec("", e.kubectlBin, "delete", "-k", overlay, "--ignore-not-found", "--wait=true", "--timeout=3m")
	}
	t.Cleanup(uninstall)

	e.kubectl(t, "apply", "--server-side", "-k", overlay)
	e.kubectl(t, "-n", operatorNS, "rollout", "status", "deployment/felix-operator", "--timeout=3m")
	e.kubectl(t, "create", "namespace", kustomizeNS)
	e.kubectl(t, "label", "namespace", kustomizeNS,
		"pod-security.kubernetes.io/enforce=restricted", "pod-security.kubernetes.io/enforce-version=latest")
	storage := ""
	if e.storage != "" {
		storage = "\n    storageClassName: " + e.storage
	}
	e.apply(t, kustomizeNS, fmt.Sprintf(`apiVersion: felix.dev/v1alpha1
kind: FelixCluster
metadata:
  name: kz
spec:
  brokers: 1
  storage:
    size: 64Mi%s
---
apiVersion: felix.dev/v1alpha1
kind: FelixStream
metadata:
  name: solo
spec:
  cluster: kz
  shards: 1
  replicas: 1
`, storage))
	// No spec.image: the operator's own release's broker image, the one
	// the overlay set.
	e.kubectl(t, "-n", kustomizeNS, "wait", "felixcluster/kz", "--for=condition=Ready", "--timeout=5m")
	if img := e.kubectl(t, "-n", kustomizeNS, "get", "pod", "kz-0", "-o", "jsonpath={.spec.containers[0].image}"); img != e.image {
		t.Errorf("broker pod runs %q, want the operator's image %q", img, e.image)
	}
	eventually(t, 2*time.Minute, "the stream's shard is led", func() error {
		out := e.kubectl(t, "-n", kustomizeNS, "get", "felixshard", "solo-0", "-o", "jsonpath={.status.assignment.leader}")
		if out != "kz-0" {
			return fmt.Errorf("leader %q", out)
		}
		return nil
	})
	uninstall()
	if r := e.exec("", e.kubectlBin, "get", "namespace", operatorNS); r.err == nil {
		t.Fatalf("namespace %s still there after kubectl delete -k", operatorNS)
	}
}
