package podrunner_test

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/netip"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/tools/clientcmd"

	"felix.dev/felix/internal/podrunner"
)

// helperImage builds the pod helper as a static binary into an image FROM
// scratch (nothing is pulled), removed when the test ends.
func helperImage(t *testing.T) string {
	t.Helper()
	dir := t.TempDir()
	build := exec.Command("go", "build", "-o", filepath.Join(dir, "podhelper"), "./testdata/podhelper")
	build.Env = append(os.Environ(), "CGO_ENABLED=0")
	if out, err := build.CombinedOutput(); err != nil {
		t.Fatalf("build static podhelper: %v\n%s", err, out)
	}
	df := "FROM scratch\nCOPY podhelper /podhelper\nENTRYPOINT [\"/podhelper\"]\n"
	if err := os.WriteFile(filepath.Join(dir, "Dockerfile"), []byte(df), 0o644); err != nil {
		t.Fatal(err)
	}
	image := fmt.Sprintf("felix-podhelper:test-%d", os.Getpid())
	if out, err := exec.Command("docker", "build", "-q", "-t", image, dir).CombinedOutput(); err != nil {
		t.Fatalf("docker build: %v\n%s", err, out)
	}
	t.Cleanup(func() { _ = exec.Command("docker", "rmi", "--force", image).Run() })
	return image
}

// networkExists asks Docker whether a network of this name exists.
func networkExists(t *testing.T, name string) bool {
	t.Helper()
	out, err := exec.Command("docker", "network", "ls", "--format", "{{.Name}}").Output()
	if err != nil {
		t.Fatalf("docker network ls: %v", err)
	}
	for _, n := range strings.Fields(string(out)) {
		if n == name {
			return true
		}
	}
	return false
}

// reachable reports whether a TCP connection to addr opens at once.
func reachable(addr string) bool {
	c, err := net.DialTimeout("tcp", addr, 300*time.Millisecond)
	if err != nil {
		return false
	}
	_ = c.Close()
	return true
}

// TestBridgeMode_PartitionHealAndCleanup runs a broker-like pod (init
// container, then the main one) as Docker containers on a bridge network
// the runner creates: the pod's address is in the network's subnet and
// the host reaches it there; the node is the gateway; its kubeconfig
// reaches a loopback API server at the gateway with the original TLS
// name. Partition cuts it off (unreachable, unready) and Heal connects it
// again; a container restarted while partitioned stays partitioned until
// Heal. The runner's shutdown removes the network.
func TestBridgeMode_PartitionHealAndCleanup(t *testing.T) {
	if os.Getenv("FELIX_SKIP_DOCKER") == "1" {
		t.Skip("FELIX_SKIP_DOCKER=1")
	}
	image := helperImage(t)
	network := fmt.Sprintf("felix-podrunner-%d", os.Getpid())
	t.Cleanup(func() {
		if networkExists(t, network) {
			t.Errorf("the runner left the network %s behind", network)
			ids, _ := exec.Command("docker", "ps", "--all", "--quiet", "--filter", "network="+network).Output()
			if f := strings.Fields(string(ids)); len(f) > 0 {
				_ = exec.Command("docker", append([]string{"rm", "--force"}, f...)...).Run()
			}
			_ = exec.Command("docker", "network", "rm", network).Run()
		}
	})
	ctx := context.Background()
	ns := createNamespace(t, "bridge")
	r, stop := startRunner(t, ns, 240, func(c *podrunner.Config) {
		c.Addresses = nil // the subnet's book
		c.Docker = &podrunner.DockerConfig{Image: image, Network: network}
		c.Kubeconfig = env.Kubeconfig
	})
	n, ok := r.Network()
	if !ok || !n.Created || n.Name != network || !n.Subnet.Contains(n.Gateway) {
		t.Fatalf("Network() = %+v, %v; want a network the runner created", n, ok)
	}
	if !networkExists(t, network) {
		t.Fatalf("no Docker network %s", network)
	}
	must(t, env.Client.Create(ctx, &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "settings"}}))
	must(t, env.Client.Create(ctx, claim(ns, "data-n0")))
	must(t, env.Client.Create(ctx, brokerLikePod(ns, "n0", "data-n0")))
	pod := waitReady(t, ns, "n0", 0)
	ip, err := netip.ParseAddr(pod.Status.PodIP)
	if err != nil || !n.Subnet.Contains(ip) || ip == n.Gateway {
		t.Fatalf("podIP %q: want an address of %s other than the gateway", pod.Status.PodIP, n.Subnet)
	}
	if pod.Status.HostIP != n.Gateway.String() {
		t.Errorf("hostIP %q, want the gateway %s", pod.Status.HostIP, n.Gateway)
	}
	dir := r.ClaimDir(ns, "data-n0")
	rec := readRecord(t, filepath.Join(dir, "n0.json"))
	addr := net.JoinHostPort(ip.String(), strconv.Itoa(helperPort))
	for name, want := range map[string]string{"POD_IP": ip.String(), "ADVERTISE": addr} {
		if got := envOf(rec, name); got != want {
			t.Errorf("env %s=%q, want %q", name, got, want)
		}
	}
	kc, err := clientcmd.LoadFromFile(envOf(rec, "KUBECONFIG"))
	if err != nil {
		t.Fatalf("the pod's kubeconfig: %v", err)
	}
	for name, c := range kc.Clusters {
		if !strings.HasPrefix(c.Server, "https://"+n.Gateway.String()+":") || c.TLSServerName != "127.0.0.1" || len(c.CertificateAuthorityData) == 0 {
			t.Errorf("cluster %s of the pod's kubeconfig: server %q, tls-server-name %q, CA inlined %v; want the gateway, 127.0.0.1, true",
				name, c.Server, c.TLSServerName, len(c.CertificateAuthorityData) > 0)
		}
	}
	if !reachable(addr) {
		t.Fatalf("the host does not reach the pod at %s", addr)
	}

	// Partitioned: unreachable and unready; twice is the same.
	must(t, r.Partition(ns, "n0"))
	must(t, r.Partition(ns, "n0"))
	if reachable(addr) {
		t.Fatalf("a partitioned pod accepted a connection at %s", addr)
	}
	eventually(t, 10*time.Second, "partitioned pod unready", func() (bool, string) {
		p, err := getPod(t, ns, "n0")
		return err == nil && !podReady(p), fmt.Sprint(err)
	})
	must(t, r.Heal(ns, "n0"))
	waitReady(t, ns, "n0", 0)
	if !reachable(addr) {
		t.Fatalf("a healed pod does not answer at %s", addr)
	}
	if again := readRecord(t, filepath.Join(dir, "n0.json")); again.PID != rec.PID {
		t.Fatalf("the container was restarted by the partition (pid %d -> %d)", rec.PID, again.PID)
	}

	// Restarted while partitioned: the new container runs, cut off.
	starts := len(readLines(t, filepath.Join(dir, "starts")))
	must(t, r.Partition(ns, "n0"))
	must(t, r.Kill(ns, "n0"))
	eventually(t, 20*time.Second, "the container restarted while partitioned", func() (bool, string) {
		b, err := os.ReadFile(filepath.Join(dir, "starts"))
		return err == nil && strings.Count(string(b), "\n") > starts, string(b)
	})
	rec2 := readRecord(t, filepath.Join(dir, "n0.json"))
	// An observation period, not a wait: the new container listens within
	// milliseconds of writing its record.
	for i := 0; i < 5; i++ {
		if reachable(addr) {
			t.Fatalf("a container restarted while partitioned accepted a connection at %s", addr)
		}
		time.Sleep(100 * time.Millisecond)
	}
	must(t, r.Heal(ns, "n0"))
	waitReady(t, ns, "n0", 1)
	if !reachable(addr) {
		t.Fatalf("the restarted pod does not answer at %s after the heal", addr)
	}
	if again := readRecord(t, filepath.Join(dir, "n0.json")); again.PID != rec2.PID {
		t.Errorf("the container restarted after the heal (pid %d -> %d): it should have bound its address while partitioned", rec2.PID, again.PID)
	}

	stop()
	if networkExists(t, network) {
		t.Errorf("the network %s survived the runner's shutdown", network)
	}
	if err := r.Partition(ns, "n0"); !errors.Is(err, podrunner.ErrPodNotRunning) {
		t.Errorf("Partition after shutdown: %v, want ErrPodNotRunning", err)
	}
}
