//go:build !(linux && (amd64 || arm64))

package logstore

import (
	"errors"
	"os"
)

// aioFile is not available on this platform: direct writes use pwrite.
type aioFile struct{}

var errNoAIO = errors.New("logstore: native AIO is not supported on this platform")

func newAIOFile(*os.File) (*aioFile, error) { return nil, errNoAIO }

func probeAIO() error { return errNoAIO }

var errAIOBusy = errors.New("logstore: native AIO queue full")

func (*aioFile) writeAt([]byte, int64) error { return errors.ErrUnsupported }

func (*aioFile) close() error { return nil }
