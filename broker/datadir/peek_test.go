package datadir

import (
	"errors"
	"os"
	"path/filepath"
	"testing"
)

// Peek decides as Identify would and writes nothing: a new directory
// still has no storage id afterwards, and Identify still runs.
func TestPeekWritesNothing(t *testing.T) {
	dir := t.TempDir()
	d, err := Open(dir, Options{Fsync: FsyncOnCommit, SyncFS: func(string) error { return nil }})
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = d.Close() }()
	dec, err := d.Peek()
	if err != nil {
		t.Fatal(err)
	}
	if dec.Action != New || dec.Local != ReasonStorageIDMissing {
		t.Fatalf("Peek on a new directory: %+v", dec)
	}
	if _, err := os.Stat(filepath.Join(dir, StorageIDFile)); !errors.Is(err, os.ErrNotExist) {
		t.Fatalf("storage-id after Peek: %v, want none", err)
	}
	if _, err := d.Identify(); err != nil {
		t.Fatalf("Identify after Peek: %v", err)
	}
	if _, err := d.Peek(); !errors.Is(err, ErrStepOrder) {
		t.Fatalf("Peek after Identify: %v, want ErrStepOrder", err)
	}
}
