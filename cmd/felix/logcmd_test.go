package main

import (
	"bytes"
	"crypto/sha256"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"felix.dev/felix/broker/datadir"
	"felix.dev/felix/broker/logstore"
	"felix.dev/felix/broker/record"
	"felix.dev/felix/internal/diskfault"
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
	if f, err := diskfault.FlipMarker(dir, marker); err != nil || len(f) != 1 {
		t.Fatalf("marker found %d times (%v)", len(f), err)
	}
}

// hashTree returns, by relative path, the sha256 of every file under dir:
// its size and each of its data ranges with their offsets (holes read as
// zeros, and reading the big sparse badger files in full is slow).
func hashTree(t *testing.T, dir string) map[string]string {
	t.Helper()
	out := map[string]string{}
	err := filepath.WalkDir(dir, func(p string, e os.DirEntry, err error) error {
		if err != nil || e.IsDir() {
			return err
		}
		f, err := os.Open(p)
		if err != nil {
			return err
		}
		defer func() { _ = f.Close() }()
		st, err := f.Stat()
		if err != nil {
			return err
		}
		h := sha256.New()
		fmt.Fprintf(h, "size %d\n", st.Size())
		err = dataRanges(f, st.Size(), func(from, to int64) error {
			fmt.Fprintf(h, "range %d %d\n", from, to)
			if _, err := f.Seek(from, io.SeekStart); err != nil {
				return err
			}
			_, err := io.CopyN(h, f, to-from)
			return err
		})
		if err != nil {
			return err
		}
		rel, _ := filepath.Rel(dir, p)
		out[rel] = fmt.Sprintf("%x", h.Sum(nil))
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	return out
}

// copyFiles copies the files under src (a store still open: a crash
// leaves them so) into dst.
func copyFiles(t *testing.T, src, dst string) {
	t.Helper()
	if err := copyTree(src, dst); err != nil {
		t.Fatal(err)
	}
}

// zeroClogFrom zeroes the commit-log file holding marker from marker on:
// frames that never reached the disk before a crash.
func zeroClogFrom(t *testing.T, dir string, marker []byte) {
	t.Helper()
	n := 0
	err := filepath.WalkDir(dir, func(p string, e os.DirEntry, err error) error {
		if err != nil || e.IsDir() || !strings.HasSuffix(p, ".clog") {
			return err
		}
		b, err := os.ReadFile(p)
		if err != nil {
			return err
		}
		if i := bytes.Index(b, marker); i >= 0 {
			n++
			clear(b[i:])
			return os.WriteFile(p, b, 0o644)
		}
		return nil
	})
	if err != nil || n != 1 {
		t.Fatalf("marker found in %d commit-log files (%v)", n, err)
	}
}

// felix log inspect changes nothing in the directory it inspects, and
// judges what does not read back as the broker's next start would: after
// an unclean stop under on-commit, a batch whose commit-log frame never
// reached the disk is a torn tail (dropped, not damage), so inspect exits
// 0 and the broker's next open still finds it torn.
func TestLogInspectIsReadOnlyAndKnowsAnOnCommitCrash(t *testing.T) {
	dataDir := t.TempDir()
	// The previous run: on-commit, stopped uncleanly (no MarkCleanStop).
	d, err := datadir.Open(dataDir, datadir.Options{Fsync: datadir.FsyncOnCommit})
	if err != nil {
		t.Fatal(err)
	}
	id, err := d.Identify()
	if err != nil {
		t.Fatal(err)
	}
	prep, err := id.Standalone()
	if err != nil {
		t.Fatal(err)
	}
	if _, err := prep.MarkRunning(); err != nil {
		t.Fatal(err)
	}
	if err := d.Close(); err != nil {
		t.Fatal(err)
	}
	live := t.TempDir()
	store, err := logstore.Open(logstore.Options{Dir: live, Fsync: logstore.FsyncOnCommit, CommitLogValues: true,
		ValueThreshold: 64, AutoCommit: true})
	if err != nil {
		t.Fatal(err)
	}
	l, err := store.Log(record.LogID{ShardID: record.ShardID{Stream: "orders", Shard: 1}, Log: record.LogData})
	if err != nil {
		t.Fatal(err)
	}
	for i := 0; i < 20; i++ {
		if _, err := l.Append(t.Context(), []record.Record{{Payload: []byte(fmt.Sprintf("%0200d", i))}}, nil); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := l.Append(t.Context(), []record.Record{{Payload: []byte("never-written-" + strings.Repeat("z", 200))}}, nil); err != nil {
		t.Fatal(err)
	}
	lsDir := filepath.Join(dataDir, logStoreDir)
	copyFiles(t, live, lsDir) // no Close: a crash
	if err := store.Close(); err != nil {
		t.Fatal(err)
	}
	zeroClogFrom(t, lsDir, []byte("never-written-"))

	before := hashTree(t, dataDir)
	out, err := runFelix(t, "log", "inspect", "--data-dir", dataDir, "--scratch-dir", t.TempDir())
	if err != nil {
		t.Fatalf("inspect after an on-commit crash: %v\n%s", err, out)
	}
	if !strings.Contains(out, `"damaged":false`) || !strings.Contains(out, `"tail":20`) || !strings.Contains(out, `"lastRun":"acknowledged-durable"`) {
		t.Fatalf("inspect: want the torn batch dropped, tail 20, no damage:\n%s", out)
	}
	after := hashTree(t, dataDir)
	if len(after) != len(before) {
		t.Fatalf("inspect changed the directory's files: %d before, %d after", len(before), len(after))
	}
	for name, h := range before {
		if after[name] != h {
			t.Fatalf("inspect changed %s", name)
		}
	}
	// What the broker's next start finds: still a torn tail.
	s2, err := logstore.Open(logstore.Options{Dir: lsDir, Fsync: logstore.FsyncOnCommit, CommitLogValues: true,
		ValueThreshold: logstore.BrokerValueThreshold, AutoCommit: true, LastRun: logstore.LastRunAcknowledgedDurable})
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = s2.Close() }()
	if dmg := s2.Damaged(); len(dmg) != 0 {
		t.Fatalf("the broker's next open after inspect: damage %v", dmg)
	}
}
