package datadir

import (
	"bytes"
	"fmt"
	"io"
	"os"

	"golang.org/x/sys/unix"
)

// DefaultBootIDPath is where Linux publishes a random id for the current
// boot; it changes at every boot of the machine.
const DefaultBootIDPath = "/proc/sys/kernel/random/boot_id"

// ReadBootID reads the boot id at path (DefaultBootIDPath in production).
// The file must hold one lowercase UUID, optionally followed by a newline.
// An error means "boot unknown" to the rotation decision.
func ReadBootID(path string) (string, error) {
	f, err := os.Open(path)
	if err != nil {
		return "", fmt.Errorf("datadir: read boot id: %w", err)
	}
	defer f.Close()
	data, err := io.ReadAll(io.LimitReader(f, 128))
	if err != nil {
		return "", fmt.Errorf("datadir: read boot id: %w", err)
	}
	s := string(bytes.TrimSuffix(data, []byte("\n")))
	if !validBootID(s) {
		return "", fmt.Errorf("datadir: boot id %q from %s is not a lowercase uuid", s, path)
	}
	return s, nil
}

// validBootID reports whether s is a lowercase UUID in the 8-4-4-4-12 form
// the kernel prints.
func validBootID(s string) bool {
	if len(s) != 36 {
		return false
	}
	for i := 0; i < len(s); i++ {
		switch i {
		case 8, 13, 18, 23:
			if s[i] != '-' {
				return false
			}
		default:
			if _, ok := hexDigit(s[i]); !ok {
				return false
			}
		}
	}
	return true
}

// SyncFS flushes every dirty page of the filesystem holding dir with
// syncfs(2) and reports any writeback error the kernel has not yet
// reported to anyone. It is the default Options.SyncFS.
func SyncFS(dir string) error {
	fd, err := unix.Open(dir, unix.O_RDONLY|unix.O_DIRECTORY|unix.O_CLOEXEC, 0)
	if err != nil {
		return fmt.Errorf("datadir: open %s for syncfs: %w", dir, err)
	}
	defer unix.Close(fd)
	if err := unix.Syncfs(fd); err != nil {
		return fmt.Errorf("datadir: syncfs %s: %w", dir, err)
	}
	return nil
}
