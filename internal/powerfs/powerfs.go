//go:build linux

package powerfs

import (
	"errors"
	"fmt"
	"math/rand/v2"
	"os"
	"path/filepath"
	"sync"
	"syscall"
	"time"

	"github.com/go-logr/logr"
	"github.com/hanwen/go-fuse/v2/fs"
	"github.com/hanwen/go-fuse/v2/fuse"
)

// PageSize is the granularity of the journal and of torn writes.
const PageSize = 4096

// ErrNotMounted is returned by Unmount and PowerCut on an FS that is not
// mounted.
var ErrNotMounted = errors.New("powerfs: not mounted")

// Options configure Mount.
type Options struct {
	// Backing is the directory that holds the durable state (required).
	// It must exist; the mount starts from what it holds.
	Backing string
	// Rand, when set, tears the last unsynced write of each file at a
	// power cut (see the package doc). Nil: no tearing.
	Rand *rand.Rand
	// JournaledMetadata, when set, makes every directory change so far
	// durable at any file's fsync or fdatasync, as the journal commit of
	// ext4 or xfs does (a new file fsynced keeps its name there). Unset:
	// strict POSIX, where only a directory's own fsync makes its entries
	// durable.
	JournaledMetadata bool
	// Logger receives one line per power cut and undo failures.
	Logger logr.Logger
}

// Loss counts what a power cut dropped.
type Loss struct {
	// Files is the number of files whose data or size was rolled back.
	Files int
	// Pages is the number of pages written back with their old contents.
	Pages int
	// TornPages is the number of pages of unsynced writes kept by tearing.
	TornPages int
	// Entries is the number of directory changes undone.
	Entries int
}

// FS is a mounted power-loss file system. Its methods are safe for
// concurrent use with the file system's own operations.
type FS struct {
	opts       Options
	mountpoint string
	trash      string
	server     *fuse.Server

	mu       sync.Mutex
	files    map[*fs.Inode]*journal
	ops      []*dirOp
	trashSeq int
}

// Mount mounts a power-loss file system over opts.Backing on mountpoint
// (an existing empty directory). It fails when FUSE is not available
// (no /dev/fuse, no fusermount3, or not permitted).
func Mount(mountpoint string, opts Options) (*FS, error) {
	if opts.Backing == "" {
		return nil, errors.New("powerfs: Options.Backing is required")
	}
	backing, err := filepath.Abs(opts.Backing)
	if err != nil {
		return nil, err
	}
	opts.Backing = backing
	st, err := os.Stat(backing)
	if err != nil {
		return nil, fmt.Errorf("powerfs: backing directory: %w", err)
	}
	if !st.IsDir() {
		return nil, fmt.Errorf("powerfs: backing %s is not a directory", backing)
	}
	// The trash sits beside the backing directory (same file system, so
	// moves into it are renames) and outside the mount.
	trash := filepath.Join(filepath.Dir(backing), ".powerfs-trash-"+filepath.Base(backing))
	if err := os.RemoveAll(trash); err != nil {
		return nil, err
	}
	if err := os.Mkdir(trash, 0o700); err != nil {
		return nil, err
	}
	f := &FS{opts: opts, mountpoint: mountpoint, trash: trash, files: map[*fs.Inode]*journal{}}

	var sst syscall.Stat_t
	if err := syscall.Stat(backing, &sst); err != nil {
		return nil, err
	}
	root := &fs.LoopbackRoot{Path: backing, Dev: uint64(sst.Dev)}
	rootNode := &node{LoopbackNode: fs.LoopbackNode{RootData: root}, pfs: f}
	root.RootNode = rootNode
	timeout := time.Second
	server, err := fs.Mount(mountpoint, rootNode, &fs.Options{
		MountOptions: fuse.MountOptions{FsName: "powerfs", Name: "powerfs", DisableXAttrs: true},
		EntryTimeout: &timeout, AttrTimeout: &timeout, NegativeTimeout: &timeout,
	})
	if err != nil {
		_ = os.RemoveAll(trash)
		return nil, fmt.Errorf("powerfs: mount %s: %w", mountpoint, err)
	}
	f.server = server
	return f, nil
}

// Unmount unmounts cleanly: everything written so far is kept, as after
// a clean shutdown that synced.
func (f *FS) Unmount() error {
	if err := f.unmount(); err != nil {
		return err
	}
	f.SyncAll()
	return os.RemoveAll(f.trash)
}

func (f *FS) unmount() error {
	if f.server == nil {
		return ErrNotMounted
	}
	if err := f.server.Unmount(); err != nil {
		return fmt.Errorf("powerfs: unmount %s: %w", f.mountpoint, err)
	}
	f.server.Wait()
	f.server = nil
	return nil
}

// Mounted reports whether the file system is mounted (a failed Unmount
// or PowerCut leaves it mounted).
func (f *FS) Mounted() bool {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.server != nil
}

// SyncAll makes everything durable, as a successful syncfs(2) would.
func (f *FS) SyncAll() {
	f.mu.Lock()
	defer f.mu.Unlock()
	for ino, j := range f.files {
		j.close()
		delete(f.files, ino)
	}
	for _, op := range f.ops {
		op.durable()
	}
	f.ops = nil
}

// PowerCut unmounts the file system (the processes using it must have
// exited: a busy mount fails) and rolls the backing directory back to
// its durable state: unsynced data, truncations and directory changes
// are dropped, and with Options.Rand the last unsynced write of each file
// is torn. Mount the backing directory again to go on.
func (f *FS) PowerCut() (Loss, error) {
	if err := f.unmount(); err != nil {
		return Loss{}, err
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	var loss Loss
	var errs []error
	for ino, j := range f.files {
		pages, torn, err := j.rollback(f.opts.Rand)
		f.opts.Logger.V(1).Info("powerfs: rolled back", "file", j.name, "size", j.origSize, "pages", pages, "tornPages", torn)
		if err != nil {
			errs = append(errs, err)
		}
		loss.Files++
		loss.Pages += pages
		loss.TornPages += torn
		j.close()
		delete(f.files, ino)
	}
	for i := len(f.ops) - 1; i >= 0; i-- {
		f.opts.Logger.V(1).Info("powerfs: undo", "change", f.ops[i].desc)
		if err := f.ops[i].undo(); err != nil {
			f.opts.Logger.Info("powerfs: undo failed", "change", f.ops[i].desc, "error", err.Error())
		}
		loss.Entries++
	}
	f.ops = nil
	errs = append(errs, os.RemoveAll(f.trash))
	f.opts.Logger.Info("powerfs: power cut", "files", loss.Files, "pages", loss.Pages,
		"tornPages", loss.TornPages, "entries", loss.Entries)
	return loss, errors.Join(errs...)
}

// backingPath is the path in the backing directory of n.
func (f *FS) backingPath(n *fs.Inode) string {
	return filepath.Join(f.opts.Backing, n.Path(nil))
}

// trashPath names a fresh place in the trash. Called with f.mu held.
func (f *FS) trashPath() string {
	f.trashSeq++
	return filepath.Join(f.trash, fmt.Sprintf("%d", f.trashSeq))
}
