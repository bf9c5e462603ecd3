package e2e

import (
	"bufio"
	"bytes"
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/json"
	"encoding/pem"
	"errors"
	"math/big"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	// The binary is built from these packages: importing them makes the
	// test cache notice their changes.
	_ "felix.dev/felix/broker/client"
	_ "felix.dev/felix/broker/datadir"
	_ "felix.dev/felix/broker/logstore"
	_ "felix.dev/felix/broker/server"
)

// felixBin builds the felix binary once per test run; FELIX_E2E_BIN names
// a binary to use instead.
func felixBin(t *testing.T) string {
	t.Helper()
	if bin := os.Getenv("FELIX_E2E_BIN"); bin != "" {
		return bin // another build, to compare (as in test/e2e)
	}
	// Reading the command's sources makes the test cache notice their
	// changes (the build runs in a subprocess the cache cannot see).
	srcs, _ := filepath.Glob(filepath.Join("..", "..", "..", "cmd", "felix", "*.go"))
	for _, src := range srcs {
		_, _ = os.ReadFile(src)
	}
	bin := filepath.Join(t.TempDir(), "felix")
	cmd := exec.Command("go", "build", "-o", bin, "felix.dev/felix/cmd/felix")
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("go build: %v\n%s", err, out)
	}
	return bin
}

// brokerProc is a running `felix broker`.
type brokerProc struct {
	cmd       *exec.Cmd
	listen    string
	http      string
	storageID string
	exited    chan error
	stderr    *bytes.Buffer
}

func startBroker(t *testing.T, bin, dataDir, fsync string, extra ...string) *brokerProc {
	t.Helper()
	cmd := exec.Command(bin, append([]string{"broker", "--data-dir", dataDir, "--listen", "127.0.0.1:0", "--http", "127.0.0.1:0",
		"--fsync", fsync, "--standalone"}, extra...)...)
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	b := &brokerProc{cmd: cmd, exited: make(chan error, 1), stderr: &bytes.Buffer{}}
	cmd.Stderr = b.stderr
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	go func() { b.exited <- cmd.Wait() }()
	t.Cleanup(func() {
		if cmd.ProcessState == nil {
			_ = cmd.Process.Kill()
			<-b.exited
		}
	})
	lines := make(chan string, 1)
	go func() {
		sc := bufio.NewScanner(stdout)
		if sc.Scan() {
			lines <- sc.Text()
		}
		close(lines)
	}()
	select {
	case line, ok := <-lines:
		if !ok {
			t.Fatalf("broker exited before serving:\n%s", b.stderr)
		}
		var hello struct{ Listen, HTTP, StorageID string }
		if err := json.Unmarshal([]byte(line), &hello); err != nil {
			t.Fatalf("serving line %q: %v", line, err)
		}
		b.listen, b.http, b.storageID = hello.Listen, hello.HTTP, hello.StorageID
	case <-time.After(30 * time.Second):
		t.Fatalf("broker did not start:\n%s", b.stderr)
	}
	deadline := time.Now().Add(10 * time.Second)
	for {
		resp, err := http.Get("http://" + b.http + "/ready")
		if err == nil {
			_ = resp.Body.Close()
			if resp.StatusCode == 200 {
				break
			}
		}
		if time.Now().After(deadline) {
			t.Fatalf("broker not ready: %v", err)
		}
		time.Sleep(20 * time.Millisecond)
	}
	return b
}

// stop sends SIGTERM and waits for a zero exit.
func (b *brokerProc) stop(t *testing.T) {
	t.Helper()
	if err := b.cmd.Process.Signal(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	select {
	case err := <-b.exited:
		if err != nil {
			t.Fatalf("broker exit: %v\n%s", err, b.stderr)
		}
	case <-time.After(60 * time.Second):
		// Ask for the goroutines, so a hang says where it is.
		_ = b.cmd.Process.Signal(syscall.SIGQUIT)
		select {
		case <-b.exited:
		case <-time.After(10 * time.Second):
			_ = b.cmd.Process.Kill()
		}
		t.Fatalf("broker did not stop within 60s of SIGTERM; its stderr, with the goroutine dump of SIGQUIT:\n%s", b.stderr)
	}
}

type result struct {
	stdout []string
	stderr string
	code   int
}

func run(t *testing.T, bin, stdin string, args ...string) result {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	cmd := exec.CommandContext(ctx, bin, args...)
	cmd.Stdin = strings.NewReader(stdin)
	var out, errb bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &errb
	err := cmd.Run()
	r := result{stderr: errb.String()}
	var ee *exec.ExitError
	if errors.As(err, &ee) {
		r.code = ee.ExitCode()
	} else if err != nil {
		t.Fatalf("%v: %v", args, err)
	}
	for _, l := range strings.Split(strings.TrimSpace(out.String()), "\n") {
		if l != "" {
			r.stdout = append(r.stdout, l)
		}
	}
	return r
}

func decode(t *testing.T, line string) map[string]any {
	t.Helper()
	var m map[string]any
	if err := json.Unmarshal([]byte(line), &m); err != nil {
		t.Fatalf("not one JSON object: %q: %v", line, err)
	}
	return m
}

// ok runs a command that must succeed and returns its JSON lines.
func ok(t *testing.T, bin, stdin string, args ...string) []map[string]any {
	t.Helper()
	r := run(t, bin, stdin, args...)
	if r.code != 0 {
		t.Fatalf("%v exited %d: %s", args, r.code, r.stderr)
	}
	var out []map[string]any
	for _, l := range r.stdout {
		out = append(out, decode(t, l))
	}
	return out
}

// refused runs a command that must fail and returns its stderr JSON.
func refused(t *testing.T, bin string, args ...string) map[string]any {
	t.Helper()
	r := run(t, bin, "", args...)
	if r.code == 0 {
		t.Fatalf("%v succeeded: %v", args, r.stdout)
	}
	lines := strings.Split(strings.TrimSpace(r.stderr), "\n")
	if len(lines) != 1 || len(r.stdout) != 0 {
		t.Fatalf("%v: want one JSON line on stderr and nothing on stdout, got %q / %q", args, r.stderr, r.stdout)
	}
	return decode(t, lines[0])
}

func want(t *testing.T, got, wantV any) {
	t.Helper()
	if diff := cmp.Diff(wantV, got); diff != "" {
		t.Fatalf("(-want +got):\n%s", diff)
	}
}

// TestCLIEndToEnd drives a real broker process through the client commands:
// appends (single and stdin batches), conditional append refused with the
// tail [TR-1], trim with headers, CursorTooOld carrying trimHeaders [TR-4],
// describe, follow mode, and a graceful SIGTERM that records a clean stop
// so the restart keeps the storage id [ID-3].
func TestCLIEndToEnd(t *testing.T) {
	if testing.Short() {
		t.Skip("builds and runs the felix binary")
	}
	bin := felixBin(t)
	t.Run("commands", func(t *testing.T) { testCommands(t, bin) })
	t.Run("tls", func(t *testing.T) { testTLS(t, bin) })
	t.Run("python client from the protocol document", func(t *testing.T) { testPythonClient(t, bin) })
}

// testPythonClient runs testdata/pyclient.py, a client written from
// docs/protocol.md alone, against the broker: the document is precise
// enough for another language.
func testPythonClient(t *testing.T, bin string) {
	py, err := exec.LookPath("python3")
	if err != nil {
		t.Skip("python3 not installed")
	}
	b := startBroker(t, bin, t.TempDir(), "none")
	out, err := exec.Command(py, filepath.Join("testdata", "pyclient.py"), b.listen, "py").Output()
	if err != nil {
		var ee *exec.ExitError
		if errors.As(err, &ee) {
			t.Fatalf("pyclient: %v\n%s", err, ee.Stderr)
		}
		t.Fatal(err)
	}
	got := decode(t, strings.TrimSpace(string(out)))
	for _, k := range []string{"cursorTooOld", "offsetMismatch"} {
		if e, ok := got[k].(map[string]any); ok {
			delete(e, "message") // human text, not part of the contract
		}
	}
	wantJSON := `{"append":{"first":0,"tail":2},
		"cursorTooOld":{"code":2,"floor":1,"from":0,"trimHeaders":{"epoch":"5"}},
		"describe":{"base":0,"committed":3,"floor":1,"tail":3},
		"features":2,
		"offsetMismatch":{"code":1,"expected":0,"tail":2},
		"read":{"next":2,"records":[{"headers":{"epoch":"1"},"offset":0,"payload":"one"},{"headers":{},"offset":1,"payload":"two"}]},
		"trim":{"floor":1,"tail":3}}`
	want(t, got, decode(t, wantJSON))
	b.stop(t)
}

func testCommands(t *testing.T, bin string) {
	dataDir := t.TempDir()
	b := startBroker(t, bin, dataDir, "on-commit")
	shard := func(extra ...string) []string {
		return append(extra, "--broker", b.listen, "--stream", "orders", "--shard", "2")
	}

	want(t, ok(t, bin, "", shard("append", "--payload", "hello")...),
		[]map[string]any{{"first": 0.0, "last": 0.0, "tail": 1.0}})
	want(t, ok(t, bin, "a\nb\n\xff\xfe\n", shard("append", "--header", "epoch=1", "--header", "src=cli")...),
		[]map[string]any{{"first": 1.0, "last": 3.0, "tail": 4.0}})

	recs := ok(t, bin, "", shard("read", "--from", "earliest")...)
	if len(recs) != 4 {
		t.Fatalf("read %d records, want 4: %v", len(recs), recs)
	}
	for i, r := range recs {
		delete(r, "timestamp")
		if r["offset"] != float64(i) || r["epoch"] != 0.0 {
			t.Fatalf("record %d: %v", i, r)
		}
	}
	want(t, recs[1], map[string]any{"offset": 1.0, "epoch": 0.0, "headers": map[string]any{"epoch": "1", "src": "cli"}, "payload": "a"})
	want(t, recs[3]["payloadBase64"], "//4=")
	want(t, recs[0]["headers"], map[string]any{})
	if got := ok(t, bin, "", shard("read", "--from", "1", "--limit", "2")...); len(got) != 2 || got[0]["offset"] != 1.0 {
		t.Fatalf("read --from 1 --limit 2: %v", got)
	}

	// [TR-1] a stale conditional append names the tail.
	e := refused(t, bin, shard("append", "--expect-tail", "2", "--payload", "stale")...)
	if e["error"] != "OffsetMismatch" || e["tail"] != 4.0 || e["expected"] != 2.0 {
		t.Fatalf("OffsetMismatch error: %v", e)
	}
	want(t, ok(t, bin, "", shard("append", "--expect-tail", "4", "--payload", "fenced", "--header", "epoch=2")...),
		[]map[string]any{{"first": 4.0, "last": 4.0, "tail": 5.0}})

	// [TR-2] trim with headers; [TR-4] a read below the floor is told who trimmed.
	want(t, ok(t, bin, "", shard("trim", "--floor", "3", "--expect-tail", "5", "--header", "epoch=2")...),
		[]map[string]any{{"tail": 6.0, "floor": 3.0}})
	e = refused(t, bin, shard("read", "--from", "1")...)
	if e["error"] != "CursorTooOld" || e["floor"] != 3.0 {
		t.Fatalf("CursorTooOld error: %v", e)
	}
	want(t, e["trimHeaders"], map[string]any{"epoch": "2"})
	e = refused(t, bin, shard("trim", "--floor", "4", "--expect-tail", "5")...)
	if e["error"] != "OffsetMismatch" || e["tail"] != 6.0 {
		t.Fatalf("trim with a stale tail: %v", e)
	}
	if got := ok(t, bin, "", shard("read", "--from", "earliest")...); len(got) != 2 || got[0]["offset"] != 3.0 || got[1]["payload"] != "fenced" {
		t.Fatalf("read from earliest after the trim (trim record skipped): %v", got)
	}
	want(t, ok(t, bin, "", shard("describe")...),
		[]map[string]any{{"stream": "orders", "shard": 2.0, "base": 0.0, "floor": 3.0, "tail": 6.0, "committed": 6.0}})
	table := run(t, bin, "", shard("describe", "-o", "table")...)
	if table.code != 0 || len(table.stdout) != 2 || !strings.HasPrefix(table.stdout[0], "STREAM") {
		t.Fatalf("describe -o table: %v", table.stdout)
	}
	e = refused(t, bin, "read", "--broker", b.listen, "--shard", "0")
	if e["error"] != "Usage" {
		t.Fatalf("missing --stream: %v", e)
	}

	// Follow mode: a reader waiting at the tail prints the next record.
	follow := exec.Command(bin, shard("read", "--from", "latest", "--follow", "--limit", "1")...)
	var fout bytes.Buffer
	follow.Stdout = &fout
	if err := follow.Start(); err != nil {
		t.Fatal(err)
	}
	done := make(chan error, 1)
	go func() { done <- follow.Wait() }()
	deadline := time.After(20 * time.Second)
	for appended := false; !appended; {
		ok(t, bin, "", shard("append", "--payload", "live")...)
		select {
		case err := <-done:
			if err != nil {
				t.Fatalf("follow: %v", err)
			}
			appended = true
		case <-time.After(200 * time.Millisecond):
		case <-deadline:
			_ = follow.Process.Kill()
			t.Fatal("follow reader printed nothing")
		}
	}
	if got := decode(t, strings.TrimSpace(fout.String())); got["payload"] != "live" {
		t.Fatalf("follow printed %v", got)
	}

	// felix bench drives appends and reports its figures.
	bench := ok(t, bin, "", "bench", "--broker", b.listen, "--connections", "2", "--pipeline", "2", "--batch", "4",
		"--record-size", "100", "--duration", "300ms", "--warmup", "0s", "--reads")
	if len(bench) != 1 || bench[0]["records"].(float64) <= 0 || bench[0]["errors"] != 0.0 || bench[0]["p99Ms"].(float64) <= 0 ||
		bench[0]["mbPerSec"].(float64) <= 0 || bench[0]["recordsPerSec"].(float64) <= 0 {
		t.Fatalf("bench: %v", bench)
	}

	// Graceful stop records a clean stop; the restart keeps the id and data.
	id := b.storageID
	b.stop(t)
	rs, err := os.ReadFile(filepath.Join(dataDir, "run-state"))
	if err != nil || !strings.Contains(string(rs), "clean-stop") {
		t.Fatalf("run-state after SIGTERM: %q %v", rs, err)
	}
	b2 := startBroker(t, bin, dataDir, "on-commit")
	if b2.storageID != id {
		t.Fatalf("storage id changed across a clean restart: %s -> %s", id, b2.storageID)
	}
	got := ok(t, bin, "", "describe", "--broker", b2.listen, "--stream", "orders", "--shard", "2")
	if got[0]["floor"] != 3.0 || got[0]["tail"].(float64) < 7 {
		t.Fatalf("describe after restart: %v", got)
	}
	b2.stop(t)
}

// testTLS runs the broker with a certificate and the client commands with
// --tls-ca; a plaintext client is refused.
func testTLS(t *testing.T, bin string) {
	dir := t.TempDir()
	certFile, keyFile := writeCert(t, dir)
	b := startBroker(t, bin, filepath.Join(dir, "data"), "periodic", "--tls-cert", certFile, "--tls-key", keyFile)
	args := []string{"--broker", b.listen, "--stream", "secure", "--tls-ca", certFile}
	want(t, ok(t, bin, "", append([]string{"append", "--payload", "over tls"}, args...)...),
		[]map[string]any{{"first": 0.0, "last": 0.0, "tail": 1.0}})
	got := ok(t, bin, "", append([]string{"read"}, args...)...)
	if len(got) != 1 || got[0]["payload"] != "over tls" {
		t.Fatalf("read over TLS: %v", got)
	}
	e := refused(t, bin, "describe", "--broker", b.listen, "--stream", "secure", "--timeout", "3s")
	if e["error"] != "Unavailable" {
		t.Fatalf("plaintext client against a TLS broker: %v", e)
	}
	b.stop(t)
}

// writeCert writes a self-signed certificate for 127.0.0.1 and its key as
// PEM files.
func writeCert(t *testing.T, dir string) (certFile, keyFile string) {
	t.Helper()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	tmpl := &x509.Certificate{SerialNumber: big.NewInt(1), Subject: pkix.Name{CommonName: "felix-e2e"},
		NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(time.Hour),
		IPAddresses: []net.IP{net.ParseIP("127.0.0.1")}, KeyUsage: x509.KeyUsageDigitalSignature,
		ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth}, BasicConstraintsValid: true, IsCA: true}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		t.Fatal(err)
	}
	keyDER, err := x509.MarshalECPrivateKey(key)
	if err != nil {
		t.Fatal(err)
	}
	certFile, keyFile = filepath.Join(dir, "tls.crt"), filepath.Join(dir, "tls.key")
	if err := os.WriteFile(certFile, pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der}), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(keyFile, pem.EncodeToMemory(&pem.Block{Type: "EC PRIVATE KEY", Bytes: keyDER}), 0o600); err != nil {
		t.Fatal(err)
	}
	return certFile, keyFile
}
