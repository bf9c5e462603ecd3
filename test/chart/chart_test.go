// Package chart_test renders the Helm chart and the kustomize config and
// applies both with a server-side dry run against a real kube-apiserver, so a
// manifest the API server would refuse fails the build.
package chart_test

import (
	"bytes"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
	"sigs.k8s.io/yaml"

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

// appVersion is the chart's appVersion, the image tag it installs.
func appVersion(t *testing.T) string {
	t.Helper()
	v, err := testenv.ChartAppVersion()
	if err != nil {
		t.Fatal(err)
	}
	return v
}

func TestChartAndKustomizeApplyWithServerDryRun(t *testing.T) {
	env := testenv.Start(t)
	helm := helmBinary(t)
	run(t, helm, "lint", "charts/felix")
	run(t, helm, "lint", "charts/felix", "--set", "watchNamespaces={team-a,team-b}")

	dir := t.TempDir()
	kc := "--kubeconfig=" + env.Kubeconfig
	for _, ns := range []string{"felix-system", "team-a", "team-b"} {
		run(t, "kubectl", kc, "create", "namespace", ns)
	}
	template := func(extra ...string) string {
		args := append([]string{"template", "felix", "charts/felix", "--namespace", "felix-system", "--include-crds", "--kube-version", "1.37.2"}, extra...)
		return run(t, helm, args...)
	}
	dryRun := func(name, rendered string) string {
		path := filepath.Join(dir, name+".yaml")
		if err := os.WriteFile(path, []byte(rendered), 0o644); err != nil {
			t.Fatal(err)
		}
		return run(t, "kubectl", kc, "apply", "--server-side", "--dry-run=server", "-f", path)
	}

	// Cluster-wide (the default).
	rendered := template()
	for _, want := range []string{"kind: Deployment", "kind: ClusterRole", "--leader-elect=true", "kind: CustomResourceDefinition", "felixshards.felix.dev",
		"felixusers.felix.dev", "  - felixusers\n", "  - secrets\n",
		"--metrics-secure=true", "--metrics-bind-address=:8443", "name: felix-metrics-reader", "kind: ValidatingAdmissionPolicy\n", "kind: ValidatingAdmissionPolicyBinding"} {
		if !strings.Contains(rendered, want) {
			t.Errorf("helm template output lacks %q", want)
		}
	}
	if strings.Contains(rendered, "--watch-namespaces") {
		t.Error("the default chart restricts the operator to namespaces")
	}
	// The image tag defaults to the chart's appVersion.
	if want := `image: "felix:` + appVersion(t) + `"`; !strings.Contains(rendered, want) {
		t.Errorf("helm template output lacks %s (the image tag defaults to appVersion)", want)
	}
	out := dryRun("cluster", rendered)
	for _, want := range []string{
		"deployment.apps/felix-felix-operator serverside-applied (server dry run)",
		"clusterrole.rbac.authorization.k8s.io/felix-felix-operator serverside-applied",
		"customresourcedefinition.apiextensions.k8s.io/felixusers.felix.dev serverside-applied",
		"clusterrole.rbac.authorization.k8s.io/felix-broker-auth-delegator serverside-applied",
		"clusterrolebinding.rbac.authorization.k8s.io/felix-broker-auth-delegator serverside-applied",
		"validatingadmissionpolicy.admissionregistration.k8s.io/felix-broker-writes serverside-applied",
		"validatingadmissionpolicybinding.admissionregistration.k8s.io/felix-broker-writes serverside-applied",
	} {
		if !strings.Contains(out, want) {
			t.Errorf("chart dry run lacks %q:\n%s", want, out)
		}
	}

	// Namespace-scoped: a Role and RoleBinding per watched namespace, no
	// ClusterRole with the operator's rules.
	rendered = template("--set", "watchNamespaces={team-a,team-b}")
	if !strings.Contains(rendered, "--watch-namespaces=team-a,team-b") {
		t.Error("namespace-scoped chart does not pass --watch-namespaces")
	}
	out = dryRun("namespaced", rendered)
	for _, want := range []string{
		"role.rbac.authorization.k8s.io/felix-felix-operator serverside-applied",
		"rolebinding.rbac.authorization.k8s.io/felix-felix-operator serverside-applied",
		"clusterrole.rbac.authorization.k8s.io/felix-felix-operator-auth-delegator serverside-applied",
	} {
		if strings.Count(out, want) < 1 {
			t.Errorf("namespace-scoped dry run lacks %q:\n%s", want, out)
		}
	}
	if n := strings.Count(out, "role.rbac.authorization.k8s.io/felix-felix-operator serverside-applied"); n != 2 {
		t.Errorf("namespace-scoped chart: %d operator Roles; want one per watched namespace (2):\n%s", n, out)
	}
	if strings.Contains(out, "clusterrole.rbac.authorization.k8s.io/felix-felix-operator serverside-applied") {
		t.Errorf("namespace-scoped chart still grants the operator's ClusterRole:\n%s", out)
	}
	for _, ns := range []string{"team-a", "team-b"} {
		if !strings.Contains(rendered, "  namespace: "+ns+"\n") {
			t.Errorf("nothing rendered in namespace %s", ns)
		}
	}
	for _, res := range []string{"- nodes", "- clusterrolebindings", "- storageclasses"} {
		if strings.Contains(rendered, res) {
			t.Errorf("a namespace Role names %s, which only a ClusterRole grants", res)
		}
	}

	// The values a platform team sets: an existing ServiceAccount (bound by
	// the chart's RBAC, not created), pull secrets, verbosity, extra flags.
	rendered = template("--set", "serviceAccount.create=false,serviceAccount.name=ops-sa,logLevel=1,imagePullSecrets[0].name=regcred",
		"--set-json", `extraArgs=["--max-clock-skew=2s"]`)
	for _, want := range []string{"serviceAccountName: ops-sa\n", "imagePullSecrets:\n        - name: regcred\n", "- --v=1\n", `- "--max-clock-skew=2s"`, "  - kind: ServiceAccount\n    name: ops-sa\n    namespace: felix-system\n"} {
		if !strings.Contains(rendered, want) {
			t.Errorf("chart with serviceAccount, imagePullSecrets, logLevel and extraArgs set lacks %q", want)
		}
	}
	if strings.Contains(rendered, "kind: ServiceAccount\nmetadata:\n  name: ops-sa") {
		t.Error("serviceAccount.create=false still creates the ServiceAccount")
	}
	if !strings.Contains(template(), "- --v=0\n") {
		t.Error("the default chart does not pass --v=0")
	}
	// The values schema refuses what the templates would render wrong.
	for _, bad := range [][]string{{"--set", "logLevel=-1"}, {"--set", "replicas=0"}, {"--set", "serviceAccount.nmae=typo"}, {"--set-json", `extraArgs=["-v 3"]`},
		{"--set", "monitoring.grafanaDashboard.nmae=typo"}, {"--set", "monitoring.grafanaDashboard.namespace=Not_A_Namespace"}} {
		args := append([]string{"template", "felix", "charts/felix"}, bad...)
		cmd := exec.Command(helm, args...)
		cmd.Dir = testenv.RepoRoot()
		if b, err := cmd.CombinedOutput(); err == nil || !strings.Contains(string(b), "schema") {
			t.Errorf("helm template %v: want a values schema error, got %v:\n%s", bad, err, b)
		}
	}

	// The Grafana dashboard: off by default; on, a ConfigMap with the
	// sidecar's label (and the annotations and namespace asked for) holding
	// files/dashboards/felix.json unchanged, which the API server takes.
	if strings.Contains(template(), "felix-dashboard") {
		t.Error("the default chart renders the Grafana dashboard ConfigMap")
	}
	rendered = template("--set", "monitoring.grafanaDashboard.enabled=true,monitoring.grafanaDashboard.namespace=team-a",
		"--set-json", `monitoring.grafanaDashboard.annotations={"grafana_folder":"Felix"}`)
	dash := dashboardConfigMap(t, rendered)
	if dash.Namespace != "team-a" || dash.Labels["grafana_dashboard"] != "1" || dash.Annotations["grafana_folder"] != "Felix" {
		t.Errorf("dashboard ConfigMap: namespace %q, labels %v, annotations %v; want team-a, grafana_dashboard=1, grafana_folder=Felix",
			dash.Namespace, dash.Labels, dash.Annotations)
	}
	file, err := os.ReadFile(filepath.Join(testenv.RepoRoot(), "charts/felix/files/dashboards/felix.json"))
	if err != nil {
		t.Fatal(err)
	}
	if got := dash.Data["felix.json"]; got != strings.TrimSpace(string(file)) {
		t.Errorf("the dashboard ConfigMap's felix.json (%d bytes) is not files/dashboards/felix.json (%d bytes)", len(got), len(file))
	}
	if out := dryRun("dashboard", rendered); !strings.Contains(out, "configmap/felix-felix-dashboard serverside-applied") {
		t.Errorf("dashboard dry run lacks the ConfigMap:\n%s", out)
	}

	// The kustomize config installs the same things.
	out = run(t, "kubectl", kc, "apply", "--server-side", "--dry-run=server", "-k", "config/default")
	for _, want := range []string{"deployment.apps/felix-operator", "clusterrole.rbac.authorization.k8s.io/felix-operator",
		"clusterrole.rbac.authorization.k8s.io/felix-metrics-reader", "clusterrole.rbac.authorization.k8s.io/felix-broker-auth-delegator", "clusterrolebinding.rbac.authorization.k8s.io/felix-broker-auth-delegator", "validatingadmissionpolicy.admissionregistration.k8s.io/felix-broker-writes",
		"customresourcedefinition.apiextensions.k8s.io/felixusers.felix.dev"} {
		if !strings.Contains(out, want) {
			t.Errorf("kustomize dry run lacks %q:\n%s", want, out)
		}
	}

	// With the chart's CRDs installed, the samples and the local cluster's
	// FelixUsers (a stream grant, the secure default) are accepted, and a
	// grant of prefix "*" (not a wildcard: a prefix is a stream-name
	// prefix) is refused.
	run(t, "kubectl", kc, "apply", "--server-side", "-f", "charts/felix/crds")
	run(t, "kubectl", kc, "wait", "--for=condition=Established", "crd/felixusers.felix.dev", "crd/felixclusters.felix.dev", "crd/felixscheduledbackups.felix.dev", "--timeout=60s")
	out = run(t, "kubectl", kc, "apply", "--server-side", "--dry-run=server", "-n", "default", "-f", "config/samples")
	for _, want := range []string{"felixcluster.felix.dev/demo serverside-applied", "felixcluster.felix.dev/demo-pool serverside-applied"} {
		if !strings.Contains(out, want) {
			t.Errorf("samples dry run lacks %q:\n%s", want, out)
		}
	}
	user := filepath.Join(dir, "user.yaml")
	if err := os.WriteFile(user, []byte(`apiVersion: felix.dev/v1alpha1
kind: FelixUser
metadata: {name: demo, namespace: default}
spec:
  cluster: demo
  authorization:
    grants:
    - {stream: events, operations: [Append, Read, Describe]}
    - {prefix: team-, operations: [Read]}
`), 0o644); err != nil {
		t.Fatal(err)
	}
	out = run(t, "kubectl", kc, "apply", "--server-side", "--dry-run=server", "-f", user)
	if !strings.Contains(out, "felixuser.felix.dev/demo serverside-applied") {
		t.Errorf("FelixUser dry run:\n%s", out)
	}
	bad := filepath.Join(dir, "bad-user.yaml")
	if err := os.WriteFile(bad, []byte(`apiVersion: felix.dev/v1alpha1
kind: FelixUser
metadata: {name: everything, namespace: default}
spec:
  cluster: demo
  authorization:
    grants:
    - {prefix: "*", operations: [Append]}
`), 0o644); err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command("kubectl", kc, "apply", "--server-side", "--dry-run=server", "-f", bad)
	cmd.Dir = testenv.RepoRoot()
	if b, err := cmd.CombinedOutput(); err == nil || !strings.Contains(string(b), "prefix") {
		t.Errorf("a grant of prefix \"*\" was not refused (err %v):\n%s", err, b)
	}
}

// dashboardConfigMap returns the Grafana dashboard ConfigMap of a rendered
// chart.
func dashboardConfigMap(t *testing.T, rendered string) corev1.ConfigMap {
	t.Helper()
	for _, doc := range bytes.Split([]byte(rendered), []byte("\n---\n")) {
		var cm corev1.ConfigMap
		if err := yaml.Unmarshal(doc, &cm); err == nil && cm.Kind == "ConfigMap" && strings.HasSuffix(cm.Name, "-felix-dashboard") {
			return cm
		}
	}
	t.Fatal("helm template with monitoring.grafanaDashboard.enabled=true renders no dashboard ConfigMap")
	return corev1.ConfigMap{}
}
