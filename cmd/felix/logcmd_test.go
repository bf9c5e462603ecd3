package main

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"felix.dev/felix/broker/datadir"
	"felix.dev/felix/broker/logstore"
	"felix.dev/felix/broker/record"
)

func runFelix(t *testing.T, args ...string) (string, error) {
	t.Helper()
	root := newRootCmd()
	var out bytes.Buffer
	root.SetOut(&out)
	root.SetErr(&out)
	root.SetArgs(args)
	err := root.ExecuteContext(t.Context())
	return out.String(), err
}

// felix log inspect reports a damaged log (and exits 4) without dropping
// anything; felix log repair needs --yes, truncates at the given offset,
// and removes storage-id so the next start rotates [ID-3].
func TestLogInspectAndRepairCommands(t *testing.T) {
	dataDir := t.TempDir()
	if err := os.WriteFile(filepath.Join(dataDir, datadir.StorageIDFile), []byte("x"), 0o644); err != nil {
		t.Fatal(err)
	}
	o := logstore.Options{Dir: filepath.Join(dataDir, logStoreDir), ValueThreshold: logstore.BrokerValueThreshold, AutoCommit: true}
	store, err := logstore.Open(o)
	if err != nil {
		t.Fatal(err)
	}
	for _, shard := range []uint32{1, 2} {
		l, err := store.Log(record.LogID{ShardID: record.ShardID{Stream: "orders", Shard: shard}, Log: record.LogData})
		if err != nil {
			t.Fatal(err)
		}
		for i := 0; i < 6; i++ {
			p := fmt.Sprintf("s%d-b%d-%s", shard, i, strings.Repeat("q", 1500))
			if _, err := l.Append(t.Context(), []record.Record{{Payload: []byte(p)}}, nil); err != nil {
				t.Fatal(err)
			}
		}
	}
	if err := store.Close(); err != nil {
		t.Fatal(err)
	}
	// Damage a batch in the middle of shard 1: no open-time check sees it,
	// inspect reads every batch.
	flipFile(t, o.Dir, []byte("s1-b2-qqq"))

	out, err := runFelix(t, "log", "inspect", "--data-dir", dataDir)
	var ee *exitError
	if !errors.As(err, &ee) || ee.code != exitDamaged {
		t.Fatalf("inspect of a damaged directory: %v\n%s", err, out)
	}
	lines := strings.Split(strings.TrimSpace(out), "\n")
	if len(lines) != 2 {
		t.Fatalf("inspect printed %d lines:\n%s", len(lines), out)
	}
	var first, second map[string]any
	if err := json.Unmarshal([]byte(lines[0]), &first); err != nil {
		t.Fatal(err)
	}
	if err := json.Unmarshal([]byte(lines[1]), &second); err != nil {
		t.Fatal(err)
	}
	if first["damaged"] != true || first["damageOffset"] != 2.0 || first["tail"] != 6.0 || second["damaged"] != false {
		t.Fatalf("inspect:\n%s", out)
	}

	if _, err := runFelix(t, "log", "repair", "--data-dir", dataDir, "--stream", "orders", "--shard", "1", "--truncate-at", "2"); err == nil {
		t.Fatal("repair without --yes ran")
	}
	if _, err := runFelix(t, "log", "repair", "--data-dir", dataDir, "--stream", "orders", "--shard", "1", "--truncate-at", "5", "--yes"); err == nil {
		t.Fatal("repair above the damage ran")
	}
	if out, err := runFelix(t, "log", "repair", "--data-dir", dataDir, "--stream", "orders", "--shard", "1", "--truncate-at", "2", "--yes"); err != nil {
		t.Fatalf("repair: %v\n%s", err, out)
	}
	if _, err := os.Stat(filepath.Join(dataDir, datadir.StorageIDFile)); !errors.Is(err, os.ErrNotExist) {
		t.Fatalf("storage-id after repair: %v, want removed", err)
	}
	out, err = runFelix(t, "log", "inspect", "--data-dir", dataDir, "--stream", "orders", "--shard", "1")
	if err != nil || !strings.Contains(out, `"damaged":false`) || !strings.Contains(out, `"tail":2`) {
		t.Fatalf("inspect after repair: %v\n%s", err, out)
	}
	// No damage left: repair is refused without --force, before the
	// storage-id goes.
	if err := os.WriteFile(filepath.Join(dataDir, datadir.StorageIDFile), []byte("x"), 0o644); err != nil {
		t.Fatal(err)
	}
	if _, err := runFelix(t, "log", "repair", "--data-dir", dataDir, "--stream", "orders", "--shard", "1", "--truncate-at", "1", "--yes"); !errors.Is(err, logstore.ErrNotDamaged) {
		t.Fatalf("repair of an undamaged log: %v, want ErrNotDamaged", err)
	}
	if _, err := os.Stat(filepath.Join(dataDir, datadir.StorageIDFile)); err != nil {
		t.Fatalf("storage-id after a refused repair: %v", err)
	}
	if out, err := runFelix(t, "log", "repair", "--data-dir", dataDir, "--stream", "orders", "--shard", "1", "--truncate-at", "1", "--yes", "--force"); err != nil || !strings.Contains(out, `"tail":1`) {
		t.Fatalf("forced repair: %v\n%s", err, out)
	}
}

func flipFile(t *testing.T, dir string, marker []byte) {
	t.Helper()
	n := 0
	err := filepath.WalkDir(dir, func(p string, e os.DirEntry, err error) error {
		if err != nil || e.IsDir() {
			return err
		}
		b, err := os.ReadFile(p)
		if err != nil {
			return err
		}
		if i := bytes.Index(b, marker); i >= 0 {
			n++
			b[i+len(marker)/2] ^= 0x20
			return os.WriteFile(p, b, 0o644)
		}
		return nil
	})
	if err != nil || n != 1 {
		t.Fatalf("marker found %d times (%v)", n, err)
	}
}
