package podrunner

import (
	"errors"
	"net/netip"
	"os"
	"path/filepath"
	"testing"

	"k8s.io/apimachinery/pkg/types"
	clientcmdapi "k8s.io/client-go/tools/clientcmd/api"
)

// TestSubnetAddressBook: a bridge network's book hands out the subnet's
// host addresses in order, never the gateway, the network or the broadcast
// address; a name keeps its address across reloads; assignments from
// another subnet (the network recreated elsewhere) are dropped.
func TestSubnetAddressBook(t *testing.T) {
	path := filepath.Join(t.TempDir(), "addresses-net.json")
	subnet := netip.MustParsePrefix("172.29.3.0/29") // hosts .1-.6
	gw := netip.MustParseAddr("172.29.3.1")
	b, err := NewSubnetAddressBook(path, subnet, gw)
	if err != nil {
		t.Fatal(err)
	}
	var got []string
	for _, n := range []string{"a", "b", "c", "d", "e"} {
		a, err := b.Allocate("ns", n)
		if err != nil {
			t.Fatalf("allocate %s: %v", n, err)
		}
		got = append(got, a.String())
	}
	want := []string{"172.29.3.2", "172.29.3.3", "172.29.3.4", "172.29.3.5", "172.29.3.6"}
	for i := range want {
		if got[i] != want[i] {
			t.Fatalf("addresses %v, want %v", got, want)
		}
	}
	if _, err := b.Allocate("ns", "f"); !errors.Is(err, ErrAddressesExhausted) {
		t.Fatalf("allocation past the broadcast address: %v, want ErrAddressesExhausted", err)
	}
	again, err := NewSubnetAddressBook(path, subnet, gw)
	if err != nil {
		t.Fatal(err)
	}
	if a, _ := again.Allocate("ns", "c"); a.String() != "172.29.3.4" {
		t.Fatalf("after reload ns/c = %v, want 172.29.3.4", a)
	}
	moved, err := NewSubnetAddressBook(path, netip.MustParsePrefix("172.29.4.0/24"), netip.MustParseAddr("172.29.4.1"))
	if err != nil {
		t.Fatal(err)
	}
	if a, _ := moved.Allocate("ns", "e"); a.String() != "172.29.4.2" {
		t.Fatalf("on a new subnet ns/e = %v, want 172.29.4.2 (old assignments dropped)", a)
	}
	for _, bad := range []string{"172.29.3.0/31", "fd00::/64"} {
		if _, err := NewSubnetAddressBook(filepath.Join(t.TempDir(), "x.json"), netip.MustParsePrefix(bad)); err == nil {
			t.Errorf("subnet %s accepted", bad)
		}
	}
}

// TestReachFromBridge: a kubeconfig cluster on the host's loopback is
// reached at the gateway on the same port, with the original host as the
// TLS server name (the certificate names it); other servers and an
// explicit server name are left alone.
func TestReachFromBridge(t *testing.T) {
	kc := clientcmdapi.NewConfig()
	kc.Clusters["relay"] = &clientcmdapi.Cluster{Server: "https://127.0.0.1:41234"}
	kc.Clusters["named"] = &clientcmdapi.Cluster{Server: "https://localhost", TLSServerName: "apiserver"}
	kc.Clusters["remote"] = &clientcmdapi.Cluster{Server: "https://10.0.0.7:6443"}
	kc.Clusters["v6"] = &clientcmdapi.Cluster{Server: "http://[::1]:8080/prefix"}
	reachFromBridge(kc, netip.MustParseAddr("172.29.0.1"))
	for name, want := range map[string][2]string{
		"relay":  {"https://172.29.0.1:41234", "127.0.0.1"},
		"named":  {"https://172.29.0.1:443", "apiserver"},
		"remote": {"https://10.0.0.7:6443", ""},
		"v6":     {"http://172.29.0.1:8080/prefix", ""},
	} {
		c := kc.Clusters[name]
		if c.Server != want[0] || c.TLSServerName != want[1] {
			t.Errorf("%s: server %q name %q, want %q %q", name, c.Server, c.TLSServerName, want[0], want[1])
		}
	}
}

// TestFreeSubnet: the first /24 of the pool overlapping nothing in use.
func TestFreeSubnet(t *testing.T) {
	pool := netip.MustParsePrefix("172.29.0.0/16")
	used := []netip.Prefix{netip.MustParsePrefix("172.29.0.0/23"), netip.MustParsePrefix("172.29.2.128/25"), netip.MustParsePrefix("10.0.0.0/8")}
	p, err := freeSubnet(pool, used)
	if err != nil || p.String() != "172.29.3.0/24" {
		t.Fatalf("freeSubnet = %v, %v; want 172.29.3.0/24", p, err)
	}
	if _, err := freeSubnet(pool, []netip.Prefix{netip.MustParsePrefix("172.16.0.0/12")}); !errors.Is(err, ErrSubnetInUse) {
		t.Fatalf("a pool entirely in use: %v, want ErrSubnetInUse", err)
	}
}

// TestPartitionErrors: outside bridge mode Partition and Heal say so; in
// bridge mode a pod the runner has not started is not running.
func TestPartitionErrors(t *testing.T) {
	r := &Runner{cfg: Config{StateDir: t.TempDir()}, workers: map[types.NamespacedName]*podWorker{}}
	if err := r.Partition("ns", "felix-0"); !errors.Is(err, ErrNotBridgeMode) {
		t.Errorf("Partition outside bridge mode: %v, want ErrNotBridgeMode", err)
	}
	if err := r.Heal("ns", "felix-0"); !errors.Is(err, ErrNotBridgeMode) {
		t.Errorf("Heal outside bridge mode: %v, want ErrNotBridgeMode", err)
	}
	r.cfg.Docker = &DockerConfig{Image: "felix:dev", Network: "felix-test"}
	r.net = &BridgeNetwork{Name: "felix-test", Subnet: netip.MustParsePrefix("172.29.9.0/24"), Gateway: netip.MustParseAddr("172.29.9.1")}
	if err := r.Partition("ns", "felix-0"); !errors.Is(err, ErrPodNotRunning) {
		t.Errorf("Partition of an unknown pod: %v, want ErrPodNotRunning", err)
	}
	if r.hostIP() != "172.29.9.1" {
		t.Errorf("host IP in bridge mode %s, want the gateway", r.hostIP())
	}
	if _, err := os.Stat(r.cfg.StateDir); err != nil {
		t.Fatal(err)
	}
}
