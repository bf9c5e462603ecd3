package datadir

import "errors"

// errCorruptFile is wrapped by every error that reports an identity file
// (storage-id, registration, run-state) whose bytes do not decode. A corrupt
// file is never an I/O failure: Identify reads it as FileCorrupt,
// "unknown" to the rotation decision.
var errCorruptFile = errors.New("datadir: corrupt file")

// ErrLocked is returned by Open and RestorePoint when another process (or
// another Dir in this process) holds the directory's lock.
var ErrLocked = errors.New("datadir: data directory is locked by another process")

// ErrStepOrder is returned when a startup step is used out of the [ID-4]
// order: a step object used twice, Identify called twice, or a step used
// after its Dir was closed.
var ErrStepOrder = errors.New("datadir: startup step out of order")

// ErrNoCutStep is returned by RestorePoint when no log-cutting step was
// supplied.
var ErrNoCutStep = errors.New("datadir: restore point needs a log cutting step")
