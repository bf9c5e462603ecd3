package record

import (
	"errors"
	"fmt"
)

// FsyncMode says when an append is acknowledged relative to the disk. The
// log store applies it; the data directory records it in run-state, since
// whether a crash may have dropped acknowledged appends decides the
// storage id ([ID-3]). The zero value is no mode: a store treats it as
// FsyncOnCommit, a run-state record holding it is corrupt.
type FsyncMode uint8

const (
	// FsyncOnCommit acknowledges an append only after a sync that started
	// after the append was written; concurrent appends share one sync.
	// Survives process and machine crashes.
	FsyncOnCommit FsyncMode = iota + 1
	// FsyncPeriodic acknowledges once the kernel has the write and syncs on
	// an interval. Survives process crashes; a machine crash may lose up to
	// about one interval of acknowledged appends.
	FsyncPeriodic
	// FsyncNone never syncs explicitly (only on close). Survives process
	// crashes; a machine crash may lose any acknowledged append the kernel
	// had not yet written back.
	FsyncNone
)

// ErrBadFsyncMode is returned by ParseFsyncMode for an unknown spelling.
var ErrBadFsyncMode = errors.New("unknown fsync mode")

// String returns "on-commit", "periodic" or "none".
func (m FsyncMode) String() string {
	switch m {
	case FsyncOnCommit:
		return "on-commit"
	case FsyncPeriodic:
		return "periodic"
	case FsyncNone:
		return "none"
	default:
		return fmt.Sprintf("fsync-mode(%d)", uint8(m))
	}
}

// Valid reports whether m is one of the three modes.
func (m FsyncMode) Valid() bool { return m >= FsyncOnCommit && m <= FsyncNone }

// ParseFsyncMode accepts "on-commit", "periodic" or "none" (the flag and
// run-state spelling) and "OnCommit", "Periodic" or "None" (the FelixCluster
// API spelling).
func ParseFsyncMode(s string) (FsyncMode, error) {
	switch s {
	case "on-commit", "OnCommit":
		return FsyncOnCommit, nil
	case "periodic", "Periodic":
		return FsyncPeriodic, nil
	case "none", "None":
		return FsyncNone, nil
	default:
		return 0, fmt.Errorf("%w: %q (want on-commit, periodic or none)", ErrBadFsyncMode, s)
	}
}
