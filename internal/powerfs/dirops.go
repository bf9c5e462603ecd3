//go:build linux

package powerfs

import (
	"errors"
	"os"
	"slices"
	"syscall"

	"github.com/hanwen/go-fuse/v2/fs"
	"golang.org/x/sys/unix"
)

// dirOp is one directory change that is not yet durable.
type dirOp struct {
	desc    string
	dirs    []*fs.Inode  // durable once one of these is fsynced
	undo    func() error // puts the backing directory back
	durable func()       // forgets the undo (empties the trash it held)
}

// recordCreate journals a new entry at path in dir. Called with f.mu held.
func (f *FS) recordCreate(dir *fs.Inode, path string) {
	f.ops = append(f.ops, &dirOp{
		desc: "create " + path,
		dirs: []*fs.Inode{dir},
		undo: func() error {
			err := os.RemoveAll(path)
			return err
		},
		durable: func() {},
	})
}

// remove moves path (a directory when dir is true, which must be empty)
// to the trash and journals the removal. Called with f.mu held.
func (f *FS) remove(parent *fs.Inode, path string, dir bool) syscall.Errno {
	var st unix.Stat_t
	if err := unix.Lstat(path, &st); err != nil {
		return fs.ToErrno(err)
	}
	isDir := st.Mode&unix.S_IFMT == unix.S_IFDIR
	if dir != isDir {
		if dir {
			return syscall.ENOTDIR
		}
		return syscall.EISDIR
	}
	if dir {
		entries, err := os.ReadDir(path)
		if err != nil {
			return fs.ToErrno(err)
		}
		if len(entries) > 0 {
			return syscall.ENOTEMPTY
		}
	}
	t := f.trashPath()
	if err := unix.Rename(path, t); err != nil {
		return fs.ToErrno(err)
	}
	f.ops = append(f.ops, &dirOp{
		desc:    "remove " + path,
		dirs:    []*fs.Inode{parent},
		undo:    func() error { return unix.Renameat2(unix.AT_FDCWD, t, unix.AT_FDCWD, path, unix.RENAME_NOREPLACE) },
		durable: func() { _ = os.RemoveAll(t) },
	})
	return 0
}

// rename renames from to to, keeping an entry it replaces in the trash,
// and journals it. Called with f.mu held.
func (f *FS) rename(fromDir, toDir *fs.Inode, from, to string, flags uint) syscall.Errno {
	exchange := flags&unix.RENAME_EXCHANGE != 0
	victim := ""
	if !exchange && flags&unix.RENAME_NOREPLACE == 0 {
		var st unix.Stat_t
		if err := unix.Lstat(to, &st); err == nil {
			var fst unix.Stat_t
			if err := unix.Lstat(from, &fst); err != nil {
				return fs.ToErrno(err)
			}
			if fst.Ino == st.Ino && fst.Dev == st.Dev {
				return 0 // the same file: rename does nothing
			}
			if st.Mode&unix.S_IFMT == unix.S_IFDIR {
				if fst.Mode&unix.S_IFMT != unix.S_IFDIR {
					return syscall.EISDIR
				}
				if entries, err := os.ReadDir(to); err != nil {
					return fs.ToErrno(err)
				} else if len(entries) > 0 {
					return syscall.ENOTEMPTY
				}
			} else if fst.Mode&unix.S_IFMT == unix.S_IFDIR {
				return syscall.ENOTDIR
			}
			victim = f.trashPath()
			if err := unix.Rename(to, victim); err != nil {
				return fs.ToErrno(err)
			}
		} else if !errors.Is(err, unix.ENOENT) {
			return fs.ToErrno(err)
		}
	}
	if err := unix.Renameat2(unix.AT_FDCWD, from, unix.AT_FDCWD, to, flags); err != nil {
		if victim != "" {
			_ = unix.Rename(victim, to)
		}
		return fs.ToErrno(err)
	}
	f.ops = append(f.ops, &dirOp{
		desc: "rename " + from + " " + to,
		dirs: []*fs.Inode{fromDir, toDir},
		undo: func() error {
			if exchange {
				return unix.Renameat2(unix.AT_FDCWD, to, unix.AT_FDCWD, from, unix.RENAME_EXCHANGE)
			}
			if err := unix.Renameat2(unix.AT_FDCWD, to, unix.AT_FDCWD, from, unix.RENAME_NOREPLACE); err != nil {
				return err
			}
			if victim != "" {
				return unix.Rename(victim, to)
			}
			return nil
		},
		durable: func() {
			if victim != "" {
				_ = os.RemoveAll(victim)
			}
		},
	})
	return 0
}

// syncDir makes the changes that touched dir durable. Called with f.mu
// held.
func (f *FS) syncDir(dir *fs.Inode) {
	f.ops = slices.DeleteFunc(f.ops, func(op *dirOp) bool {
		if slices.Contains(op.dirs, dir) {
			op.durable()
			return true
		}
		return false
	})
}
