package podrunner_test

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/go-logr/logr/testr"
	authenticationv1 "k8s.io/api/authentication/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/clientcmd"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"felix.dev/felix/internal/podrunner"
	"felix.dev/felix/internal/testenv"
)

// One API server and one helper binary serve every test of the package.
var (
	env    *testenv.Env
	helper string
)

// helperPort is the HTTP port of the helper "pods"; unusual, so tests of
// other packages on the same machine do not collide with it.
const helperPort = 17917

func TestMain(m *testing.M) {
	os.Exit(runTests(m))
}

func runTests(m *testing.M) int {
	flag.Parse()
	if fuzzing() {
		// Fuzz workers are this binary too: they must not each start an
		// API server. Only the fuzz targets run.
		return m.Run()
	}
	dir, err := os.MkdirTemp("", "podrunner-test-")
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	defer func() { _ = os.RemoveAll(dir) }()
	helper = filepath.Join(dir, "podhelper")
	build := exec.Command("go", "build", "-o", helper, "./testdata/podhelper")
	build.Stderr = os.Stderr
	if err := build.Run(); err != nil {
		fmt.Fprintln(os.Stderr, "build podhelper:", err)
		return 1
	}
	env, err = testenv.StartEnv()
	if err != nil {
		fmt.Fprintln(os.Stderr, "testenv:", err)
		return 1
	}
	defer func() { _ = env.Stop() }()
	return m.Run()
}

// fuzzing reports whether the binary runs a fuzz target (-test.fuzz) or
// is a fuzz worker.
func fuzzing() bool {
	for _, name := range []string{"test.fuzz", "test.fuzzworker"} {
		if f := flag.Lookup(name); f != nil && f.Value.String() != "" && f.Value.String() != "false" {
			return true
		}
	}
	return false
}

// startRunner runs a Runner for namespace ns with addresses
// 127.0.0.first..first+9 until the test ends, and checks that it returns.
func startRunner(t *testing.T, ns string, first byte, mod func(*podrunner.Config)) (*podrunner.Runner, context.CancelFunc) {
	t.Helper()
	if env == nil {
		t.Fatal("no API server (the binary is fuzzing: run tests without -fuzz)")
	}
	state := t.TempDir()
	book, err := podrunner.NewAddressBook(filepath.Join(state, "addresses.json"), first, first+9)
	if err != nil {
		t.Fatal(err)
	}
	cfg := podrunner.Config{
		RestConfig:        env.Config,
		Namespaces:        []string{ns},
		StateDir:          state,
		Images:            map[string]string{"helper": helper},
		Addresses:         book,
		RestartBackoff:    100 * time.Millisecond,
		MaxRestartBackoff: 500 * time.Millisecond,
		MaxProbePeriod:    200 * time.Millisecond,
		ShutdownGrace:     2 * time.Second,
		Logger:            testr.NewWithOptions(t, testr.Options{Verbosity: 0}),
	}
	if mod != nil {
		mod(&cfg)
	}
	r, err := podrunner.New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- r.Run(ctx) }()
	stop := func() {
		cancel()
		select {
		case err := <-done:
			if err != nil {
				t.Errorf("Run: %v", err)
			}
		case <-time.After(20 * time.Second):
			t.Error("Run did not return after cancel")
		}
	}
	var once bool
	t.Cleanup(func() {
		if !once {
			stop()
		}
	})
	return r, func() { once = true; stop() }
}

// createNamespace creates a fresh namespace named after base (unique, so
// -count=N reruns against the same API server do not collide).
func createNamespace(t *testing.T, base string) string {
	t.Helper()
	ns := &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{GenerateName: base + "-"}}
	if err := env.Client.Create(context.Background(), ns); err != nil {
		t.Fatal(err)
	}
	return ns.Name
}

func claim(ns, name string) *corev1.PersistentVolumeClaim {
	return &corev1.PersistentVolumeClaim{
		ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name},
		Spec: corev1.PersistentVolumeClaimSpec{
			AccessModes: []corev1.PersistentVolumeAccessMode{corev1.ReadWriteOnce},
			Resources:   corev1.VolumeResourceRequirements{Requests: corev1.ResourceList{corev1.ResourceStorage: resource.MustParse("1Gi")}},
		},
	}
}

// brokerLikePod is shaped like the operator's broker pods: command
// "felix"-style with args naming the data dir and ":port" listen
// addresses, downward-API env, a ConfigMap envFrom, a claim at the data
// dir, and HTTP probes on a named port.
func brokerLikePod(ns, name, claimName string) *corev1.Pod {
	field := func(n, path string) corev1.EnvVar {
		return corev1.EnvVar{Name: n, ValueFrom: &corev1.EnvVarSource{FieldRef: &corev1.ObjectFieldSelector{FieldPath: path}}}
	}
	probe := func(path string, failures int32) *corev1.Probe {
		return &corev1.Probe{
			ProbeHandler:     corev1.ProbeHandler{HTTPGet: &corev1.HTTPGetAction{Path: path, Port: intstr.FromString("http")}},
			PeriodSeconds:    5,
			FailureThreshold: failures,
		}
	}
	mounts := []corev1.VolumeMount{{Name: "data", MountPath: "/var/lib/felix"}, {Name: "tmp", MountPath: "/tmp"}}
	return &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name, Labels: map[string]string{"app": "helper"}},
		Spec: corev1.PodSpec{
			Hostname:                      name,
			Subdomain:                     "brokers",
			RestartPolicy:                 corev1.RestartPolicyAlways,
			TerminationGracePeriodSeconds: ptr.To[int64](5),
			InitContainers: []corev1.Container{{
				Name: "init", Image: "helper:dev", Command: []string{"helper"},
				Args:         []string{"--data-dir", "/var/lib/felix", "--name", "init", "--exit", "0"},
				VolumeMounts: mounts,
			}},
			Containers: []corev1.Container{{
				Name: "main", Image: "helper:dev", Command: []string{"helper"},
				Args: []string{
					"--data-dir", "/var/lib/felix", "--name", "$(POD_NAME)",
					"--http", fmt.Sprintf(":%d", helperPort),
				},
				Ports: []corev1.ContainerPort{{Name: "http", ContainerPort: helperPort}},
				Env: []corev1.EnvVar{
					field("POD_NAME", "metadata.name"), field("POD_IP", "status.podIP"), field("NAMESPACE", "metadata.namespace"),
					{Name: "ADVERTISE", Value: fmt.Sprintf("$(POD_NAME).brokers.$(NAMESPACE).svc:%d", helperPort)},
				},
				EnvFrom:        []corev1.EnvFromSource{{ConfigMapRef: &corev1.ConfigMapEnvSource{LocalObjectReference: corev1.LocalObjectReference{Name: "settings"}}}},
				ReadinessProbe: probe("/ready", 1),
				LivenessProbe:  probe("/live", 25),
				VolumeMounts:   mounts,
			}},
			Volumes: []corev1.Volume{
				{Name: "data", VolumeSource: corev1.VolumeSource{PersistentVolumeClaim: &corev1.PersistentVolumeClaimVolumeSource{ClaimName: claimName}}},
				{Name: "tmp", VolumeSource: corev1.VolumeSource{EmptyDir: &corev1.EmptyDirVolumeSource{}}},
			},
		},
	}
}

// eventually polls cond every 50ms until it holds or timeout passes.
func eventually(t *testing.T, timeout time.Duration, what string, cond func() (bool, string)) {
	t.Helper()
	deadline := time.Now().Add(timeout)
	tick := time.NewTicker(50 * time.Millisecond)
	defer tick.Stop()
	last := ""
	for {
		ok, detail := cond()
		if ok {
			return
		}
		last = detail
		if time.Now().After(deadline) {
			t.Fatalf("%s: not within %s (last: %s)", what, timeout, last)
		}
		<-tick.C
	}
}

func getPod(t *testing.T, ns, name string) (*corev1.Pod, error) {
	t.Helper()
	var p corev1.Pod
	err := env.Client.Get(context.Background(), client.ObjectKey{Namespace: ns, Name: name}, &p)
	return &p, err
}

func podReady(p *corev1.Pod) bool {
	for _, c := range p.Status.Conditions {
		if c.Type == corev1.PodReady {
			return c.Status == corev1.ConditionTrue
		}
	}
	return false
}

func restarts(p *corev1.Pod) int32 {
	if len(p.Status.ContainerStatuses) == 0 {
		return -1
	}
	return p.Status.ContainerStatuses[0].RestartCount
}

func waitReady(t *testing.T, ns, name string, restartCount int32) *corev1.Pod {
	t.Helper()
	var pod *corev1.Pod
	eventually(t, 20*time.Second, "pod "+name+" Running and Ready", func() (bool, string) {
		p, err := getPod(t, ns, name)
		if err != nil {
			return false, err.Error()
		}
		pod = p
		return p.Status.Phase == corev1.PodRunning && podReady(p) && restarts(p) == restartCount,
			fmt.Sprintf("phase %s ready %v restarts %d reason %q %q", p.Status.Phase, podReady(p), restarts(p), p.Status.Reason, p.Status.Message)
	})
	return pod
}

type record struct {
	Args []string `json:"args"`
	Env  []string `json:"env"`
	PID  int      `json:"pid"`
	Boot string   `json:"boot"`
}

func readRecord(t *testing.T, path string) record {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	var r record
	if err := json.Unmarshal(b, &r); err != nil {
		t.Fatal(err)
	}
	return r
}

func envOf(r record, name string) string {
	for _, kv := range r.Env {
		if strings.HasPrefix(kv, name+"=") {
			return kv[len(name)+1:]
		}
	}
	return ""
}

func processGone(pid int) bool {
	return errors.Is(syscall.Kill(pid, 0), syscall.ESRCH)
}

// TestPodLifecycle_RunRestartDelete follows a broker-like pod through the
// kubelet's life: bound, volume mapped, init container first, address and
// env resolved, Ready from its probe; killed and restarted with the count
// incremented and the volume kept (init not rerun); deleted: SIGTERM, the
// process gone and the object removed.
func TestPodLifecycle_RunRestartDelete(t *testing.T) {
	ctx := context.Background()
	ns := createNamespace(t, "lifecycle")
	r, _ := startRunner(t, ns, 200, nil)
	must(t, env.Client.Create(ctx, &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "settings"}, Data: map[string]string{"FELIX_FSYNC": "quorum"}}))
	must(t, env.Client.Create(ctx, claim(ns, "data-b0")))
	must(t, env.Client.Create(ctx, brokerLikePod(ns, "b0", "data-b0")))

	pod := waitReady(t, ns, "b0", 0)
	if pod.Spec.NodeName != podrunner.DefaultNodeName {
		t.Fatalf("nodeName %q, want %q", pod.Spec.NodeName, podrunner.DefaultNodeName)
	}
	if pod.Status.PodIP != "127.0.0.200" {
		t.Fatalf("podIP %q, want 127.0.0.200", pod.Status.PodIP)
	}
	var pvc corev1.PersistentVolumeClaim
	must(t, env.Client.Get(ctx, client.ObjectKey{Namespace: ns, Name: "data-b0"}, &pvc))
	if pvc.Status.Phase != corev1.ClaimBound {
		t.Fatalf("claim phase %q, want Bound", pvc.Status.Phase)
	}

	dir := r.ClaimDir(ns, "data-b0")
	rec := readRecord(t, filepath.Join(dir, "b0.json"))
	wantArgs := []string{"--data-dir", dir, "--name", "b0", "--http", fmt.Sprintf("127.0.0.200:%d", helperPort)}
	if strings.Join(rec.Args, " ") != strings.Join(wantArgs, " ") {
		t.Fatalf("args %q, want %q", rec.Args, wantArgs)
	}
	for name, want := range map[string]string{
		"POD_NAME": "b0", "POD_IP": "127.0.0.200", "NAMESPACE": ns, "FELIX_FSYNC": "quorum",
		"ADVERTISE": fmt.Sprintf("127.0.0.200:%d", helperPort), "HOSTNAME": "b0",
	} {
		if got := envOf(rec, name); got != want {
			t.Errorf("env %s=%q, want %q", name, got, want)
		}
	}
	if tmp := envOf(rec, "TMPDIR"); !strings.HasPrefix(tmp, r.StateDir()) || !strings.HasSuffix(tmp, "/volumes/tmp") {
		t.Errorf("TMPDIR %q is not the pod's tmp emptyDir", tmp)
	}
	if starts := readLines(t, filepath.Join(dir, "starts")); len(starts) != 2 || !strings.HasPrefix(starts[0], "init ") {
		t.Fatalf("starts %q: want the init container, then the main one", starts)
	}
	resp, err := http.Get(fmt.Sprintf("http://127.0.0.200:%d/ready", helperPort))
	if err != nil {
		t.Fatalf("pod address does not answer: %v", err)
	}
	_ = resp.Body.Close()

	// kill -9: restarted, counted, volume kept, init container not rerun.
	must(t, r.Kill(ns, "b0"))
	eventually(t, 10*time.Second, "first process reaped", func() (bool, string) { return processGone(rec.PID), "" })
	pod = waitReady(t, ns, "b0", 1)
	if last := pod.Status.ContainerStatuses[0].LastTerminationState.Terminated; last == nil || last.ExitCode != 137 {
		t.Fatalf("last termination %+v, want exit code 137", last)
	}
	starts := readLines(t, filepath.Join(dir, "starts"))
	if len(starts) != 3 || !strings.HasPrefix(starts[2], "b0 ") {
		t.Fatalf("starts after restart %q: want init, b0, b0", starts)
	}
	rec2 := readRecord(t, filepath.Join(dir, "b0.json"))

	// Delete: SIGTERM (the helper logs it), process gone, object removed.
	must(t, env.Client.Delete(ctx, pod))
	eventually(t, 15*time.Second, "pod object removed", func() (bool, string) {
		_, err := getPod(t, ns, "b0")
		return apierrors.IsNotFound(err), fmt.Sprint(err)
	})
	if !processGone(rec2.PID) {
		t.Fatalf("process %d still runs after its pod was deleted", rec2.PID)
	}
	logText, err := os.ReadFile(r.LogPath(ns, "b0"))
	must(t, err)
	if !strings.Contains(string(logText), "podhelper: SIGTERM, exiting") {
		t.Fatalf("log does not show a SIGTERM stop:\n%s", logText)
	}
	if _, err := os.Stat(filepath.Join(dir, "b0.json")); err != nil {
		t.Fatalf("claim directory lost with the pod: %v", err)
	}
}

// TestFaultHooks_FreezeThawAndShutdown: a frozen pod turns unready and
// comes back when thawed; cancelling the runner's context stops every
// process it started.
func TestFaultHooks_FreezeThawAndShutdown(t *testing.T) {
	ctx := context.Background()
	ns := createNamespace(t, "hooks")
	r, stop := startRunner(t, ns, 210, nil)
	must(t, env.Client.Create(ctx, &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "settings"}}))
	must(t, env.Client.Create(ctx, claim(ns, "data-f0")))
	pod := brokerLikePod(ns, "f0", "data-f0")
	pod.Spec.Containers[0].LivenessProbe = nil // a frozen process must not be restarted here
	must(t, env.Client.Create(ctx, pod))
	waitReady(t, ns, "f0", 0)
	rec := readRecord(t, filepath.Join(r.ClaimDir(ns, "data-f0"), "f0.json"))

	must(t, r.Freeze(ns, "f0"))
	eventually(t, 10*time.Second, "frozen pod unready", func() (bool, string) {
		p, err := getPod(t, ns, "f0")
		return err == nil && !podReady(p) && p.Status.Phase == corev1.PodRunning, fmt.Sprint(err)
	})
	// A snapshot's freeze leaves a process frozen by a test frozen.
	thaw, err := r.FreezeClaim(ns, "data-f0")
	must(t, err)
	thaw()
	if st := procState(t, rec.PID); st != "T" {
		t.Fatalf("state %q after FreezeClaim+thaw of a frozen pod, want T", st)
	}
	must(t, r.Thaw(ns, "f0"))
	waitReady(t, ns, "f0", 0)

	// FreezeClaim stops a running pod until thawed.
	thaw, err = r.FreezeClaim(ns, "data-f0")
	must(t, err)
	if st := procState(t, rec.PID); st != "T" {
		t.Fatalf("state %q under FreezeClaim, want T", st)
	}
	thaw()
	eventually(t, 5*time.Second, "thawed", func() (bool, string) { st := procState(t, rec.PID); return st != "T", st })

	must(t, r.WipeVolume(ns, "data-f0"))
	if entries, _ := os.ReadDir(r.ClaimDir(ns, "data-f0")); len(entries) != 0 {
		t.Fatalf("wiped volume still holds %d entries", len(entries))
	}

	stop()
	if !processGone(rec.PID) {
		t.Fatalf("process %d survived the runner's shutdown", rec.PID)
	}
	if err := r.Kill(ns, "f0"); !errors.Is(err, podrunner.ErrPodNotRunning) {
		t.Fatalf("Kill after shutdown: %v, want ErrPodNotRunning", err)
	}

	// A new runner on the same state directory is a rebooted node: it
	// runs the pod again, init container first, at the same address.
	r2, _ := startRunner(t, ns, 210, func(c *podrunner.Config) {
		c.StateDir = r.StateDir()
		book, err := podrunner.NewAddressBook(filepath.Join(r.StateDir(), "addresses.json"), 210, 219)
		must(t, err)
		c.Addresses = book
	})
	var rec2 record
	eventually(t, 20*time.Second, "pod rerun by the new runner", func() (bool, string) {
		b, err := os.ReadFile(filepath.Join(r2.ClaimDir(ns, "data-f0"), "f0.json"))
		if err != nil || json.Unmarshal(b, &rec2) != nil {
			return false, fmt.Sprint(err)
		}
		return rec2.PID != rec.PID, "same pid"
	})
	if ip, _ := r2.PodIP(ns, "f0"); ip.String() != "127.0.0.210" {
		t.Fatalf("address after runner restart %v, want 127.0.0.210", ip)
	}
	if starts := readLines(t, filepath.Join(r2.ClaimDir(ns, "data-f0"), "starts")); len(starts) != 2 || !strings.HasPrefix(starts[0], "init ") {
		t.Fatalf("starts %q: want init then main (the wipe emptied the volume)", starts)
	}
}

// TestLivenessFailure_RestartsContainer: a failing liveness probe restarts
// the container (counted); a passing one leaves it alone.
func TestLivenessFailure_RestartsContainer(t *testing.T) {
	ctx := context.Background()
	ns := createNamespace(t, "liveness")
	r, _ := startRunner(t, ns, 224, nil)
	must(t, env.Client.Create(ctx, &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "settings"}}))
	must(t, env.Client.Create(ctx, claim(ns, "data-l0")))
	pod := brokerLikePod(ns, "l0", "data-l0")
	pod.Spec.Containers[0].LivenessProbe.PeriodSeconds = 1
	pod.Spec.Containers[0].LivenessProbe.FailureThreshold = 2
	must(t, env.Client.Create(ctx, pod))
	waitReady(t, ns, "l0", 0)
	unhealthy := filepath.Join(r.ClaimDir(ns, "data-l0"), "unhealthy")
	must(t, os.WriteFile(unhealthy, nil, 0o644))
	eventually(t, 20*time.Second, "restart after liveness failure", func() (bool, string) {
		p, err := getPod(t, ns, "l0")
		if err != nil {
			return false, err.Error()
		}
		return restarts(p) >= 1, fmt.Sprint(restarts(p))
	})
	must(t, os.Remove(unhealthy))
	p := waitReadyAtLeast(t, ns, "l0", 1)
	settled := restarts(p)
	// Healthy for two liveness windows (2 x 1s): no more restarts.
	deadline := time.Now().Add(2 * time.Second)
	for time.Now().Before(deadline) {
		p, err := getPod(t, ns, "l0")
		must(t, err)
		if restarts(p) != settled {
			t.Fatalf("restarted while healthy: %d -> %d", settled, restarts(p))
		}
		time.Sleep(100 * time.Millisecond)
	}
}

func waitReadyAtLeast(t *testing.T, ns, name string, minRestarts int32) *corev1.Pod {
	t.Helper()
	var pod *corev1.Pod
	eventually(t, 20*time.Second, "pod "+name+" Ready again", func() (bool, string) {
		p, err := getPod(t, ns, name)
		if err != nil {
			return false, err.Error()
		}
		pod = p
		return podReady(p) && restarts(p) >= minRestarts, fmt.Sprintf("ready %v restarts %d", podReady(p), restarts(p))
	})
	return pod
}

// TestPodReplacement_SameNameSameAddress: a pod that completed
// (Succeeded) is deleted and replaced by a pod of the same name, which
// runs at the same address.
func TestPodReplacement_SameNameSameAddress(t *testing.T) {
	ctx := context.Background()
	ns := createNamespace(t, "replace")
	startRunner(t, ns, 226, nil)
	must(t, env.Client.Create(ctx, &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "settings"}}))
	must(t, env.Client.Create(ctx, claim(ns, "data-c0")))
	job := brokerLikePod(ns, "c0", "data-c0")
	job.Spec.RestartPolicy = corev1.RestartPolicyOnFailure
	job.Spec.Containers[0].Args = []string{"--data-dir", "/var/lib/felix", "--name", "job", "--exit", "0"}
	job.Spec.Containers[0].ReadinessProbe, job.Spec.Containers[0].LivenessProbe = nil, nil
	must(t, env.Client.Create(ctx, job))
	eventually(t, 20*time.Second, "job pod Succeeded", func() (bool, string) {
		p, err := getPod(t, ns, "c0")
		if err != nil {
			return false, err.Error()
		}
		return p.Status.Phase == corev1.PodSucceeded, fmt.Sprintf("%s init %+v main %+v", p.Status.Phase, p.Status.InitContainerStatuses, p.Status.ContainerStatuses)
	})
	first, _ := getPod(t, ns, "c0")
	must(t, env.Client.Delete(ctx, first))
	eventually(t, 15*time.Second, "completed pod removed", func() (bool, string) {
		_, err := getPod(t, ns, "c0")
		return apierrors.IsNotFound(err), fmt.Sprint(err)
	})
	must(t, env.Client.Create(ctx, brokerLikePod(ns, "c0", "data-c0")))
	second := waitReady(t, ns, "c0", 0)
	if second.UID == first.UID || second.Status.PodIP != first.Status.PodIP || second.Status.PodIP != "127.0.0.226" {
		t.Fatalf("replacement uid %s ip %s; first uid %s ip %s", second.UID, second.Status.PodIP, first.UID, first.Status.PodIP)
	}
}

// TestGarbageCollection_OwnerGoneDeletesPodAndClaim: with no
// controller-manager, the runner collects its pods and claims whose owners
// are all gone (deleting a FelixCluster stops its brokers).
func TestGarbageCollection_OwnerGoneDeletesPodAndClaim(t *testing.T) {
	ctx := context.Background()
	ns := createNamespace(t, "gc")
	r, _ := startRunner(t, ns, 228, nil)
	owner := &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "settings"}}
	must(t, env.Client.Create(ctx, owner))
	ref := metav1.OwnerReference{APIVersion: "v1", Kind: "ConfigMap", Name: owner.Name, UID: owner.UID, Controller: ptr.To(true)}
	pvc := claim(ns, "data-g0")
	pvc.OwnerReferences = []metav1.OwnerReference{ref}
	must(t, env.Client.Create(ctx, pvc))
	pod := brokerLikePod(ns, "g0", "data-g0")
	pod.OwnerReferences = []metav1.OwnerReference{ref}
	must(t, env.Client.Create(ctx, pod))
	waitReady(t, ns, "g0", 0)
	rec := readRecord(t, filepath.Join(r.ClaimDir(ns, "data-g0"), "g0.json"))

	must(t, env.Client.Delete(ctx, owner))
	eventually(t, 20*time.Second, "pod and claim collected", func() (bool, string) {
		_, podErr := getPod(t, ns, "g0")
		claimErr := env.Client.Get(ctx, client.ObjectKeyFromObject(pvc), &corev1.PersistentVolumeClaim{})
		return apierrors.IsNotFound(podErr) && apierrors.IsNotFound(claimErr), fmt.Sprint(podErr, claimErr)
	})
	if !processGone(rec.PID) {
		t.Fatalf("process %d of a collected pod still runs", rec.PID)
	}
}

// TestDeletion_SIGKILLAfterGrace: a process that ignores SIGTERM is
// killed once the deletion grace period has passed, and only then is the
// pod object removed.
func TestDeletion_SIGKILLAfterGrace(t *testing.T) {
	ctx := context.Background()
	ns := createNamespace(t, "grace")
	r, _ := startRunner(t, ns, 232, nil)
	must(t, env.Client.Create(ctx, &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "settings"}}))
	must(t, env.Client.Create(ctx, claim(ns, "data-k0")))
	pod := brokerLikePod(ns, "k0", "data-k0")
	pod.Spec.Containers[0].Args = append(pod.Spec.Containers[0].Args, "--ignore-term")
	must(t, env.Client.Create(ctx, pod))
	pod = waitReady(t, ns, "k0", 0)
	rec := readRecord(t, filepath.Join(r.ClaimDir(ns, "data-k0"), "k0.json"))
	const grace = 2 * time.Second
	start := time.Now()
	must(t, env.Client.Delete(ctx, pod, client.GracePeriodSeconds(int64(grace/time.Second))))
	eventually(t, 15*time.Second, "pod object removed", func() (bool, string) {
		_, err := getPod(t, ns, "k0")
		return apierrors.IsNotFound(err), fmt.Sprint(err)
	})
	if took := time.Since(start); took < grace {
		t.Fatalf("pod removed after %v, before its %v grace period", took, grace)
	}
	if !processGone(rec.PID) {
		t.Fatalf("process %d survived SIGKILL", rec.PID)
	}
	logText, err := os.ReadFile(r.LogPath(ns, "k0"))
	must(t, err)
	if !strings.Contains(string(logText), "SIGTERM ignored") {
		t.Fatalf("no SIGTERM reached the process:\n%s", logText)
	}
}

// TestInitFailure_NeverRestartFailsPod: an init container failing under
// restartPolicy Never fails the pod and its main container never starts.
func TestInitFailure_NeverRestartFailsPod(t *testing.T) {
	ctx := context.Background()
	ns := createNamespace(t, "initfail")
	r, _ := startRunner(t, ns, 220, nil)
	must(t, env.Client.Create(ctx, &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "settings"}}))
	must(t, env.Client.Create(ctx, claim(ns, "data-i0")))
	pod := brokerLikePod(ns, "i0", "data-i0")
	pod.Spec.RestartPolicy = corev1.RestartPolicyNever
	pod.Spec.InitContainers[0].Args = []string{"--data-dir", "/var/lib/felix", "--name", "init", "--exit", "4"}
	must(t, env.Client.Create(ctx, pod))
	eventually(t, 20*time.Second, "pod Failed", func() (bool, string) {
		p, err := getPod(t, ns, "i0")
		if err != nil {
			return false, err.Error()
		}
		return p.Status.Phase == corev1.PodFailed, string(p.Status.Phase)
	})
	p, _ := getPod(t, ns, "i0")
	if term := p.Status.InitContainerStatuses[0].State.Terminated; term == nil || term.ExitCode != 4 {
		t.Fatalf("init status %+v, want terminated with code 4", p.Status.InitContainerStatuses[0].State)
	}
	if starts := readLines(t, filepath.Join(r.ClaimDir(ns, "data-i0"), "starts")); len(starts) != 1 {
		t.Fatalf("starts %q: the main container ran after a failed init", starts)
	}
}

// TestClaimDeletion_PVCProtectionReleased: a deleted claim no pod uses
// loses its directory and its pvc-protection finalizer, so it goes away.
func TestClaimDeletion_PVCProtectionReleased(t *testing.T) {
	ctx := context.Background()
	ns := createNamespace(t, "claims")
	r, _ := startRunner(t, ns, 230, nil)
	c := claim(ns, "scratch")
	must(t, env.Client.Create(ctx, c))
	dir := r.ClaimDir(ns, "scratch")
	eventually(t, 10*time.Second, "claim bound", func() (bool, string) {
		var got corev1.PersistentVolumeClaim
		err := env.Client.Get(ctx, client.ObjectKeyFromObject(c), &got)
		_, statErr := os.Stat(dir)
		return err == nil && got.Status.Phase == corev1.ClaimBound && statErr == nil, fmt.Sprint(err, statErr)
	})
	must(t, env.Client.Delete(ctx, c))
	eventually(t, 10*time.Second, "claim and directory gone", func() (bool, string) {
		var got corev1.PersistentVolumeClaim
		err := env.Client.Get(ctx, client.ObjectKeyFromObject(c), &got)
		_, statErr := os.Stat(dir)
		return apierrors.IsNotFound(err) && os.IsNotExist(statErr), fmt.Sprint(err, statErr)
	})
}

// TestServiceAccountTokens_PodGetsItsOwnIdentity: with
// ServiceAccountTokens a process reaches the API server as its pod's
// ServiceAccount, so RBAC applies to it as in a cluster.
func TestServiceAccountTokens_PodGetsItsOwnIdentity(t *testing.T) {
	ctx := context.Background()
	ns := createNamespace(t, "tokens")
	r, _ := startRunner(t, ns, 234, func(c *podrunner.Config) { c.ServiceAccountTokens = true })
	must(t, env.Client.Create(ctx, &corev1.ServiceAccount{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "broker"}}))
	must(t, env.Client.Create(ctx, &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "settings"}}))
	must(t, env.Client.Create(ctx, claim(ns, "data-s0")))
	pod := brokerLikePod(ns, "s0", "data-s0")
	pod.Spec.ServiceAccountName = "broker"
	must(t, env.Client.Create(ctx, pod))
	waitReady(t, ns, "s0", 0)
	kc := envOf(readRecord(t, filepath.Join(r.ClaimDir(ns, "data-s0"), "s0.json")), "KUBECONFIG")
	if kc == "" {
		t.Fatal("no KUBECONFIG in the pod's environment")
	}
	cfg, err := clientcmd.BuildConfigFromFlags("", kc)
	must(t, err)
	cs, err := kubernetes.NewForConfig(cfg)
	must(t, err)
	review, err := cs.AuthenticationV1().SelfSubjectReviews().Create(ctx, &authenticationv1.SelfSubjectReview{}, metav1.CreateOptions{})
	must(t, err)
	if want := "system:serviceaccount:" + ns + ":broker"; review.Status.UserInfo.Username != want {
		t.Fatalf("pod authenticates as %q, want %q", review.Status.UserInfo.Username, want)
	}
	_, err = cs.CoreV1().Pods(ns).List(ctx, metav1.ListOptions{})
	if !apierrors.IsForbidden(err) {
		t.Fatalf("listing pods without an RBAC grant: %v, want Forbidden", err)
	}
}

// procState is the one-letter state of a process from /proc.
func procState(t *testing.T, pid int) string {
	t.Helper()
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		t.Fatal(err)
	}
	s := string(b)
	i := strings.LastIndexByte(s, ')')
	return s[i+2 : i+3]
}

func readLines(t *testing.T, path string) []string {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	return strings.Split(strings.TrimSpace(string(b)), "\n")
}

func must(t *testing.T, err error) {
	t.Helper()
	if err != nil {
		t.Fatal(err)
	}
}
