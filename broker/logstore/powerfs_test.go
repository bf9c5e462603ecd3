//go:build linux

package logstore

import (
	"bytes"
	"os"
	"path/filepath"
	"testing"

	"felix.dev/felix/internal/powerfs"
)

// The commit log's direct writes on a FUSE file system (powerfs): the
// O_DIRECT|O_DSYNC open succeeds, the write goes through native AIO, and
// the frames survive a power cut, so the broker needs no flag to run on
// FUSE (where O_DIRECT or io_setup is refused, openDirect's callers fall
// back by themselves).
func TestDirectWritesOnPowerFS(t *testing.T) {
	base := t.TempDir()
	backing, mnt := filepath.Join(base, "backing"), filepath.Join(base, "mnt")
	for _, d := range []string{backing, mnt} {
		if err := os.Mkdir(d, 0o755); err != nil {
			t.Fatal(err)
		}
	}
	pfs, err := powerfs.Mount(mnt, powerfs.Options{Backing: backing})
	if err != nil {
		t.Skipf("needs a FUSE mount (/dev/fuse, fusermount3, root): %v", err)
	}
	path := filepath.Join(mnt, "frames")
	if err := os.WriteFile(path, nil, 0o644); err != nil {
		t.Fatal(err)
	}
	if err := syncDir(mnt); err != nil {
		t.Fatal(err)
	}
	w, err := openDirect(path, true)
	if err != nil {
		_ = pfs.Unmount()
		t.Fatalf("O_DIRECT on powerfs: %v", err)
	}
	async := w.aio != nil
	frames := bytes.Repeat([]byte("frame."), 1500) // crosses a block, ends inside one
	if err := w.writeAt(frames, 0); err != nil {
		t.Fatalf("direct write on powerfs (aio %v): %v", async, err)
	}
	if err := w.close(); err != nil {
		t.Fatal(err)
	}
	if _, err := pfs.PowerCut(); err != nil {
		t.Fatal(err)
	}
	got, err := os.ReadFile(filepath.Join(backing, "frames"))
	if err != nil {
		t.Fatal(err)
	}
	if len(got) < len(frames) || !bytes.Equal(got[:len(frames)], frames) {
		t.Fatalf("direct frames after the power cut: %d bytes, want %d written", len(got), len(frames))
	}
	if !async && probeAIO() == nil {
		t.Fatal("native AIO is available but the direct writer did not use it")
	}
	t.Logf("direct write on powerfs through native AIO: %v", async)
}
