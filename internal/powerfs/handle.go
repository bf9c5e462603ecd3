//go:build linux

package powerfs

import (
	"context"
	"syscall"

	"github.com/hanwen/go-fuse/v2/fs"
	"github.com/hanwen/go-fuse/v2/fuse"
	"golang.org/x/sys/unix"
)

// handle is an open file whose writes are journaled until durable.
type handle struct {
	*fs.LoopbackFile
	n    *node
	sync bool // opened O_SYNC or O_DSYNC: each write is durable
}

var (
	_ fs.FileWriter    = (*handle)(nil)
	_ fs.FileAllocater = (*handle)(nil)
	_ fs.FileFsyncer   = (*handle)(nil)
)

// PassthroughFd refuses kernel passthrough: writes must come to us.
func (h *handle) PassthroughFd() (int, bool) { return -1, false }

// Write journals the pages it overwrites, then writes through.
func (h *handle) Write(ctx context.Context, data []byte, off int64) (uint32, syscall.Errno) {
	return h.write(off, int64(len(data)), func() (uint32, syscall.Errno) { return h.LoopbackFile.Write(ctx, data, off) })
}

// Writev is Write for a vector.
func (h *handle) Writev(ctx context.Context, data [][]byte, off int64) (uint32, syscall.Errno) {
	var n int64
	for _, b := range data {
		n += int64(len(b))
	}
	return h.write(off, n, func() (uint32, syscall.Errno) { return h.LoopbackFile.Writev(ctx, data, off) })
}

func (h *handle) write(off, n int64, do func() (uint32, syscall.Errno)) (uint32, syscall.Errno) {
	pfs := h.n.pfs
	pfs.mu.Lock()
	defer pfs.mu.Unlock()
	j, errno := pfs.journalFor(h.n, h)
	if errno != 0 {
		return 0, errno
	}
	if err := j.save(off, off+n); err != nil {
		return 0, fs.ToErrno(err)
	}
	written, errno := do()
	if written > 0 {
		if h.sync {
			j.synced(off, off+int64(written))
		} else {
			j.wrote(off, off+int64(written))
		}
	}
	return written, errno
}

// Allocate journals a fallocate: growing the file is undone by the
// rollback's truncate, punched or zeroed ranges by their saved pages.
func (h *handle) Allocate(ctx context.Context, off uint64, size uint64, mode uint32) syscall.Errno {
	if mode&^(unix.FALLOC_FL_KEEP_SIZE|unix.FALLOC_FL_PUNCH_HOLE|unix.FALLOC_FL_ZERO_RANGE) != 0 {
		return syscall.ENOTSUP
	}
	pfs := h.n.pfs
	pfs.mu.Lock()
	defer pfs.mu.Unlock()
	j, errno := pfs.journalFor(h.n, h)
	if errno != 0 {
		return errno
	}
	if mode&(unix.FALLOC_FL_PUNCH_HOLE|unix.FALLOC_FL_ZERO_RANGE) != 0 {
		if err := j.save(int64(off), int64(off+size)); err != nil {
			return fs.ToErrno(err)
		}
	}
	return h.LoopbackFile.Allocate(ctx, off, size, mode)
}

// Fsync makes the file's data durable.
func (h *handle) Fsync(ctx context.Context, flags uint32) syscall.Errno {
	return h.n.Fsync(ctx, h, flags)
}

// Setattr goes through the node, which journals a size change.
func (h *handle) Setattr(ctx context.Context, in *fuse.SetAttrIn, out *fuse.AttrOut) syscall.Errno {
	return h.LoopbackFile.Setattr(ctx, in, out)
}

// truncate journals and makes a truncation to size (O_TRUNC).
func (h *handle) truncate(size int64) syscall.Errno {
	h.n.pfs.mu.Lock()
	defer h.n.pfs.mu.Unlock()
	return h.truncateLocked(size)
}

func (h *handle) truncateLocked(size int64) syscall.Errno {
	j, errno := h.n.pfs.journalFor(h.n, h)
	if errno != 0 {
		return errno
	}
	if err := j.save(size, j.origSize); err != nil {
		return fs.ToErrno(err)
	}
	fd, _ := h.LoopbackFile.PassthroughFd()
	return fs.ToErrno(unix.Ftruncate(fd, size))
}
