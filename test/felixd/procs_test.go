package felixd_test

import (
	"bufio"
	"bytes"
	"encoding/json"
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"sync"
	"syscall"
	"testing"
	"time"

	"felix.dev/felix/internal/testenv"
)

// felixBin builds the felix binary into the test's temp dir.
func felixBin(t *testing.T) string {
	t.Helper()
	// Reading the sources makes the test cache notice their changes (the
	// build runs in a subprocess the cache cannot see).
	for _, dir := range []string{"cmd/felix", "felixd"} {
		srcs, _ := filepath.Glob(filepath.Join(testenv.RepoRoot(), dir, "*.go"))
		for _, src := range srcs {
			_, _ = os.ReadFile(src)
		}
	}
	bin := filepath.Join(t.TempDir(), "felix")
	cmd := exec.Command("go", "build", "-o", bin, "./cmd/felix")
	cmd.Dir = testenv.RepoRoot()
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("go build: %v\n%s", err, out)
	}
	return bin
}

// syncBuffer is a bytes.Buffer safe for the process's writer and the test.
type syncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *syncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *syncBuffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}

// proc is a process this test started.
type proc struct {
	name   string
	cmd    *exec.Cmd
	exited chan struct{}
	err    error
	stderr *syncBuffer
}

// start runs bin with args; the process is killed when the test ends if it
// is still running.
func start(t *testing.T, name, bin string, args ...string) (*proc, *bufio.Scanner) {
	t.Helper()
	cmd := exec.Command(bin, args...)
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	p := &proc{name: name, cmd: cmd, exited: make(chan struct{}), stderr: &syncBuffer{}}
	cmd.Stderr = p.stderr
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	go func() {
		p.err = cmd.Wait()
		close(p.exited)
	}()
	t.Cleanup(func() {
		select {
		case <-p.exited:
		default:
			_ = cmd.Process.Kill() // SIGKILL ends a stopped process too
			<-p.exited
		}
		if t.Failed() {
			t.Logf("%s stderr:\n%s", name, p.stderr)
		}
	})
	return p, bufio.NewScanner(stdout)
}

func (p *proc) signal(t *testing.T, sig syscall.Signal) {
	t.Helper()
	if err := p.cmd.Process.Signal(sig); err != nil {
		t.Fatalf("%s: signal %v: %v", p.name, sig, err)
	}
}

// wait waits for the process to exit and returns its exit code.
func (p *proc) wait(t *testing.T, d time.Duration) int {
	t.Helper()
	select {
	case <-p.exited:
	case <-time.After(d):
		t.Fatalf("%s did not exit within %v", p.name, d)
	}
	var ee *exec.ExitError
	if errors.As(p.err, &ee) {
		return ee.ExitCode()
	}
	if p.err != nil {
		t.Fatalf("%s: %v", p.name, p.err)
	}
	return 0
}

// startBroker starts a standalone broker and returns it with its protocol
// address.
// brokerIdleTimeout is the broker's --idle-timeout: shorter than a standby
// holder's wait for the lease and than a frozen holder's freeze.
const brokerIdleTimeout = time.Second

func startBroker(t *testing.T, bin, dataDir string) (*proc, string) {
	t.Helper()
	b, out := start(t, "broker", bin, "broker", "--standalone", "--data-dir", dataDir,
		"--listen", "127.0.0.1:0", "--http", "127.0.0.1:0", "--fsync", "periodic",
		"--idle-timeout", brokerIdleTimeout.String())
	lines := make(chan string, 1)
	go func() {
		if out.Scan() {
			lines <- out.Text()
		}
		close(lines)
	}()
	select {
	case line, ok := <-lines:
		if !ok {
			t.Fatalf("broker exited before serving:\n%s", b.stderr)
		}
		var hello struct{ Listen string }
		if err := json.Unmarshal([]byte(line), &hello); err != nil || hello.Listen == "" {
			t.Fatalf("serving line %q: %v", line, err)
		}
		return b, hello.Listen
	case <-time.After(30 * time.Second):
		t.Fatalf("broker did not start:\n%s", b.stderr)
	}
	return nil, ""
}

// waitFor polls cond every 20ms until it holds or d passes.
func waitFor(t *testing.T, what string, d time.Duration, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(d)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out after %v waiting for %s", d, what)
		}
		time.Sleep(20 * time.Millisecond)
	}
}
