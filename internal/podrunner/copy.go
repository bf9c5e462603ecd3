package podrunner

import (
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
)

// CopyDir copies the tree at src to dst, which must not exist: it is built
// in dst+".tmp" and renamed into place, so dst appears whole or not at all.
// Regular files, directories and symlinks are copied with their
// permission bits; other file types are skipped. It returns the number of
// bytes of regular files copied.
func CopyDir(src, dst string) (int64, error) {
	tmp := dst + ".tmp"
	if err := os.RemoveAll(tmp); err != nil {
		return 0, fmt.Errorf("copy %s: %w", src, err)
	}
	if err := os.MkdirAll(filepath.Dir(dst), 0o755); err != nil {
		return 0, fmt.Errorf("copy %s: %w", src, err)
	}
	var total int64
	err := filepath.WalkDir(src, func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		rel, err := filepath.Rel(src, path)
		if err != nil {
			return err
		}
		target := filepath.Join(tmp, rel)
		info, err := d.Info()
		if err != nil {
			return err
		}
		switch {
		case d.IsDir():
			return os.MkdirAll(target, info.Mode().Perm()|0o700)
		case d.Type()&fs.ModeSymlink != 0:
			link, err := os.Readlink(path)
			if err != nil {
				return err
			}
			return os.Symlink(link, target)
		case d.Type().IsRegular():
			n, err := copyFile(path, target, info.Mode().Perm())
			total += n
			return err
		default:
			return nil
		}
	})
	if err != nil {
		_ = os.RemoveAll(tmp)
		return 0, fmt.Errorf("copy %s: %w", src, err)
	}
	if err := os.Rename(tmp, dst); err != nil {
		_ = os.RemoveAll(tmp)
		return 0, fmt.Errorf("copy %s: %w", src, err)
	}
	return total, nil
}

func copyFile(src, dst string, perm fs.FileMode) (int64, error) {
	in, err := os.Open(src)
	if err != nil {
		return 0, err
	}
	defer func() { _ = in.Close() }()
	out, err := os.OpenFile(dst, os.O_CREATE|os.O_EXCL|os.O_WRONLY, perm)
	if err != nil {
		return 0, err
	}
	n, err := io.Copy(out, in)
	if err == nil {
		err = out.Sync()
	}
	if cerr := out.Close(); err == nil {
		err = cerr
	}
	return n, err
}
