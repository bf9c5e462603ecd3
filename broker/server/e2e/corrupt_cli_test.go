package e2e

import (
	"io"
	"net/http"
	"strings"
	"testing"

	"felix.dev/felix/internal/diskfault"
)

// flipAll flips one byte inside every occurrence of marker under dir.
func flipAll(t *testing.T, dir, marker string) int {
	t.Helper()
	f, err := diskfault.FlipMarker(dir, []byte(marker))
	if err != nil {
		t.Fatal(err)
	}
	return len(f)
}

func metricsText(t *testing.T, b *brokerProc) string {
	t.Helper()
	resp, err := http.Get("http://" + b.http + "/metrics")
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	body, _ := io.ReadAll(resp.Body)
	return string(body)
}

// Issue 25, standalone: after a clean stop under on-commit and one byte of
// the newest batch flipped, the broker starts, serves its other logs, and
// refuses the damaged one with Corrupt (read and append), with an
// error-level line and felix_broker_corrupt_logs 1. felix log inspect
// shows the damage; felix log repair truncates at it, and the broker then
// serves the log again under a new storage id.
func TestCLIStandaloneCorruptLogIsRefusedThenRepaired(t *testing.T) {
	if testing.Short() {
		t.Skip("builds and runs the felix binary")
	}
	bin := felixBin(t)
	dataDir := t.TempDir()
	b := startBroker(t, bin, dataDir, "on-commit")
	on := func(shard string, extra ...string) []string {
		return append(extra, "--broker", b.listen, "--stream", "orders", "--shard", shard)
	}
	for i := 0; i < 20; i++ {
		ok(t, bin, "", on("2", "append", "--payload", "r-"+strings.Repeat("r", 1500))...)
	}
	ok(t, bin, "", on("2", "append", "--payload", "newest-"+strings.Repeat("n", 1500))...)
	ok(t, bin, "", on("3", "append", "--payload", "other-shard")...)
	oldID := b.storageID
	b.stop(t)
	if n := flipAll(t, dataDir, "newest-nnnn"); n == 0 {
		t.Fatal("newest batch not found on disk")
	}

	b = startBroker(t, bin, dataDir, "on-commit")
	e := refused(t, bin, on("2", "read", "--from", "earliest")...)
	if e["error"] != "Corrupt" || e["offset"] != 20.0 {
		t.Fatalf("read of the damaged log: %v, want Corrupt at 20", e)
	}
	if e := refused(t, bin, on("2", "append", "--payload", "more")...); e["error"] != "Corrupt" {
		t.Fatalf("append to the damaged log: %v, want Corrupt", e)
	}
	if got := ok(t, bin, "", on("3", "read", "--from", "earliest")...); len(got) != 1 {
		t.Fatalf("the other shard: %v", got)
	}
	if m := metricsText(t, b); !strings.Contains(m, "\nfelix_broker_corrupt_logs 1\n") {
		t.Fatalf("metrics without felix_broker_corrupt_logs 1")
	}
	b.stop(t)
	if !strings.Contains(b.stderr.String(), "log refused: its stored data is damaged") {
		t.Fatalf("no error-level line about the damage:\n%s", b.stderr)
	}

	r := run(t, bin, "", "log", "inspect", "--data-dir", dataDir, "--stream", "orders", "--shard", "2")
	if r.code != 4 || len(r.stdout) != 1 || !strings.Contains(r.stdout[0], `"damageOffset":20`) {
		t.Fatalf("inspect: exit %d, %q, %s", r.code, r.stdout, r.stderr)
	}
	ok(t, bin, "", "log", "repair", "--data-dir", dataDir, "--stream", "orders", "--shard", "2", "--truncate-at", "20", "--yes")

	b = startBroker(t, bin, dataDir, "on-commit")
	if b.storageID == oldID {
		t.Fatal("the storage id survived a repair that gave up records")
	}
	if got := ok(t, bin, "", on("2", "read", "--from", "earliest")...); len(got) != 20 {
		t.Fatalf("after repair %d records, want 20", len(got))
	}
	ok(t, bin, "", on("2", "append", "--expect-tail", "20", "--payload", "after-repair")...)
	b.stop(t)
}
