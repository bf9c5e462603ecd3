package main

import (
	"fmt"
	"io"
	"strings"
	"testing"
	"time"

	"felix.dev/felix/broker/auth"
	"felix.dev/felix/internal/pki"
)

// felix append --each-line appends each line of stdin as it is read: the
// answer for a line is printed while stdin is still open, before the next
// line is written, and every line lands once, in order.
func TestAppendEachLine(t *testing.T) {
	clearTLSEnv(t)
	b := startTLSBroker(t)
	b.table.Set("alice", "uid-alice", []auth.Grant{{Stream: "orders", Ops: []auth.Operation{auth.OpAppend, auth.OpRead, auth.OpDescribe}}})
	alice := issueDir(t, b.ca, pki.Identity{Namespace: "ns", Cluster: "c", Kind: pki.KindUser, Name: "alice"})

	in, feed := io.Pipe()
	var out syncBuffer
	root := newRootCmd()
	root.SetIn(in)
	root.SetOut(&out)
	root.SetErr(&out)
	root.SetArgs([]string{"append", "--broker", b.addr, "--stream", "orders", "--each-line", "--tls-dir", alice, "--cluster", "ns/c"})
	done := make(chan error, 1)
	go func() { done <- root.ExecuteContext(t.Context()) }()

	for i := 0; i < 3; i++ {
		if _, err := fmt.Fprintf(feed, "line-%d\n", i); err != nil {
			t.Fatal(err)
		}
		want := fmt.Sprintf(`{"first":%d,"last":%d,"tail":%d}`, i, i, i+1)
		deadline := time.Now().Add(10 * time.Second)
		for !strings.Contains(out.String(), want) {
			if time.Now().After(deadline) {
				t.Fatalf("line %d: no answer %s while stdin stays open; printed:\n%s", i, want, out.String())
			}
			time.Sleep(10 * time.Millisecond)
		}
	}
	_ = feed.Close()
	if err := <-done; err != nil {
		t.Fatalf("append --each-line: %v\n%s", err, out.String())
	}
	got, err := runFelix(t, "read", "--broker", b.addr, "--stream", "orders", "--from", "0", "--tls-dir", alice, "--cluster", "ns/c")
	if err != nil {
		t.Fatal(err)
	}
	for i := 0; i < 3; i++ {
		if n := strings.Count(got, fmt.Sprintf(`"payload":"line-%d"`, i)); n != 1 {
			t.Errorf("line-%d read back %d times:\n%s", i, n, got)
		}
	}

	// --each-line sends stdin's lines: --payload and --expect-tail are refused.
	for _, extra := range [][]string{{"--payload", "x"}, {"--expect-tail", "3"}} {
		args := append([]string{"append", "--broker", b.addr, "--stream", "orders", "--each-line", "--tls-dir", alice}, extra...)
		if out, err := runFelix(t, args...); err == nil || !strings.Contains(out, "--each-line") {
			t.Errorf("append --each-line %v: %v\n%s", extra, err, out)
		}
	}
}
