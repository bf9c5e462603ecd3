package datadir

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"testing"
)

// TestID5_RestorePointDeletesStorageIDFirst: the cut step runs only after
// storage-id is gone, and the next start makes a new id.
func TestID5_RestorePointDeletesStorageIDFirst(t *testing.T) {
	e := newEnv(t)
	d, r := e.startStandalone(FsyncOnCommit)
	before := r.StorageID()
	e.stopClean(d, r)
	e.writeFile(StorageIDFile+tmpSuffix, []byte("leftover"))

	cutCalls := 0
	cut := func(ctx context.Context, dir string) error {
		cutCalls++
		if dir != e.dir {
			t.Errorf("cut got dir %q, want %q", dir, e.dir)
		}
		for _, n := range []string{StorageIDFile, StorageIDFile + tmpSuffix} {
			if _, err := os.Stat(filepath.Join(dir, n)); !errors.Is(err, os.ErrNotExist) {
				t.Errorf("cut step sees %s (stat err %v); it must be deleted first", n, err)
			}
		}
		return nil
	}
	if err := RestorePoint(t.Context(), e.dir, RestoreOptions{Cut: cut}); err != nil {
		t.Fatal(err)
	}
	if cutCalls != 1 {
		t.Fatalf("cut ran %d times", cutCalls)
	}
	d, r = e.startStandalone(FsyncOnCommit)
	if r.StorageID() == before || r.Decision().Reason != ReasonStorageIDMissing {
		t.Fatalf("after restore point: id %v (was %v) reason %v", r.StorageID(), before, r.Decision().Reason)
	}
	e.stopClean(d, r)
}

// TestID5_RestorePointFailedCutStillRotates: a cut that fails leaves the
// id deleted; running again works.
func TestID5_RestorePointFailedCutStillRotates(t *testing.T) {
	e := newEnv(t)
	d, r := e.startStandalone(FsyncPeriodic)
	e.stopClean(d, r)
	boom := errors.New("cut failed")
	err := RestorePoint(t.Context(), e.dir, RestoreOptions{Cut: func(context.Context, string) error { return boom }})
	if !errors.Is(err, boom) {
		t.Fatalf("RestorePoint = %v, want the cut error", err)
	}
	if _, err := os.Stat(filepath.Join(e.dir, StorageIDFile)); !errors.Is(err, os.ErrNotExist) {
		t.Fatalf("storage-id survived a failed cut: %v", err)
	}
	if err := RestorePoint(t.Context(), e.dir, RestoreOptions{Cut: func(context.Context, string) error { return nil }}); err != nil {
		t.Fatalf("second RestorePoint: %v", err)
	}
}

func TestID5_RestorePointRefusals(t *testing.T) {
	if err := RestorePoint(t.Context(), t.TempDir(), RestoreOptions{}); !errors.Is(err, ErrNoCutStep) {
		t.Fatalf("no cut step: %v", err)
	}
	missing := filepath.Join(t.TempDir(), "nope")
	if err := RestorePoint(t.Context(), missing, RestoreOptions{Cut: func(context.Context, string) error { return nil }}); err == nil {
		t.Fatal("missing directory: want error")
	}
	if _, err := os.Stat(missing); !errors.Is(err, os.ErrNotExist) {
		t.Fatal("RestorePoint created the missing directory")
	}
}
