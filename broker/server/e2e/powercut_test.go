//go:build linux

package e2e

import (
	"bytes"
	"context"
	"fmt"
	"math/rand/v2"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/go-logr/logr/testr"

	"felix.dev/felix/broker/client"
	"felix.dev/felix/broker/record"
	"felix.dev/felix/broker/wire"
	"felix.dev/felix/internal/powerfs"
)

// Power-cut tests with the real broker on a powerfs mount (issue 25,
// item 2): the broker appends with acknowledgement, is SIGKILLed at a
// seeded moment while appends are in flight, the file system loses
// everything not made durable by fsync (data, new entries, renames,
// truncations; the last unsynced write of each file torn at a page), and
// the broker restarts under a new boot id. The seeds' promises [ID-3]:
// on-commit keeps every acknowledged record and its storage id;
// periodic and none either keep every acknowledged record or rotate the
// storage id, so that no peer counts this replica as holding what it
// lost. FELIX_POWERCUT_SEED sets the seed.

const (
	bootBefore = "3c1e9a52-7d4b-4f0e-9b8a-2d6c5e1f0a7b\n"
	bootAfter  = "8d2f4b61-1a3c-4e5d-8f70-9a1b2c3d4e5f\n"
)

// powerMount mounts a powerfs on base/mnt over base/backing, or skips
// the test when FUSE is not available here.
func powerMount(t *testing.T, base string, rnd *rand.Rand) *powerfs.FS {
	t.Helper()
	backing, mnt := filepath.Join(base, "backing"), filepath.Join(base, "mnt")
	for _, d := range []string{backing, mnt} {
		if err := os.MkdirAll(d, 0o755); err != nil {
			t.Fatal(err)
		}
	}
	f, err := powerfs.Mount(mnt, powerfs.Options{Backing: backing, Rand: rnd, Logger: testr.NewWithOptions(t, testr.Options{Verbosity: 1})})
	if err != nil {
		t.Skipf("needs a FUSE mount (/dev/fuse, fusermount3, root): %v", err)
	}
	return f
}

func TestPowerCutRealBroker(t *testing.T) {
	if testing.Short() {
		t.Skip("builds and runs the felix binary on a FUSE mount")
	}
	bin := felixBin(t)
	seed := uint64(20261201)
	if s := os.Getenv("FELIX_POWERCUT_SEED"); s != "" {
		if _, err := fmt.Sscan(s, &seed); err != nil {
			t.Fatalf("FELIX_POWERCUT_SEED: %v", err)
		}
	}
	cases := []struct {
		name, fsync string
		extra       []string
	}{
		{"on-commit", "on-commit", nil},
		{"on-commit-values-in-badger", "on-commit", []string{"--batches-in-commit-log=false"}},
		{"periodic", "periodic", []string{"--fsync-interval", "100ms"}},
		{"none", "none", nil},
	}
	for i, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			rng := rand.New(rand.NewPCG(seed, uint64(i)))
			acked, kept, rotated, rerr := powerCutRound(t, bin, c.fsync, c.extra, rng)
			t.Logf("POWERCUT fsync=%s variant=%s acknowledged=%d survived=%d lost=%d storage_id_rotated=%v read_error=%v",
				c.fsync, c.name, acked, kept, acked-min(acked, kept), rotated, rerr)
			switch {
			case rerr != nil:
				// What a power cut lost is a torn tail, dropped on open
				// (a new boot: LastRunUnknown); a read that fails in what
				// survived took a torn write for damage.
				t.Fatalf("%s: a read after the power cut failed at offset %d: %v", c.fsync, kept, rerr)
			case c.fsync == "on-commit" && (kept < acked || rotated):
				t.Fatalf("on-commit: %d of %d acknowledged records survived the power cut, storage id rotated %v; want all and the same id", kept, acked, rotated)
			case kept < acked && !rotated:
				t.Fatalf("%s: lost %d of %d acknowledged records and kept its storage id: a peer would count it as holding them [ID-3]", c.fsync, acked-kept, acked)
			}
		})
	}
}

// powerCutRound runs one broker on a fresh powerfs, kills it and cuts
// the power at a seeded moment, restarts it, and returns the highest
// acknowledged tail, how many of those records survived intact, whether
// the storage id changed, and the error that stopped the read back from
// offset 0 before the tail, if any.
func powerCutRound(t *testing.T, bin, fsync string, extra []string, rng *rand.Rand) (acked, kept uint64, rotated bool, rerr error) {
	base := t.TempDir()
	bootFile := filepath.Join(base, "boot_id")
	if err := os.WriteFile(bootFile, []byte(bootBefore), 0o644); err != nil {
		t.Fatal(err)
	}
	pfs := powerMount(t, base, rand.New(rand.NewPCG(rng.Uint64(), 1)))
	mounted := true
	t.Cleanup(func() {
		if mounted {
			_ = pfs.Unmount()
		}
	})
	dataDir := filepath.Join(base, "mnt", "data")
	flags := append([]string{"--boot-id-file", bootFile}, extra...)
	b := startBroker(t, bin, dataDir, fsync, flags...)
	id := b.storageID

	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	c, err := client.Dial(ctx, b.listen, client.Options{})
	if err != nil {
		t.Fatal(err)
	}
	shard := record.ShardID{Stream: "power", Shard: 0}
	// Append until the broker dies; acked is the highest acknowledged tail.
	done := make(chan uint64, 1)
	go func() {
		var tail uint64
		for {
			recs := make([]record.Record, 8)
			for i := range recs {
				recs[i] = record.Record{Payload: powerPayload(tail + uint64(i))}
			}
			res, err := c.Append(ctx, shard, recs, &tail)
			if err != nil {
				done <- tail
				return
			}
			tail = res.Tail
		}
	}()
	time.Sleep(time.Duration(300+rng.IntN(700)) * time.Millisecond) // the seeded moment of the cut
	if err := b.cmd.Process.Signal(syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	<-b.exited
	acked = <-done
	_ = c.Close()
	if acked == 0 {
		t.Fatalf("nothing acknowledged before the cut:\n%s", b.stderr)
	}

	loss, err := pfs.PowerCut()
	mounted = false
	if err != nil {
		t.Fatalf("power cut: %v", err)
	}
	t.Logf("power cut dropped %+v", loss)
	if err := os.WriteFile(bootFile, []byte(bootAfter), 0o644); err != nil {
		t.Fatal(err)
	}
	pfs = powerMount(t, base, nil)
	mounted = true

	b = startBroker(t, bin, dataDir, fsync, flags...)
	rotated = b.storageID != id
	for _, line := range strings.Split(b.stderr.String(), "\n") {
		if strings.Contains(line, "storage id") || strings.Contains(line, "damage") || strings.Contains(line, "AIO") {
			t.Logf("restarted broker: %s", line)
		}
	}
	c2, err := client.Dial(ctx, b.listen, client.Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer c2.Close()
	got, rerr := readIntact(ctx, c2, shard)
	if rerr != nil {
		t.Logf("read after the power cut stopped at offset %d: %v", len(got), rerr)
	}
	for i, r := range got {
		if r.Offset != uint64(i) || !bytes.Equal(r.Payload, powerPayload(uint64(i))) {
			t.Fatalf("record %d after the power cut: offset %d, payload %q", i, r.Offset, r.Payload[:min(len(r.Payload), 24)])
		}
	}
	kept = min(uint64(len(got)), acked)
	b.stop(t)
	return acked, kept, rotated, rerr
}

// readIntact reads the shard from offset 0 until its end or the first
// error, which it returns with the intact records before it (after an
// error it goes on one record at a time, to find where it stops).
func readIntact(ctx context.Context, c *client.Client, shard record.ShardID) ([]record.Record, error) {
	var out []record.Record
	from, maxRecords := uint64(0), uint32(0)
	for {
		res, err := c.Read(ctx, wire.ReadRequest{Shard: shard, From: wire.FromOffset, Offset: from, MaxRecords: maxRecords, MaxBytes: 4 << 20})
		if err != nil {
			if maxRecords == 1 {
				return out, err
			}
			maxRecords = 1
			continue
		}
		if len(res.Records) == 0 {
			return out, nil
		}
		out = append(out, res.Records...)
		from = res.Next
	}
}

// powerPayload is the payload of the record at offset o.
func powerPayload(o uint64) []byte {
	p := bytes.Repeat([]byte{'.'}, 512)
	copy(p, fmt.Sprintf("record %d", o))
	return p
}
