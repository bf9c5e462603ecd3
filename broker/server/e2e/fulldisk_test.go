package e2e

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"felix.dev/felix/broker/client"
	"felix.dev/felix/broker/record"
	"felix.dev/felix/broker/wire"
)

// mountTmpfs mounts a tmpfs of the given size on a new directory and
// unmounts it when the test ends (after the brokers using it are
// stopped: cleanups run last first), or skips the test when mounting is
// not permitted.
func mountTmpfs(t *testing.T, size string) string {
	t.Helper()
	dir := t.TempDir()
	out, err := exec.Command("mount", "-t", "tmpfs", "-o", "size="+size, "tmpfs", dir).CombinedOutput()
	if err != nil {
		t.Skipf("needs a small tmpfs to fill (mount is not permitted here, run as root): %v: %s", err, bytes.TrimSpace(out))
	}
	t.Cleanup(func() {
		if out, err := exec.Command("umount", dir).CombinedOutput(); err != nil {
			t.Errorf("umount %s: %v: %s", dir, err, out)
		}
	})
	return dir
}

// httpGet returns the status and body of a GET on the broker's HTTP port.
func httpGet(t *testing.T, b *brokerProc, path string) (int, string) {
	t.Helper()
	resp, err := http.Get("http://" + b.http + path)
	if err != nil {
		t.Fatalf("GET %s: %v", path, err)
	}
	defer resp.Body.Close()
	body, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, string(body)
}

// readAllFrom reads the shard from offset 0 to its committed end.
func readAllFrom(ctx context.Context, t *testing.T, c *client.Client, shard record.ShardID) []record.Record {
	t.Helper()
	var out []record.Record
	from := uint64(0)
	for {
		res, err := c.Read(ctx, wire.ReadRequest{Shard: shard, From: wire.FromOffset, Offset: from, MaxBytes: 4 << 20})
		if err != nil {
			t.Fatalf("read from %d: %v", from, err)
		}
		if len(res.Records) == 0 {
			return out
		}
		out = append(out, res.Records...)
		from = res.Next
	}
}

// TestFullDiskRealBroker fills a real broker's 64 MiB tmpfs with appends:
// appends are refused with StorageFull, /ready answers 503 with the
// reason, the metrics say so, reads are still served and Describe reports
// the acknowledged tail; freeing space brings appends and /ready back by
// themselves, and after a restart every acknowledged record is there and
// nothing else. Twice: with a free-space floor (the refusal comes before
// the disk is full), and with none, so that a commit-log write meets
// ENOSPC and the broker must roll back instead of failing for good.
func TestFullDiskRealBroker(t *testing.T) {
	if testing.Short() {
		t.Skip("builds and runs the felix binary")
	}
	bin := felixBin(t)
	t.Run("floor", func(t *testing.T) { testFullDisk(t, bin, "16Mi") })
	t.Run("enospc", func(t *testing.T) { testFullDisk(t, bin, "0") })
}

func testFullDisk(t *testing.T, bin, minFree string) {
	mnt := mountTmpfs(t, "64m")
	filler := filepath.Join(mnt, "filler")
	if err := os.WriteFile(filler, make([]byte, 16<<20), 0o644); err != nil {
		t.Fatal(err)
	}
	dataDir := filepath.Join(mnt, "data")
	flags := []string{"--min-free-bytes", minFree, "--free-space-check-interval", "50ms"}
	b := startBroker(t, bin, dataDir, "on-commit", flags...)

	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	c, err := client.Dial(ctx, b.listen, client.Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	shard := record.ShardID{Stream: "fill", Shard: 0}
	batch := func(first uint64) []record.Record {
		recs := make([]record.Record, 16)
		for i := range recs {
			p := bytes.Repeat([]byte{'.'}, 16<<10)
			copy(p, fmt.Sprintf("record %d", first+uint64(i)))
			recs[i] = record.Record{Payload: p}
		}
		return recs
	}

	var acked uint64
	var we *wire.Error
	for i := 0; ; i++ {
		if i > 400 {
			t.Fatalf("100 MiB appended to a 64 MiB tmpfs and never refused")
		}
		res, err := c.Append(ctx, shard, batch(acked), &acked)
		if err == nil {
			acked = res.Tail
			continue
		}
		if !errors.As(err, &we) || we.Code != wire.CodeStorageFull {
			t.Fatalf("append %d (tail %d): %v, want StorageFull", i, acked, err)
		}
		break
	}
	t.Logf("refused with StorageFull after %d records: %s", acked, we.Message)
	if acked == 0 {
		t.Fatal("nothing was appended before the disk was full")
	}
	if _, err := c.Append(ctx, shard, batch(acked), &acked); !errors.As(err, &we) || we.Code != wire.CodeStorageFull {
		t.Fatalf("second append while full: %v, want StorageFull", err)
	}
	if code, body := httpGet(t, b, "/ready"); code != http.StatusServiceUnavailable || !strings.Contains(body, "storage full") {
		t.Fatalf("/ready while full: %d %q, want 503 naming storage full", code, body)
	}
	if _, body := httpGet(t, b, "/metrics"); !strings.Contains(body, "felix_broker_storage_full 1") ||
		!strings.Contains(body, "felix_broker_storage_full_refusals_total 2") {
		t.Fatalf("/metrics while full lacks felix_broker_storage_full 1 and 2 refusals")
	}
	if d, err := c.Describe(ctx, shard); err != nil || d.Tail != acked || d.Committed != acked {
		t.Fatalf("describe while full: %+v, %v; acknowledged tail %d", d, err, acked)
	}
	if got := readAllFrom(ctx, t, c, shard); uint64(len(got)) != acked {
		t.Fatalf("read while full: %d records, want %d", len(got), acked)
	}

	// Space returns: appends and /ready come back by themselves.
	if err := os.Remove(filler); err != nil {
		t.Fatal(err)
	}
	deadline := time.Now().Add(20 * time.Second)
	for {
		code, body := httpGet(t, b, "/ready")
		if code == http.StatusOK {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("/ready after freeing 16 MiB: %d %q", code, body)
		}
		time.Sleep(50 * time.Millisecond)
	}
	res, err := c.Append(ctx, shard, batch(acked), &acked)
	if err != nil {
		t.Fatalf("append after space returned: %v", err)
	}
	acked = res.Tail
	if _, body := httpGet(t, b, "/metrics"); !strings.Contains(body, "felix_broker_storage_full 0") {
		t.Fatalf("/metrics after space returned lacks felix_broker_storage_full 0")
	}
	_ = c.Close()
	b.stop(t)

	// Nothing acknowledged is lost across a restart.
	b = startBroker(t, bin, dataDir, "on-commit", flags...)
	c2, err := client.Dial(ctx, b.listen, client.Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer c2.Close()
	got := readAllFrom(ctx, t, c2, shard)
	if uint64(len(got)) != acked {
		t.Fatalf("after restart %d records, acknowledged %d", len(got), acked)
	}
	for i, r := range got {
		if want := fmt.Sprintf("record %d", i); r.Offset != uint64(i) || !bytes.HasPrefix(r.Payload, []byte(want)) {
			t.Fatalf("record %d after restart: offset %d, payload %q", i, r.Offset, r.Payload[:min(len(r.Payload), 16)])
		}
	}
	b.stop(t)
}
