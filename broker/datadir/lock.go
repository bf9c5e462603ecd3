package datadir

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"

	"golang.org/x/sys/unix"
)

// LockFile is the name of the file whose flock(2) marks a data directory
// in use.
const LockFile = "felix.lock"

// lockDir takes an exclusive, non-blocking flock on path/LockFile. The
// lock lives as long as the returned file stays open; the kernel drops it
// when the process dies, so a SIGKILLed broker never leaves a stale lock.
func lockDir(path string) (*os.File, error) {
	f, err := os.OpenFile(filepath.Join(path, LockFile), os.O_RDWR|os.O_CREATE, 0o640)
	if err != nil {
		return nil, fmt.Errorf("datadir: open lock file: %w", err)
	}
	if err := unix.Flock(int(f.Fd()), unix.LOCK_EX|unix.LOCK_NB); err != nil {
		_ = f.Close()
		if errors.Is(err, unix.EWOULDBLOCK) {
			return nil, fmt.Errorf("%w: %s", ErrLocked, path)
		}
		return nil, fmt.Errorf("datadir: flock %s: %w", path, err)
	}
	return f, nil
}
