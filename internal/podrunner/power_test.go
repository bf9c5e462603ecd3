package podrunner_test

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"felix.dev/felix/internal/podrunner"
)

// mountedAt reports whether a powerfs is mounted at dir.
func mountedAt(t *testing.T, dir string) bool {
	t.Helper()
	b, err := os.ReadFile("/proc/self/mountinfo")
	if err != nil {
		t.Fatal(err)
	}
	for _, line := range strings.Split(string(b), "\n") {
		f := strings.Fields(line)
		if len(f) > 4 && f[4] == dir && strings.Contains(line, "powerfs") {
			return true
		}
	}
	return false
}

// writeSynced creates path with data, fsyncs it and its directory.
func writeSynced(t *testing.T, path string, data []byte) {
	t.Helper()
	must(t, os.WriteFile(path, data, 0o644))
	for _, p := range []string{path, filepath.Dir(path)} {
		f, err := os.Open(p)
		must(t, err)
		must(t, f.Sync())
		must(t, f.Close())
	}
}

// TestPowerCut_DropsUnsyncedRemountsAndRestartsOnNewBoot: a pod whose
// claim is on powerfs loses power: its process is killed, what was not
// made durable is gone (the helper never syncs; a file the test synced
// stays), the claim is mounted again, and the container restarts, counted,
// with a new boot id in the file its flag names. Stopping the runner
// leaves no mount behind.
func TestPowerCut_DropsUnsyncedRemountsAndRestartsOnNewBoot(t *testing.T) {
	ctx := context.Background()
	ns := createNamespace(t, "power")
	r, stop := startRunner(t, ns, 236, func(c *podrunner.Config) {
		c.PowerLoss = &podrunner.PowerLossConfig{BootIDFlag: "--boot-id-file", Seed: 7}
	})
	must(t, env.Client.Create(ctx, &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "settings"}}))
	must(t, env.Client.Create(ctx, claim(ns, "data-p0")))
	must(t, env.Client.Create(ctx, brokerLikePod(ns, "p0", "data-p0")))
	waitReady(t, ns, "p0", 0)
	dir := r.ClaimDir(ns, "data-p0")
	if !mountedAt(t, dir) {
		t.Skipf("claim %s is not on powerfs (FUSE unavailable?)", dir)
	}
	rec := readRecord(t, filepath.Join(dir, "p0.json"))
	i := slices.Index(rec.Args, "--boot-id-file")
	if i < 0 || i+1 >= len(rec.Args) || rec.Boot == "" {
		t.Fatalf("args %q, boot %q: want --boot-id-file with a boot id", rec.Args, rec.Boot)
	}
	if strings.Contains(strings.Join(readLines(t, filepath.Join(dir, "starts")), ","), "init --boot-id-file") {
		t.Fatal("the init container got the boot id flag")
	}
	writeSynced(t, filepath.Join(dir, "durable"), []byte("kept"))
	must(t, os.WriteFile(filepath.Join(dir, "volatile"), []byte("lost"), 0o644))

	loss, err := r.PowerCut(ns, "p0")
	must(t, err)
	if loss.Entries == 0 || loss.Files == 0 {
		t.Fatalf("loss %+v: want unsynced data and entries dropped", loss)
	}
	eventually(t, 10*time.Second, "first process reaped", func() (bool, string) { return processGone(rec.PID), "" })
	waitReady(t, ns, "p0", 1)
	if !mountedAt(t, dir) {
		t.Fatal("claim not mounted again after the power cut")
	}
	if b, err := os.ReadFile(filepath.Join(dir, "durable")); err != nil || string(b) != "kept" {
		t.Fatalf("durable file after the power cut: %q, %v", b, err)
	}
	if _, err := os.Stat(filepath.Join(dir, "volatile")); !errors.Is(err, os.ErrNotExist) {
		t.Fatalf("unsynced file survived the power cut: %v", err)
	}
	starts := readLines(t, filepath.Join(dir, "starts"))
	// The init container's line was made durable when the main container
	// started (standing for its syncfs); the first main line was not.
	if len(starts) != 2 || !strings.HasPrefix(starts[0], "init ") || starts[1] != fmt.Sprintf("p0 %d", readRecord(t, filepath.Join(dir, "p0.json")).PID) {
		t.Fatalf("starts %q: want the init line (synced at the main start) and the restart's, not the first main start's (never synced)", starts)
	}
	rec2 := readRecord(t, filepath.Join(dir, "p0.json"))
	if rec2.Boot == "" || rec2.Boot == rec.Boot {
		t.Fatalf("boot id %q after the power cut, %q before: want a new one", rec2.Boot, rec.Boot)
	}

	stop()
	if mountedAt(t, dir) {
		t.Fatal("powerfs still mounted after the runner stopped")
	}
}

// TestPowerCut_NoPowerLossClaim: without PowerLoss a power cut is refused
// and nothing is killed.
func TestPowerCut_NoPowerLossClaim(t *testing.T) {
	ctx := context.Background()
	ns := createNamespace(t, "nopower")
	r, _ := startRunner(t, ns, 238, nil)
	must(t, env.Client.Create(ctx, &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "settings"}}))
	must(t, env.Client.Create(ctx, claim(ns, "data-q0")))
	must(t, env.Client.Create(ctx, brokerLikePod(ns, "q0", "data-q0")))
	waitReady(t, ns, "q0", 0)
	if _, err := r.PowerCut(ns, "q0"); !errors.Is(err, podrunner.ErrNoPowerLoss) {
		t.Fatalf("PowerCut without power-loss claims: %v, want ErrNoPowerLoss", err)
	}
	waitReady(t, ns, "q0", 0)
}
