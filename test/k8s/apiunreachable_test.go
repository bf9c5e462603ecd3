package k8s_test

import (
	"fmt"
	"os"
	"os/exec"
	"strings"
	"testing"
	"time"
)

// apiUnreachableAtStart restarts a broker while the API server cannot be
// reached from its pod: the host rejects the pod's connections to the API
// server's port (kube-proxy sends the kubernetes Service there), and the
// broker's container is stopped, so the kubelet starts it again in the same
// pod with the same address. Without the control plane a broker cannot
// learn its incarnation [ID-4], so it must hold: running, not Ready, no
// store opened, no registration, no crash loop. Once the API server is
// reachable again it registers the next incarnation under the storage id it
// had [ID-3] and serves every record again.
//
// Needs root (iptables) and the node's crictl: hack/k8s/e2e.sh sets
// FELIX_K8S_APISERVER_PORT, FELIX_K8S_CRICTL and FELIX_K8S_CRI_SOCK.
func apiUnreachableAtStart(t *testing.T, e env, records []string) {
	port, crictl, sock := os.Getenv("FELIX_K8S_APISERVER_PORT"), os.Getenv("FELIX_K8S_CRICTL"), os.Getenv("FELIX_K8S_CRI_SOCK")
	if port == "" || crictl == "" || sock == "" {
		t.Skip("FELIX_K8S_APISERVER_PORT, FELIX_K8S_CRICTL and FELIX_K8S_CRI_SOCK are set by hack/k8s/e2e.sh")
	}
	e.kubectl(t, "-n", appNS, "wait", "felixcluster/"+cluster, "--for=condition=Ready", "--timeout=4m")
	b := cluster + "-1"
	before := registrations(t, e, cluster)[b]
	ip := e.kubectl(t, "-n", appNS, "get", "pod", b, "-o", "jsonpath={.status.podIP}")
	if ip == "" {
		t.Fatalf("pod %s has no address", b)
	}
	restarts := func() string {
		return e.kubectl(t, "-n", appNS, "get", "pod", b, "-o", `jsonpath={.status.containerStatuses[?(@.name=="broker")].restartCount}`)
	}
	restartsBefore := restarts()

	rule := []string{"INPUT", "-s", ip, "-p", "tcp", "--dport", port, "-j", "REJECT", "--reject-with", "tcp-reset"}
	iptables := func(op string) error {
		out, err := exec.Command("iptables", append([]string{op}, rule...)...).CombinedOutput()
		if err != nil {
			return fmt.Errorf("iptables %s %s: %w: %s", op, strings.Join(rule, " "), err, out)
		}
		return nil
	}
	if err := iptables("-I"); err != nil {
		t.Fatal(err)
	}
	blocked := true
	unblock := func() {
		if blocked {
			if err := iptables("-D"); err != nil {
				t.Error(err)
			}
			blocked = false
		}
	}
	t.Cleanup(unblock)

	cri := func(args ...string) string {
		t.Helper()
		cmd := exec.Command(crictl, append([]string{"--timeout", "30s"}, args...)...)
		cmd.Env = append(os.Environ(), "CONTAINER_RUNTIME_ENDPOINT=unix://"+sock, "IMAGE_SERVICE_ENDPOINT=unix://"+sock)
		// Standard output only: crictl warns on stderr (no
		// /etc/crictl.yaml).
		var stderr strings.Builder
		cmd.Stderr = &stderr
		out, err := cmd.Output()
		if err != nil {
			t.Fatalf("crictl %s: %v: %s%s", strings.Join(args, " "), err, out, stderr.String())
		}
		return strings.TrimSpace(string(out))
	}
	id := cri("ps", "-q", "--name", "^broker$", "--label", "io.kubernetes.pod.name="+b, "--label", "io.kubernetes.pod.namespace="+appNS)
	if id == "" || strings.Contains(id, "\n") {
		t.Fatalf("broker container of %s: %q", b, id)
	}
	cri("stop", "--timeout", "0", id)

	eventually(t, 2*time.Minute, b+"'s broker container started again", func() error {
		if r := restarts(); r == restartsBefore {
			return fmt.Errorf("restartCount %s", r)
		}
		return nil
	})
	// It holds: running, not Ready, not registered, not restarting, for
	// as long as we watch.
	restartsHeld := restarts()
	watch := time.Now().Add(20 * time.Second)
	for time.Now().Before(watch) {
		state := e.kubectl(t, "-n", appNS, "get", "pod", b, "-o",
			`jsonpath={.status.conditions[?(@.type=="Ready")].status} {.status.containerStatuses[?(@.name=="broker")].state.running.startedAt}`)
		if ready, _, _ := strings.Cut(state, " "); ready == "True" {
			t.Fatalf("%s Ready while it cannot reach the API server (%s)", b, state)
		}
		if reg := registrations(t, e, cluster)[b]; reg.incarnation != before.incarnation {
			t.Fatalf("%s registered incarnation %d while it cannot reach the API server (before: %d)", b, reg.incarnation, before.incarnation)
		}
		if r := restarts(); r != restartsHeld {
			t.Fatalf("%s restarted (%s, then %s) instead of waiting for the API server", b, restartsHeld, r)
		}
		time.Sleep(2 * time.Second) // watching that nothing happens
	}

	unblock()
	eventually(t, 3*time.Minute, b+" registered again", func() error {
		now := registrations(t, e, cluster)[b]
		if now.incarnation <= before.incarnation {
			return fmt.Errorf("%s at incarnation %d, before %d", b, now.incarnation, before.incarnation)
		}
		if now.id != before.id {
			t.Fatalf("%s registered storage id %q after a restart on its own volume, had %q", b, now.id, before.id)
		}
		return nil
	})
	e.kubectl(t, "-n", appNS, "wait", "pod", b, "--for=condition=Ready", "--timeout=3m")
	e.kubectl(t, "-n", appNS, "wait", "felixcluster/"+cluster, "--for=condition=Ready", "--timeout=4m")
	got := readAll(t, e, fmt.Sprintf("%s.%s.svc", cluster, appNS), "consumer-after-api-outage", "alice")
	if strings.Join(got, ",") != strings.Join(records, ",") {
		t.Fatalf("after the restart without the API server read back %v, want %v", got, records)
	}
}
