//go:build linux

package powerfs

import (
	"context"
	"os"
	"path/filepath"
	"syscall"

	"github.com/hanwen/go-fuse/v2/fs"
	"github.com/hanwen/go-fuse/v2/fuse"
	"golang.org/x/sys/unix"
)

// node is a loopback node whose changes are journaled until durable.
type node struct {
	fs.LoopbackNode
	pfs *FS
}

var (
	_ fs.NodeFsyncer        = (*node)(nil)
	_ fs.NodeOpener         = (*node)(nil)
	_ fs.NodeCreater        = (*node)(nil)
	_ fs.NodeSetattrer      = (*node)(nil)
	_ fs.NodeRenamer        = (*node)(nil)
	_ fs.NodeUnlinker       = (*node)(nil)
	_ fs.NodeRmdirer        = (*node)(nil)
	_ fs.NodeMkdirer        = (*node)(nil)
	_ fs.NodeOpendirHandler = (*node)(nil)
)

var _ fs.NodeWrapChilder = (*node)(nil)

// WrapChild makes every node the loopback creates one of ours.
func (n *node) WrapChild(ctx context.Context, ops fs.InodeEmbedder) fs.InodeEmbedder {
	if lb, ok := ops.(*fs.LoopbackNode); ok {
		return &node{LoopbackNode: fs.LoopbackNode{RootData: lb.RootData}, pfs: n.pfs}
	}
	return ops
}

// openFlags drops the flags the backing file must not see: the kernel
// already applied O_APPEND, O_DIRECT would need aligned buffers on the
// backing side, the sync flags are ours to model, and O_TRUNC is
// journaled here.
func openFlags(flags uint32) (backing int, sync, trunc bool) {
	f := int(flags)
	sync = f&(unix.O_SYNC|unix.O_DSYNC) != 0
	trunc = f&unix.O_TRUNC != 0
	return f &^ (unix.O_APPEND | unix.O_DIRECT | unix.O_SYNC | unix.O_DSYNC | unix.O_TRUNC | fuse.FMODE_EXEC), sync, trunc
}

// Open opens the backing file and journals O_TRUNC.
func (n *node) Open(ctx context.Context, flags uint32) (fs.FileHandle, uint32, syscall.Errno) {
	bflags, sync, trunc := openFlags(flags)
	fh, fuseFlags, errno := n.LoopbackNode.Open(ctx, uint32(bflags))
	if errno != 0 {
		return nil, 0, errno
	}
	h := &handle{LoopbackFile: fh.(*fs.LoopbackFile), n: n, sync: sync}
	if trunc {
		if errno := h.truncate(0); errno != 0 {
			_ = h.Release(ctx)
			return nil, 0, errno
		}
	}
	return h, fuseFlags, 0
}

// Create creates the file (journaled as a new entry in n) and opens it.
func (n *node) Create(ctx context.Context, name string, flags uint32, mode uint32, out *fuse.EntryOut) (*fs.Inode, fs.FileHandle, uint32, syscall.Errno) {
	bflags, sync, trunc := openFlags(flags)
	p := filepath.Join(n.pfs.backingPath(n.EmbeddedInode()), name)
	_, statErr := os.Lstat(p)
	existed := statErr == nil
	n.pfs.mu.Lock()
	defer n.pfs.mu.Unlock()
	ino, fh, fuseFlags, errno := n.LoopbackNode.Create(ctx, name, uint32(bflags), mode, out)
	if errno != 0 {
		return nil, nil, 0, errno
	}
	if !existed {
		n.pfs.recordCreate(n.EmbeddedInode(), p)
	}
	h := &handle{LoopbackFile: fh.(*fs.LoopbackFile), n: ino.Operations().(*node), sync: sync}
	if trunc && existed {
		if errno := h.truncateLocked(0); errno != 0 {
			return nil, nil, 0, errno
		}
	}
	return ino, h, fuseFlags, 0
}

// Mkdir creates a directory, journaled as a new entry in n.
func (n *node) Mkdir(ctx context.Context, name string, mode uint32, out *fuse.EntryOut) (*fs.Inode, syscall.Errno) {
	n.pfs.mu.Lock()
	defer n.pfs.mu.Unlock()
	ino, errno := n.LoopbackNode.Mkdir(ctx, name, mode, out)
	if errno == 0 {
		n.pfs.recordCreate(n.EmbeddedInode(), filepath.Join(n.pfs.backingPath(n.EmbeddedInode()), name))
	}
	return ino, errno
}

// Mknod creates a node, journaled as a new entry in n.
func (n *node) Mknod(ctx context.Context, name string, mode, rdev uint32, out *fuse.EntryOut) (*fs.Inode, syscall.Errno) {
	n.pfs.mu.Lock()
	defer n.pfs.mu.Unlock()
	ino, errno := n.LoopbackNode.Mknod(ctx, name, mode, rdev, out)
	if errno == 0 {
		n.pfs.recordCreate(n.EmbeddedInode(), filepath.Join(n.pfs.backingPath(n.EmbeddedInode()), name))
	}
	return ino, errno
}

// Symlink creates a symlink, journaled as a new entry in n.
func (n *node) Symlink(ctx context.Context, target, name string, out *fuse.EntryOut) (*fs.Inode, syscall.Errno) {
	n.pfs.mu.Lock()
	defer n.pfs.mu.Unlock()
	ino, errno := n.LoopbackNode.Symlink(ctx, target, name, out)
	if errno == 0 {
		n.pfs.recordCreate(n.EmbeddedInode(), filepath.Join(n.pfs.backingPath(n.EmbeddedInode()), name))
	}
	return ino, errno
}

// Link creates a hard link, journaled as a new entry in n.
func (n *node) Link(ctx context.Context, target fs.InodeEmbedder, name string, out *fuse.EntryOut) (*fs.Inode, syscall.Errno) {
	n.pfs.mu.Lock()
	defer n.pfs.mu.Unlock()
	ino, errno := n.LoopbackNode.Link(ctx, target, name, out)
	if errno == 0 {
		n.pfs.recordCreate(n.EmbeddedInode(), filepath.Join(n.pfs.backingPath(n.EmbeddedInode()), name))
	}
	return ino, errno
}

// Unlink moves the entry to the trash until its removal is durable.
func (n *node) Unlink(ctx context.Context, name string) syscall.Errno {
	n.pfs.mu.Lock()
	defer n.pfs.mu.Unlock()
	return n.pfs.remove(n.EmbeddedInode(), filepath.Join(n.pfs.backingPath(n.EmbeddedInode()), name), false)
}

// Rmdir moves the empty directory to the trash until its removal is
// durable.
func (n *node) Rmdir(ctx context.Context, name string) syscall.Errno {
	n.pfs.mu.Lock()
	defer n.pfs.mu.Unlock()
	return n.pfs.remove(n.EmbeddedInode(), filepath.Join(n.pfs.backingPath(n.EmbeddedInode()), name), true)
}

// Rename renames, keeping a replaced entry in the trash until durable.
func (n *node) Rename(ctx context.Context, name string, newParent fs.InodeEmbedder, newName string, flags uint32) syscall.Errno {
	np, ok := newParent.(*node)
	if !ok || np.pfs != n.pfs {
		return syscall.EXDEV
	}
	n.pfs.mu.Lock()
	defer n.pfs.mu.Unlock()
	from := filepath.Join(n.pfs.backingPath(n.EmbeddedInode()), name)
	to := filepath.Join(n.pfs.backingPath(np.EmbeddedInode()), newName)
	return n.pfs.rename(n.EmbeddedInode(), np.EmbeddedInode(), from, to, uint(flags))
}

// Setattr journals a size change before it is made.
func (n *node) Setattr(ctx context.Context, f fs.FileHandle, in *fuse.SetAttrIn, out *fuse.AttrOut) syscall.Errno {
	n.pfs.mu.Lock()
	defer n.pfs.mu.Unlock()
	if sz, ok := in.GetSize(); ok {
		j, errno := n.pfs.journalFor(n, f)
		if errno != 0 {
			return errno
		}
		if err := j.save(int64(sz), j.origSize); err != nil {
			return fs.ToErrno(err)
		}
	}
	return n.LoopbackNode.Setattr(ctx, f, in, out)
}

// Fsync makes the file's data durable (fsync and fdatasync alike), or,
// on a directory, the changes of its entries.
func (n *node) Fsync(ctx context.Context, f fs.FileHandle, flags uint32) syscall.Errno {
	n.pfs.mu.Lock()
	defer n.pfs.mu.Unlock()
	if n.EmbeddedInode().IsDir() {
		n.pfs.syncDir(n.EmbeddedInode())
		return 0
	}
	if j, ok := n.pfs.files[n.EmbeddedInode()]; ok {
		j.close()
		delete(n.pfs.files, n.EmbeddedInode())
	}
	if n.pfs.opts.JournaledMetadata {
		for _, op := range n.pfs.ops {
			op.durable()
		}
		n.pfs.ops = nil
	}
	return 0
}

// CopyFileRange is not journaled, so it is refused.
func (n *node) CopyFileRange(ctx context.Context, fhIn fs.FileHandle, offIn uint64, out *fs.Inode, fhOut fs.FileHandle, offOut uint64, length uint64, flags uint64) (uint32, syscall.Errno) {
	return 0, syscall.ENOTSUP
}

// OpendirHandle wraps the loopback directory stream so that a
// directory fsync reaches us.
func (n *node) OpendirHandle(ctx context.Context, flags uint32) (fs.FileHandle, uint32, syscall.Errno) {
	fh, fuseFlags, errno := n.LoopbackNode.OpendirHandle(ctx, flags)
	if errno != 0 {
		return nil, 0, errno
	}
	ds, ok := fh.(dirStream)
	if !ok {
		return fh, fuseFlags, 0
	}
	return &dirHandle{dirStream: ds, n: n}, fuseFlags, 0
}

type dirStream interface {
	fs.FileReaddirenter
	fs.FileSeekdirer
	fs.FileReleasedirer
}

// dirHandle is an open directory whose fsync is ours.
type dirHandle struct {
	dirStream
	n *node
}

var _ fs.FileFsyncdirer = (*dirHandle)(nil)

// Fsyncdir makes the directory's entry changes durable.
func (d *dirHandle) Fsyncdir(ctx context.Context, flags uint32) syscall.Errno {
	return d.n.Fsync(ctx, nil, flags)
}

// journalFor returns n's journal, starting one from the handle's
// descriptor (or the backing path). Called with f.mu held.
func (f *FS) journalFor(n *node, fh fs.FileHandle) (*journal, syscall.Errno) {
	ino := n.EmbeddedInode()
	if j, ok := f.files[ino]; ok {
		return j, 0
	}
	var j *journal
	var err error
	if h, ok := fh.(*handle); ok {
		fd, _ := h.LoopbackFile.PassthroughFd()
		j, err = newJournal(f.backingPath(ino), fd)
	} else {
		var fd int
		fd, err = unix.Open(f.backingPath(ino), unix.O_RDWR|unix.O_CLOEXEC, 0)
		if err == nil {
			j, err = newJournal(f.backingPath(ino), fd)
			_ = unix.Close(fd)
		}
	}
	if err != nil {
		return nil, fs.ToErrno(err)
	}
	f.files[ino] = j
	return j, 0
}
