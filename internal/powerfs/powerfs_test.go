//go:build linux

package powerfs_test

import (
	"bytes"
	"errors"
	"math/rand/v2"
	"os"
	"path/filepath"
	"syscall"
	"testing"
	"unsafe"

	"felix.dev/felix/internal/powerfs"
)

// mount mounts a powerfs over a fresh backing directory, or skips the
// test when FUSE mounting is not permitted here.
func mount(t *testing.T, opts powerfs.Options) (*powerfs.FS, string, string) {
	t.Helper()
	base := t.TempDir()
	backing, mnt := filepath.Join(base, "backing"), filepath.Join(base, "mnt")
	for _, d := range []string{backing, mnt} {
		if err := os.Mkdir(d, 0o755); err != nil {
			t.Fatal(err)
		}
	}
	opts.Backing = backing
	f, err := powerfs.Mount(mnt, opts)
	if err != nil {
		t.Skipf("needs FUSE (/dev/fuse and fusermount3, as root): %v", err)
	}
	t.Cleanup(func() {
		if err := f.Unmount(); err != nil && !errors.Is(err, powerfs.ErrNotMounted) {
			t.Errorf("unmount: %v", err)
		}
	})
	return f, mnt, backing
}

func syncPath(t *testing.T, path string) {
	t.Helper()
	d, err := os.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer d.Close()
	if err := d.Sync(); err != nil {
		t.Fatalf("fsync %s: %v", path, err)
	}
}

// writeFile creates name in mnt with data, fsyncs it when syncFile and
// its directory when syncDir.
func writeFile(t *testing.T, mnt, name string, data []byte, syncFile, syncDir bool) {
	t.Helper()
	f, err := os.OpenFile(filepath.Join(mnt, name), os.O_CREATE|os.O_WRONLY, 0o644)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := f.Write(data); err != nil {
		t.Fatal(err)
	}
	if syncFile {
		if err := f.Sync(); err != nil {
			t.Fatal(err)
		}
	}
	if err := f.Close(); err != nil {
		t.Fatal(err)
	}
	if syncDir {
		syncPath(t, mnt)
	}
}

func cut(t *testing.T, f *powerfs.FS) powerfs.Loss {
	t.Helper()
	loss, err := f.PowerCut()
	if err != nil {
		t.Fatalf("power cut: %v", err)
	}
	return loss
}

func readBacking(t *testing.T, backing, name string) ([]byte, bool) {
	t.Helper()
	b, err := os.ReadFile(filepath.Join(backing, name))
	if errors.Is(err, os.ErrNotExist) {
		return nil, false
	}
	if err != nil {
		t.Fatal(err)
	}
	return b, true
}

func TestPowerCutDropsUnsyncedWrites(t *testing.T) {
	f, mnt, backing := mount(t, powerfs.Options{})
	writeFile(t, mnt, "synced", []byte("durable"), true, true)
	writeFile(t, mnt, "old", []byte("first"), true, true)
	// Unsynced overwrite and append to a durable file.
	g, err := os.OpenFile(filepath.Join(mnt, "old"), os.O_WRONLY|os.O_APPEND, 0)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := g.Write(bytes.Repeat([]byte("x"), 3*powerfs.PageSize)); err != nil {
		t.Fatal(err)
	}
	if _, err := g.WriteAt([]byte("FIRST"), 0); err == nil {
		t.Fatal("WriteAt on O_APPEND succeeded") // os refuses; keeps the test honest
	}
	_ = g.Close()
	if got, _ := os.ReadFile(filepath.Join(mnt, "old")); len(got) != 5+3*powerfs.PageSize {
		t.Fatalf("before the cut the mount shows %d bytes", len(got))
	}
	loss := cut(t, f)
	if got, ok := readBacking(t, backing, "synced"); !ok || string(got) != "durable" {
		t.Fatalf("fsynced file after the cut: %q %v", got, ok)
	}
	if got, _ := readBacking(t, backing, "old"); string(got) != "first" {
		t.Fatalf("unsynced append survived the cut: %d bytes", len(got))
	}
	if loss.Files != 1 {
		t.Fatalf("loss %+v, want one file rolled back", loss)
	}
}

func TestPowerCutFileSyncWithoutDirSync(t *testing.T) {
	f, mnt, backing := mount(t, powerfs.Options{})
	if err := os.Mkdir(filepath.Join(mnt, "sub"), 0o755); err != nil {
		t.Fatal(err)
	}
	syncPath(t, mnt)
	writeFile(t, filepath.Join(mnt, "sub"), "nodirsync", []byte("data"), true, false)
	writeFile(t, mnt, "nosync", []byte("data"), false, true)
	cut(t, f)
	if _, ok := readBacking(t, backing, "sub/nodirsync"); ok {
		t.Fatal("a file whose directory was never fsynced survived the cut")
	}
	if got, ok := readBacking(t, backing, "nosync"); !ok || len(got) != 0 {
		t.Fatalf("entry synced, data not: %q %v, want an empty file", got, ok)
	}
}

// With JournaledMetadata a file's fsync makes every directory change so
// far durable (ext4, xfs): the new file keeps its name, an earlier unlink
// elsewhere stays done; what follows the fsync is still lost.
func TestPowerCutJournaledMetadata(t *testing.T) {
	f, mnt, backing := mount(t, powerfs.Options{JournaledMetadata: true})
	if err := os.Mkdir(filepath.Join(mnt, "sub"), 0o755); err != nil {
		t.Fatal(err)
	}
	writeFile(t, mnt, "gone", []byte("x"), true, true)
	if err := os.Remove(filepath.Join(mnt, "gone")); err != nil {
		t.Fatal(err)
	}
	writeFile(t, filepath.Join(mnt, "sub"), "kept", []byte("data"), true, false)
	writeFile(t, mnt, "after", []byte("data"), false, false)
	cut(t, f)
	if got, ok := readBacking(t, backing, "sub/kept"); !ok || string(got) != "data" {
		t.Fatalf("fsynced new file after the cut: %q %v, want its data under its name", got, ok)
	}
	if _, ok := readBacking(t, backing, "gone"); ok {
		t.Fatal("an unlink before a file's fsync was undone")
	}
	if _, ok := readBacking(t, backing, "after"); ok {
		t.Fatal("a file created after the last fsync survived the cut")
	}
}

func TestPowerCutUndoesRenameAndUnlink(t *testing.T) {
	f, mnt, backing := mount(t, powerfs.Options{})
	writeFile(t, mnt, "a", []byte("A"), true, false)
	writeFile(t, mnt, "b", []byte("B"), true, false)
	if err := os.Mkdir(filepath.Join(mnt, "sub"), 0o755); err != nil {
		t.Fatal(err)
	}
	syncPath(t, mnt)
	// Atomic replace without a directory fsync, an unlink, an rmdir.
	writeFile(t, mnt, "a.tmp", []byte("A2"), true, false)
	if err := os.Rename(filepath.Join(mnt, "a.tmp"), filepath.Join(mnt, "a")); err != nil {
		t.Fatal(err)
	}
	if err := os.Remove(filepath.Join(mnt, "b")); err != nil {
		t.Fatal(err)
	}
	if err := os.Remove(filepath.Join(mnt, "sub")); err != nil {
		t.Fatal(err)
	}
	loss := cut(t, f)
	if got, _ := readBacking(t, backing, "a"); string(got) != "A" {
		t.Fatalf("rename without a directory fsync survived: a = %q", got)
	}
	if _, ok := readBacking(t, backing, "a.tmp"); ok {
		t.Fatal("a.tmp, never durably created, is back")
	}
	if got, _ := readBacking(t, backing, "b"); string(got) != "B" {
		t.Fatalf("unlink without a directory fsync survived: b = %q", got)
	}
	if st, err := os.Stat(filepath.Join(backing, "sub")); err != nil || !st.IsDir() {
		t.Fatalf("rmdir without a directory fsync survived: %v", err)
	}
	if loss.Entries != 4 {
		t.Fatalf("loss %+v, want 4 entry changes undone", loss)
	}
}

func TestPowerCutKeepsSyncedRename(t *testing.T) {
	f, mnt, backing := mount(t, powerfs.Options{})
	writeFile(t, mnt, "a", []byte("A"), true, true)
	writeFile(t, mnt, "a.tmp", []byte("A2"), true, false)
	if err := os.Rename(filepath.Join(mnt, "a.tmp"), filepath.Join(mnt, "a")); err != nil {
		t.Fatal(err)
	}
	syncPath(t, mnt)
	cut(t, f)
	if got, _ := readBacking(t, backing, "a"); string(got) != "A2" {
		t.Fatalf("synced atomic replace: a = %q, want A2", got)
	}
	if entries, _ := os.ReadDir(filepath.Dir(backing)); len(entries) != 2 {
		t.Fatalf("left beside the backing directory: %v", entries)
	}
}

func TestPowerCutUndoesTruncation(t *testing.T) {
	f, mnt, backing := mount(t, powerfs.Options{})
	data := bytes.Repeat([]byte("0123456789"), 2000)
	writeFile(t, mnt, "t", data, true, true)
	if err := os.Truncate(filepath.Join(mnt, "t"), 5); err != nil {
		t.Fatal(err)
	}
	g, err := os.OpenFile(filepath.Join(mnt, "t"), os.O_WRONLY|os.O_TRUNC, 0)
	if err != nil {
		t.Fatal(err)
	}
	_ = g.Close()
	if st, _ := os.Stat(filepath.Join(mnt, "t")); st.Size() != 0 {
		t.Fatalf("O_TRUNC left %d bytes", st.Size())
	}
	cut(t, f)
	if got, _ := readBacking(t, backing, "t"); !bytes.Equal(got, data) {
		t.Fatalf("truncation survived the cut: %d bytes, want %d", len(got), len(data))
	}
}

func TestPowerCutKeepsODSyncWrites(t *testing.T) {
	f, mnt, backing := mount(t, powerfs.Options{})
	writeFile(t, mnt, "d", nil, true, true)
	g, err := os.OpenFile(filepath.Join(mnt, "d"), os.O_WRONLY|0o10000 /* O_DSYNC */, 0)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := g.WriteAt([]byte("synced write"), 0); err != nil {
		t.Fatal(err)
	}
	_ = g.Close()
	cut(t, f)
	if got, _ := readBacking(t, backing, "d"); string(got) != "synced write" {
		t.Fatalf("O_DSYNC write after the cut: %q", got)
	}
}

func TestPowerCutTearsLastWrite(t *testing.T) {
	// With tearing, the kept part of an unsynced write is a page prefix:
	// over many seeds both nothing and some pages are kept, never a
	// page out of order.
	sawNone, sawSome := false, false
	for seed := uint64(1); seed <= 6 && !(sawNone && sawSome); seed++ {
		f, mnt, backing := mount(t, powerfs.Options{Rand: rand.New(rand.NewPCG(seed, 0))})
		writeFile(t, mnt, "w", nil, true, true)
		data := make([]byte, 4*powerfs.PageSize)
		for i := range data {
			data[i] = byte('a' + i/powerfs.PageSize)
		}
		writeFile(t, mnt, "w", data, false, false)
		loss := cut(t, f)
		got, _ := readBacking(t, backing, "w")
		if len(got)%powerfs.PageSize != 0 || !bytes.Equal(got, data[:len(got)]) {
			t.Fatalf("seed %d: torn write kept %d bytes that are not a page prefix", seed, len(got))
		}
		if loss.TornPages != len(got)/powerfs.PageSize {
			t.Fatalf("seed %d: loss %+v, kept %d bytes", seed, loss, len(got))
		}
		sawNone = sawNone || len(got) == 0
		sawSome = sawSome || len(got) > 0
	}
	if !sawNone || !sawSome {
		t.Fatalf("six seeds: kept nothing %v, kept some %v; want both", sawNone, sawSome)
	}
}

// The commit log's writes: O_DIRECT|O_DSYNC with aligned buffers. FUSE
// takes O_DIRECT (the kernel sends the writes to us) and each write is
// durable.
func TestPowerCutKeepsODirectODSyncWrites(t *testing.T) {
	f, mnt, backing := mount(t, powerfs.Options{})
	writeFile(t, mnt, "cl", make([]byte, 2*powerfs.PageSize), true, true)
	g, err := os.OpenFile(filepath.Join(mnt, "cl"), os.O_WRONLY|syscall.O_DIRECT|syscall.O_DSYNC, 0)
	if err != nil {
		t.Fatalf("O_DIRECT open on powerfs: %v", err)
	}
	raw := make([]byte, 2*powerfs.PageSize)
	buf := raw[powerfs.PageSize-int(uintptr(unsafe.Pointer(&raw[0]))%powerfs.PageSize):][:powerfs.PageSize]
	copy(buf, "direct")
	if _, err := g.WriteAt(buf, powerfs.PageSize); err != nil {
		t.Fatalf("O_DIRECT write on powerfs: %v", err)
	}
	_ = g.Close()
	cut(t, f)
	if got, _ := readBacking(t, backing, "cl"); len(got) != 2*powerfs.PageSize || string(got[powerfs.PageSize:][:6]) != "direct" {
		t.Fatalf("O_DIRECT|O_DSYNC write lost by the cut: %d bytes", len(got))
	}
}
