package logstore

import (
	"fmt"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/go-logr/logr/funcr"
)

// TestSpaceMonitorLogsFailuresOnChange: a free-space check that keeps
// failing is logged once per kind of failure (its system error number),
// whatever its text, and its recovery once.
func TestSpaceMonitorLogsFailuresOnChange(t *testing.T) {
	var mu sync.Mutex
	var lines []string
	logger := funcr.New(func(prefix, args string) {
		mu.Lock()
		defer mu.Unlock()
		lines = append(lines, args)
	}, funcr.Options{})
	count := func(sub string) int {
		mu.Lock()
		defer mu.Unlock()
		n := 0
		for _, l := range lines {
			if strings.Contains(l, sub) {
				n++
			}
		}
		return n
	}
	var calls atomic.Int64
	var errno atomic.Value // syscall.Errno; zero: succeed
	errno.Store(syscall.EACCES)
	free := func(string) (uint64, error) {
		n := calls.Add(1)
		if e := errno.Load().(syscall.Errno); e != 0 {
			// A different text on every call: only the class counts.
			return 0, fmt.Errorf("statfs (call %d): %w", n, e)
		}
		return 1 << 40, nil
	}
	openTest(t, Options{MinFreeBytes: 1 << 20, SpaceCheckInterval: time.Millisecond, FreeSpace: free, Logger: logger})
	waitCalls := func() {
		t.Helper()
		target := calls.Load() + 20
		deadline := time.Now().Add(10 * time.Second)
		for calls.Load() < target {
			if time.Now().After(deadline) {
				t.Fatal("the monitor stopped measuring")
			}
			time.Sleep(time.Millisecond)
		}
	}
	waitCalls()
	if n := count("free-space check"); n != 1 {
		t.Fatalf("%d lines for a check failing with EACCES on every tick, want 1: %q", n, lines)
	}
	errno.Store(syscall.EIO)
	waitCalls()
	if n := count("free-space check"); n != 2 {
		t.Fatalf("%d lines after the failure changed to EIO, want 2", n)
	}
	errno.Store(syscall.Errno(0))
	waitCalls()
	if n := count("succeeds again"); n != 1 {
		t.Fatalf("%d recovery lines, want 1", n)
	}
	errno.Store(syscall.EIO)
	waitCalls()
	if n := count("free-space check"); n != 4 {
		t.Fatalf("%d lines after failing again, want 4 (3 errors, 1 recovery)", n)
	}
}
