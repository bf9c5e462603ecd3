package e2e

import (
	"io"
	"net"
	"net/http"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"sync"
	"testing"
	"time"

	"k8s.io/client-go/rest"

	felixv1 "felix.dev/felix/api/v1alpha1"
	"felix.dev/felix/internal/testenv"
)

// relay forwards TCP connections to target while open; closed, its port
// refuses connections as a stopped API server's would.
type relay struct {
	addr   string
	target string
	mu     sync.Mutex
	ln     net.Listener
}

func (r *relay) open(t *testing.T) {
	t.Helper()
	ln, err := net.Listen("tcp", r.addr)
	if err != nil {
		t.Fatal(err)
	}
	r.mu.Lock()
	r.ln = ln
	r.mu.Unlock()
	go func() {
		for {
			in, err := ln.Accept()
			if err != nil {
				return
			}
			out, err := net.Dial("tcp", r.target)
			if err != nil {
				_ = in.Close()
				continue
			}
			go func() { _, _ = io.Copy(out, in); _ = out.Close() }()
			go func() { _, _ = io.Copy(in, out); _ = in.Close() }()
		}
	}()
}

func (r *relay) close() {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.ln != nil {
		_ = r.ln.Close()
		r.ln = nil
	}
}

func httpStatus(url string) int {
	resp, err := (&http.Client{Timeout: 2 * time.Second}).Get(url)
	if err != nil {
		return 0
	}
	_ = resp.Body.Close()
	return resp.StatusCode
}

// TestID4_BrokerHoldsWhileAPIServerUnreachable: a broker starting while the
// API server cannot be reached opens nothing and announces nothing, keeps
// /live up and /ready down; once the API server answers it registers and
// serves [ID-4].
func TestID4_BrokerHoldsWhileAPIServerUnreachable(t *testing.T) {
	c := newCluster(t, 1, felixv1.FsyncOnCommit)
	u, err := url.Parse(c.env.Config.Host)
	if err != nil {
		t.Fatal(err)
	}
	// A port that refuses connections now and relays to the API server later.
	probe, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	r := &relay{addr: probe.Addr().String(), target: u.Host}
	_ = probe.Close()
	defer r.close()
	cfg := rest.CopyConfig(c.env.Config)
	cfg.Host = "https://" + r.addr
	kubeconfig := filepath.Join(t.TempDir(), "kubeconfig")
	if err := testenv.WriteKubeconfig(cfg, kubeconfig); err != nil {
		t.Fatal(err)
	}
	httpLn, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	httpAddr := httpLn.Addr().String()
	_ = httpLn.Close()
	dataDir := filepath.Join(t.TempDir(), "data")
	cmd := exec.Command(c.bin, "broker", "--cluster", c.name, "--broker", c.name+"-0", "--namespace", c.namespace,
		"--kubeconfig", kubeconfig, "--data-dir", dataDir, "--listen", "127.0.0.1:0", "--http", httpAddr,
		"--heartbeat-interval", "300ms", "--node-expiry", "1500ms")
	logPath := filepath.Join(t.TempDir(), "broker.log")
	logf, err := os.Create(logPath)
	if err != nil {
		t.Fatal(err)
	}
	cmd.Stdout, cmd.Stderr = logf, logf
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	exited := make(chan struct{})
	go func() { _ = cmd.Wait(); close(exited) }()
	defer func() { _ = cmd.Process.Kill(); <-exited }()

	c.eventually("/live up while holding", 30*time.Second, func() (bool, string) {
		return httpStatus("http://"+httpAddr+"/live") == http.StatusOK, "no /live yet"
	})
	// Holding: /ready stays down and no store is opened, for a while.
	for i := 0; i < 10; i++ {
		if s := httpStatus("http://" + httpAddr + "/ready"); s == http.StatusOK {
			t.Fatalf("/ready is up while the API server is unreachable")
		}
		if _, err := os.Stat(filepath.Join(dataDir, "logstore")); err == nil {
			t.Fatalf("the log store was opened before registration")
		}
		select {
		case <-exited:
			b, _ := os.ReadFile(logPath)
			t.Fatalf("broker exited while holding:\n%s", b)
		case <-time.After(200 * time.Millisecond):
		}
	}
	r.open(t)
	c.eventually("/ready up after the API server returned", 60*time.Second, func() (bool, string) {
		return httpStatus("http://"+httpAddr+"/ready") == http.StatusOK, "not ready"
	})
	st := c.registered(t, c.name+"-0")
	if st.Incarnation != 1 || st.StorageID == "" {
		t.Errorf("registration after holding: incarnation %d, storage id %q", st.Incarnation, st.StorageID)
	}
}
