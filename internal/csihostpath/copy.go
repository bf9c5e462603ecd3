package csihostpath

import (
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"syscall"
)

// copyTree copies the tree at src into dst, which must not exist, and
// returns the bytes of regular files copied. Directories, regular files
// and symbolic links are copied with their permission bits, owner (when
// the process may chown) and modification time; sockets, pipes and device
// nodes are skipped. Symbolic links are copied as links, never followed.
//
// The source is a volume that pods write into, so its contents are
// untrusted: it is read through an os.Root, so no path inside it, however
// it changes during the copy, reaches outside src.
//
// The copy is not atomic with respect to writers of src: a snapshot of a
// volume in use is whatever the walk saw (test infrastructure).
func copyTree(src, dst string) (int64, error) {
	sroot, err := os.OpenRoot(src)
	if err != nil {
		return 0, fmt.Errorf("copy source: %w", err)
	}
	defer sroot.Close()
	if err := os.Mkdir(dst, 0o700); err != nil {
		return 0, fmt.Errorf("copy destination: %w", err)
	}
	droot, err := os.OpenRoot(dst)
	if err != nil {
		return 0, fmt.Errorf("copy destination: %w", err)
	}
	defer droot.Close()

	var total int64
	// Directory modes and times are applied after their contents, deepest
	// first, so a read-only directory can still be filled.
	type dirAttr struct {
		name string
		info fs.FileInfo
	}
	var dirs []dirAttr
	err = fs.WalkDir(sroot.FS(), ".", func(name string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		info, err := sroot.Lstat(name)
		if err != nil {
			return err
		}
		switch mode := info.Mode(); {
		case mode.IsDir():
			if name != "." {
				if err := droot.Mkdir(name, 0o700); err != nil {
					return err
				}
			}
			dirs = append(dirs, dirAttr{name, info})
			return nil
		case mode&fs.ModeSymlink != 0:
			target, err := sroot.Readlink(name)
			if err != nil {
				return err
			}
			if err := droot.Symlink(target, name); err != nil {
				return err
			}
			chown(droot, name, info, true)
			return nil
		case mode.IsRegular():
			n, err := copyFile(sroot, droot, name, info)
			total += n
			return err
		default:
			return nil
		}
	})
	if err != nil {
		return total, fmt.Errorf("copying %s: %w", src, err)
	}
	for i := len(dirs) - 1; i >= 0; i-- {
		d := dirs[i]
		chown(droot, d.name, d.info, false)
		if err := droot.Chmod(d.name, d.info.Mode().Perm()|d.info.Mode()&(fs.ModeSetgid|fs.ModeSticky)); err != nil {
			return total, err
		}
		if err := droot.Chtimes(d.name, d.info.ModTime(), d.info.ModTime()); err != nil {
			return total, err
		}
	}
	return total, nil
}

// copyFile copies the regular file name (described by info) from sroot to
// droot. It refuses a source that is no longer a regular file by the time
// it is opened.
func copyFile(sroot, droot *os.Root, name string, info fs.FileInfo) (int64, error) {
	in, err := sroot.OpenFile(name, os.O_RDONLY|syscall.O_NOFOLLOW|syscall.O_NONBLOCK, 0)
	if err != nil {
		return 0, err
	}
	defer in.Close()
	st, err := in.Stat()
	if err != nil {
		return 0, err
	}
	if !st.Mode().IsRegular() {
		return 0, fmt.Errorf("%s changed type during the copy", name)
	}
	out, err := droot.OpenFile(name, os.O_WRONLY|os.O_CREATE|os.O_EXCL, 0o600)
	if err != nil {
		return 0, err
	}
	n, err := copySparse(out, in, st.Size())
	if err == nil {
		err = out.Sync()
	}
	if cerr := out.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		return n, err
	}
	chown(droot, name, info, false)
	if err := droot.Chmod(name, info.Mode().Perm()|info.Mode()&(fs.ModeSetuid|fs.ModeSetgid|fs.ModeSticky)); err != nil {
		return n, err
	}
	return n, droot.Chtimes(name, info.ModTime(), info.ModTime())
}

// chown gives name in root the owner of info, best effort: without
// CAP_CHOWN the copy belongs to the driver's user, which is no error.
func chown(root *os.Root, name string, info fs.FileInfo, link bool) {
	st, ok := info.Sys().(*syscall.Stat_t)
	if !ok {
		return
	}
	if link {
		_ = root.Lchown(name, int(st.Uid), int(st.Gid))
	} else {
		_ = root.Chown(name, int(st.Uid), int(st.Gid))
	}
}

// Whence values of lseek(2) for sparse files (Linux).
const (
	seekData = 3 // SEEK_DATA
	seekHole = 4 // SEEK_HOLE
)

// copySparse copies the size bytes of in to out, which is empty, keeping
// in's holes as holes: only the data ranges lseek(SEEK_DATA/SEEK_HOLE)
// reports are written, and out is then extended to size. A database's
// preallocated files are mostly holes (a broker's store: 2.2 GB apparent
// on a 256Mi claim), which a plain copy would write out as zeros on every
// snapshot and restore. Where the file system cannot report holes, the
// whole file is copied. It returns size.
func copySparse(out, in *os.File, size int64) (int64, error) {
	for off := int64(0); off < size; {
		data, err := in.Seek(off, seekData)
		if errors.Is(err, syscall.ENXIO) { // no data after off: a hole to the end
			break
		}
		if errors.Is(err, syscall.EINVAL) && off == 0 { // holes not reported here
			if _, err := in.Seek(0, io.SeekStart); err != nil {
				return 0, err
			}
			n, err := io.Copy(out, in)
			return n, err
		}
		if err != nil {
			return off, err
		}
		hole, err := in.Seek(data, seekHole)
		if err != nil {
			return data, err
		}
		if hole > size { // the file grew during the copy: up to size only
			hole = size
		}
		if _, err := in.Seek(data, io.SeekStart); err != nil {
			return data, err
		}
		if _, err := out.Seek(data, io.SeekStart); err != nil {
			return data, err
		}
		if _, err := io.CopyN(out, in, hole-data); err != nil {
			return data, err
		}
		off = hole
	}
	return size, out.Truncate(size)
}
