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
	"io"
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
// (its FelixUser Secret mounted at /tls), with stdin, and returns what it
// printed. The pod is removed afterwards.
func (e env) felixClient(t *testing.T, ns, name, user, stdin string, args ...string) (string, error) {
	t.Helper()
	var in io.Reader
	if stdin != "" {
		in = strings.NewReader(stdin)
	}
	return e.felixClientIO(t, ns, name, user, in, io.Discard, args...)
}

// felixClientIO is felixClient with stdin read from in (nil: none) while
// the command runs; what the pod prints is also written to progress as it
// comes (through kubectl attach, which may lose the end of it).
//
// What it returns is the container's log once the pod has finished, never
// the attach stream: `kubectl run -i --rm` loses the output of a container
// that ends before kubectl attached (seen on the real node: a read printed
// nothing and kubectl exited 0), and prints it twice when an attach
// breaks and it falls back to the logs. The exit code is the container's.
func (e env) felixClientIO(t *testing.T, ns, name, user string, in io.Reader, progress io.Writer, args ...string) (string, error) {
	t.Helper()
	container := map[string]any{
		"name": name, "image": e.image, "imagePullPolicy": "Never",
		"command": []string{"felix"}, "args": args,
		"stdin": in != nil, "stdinOnce": in != nil,
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
	defer e.exec("", e.kubectlBin, "-n", ns, "delete", "pod", name, "--ignore-not-found", "--wait=true", "--timeout=2m")
	runArgs := []string{"run", name, "-n", ns, "--image", e.image, "--restart=Never", "--quiet",
		"--pod-running-timeout=3m", "--overrides", string(overrides)}
	if in != nil {
		runArgs = append(runArgs, "-i")
	}
	cmd := exec.Command(e.kubectlBin, runArgs...)
	cmd.Dir = testenv.RepoRoot()
	cmd.Env = append(os.Environ(), "KUBECONFIG="+e.kubeconfig)
	if in != nil {
		cmd.Stdin = in
	}
	var errOut bytes.Buffer
	cmd.Stdout, cmd.Stderr = progress, &errOut
	if err := cmd.Run(); err != nil {
		return "", fmt.Errorf("kubectl run %s (felix %s): %w: %s", name, strings.Join(args, " "), err, errOut.String())
	}
	var code string
	deadline := time.Now().Add(10 * time.Minute)
	for {
		r := e.exec("", e.kubectlBin, "-n", ns, "get", "pod", name, "-o",
			`jsonpath={.status.phase} {.status.containerStatuses[0].state.terminated.exitCode}`)
		phase, exit, _ := strings.Cut(strings.TrimSpace(r.out), " ")
		if r.err == nil && (phase == "Succeeded" || phase == "Failed") && exit != "" {
			code = exit
			break
		}
		if time.Now().After(deadline) {
			return "", fmt.Errorf("felix %s: pod %s did not finish: %q %v %s", strings.Join(args, " "), name, r.out, r.err, r.errOut)
		}
		time.Sleep(time.Second)
	}
	logs := e.exec("", e.kubectlBin, "-n", ns, "logs", name)
	if logs.err != nil {
		return "", fmt.Errorf("felix %s: logs of %s: %w: %s", strings.Join(args, " "), name, logs.err, logs.errOut)
	}
	if code != "0" {
		return logs.out, fmt.Errorf("felix %s: exit code %s: %s", strings.Join(args, " "), code, logs.out)
	}
	return logs.out, nil
}
