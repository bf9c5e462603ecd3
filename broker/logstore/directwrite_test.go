package logstore

import (
	"bytes"
	"errors"
	"os"
	"path/filepath"
	"testing"

	"golang.org/x/sys/unix"
)

// Direct writes land every frame at its offset in a file of zeros, across
// block boundaries and within one block written several times, and leave
// zeros after the last frame (what ends a replay).
func TestDirectWriterKeepsFramesAcrossBlocks(t *testing.T) {
	path := filepath.Join(t.TempDir(), "f")
	const fileSize = 64 << 10
	if err := os.WriteFile(path, make([]byte, fileSize), 0o644); err != nil {
		t.Fatal(err)
	}
	w, err := openDirect(path)
	if errors.Is(err, unix.EINVAL) {
		t.Skip("no O_DIRECT on this file system:", err)
	}
	if err != nil {
		t.Fatal(err)
	}
	defer w.close()
	var want []byte
	for i, n := range []int{1, 4095, 4096, 5000, 3, 9000, 1, 8192, 17} {
		frame := bytes.Repeat([]byte{byte(i + 1)}, n)
		if err := w.writeAt(frame, int64(len(want))); err != nil {
			t.Fatalf("write %d (%d bytes at %d): %v", i, n, len(want), err)
		}
		want = append(want, frame...)
		got, err := os.ReadFile(path)
		if err != nil {
			t.Fatal(err)
		}
		if len(got) != fileSize {
			t.Fatalf("file is %d bytes, want %d (a direct write must not grow it)", len(got), fileSize)
		}
		if !bytes.Equal(got[:len(want)], want) {
			t.Fatalf("after write %d the frames written differ from what is on disk", i)
		}
		if !bytes.Equal(got[len(want):], make([]byte, fileSize-len(want))) {
			t.Fatalf("after write %d the bytes after the last frame are not all zero", i)
		}
	}
}

// directSupported reports whether files in dir can be opened for direct
// writes.
func directSupported(dir string) bool {
	f, err := os.CreateTemp(dir, "probe")
	if err != nil {
		return false
	}
	defer os.Remove(f.Name())
	f.Close()
	w, err := openDirect(f.Name())
	if err != nil {
		return false
	}
	w.close()
	return true
}
