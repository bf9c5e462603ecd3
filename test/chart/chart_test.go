// Package chart_test renders the Helm chart and the kustomize config and
// applies both with a server-side dry run against a real kube-apiserver, so a
// manifest the API server would refuse fails the build.
package chart_test

import (
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"felix.dev/felix/internal/testenv"
)

// helmBinary returns the pinned helm built by `make` (FELIX_HELM), or the
// newest bin/helm-*.
func helmBinary(t *testing.T) string {
	t.Helper()
	if h := os.Getenv("FELIX_HELM"); h != "" {
		return h
	}
	m, _ := filepath.Glob(filepath.Join(testenv.RepoRoot(), "bin", "helm-*"))
	if len(m) == 0 {
		t.Fatal("helm not found: run `make helm-lint` once or set FELIX_HELM")
	}
	return m[len(m)-1]
}

func run(t *testing.T, name string, args ...string) string {
	t.Helper()
	cmd := exec.Command(name, args...)
	cmd.Dir = testenv.RepoRoot()
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("%s %s: %v\n%s", name, strings.Join(args, " "), err, out)
	}
	return string(out)
}

func TestChartAndKustomizeApplyWithServerDryRun(t *testing.T) {
	env := testenv.Start(t)
	helm := helmBinary(t)
	run(t, helm, "lint", "charts/felix")

	dir := t.TempDir()
	rendered := run(t, helm, "template", "felix", "charts/felix", "--namespace", "felix-system", "--include-crds", "--kube-version", "1.37.2")
	for _, want := range []string{"kind: Deployment", "kind: ClusterRole", "--leader-elect=true", "kind: CustomResourceDefinition", "felixshards.felix.dev"} {
		if !strings.Contains(rendered, want) {
			t.Errorf("helm template output lacks %q", want)
		}
	}
	chart := filepath.Join(dir, "chart.yaml")
	if err := os.WriteFile(chart, []byte(rendered), 0o644); err != nil {
		t.Fatal(err)
	}
	kc := "--kubeconfig=" + env.Kubeconfig
	run(t, "kubectl", kc, "create", "namespace", "felix-system")
	out := run(t, "kubectl", kc, "apply", "--server-side", "--dry-run=server", "-f", chart)
	if !strings.Contains(out, "deployment.apps/felix-felix-operator serverside-applied (server dry run)") {
		t.Errorf("chart dry run did not apply the operator Deployment:\n%s", out)
	}

	// The kustomize config installs the same things.
	out = run(t, "kubectl", kc, "apply", "--server-side", "--dry-run=server", "-k", "config/default")
	for _, want := range []string{"deployment.apps/felix-operator", "clusterrole.rbac.authorization.k8s.io/felix-operator"} {
		if !strings.Contains(out, want) {
			t.Errorf("kustomize dry run lacks %q:\n%s", want, out)
		}
	}
}
