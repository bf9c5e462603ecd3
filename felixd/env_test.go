package felixd

import (
	"os"
	"sync"
	"testing"

	"felix.dev/felix/internal/testenv"
)

// One real API server for the package's tests, started on first use.
var (
	envOnce sync.Once
	env     *testenv.Env
	envErr  error
)

func apiServer(t *testing.T) *testenv.Env {
	t.Helper()
	envOnce.Do(func() { env, envErr = testenv.StartEnv() })
	if envErr != nil {
		t.Fatalf("testenv: %v", envErr)
	}
	return env
}

func TestMain(m *testing.M) {
	code := m.Run()
	if env != nil {
		_ = env.Stop()
	}
	os.Exit(code)
}
