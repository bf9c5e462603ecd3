package podrunner

import (
	"net/netip"
	"testing"
	"time"
)

func TestExpandVars_KubeletRules(t *testing.T) {
	vars := map[string]string{"POD_NAME": "felix-0", "NAMESPACE": "prod", "EMPTY": ""}
	lookup := func(n string) (string, bool) { v, ok := vars[n]; return v, ok }
	for _, tc := range []struct{ in, want string }{
		{"$(POD_NAME)", "felix-0"},
		{"$(POD_NAME).felix-brokers.$(NAMESPACE).svc:7100", "felix-0.felix-brokers.prod.svc:7100"},
		{"$(UNKNOWN)", "$(UNKNOWN)"},
		{"$$(POD_NAME)", "$(POD_NAME)"},
		{"$$", "$"},
		{"a$b", "a$b"},
		{"$(EMPTY)x", "x"},
		{"$(POD_NAME", "$(POD_NAME"},
		{"trailing$", "trailing$"},
		{"plain", "plain"},
	} {
		if got := ExpandVars(tc.in, lookup); got != tc.want {
			t.Errorf("ExpandVars(%q) = %q, want %q", tc.in, got, tc.want)
		}
	}
}

func TestRewriter_VolumeAndAddressContract(t *testing.T) {
	ip := netip.MustParseAddr("127.0.0.7")
	rw := NewRewriter([]Mount{
		{ContainerPath: "/var/lib/felix", HostPath: "/state/pvc/ns/data-felix-0"},
		{ContainerPath: "/var/lib/felix/cache/", HostPath: "/state/pods/ns/felix-0/volumes/cache"},
		{ContainerPath: "/tmp", HostPath: "/state/pods/ns/felix-0/volumes/tmp"},
	}, ip, []string{"felix-0.felix-brokers.ns.svc"})
	for _, tc := range []struct{ in, want string }{
		{"/var/lib/felix", "/state/pvc/ns/data-felix-0"},
		{"/var/lib/felix/", "/state/pvc/ns/data-felix-0/"},
		{"/var/lib/felix/storage-id", "/state/pvc/ns/data-felix-0/storage-id"},
		{"/var/lib/felix/cache/x", "/state/pods/ns/felix-0/volumes/cache/x"},
		{"/var/lib/felixx", "/var/lib/felixx"},
		{"--data-dir=/var/lib/felix/d", "--data-dir=/state/pvc/ns/data-felix-0/d"},
		{"/tmp", "/state/pods/ns/felix-0/volumes/tmp"},
		{":7100", "127.0.0.7:7100"},
		{"0.0.0.0:7101", "127.0.0.7:7101"},
		{"[::]:7101", "127.0.0.7:7101"},
		{"--listen=:7100", "--listen=127.0.0.7:7100"},
		{"10.0.0.1:7100", "10.0.0.1:7100"},
		{"127.0.0.1:6443", "127.0.0.1:6443"},
		{":http", ":http"},
		{"felix-0.felix-brokers.ns.svc:7100", "127.0.0.7:7100"},
		{"felix-0.felix-brokers.ns.svc.cluster.local:7100", "127.0.0.7:7100"},
		{"felix-0.felix-brokers.ns.svc.cluster.local.:7100", "127.0.0.7:7100"},
		{"xfelix-0.felix-brokers.ns.svc:7100", "xfelix-0.felix-brokers.ns.svc:7100"},
		{"felix-0.felix-brokers.ns.svcx:7100", "felix-0.felix-brokers.ns.svcx:7100"},
		{"felix-1.felix-brokers.ns.svc:7100", "felix-1.felix-brokers.ns.svc:7100"},
		{"--advertise=felix-0.felix-brokers.ns.svc:7100", "--advertise=127.0.0.7:7100"},
		{"broker", "broker"},
		{"-v=2", "-v=2"},
	} {
		if got := rw.Rewrite(tc.in); got != tc.want {
			t.Errorf("Rewrite(%q) = %q, want %q", tc.in, got, tc.want)
		}
	}
}

func TestAddressBook_StablePerPodAndPersisted(t *testing.T) {
	path := t.TempDir() + "/addresses.json"
	b, err := NewAddressBook(path, 2, 4)
	if err != nil {
		t.Fatal(err)
	}
	a0, _ := b.Allocate("ns", "felix-0")
	a1, _ := b.Allocate("ns", "felix-1")
	again, _ := b.Allocate("ns", "felix-0")
	if a0.String() != "127.0.0.2" || a1.String() != "127.0.0.3" || again != a0 {
		t.Fatalf("got %v %v %v, want 127.0.0.2 127.0.0.3 127.0.0.2", a0, a1, again)
	}
	reloaded, err := NewAddressBook(path, 2, 4)
	if err != nil {
		t.Fatal(err)
	}
	if got, _ := reloaded.Allocate("ns", "felix-1"); got != a1 {
		t.Fatalf("after reload felix-1 = %v, want %v", got, a1)
	}
	if got, _ := reloaded.Allocate("other", "felix-0"); got.String() != "127.0.0.4" {
		t.Fatalf("other/felix-0 = %v, want 127.0.0.4", got)
	}
	if _, err := reloaded.Allocate("ns", "felix-9"); err == nil {
		t.Fatal("allocation beyond the range succeeded")
	}
	if _, err := NewAddressBook(path, 1, 4); err == nil {
		t.Fatal("a range including 127.0.0.1 was accepted")
	}
}

func TestRestartDelay_DoublesToCap(t *testing.T) {
	first, max := 100*time.Millisecond, time.Second
	for _, tc := range []struct {
		n    int
		want time.Duration
	}{{1, 100 * time.Millisecond}, {2, 200 * time.Millisecond}, {3, 400 * time.Millisecond}, {4, 800 * time.Millisecond}, {5, time.Second}, {50, time.Second}} {
		if got := restartDelay(first, max, tc.n); got != tc.want {
			t.Errorf("restartDelay(n=%d) = %v, want %v", tc.n, got, tc.want)
		}
	}
}

func TestBinaryFor_ImageMatching(t *testing.T) {
	c := &Config{Images: map[string]string{"felix:dev": "/bin/felix-dev", "felix": "/bin/felix", "tools/helper": "/bin/helper"}}
	for _, tc := range []struct{ image, want string }{
		{"felix:dev", "/bin/felix-dev"},
		{"felix:v1", "/bin/felix"},
		{"felix", "/bin/felix"},
		{"ghcr.io/org/felix:v2", "/bin/felix"},
		{"felix@sha256:abc", "/bin/felix"},
		{"localhost:5000/felix", "/bin/felix"},
		{"tools/helper:1", "/bin/helper"},
		{"other:dev", ""},
	} {
		got, ok := c.binaryFor(tc.image)
		if got != tc.want || ok != (tc.want != "") {
			t.Errorf("binaryFor(%q) = %q %v, want %q", tc.image, got, ok, tc.want)
		}
	}
}
