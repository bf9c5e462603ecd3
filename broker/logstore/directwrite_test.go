package logstore

import (
	"bytes"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"testing"

	"golang.org/x/sys/unix"
)

// Direct writes land every frame at its offset in a file of zeros, across
// block boundaries and within one block written several times, and leave
// zeros after the last frame (what ends a replay), whether they go through
// pwrite or native AIO.
func TestDirectWriterKeepsFramesAcrossBlocks(t *testing.T) {
	for _, async := range []bool{false, true} {
		t.Run(fmt.Sprintf("aio=%v", async), func(t *testing.T) {
			testDirectWriterFrames(t, async)
		})
	}
}

func testDirectWriterFrames(t *testing.T, async bool) {
	path := filepath.Join(t.TempDir(), "f")
	const fileSize = 64 << 10
	if err := os.WriteFile(path, make([]byte, fileSize), 0o644); err != nil {
		t.Fatal(err)
	}
	w, err := openDirect(path, async)
	if errors.Is(err, unix.EINVAL) {
		t.Skip("no O_DIRECT on this file system:", err)
	}
	if err != nil {
		t.Fatal(err)
	}
	defer w.close()
	if async && w.aio == nil {
		if _, err := newAIOFile(w.f); err != nil {
			t.Skip("no native AIO here:", err)
		}
		t.Fatal("native AIO is available but the writer did not take it")
	}
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
	w, err := openDirect(f.Name(), false)
	if err != nil {
		return false
	}
	w.close()
	return true
}

// A direct write the kernel refuses comes back as an error, through AIO
// as through pwrite, and does not leave the writer waiting: here the file
// was opened read-only, so every write fails with EBADF.
func TestDirectWriterReportsRefusedWrites(t *testing.T) {
	path := filepath.Join(t.TempDir(), "f")
	if err := os.WriteFile(path, make([]byte, 16<<10), 0o644); err != nil {
		t.Fatal(err)
	}
	f, err := os.OpenFile(path, os.O_RDONLY|unix.O_DIRECT, 0)
	if errors.Is(err, unix.EINVAL) {
		t.Skip("no O_DIRECT on this file system:", err)
	}
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	for _, async := range []bool{false, true} {
		w := &directWriter{f: f}
		if async {
			a, err := newAIOFile(f)
			if err != nil {
				t.Log("no native AIO here:", err)
				continue
			}
			defer a.close()
			w.aio = a
		}
		err := w.writeAt([]byte("frame"), 0)
		if !errors.Is(err, unix.EBADF) {
			t.Fatalf("aio=%v: write to a read-only file: got %v, want EBADF", async, err)
		}
	}
}
