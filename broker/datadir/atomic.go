package datadir

import (
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
)

// tmpSuffix marks the temporary file an atomic write renames into place.
const tmpSuffix = ".tmp"

// writeFileAtomic replaces dir/name with data so that a crash at any point
// leaves either the old file or the new one, never a torn one: write a
// temporary file, fsync it, rename it over name, fsync the directory.
func writeFileAtomic(dir, name string, data []byte) error {
	final := filepath.Join(dir, name)
	tmp := final + tmpSuffix
	f, err := os.OpenFile(tmp, os.O_WRONLY|os.O_CREATE|os.O_TRUNC, 0o640)
	if err != nil {
		return fmt.Errorf("datadir: write %s: %w", name, err)
	}
	if _, err := f.Write(data); err != nil {
		_ = f.Close()
		return fmt.Errorf("datadir: write %s: %w", name, err)
	}
	if err := f.Sync(); err != nil {
		_ = f.Close()
		return fmt.Errorf("datadir: fsync %s: %w", name, err)
	}
	if err := f.Close(); err != nil {
		return fmt.Errorf("datadir: close %s: %w", name, err)
	}
	if err := os.Rename(tmp, final); err != nil {
		return fmt.Errorf("datadir: rename %s: %w", name, err)
	}
	return syncDir(dir)
}

// removeFileDurable removes dir/name (a missing file is not an error) and
// fsyncs the directory so the removal survives a machine crash.
func removeFileDurable(dir, name string) error {
	if err := os.Remove(filepath.Join(dir, name)); err != nil && !errors.Is(err, fs.ErrNotExist) {
		return fmt.Errorf("datadir: remove %s: %w", name, err)
	}
	return syncDir(dir)
}

// syncDir fsyncs a directory so that entries created, renamed or removed
// in it are durable.
func syncDir(dir string) error {
	d, err := os.Open(dir)
	if err != nil {
		return fmt.Errorf("datadir: open directory for fsync: %w", err)
	}
	defer d.Close()
	if err := d.Sync(); err != nil {
		return fmt.Errorf("datadir: fsync directory %s: %w", dir, err)
	}
	return nil
}

// readSmallFile reads dir/name. ok is false when the file does not exist.
// A file longer than maxFileSize is returned truncated to maxFileSize+1
// bytes, which every decoder refuses as corrupt. Other read failures are
// returned as errors: an unreadable file is an I/O problem for the
// operator, not evidence about the data.
func readSmallFile(dir, name string) (data []byte, ok bool, err error) {
	f, err := os.Open(filepath.Join(dir, name))
	if errors.Is(err, fs.ErrNotExist) {
		return nil, false, nil
	}
	if err != nil {
		return nil, false, fmt.Errorf("datadir: read %s: %w", name, err)
	}
	defer f.Close()
	data, err = io.ReadAll(io.LimitReader(f, maxFileSize+1))
	if err != nil {
		return nil, false, fmt.Errorf("datadir: read %s: %w", name, err)
	}
	return data, true, nil
}
