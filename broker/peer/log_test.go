package peer

import (
	"errors"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/go-logr/logr/funcr"

	"felix.dev/felix/broker/replication"
)

// TestConnectFailuresLoggedOncePerChange [L1/M3]: a peer that keeps
// failing the same way is logged at Info once (every retry only at V(1)),
// again when the failure changes, and each failure reaches
// OnConnectFailed.
func TestConnectFailuresLoggedOncePerChange(t *testing.T) {
	var mu sync.Mutex
	var infos []string
	logger := funcr.New(func(prefix, args string) {
		mu.Lock()
		defer mu.Unlock()
		infos = append(infos, args)
	}, funcr.Options{Verbosity: 0})
	var attempts, counted atomic.Int64
	errA, errB := errors.New("refused A"), errors.New("refused B")
	p := NewPool(Options{
		Self: "b-0", Events: &recorder{}, Logger: logger,
		Resolve: func(replication.NodeID) (string, error) {
			if attempts.Add(1) <= 5 {
				return "", errA
			}
			return "", errB
		},
		After:           func(time.Duration) <-chan time.Time { c := make(chan time.Time, 1); c <- time.Time{}; return c },
		OnConnectFailed: func(replication.NodeID, error) { counted.Add(1) },
	})
	p.Want("b-1")
	waitFor(t, "ten attempts", func() bool { return counted.Load() >= 10 })
	p.Close()
	mu.Lock()
	defer mu.Unlock()
	failing := 0
	for _, l := range infos {
		if strings.Contains(l, "replication connection failing") {
			failing++
		}
	}
	// Five times A, then B: one Info line each.
	if failing != 2 {
		t.Fatalf("Info lines %d for two kinds of failure, want 2: %q", failing, infos)
	}
}
