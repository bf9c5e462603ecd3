// Package k8s_test is the end-to-end suite on a real Kubernetes node
// (docs/real-node.md): the operator installed with helm as a user would,
// broker pods under the restricted Pod Security Standard, clients through
// cluster DNS, and voluntary disruptions through the Eviction API. It runs
// only against a running node: hack/k8s/e2e.sh starts one, builds and
// imports the image and sets FELIX_K8S_KUBECONFIG; without it every test
// skips.
//
// The suite drives the cluster with kubectl and helm, the commands of
// docs/install.md, rather than a Go client, so what it proves is what a
// user types.
package k8s_test

import (
	"bytes"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"strings"
	"testing"
	"time"

	"felix.dev/felix/internal/testenv"
)

// env is how the suite reaches the node; see hack/k8s/e2e.sh.
type env struct {
	kubeconfig string
	kubectlBin string
	helm       string
	image      string // repository:tag imported into the node's runtime
	storage    string // StorageClass of the brokers' claims ("" = default)
}

func loadEnv(t *testing.T) env {
	t.Helper()
	kc := os.Getenv("FELIX_K8S_KUBECONFIG")
	if kc == "" {
		t.Skip("no real node: run hack/k8s/e2e.sh (make k8s-e2e), which sets FELIX_K8S_KUBECONFIG")
	}
	e := env{kubeconfig: kc, kubectlBin: os.Getenv("FELIX_K8S_KUBECTL"), helm: os.Getenv("FELIX_HELM"),
		image: os.Getenv("FELIX_K8S_IMAGE"), storage: os.Getenv("FELIX_K8S_STORAGE_CLASS")}
	if e.kubectlBin == "" {
		e.kubectlBin = "kubectl"
	}
	if e.helm == "" {
		t.Fatal("FELIX_HELM is not set (hack/k8s/e2e.sh sets it)")
	}
	if e.image == "" {
		e.image = "felix:" + appVersion(t)
	}
	return e
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

// result is one command's outcome.
type result struct {
	out, errOut string
	err         error
}

// exec runs name with args (and stdin) from the repository root.
func (e env) exec(stdin string, name string, args ...string) result {
	cmd := exec.Command(name, args...)
	cmd.Dir = testenv.RepoRoot()
	cmd.Env = append(os.Environ(), "KUBECONFIG="+e.kubeconfig)
	if stdin != "" {
		cmd.Stdin = strings.NewReader(stdin)
	}
	var out, errOut bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &errOut
	err := cmd.Run()
	return result{out: out.String(), errOut: errOut.String(), err: err}
}

// kubectl runs kubectl and fails the test if it fails.
func (e env) kubectl(t *testing.T, args ...string) string {
	t.Helper()
	r := e.exec("", e.kubectlBin, args...)
	if r.err != nil {
		t.Fatalf("kubectl %s: %v\n%s%s", strings.Join(args, " "), r.err, r.out, r.errOut)
	}
	return r.out
}

// apply applies a manifest from stdin.
func (e env) apply(t *testing.T, ns, manifest string) {
	t.Helper()
	r := e.exec(manifest, e.kubectlBin, "apply", "-n", ns, "-f", "-")
	if r.err != nil {
		t.Fatalf("kubectl apply: %v\n%s%s\n%s", r.err, r.out, r.errOut, manifest)
	}
}

// eventually polls f until it returns nil or the deadline passes.
func eventually(t *testing.T, timeout time.Duration, what string, f func() error) {
	t.Helper()
	deadline := time.Now().Add(timeout)
	for {
		err := f()
		if err == nil {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("%s: not within %v: %v", what, timeout, err)
		}
		time.Sleep(time.Second)
	}
}

// podSecurity is the container securityContext the restricted Pod Security
// Standard demands of every pod in the suite's namespace.
const podSecurity = `{"runAsNonRoot": true, "runAsUser": 65532, "allowPrivilegeEscalation": false, "capabilities": {"drop": ["ALL"]}, "seccompProfile": {"type": "RuntimeDefault"}}`

// felixClient runs `felix ARGS...` once in a pod of namespace ns, as user
// (its FelixUser Secret mounted at /tls), with stdin, and returns its
// standard output. The pod is removed afterwards.
func (e env) felixClient(t *testing.T, ns, name, user, stdin string, args ...string) (string, error) {
	t.Helper()
	container := map[string]any{
		"name": name, "image": e.image, "imagePullPolicy": "Never",
		"command": []string{"felix"}, "args": args,
		"stdin": stdin != "", "stdinOnce": stdin != "",
		"env":             []map[string]string{{"name": "FELIX_TLS_DIR", "value": "/tls"}},
		"volumeMounts":    []map[string]any{{"name": "tls", "mountPath": "/tls", "readOnly": true}},
		"securityContext": json.RawMessage(podSecurity),
	}
	overrides, err := json.Marshal(map[string]any{"spec": map[string]any{
		"containers":      []any{container},
		"volumes":         []any{map[string]any{"name": "tls", "secret": map[string]any{"secretName": user}}},
		"securityContext": map[string]any{"fsGroup": 65532},
	}})
	if err != nil {
		t.Fatal(err)
	}
	runArgs := []string{"run", name, "-n", ns, "--image", e.image, "--restart=Never", "--rm", "--quiet",
		"--pod-running-timeout=3m", "--overrides", string(overrides), "-i"}
	r := e.exec(stdin, e.kubectlBin, runArgs...)
	if r.err != nil {
		return r.out, fmt.Errorf("felix %s: %w: %s", strings.Join(args, " "), r.err, r.errOut)
	}
	return r.out, nil
}
