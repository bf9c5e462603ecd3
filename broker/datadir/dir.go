package datadir

import (
	"crypto/rand"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"sync"

	"github.com/go-logr/logr"
)

// Options configures a Dir. Only Fsync is required; the rest default to
// the production sources and exist so tests can inject them.
type Options struct {
	// Fsync is the log store's durability mode for this run. MarkRunning
	// records it, and the next start judges an unclean stop by it.
	Fsync FsyncMode
	// Rand is the source of new storage ids. Default: crypto/rand.Reader.
	Rand io.Reader
	// BootIDPath is read for the current boot id. Default:
	// DefaultBootIDPath.
	BootIDPath string
	// SyncFS flushes the filesystem holding the data directory and reports
	// writeback errors. Default: SyncFS.
	SyncFS func(dir string) error
	// Logger receives the startup decision. Default: discard.
	Logger logr.Logger
}

// phase is where a Dir is in the [ID-4] startup order.
type phase uint8

const (
	phaseOpened     phase = iota + 1 // locked, nothing read
	phaseIdentified                  // (a) done
	phaseVerified                    // (c) done
	phasePrepared                    // (d) done, or standalone
	phaseRunning                     // (e) done
	phaseStopped                     // (f) done
	phaseFailed                      // a step failed; start over with a new process
	phaseClosed
)

var phaseNames = [...]string{
	phaseOpened: "opened", phaseIdentified: "identified", phaseVerified: "verified",
	phasePrepared: "prepared", phaseRunning: "running", phaseStopped: "stopped",
	phaseFailed: "failed", phaseClosed: "closed",
}

func (p phase) String() string {
	if int(p) < len(phaseNames) && phaseNames[p] != "" {
		return phaseNames[p]
	}
	return fmt.Sprintf("phase(%d)", uint8(p))
}

// Dir owns one data directory for the life of a broker process: it holds
// the directory's lock and walks the [ID-4] startup order through one step
// type per stage (Identified, Verified, Prepared, Running). Each step
// object can be used once; using one out of order returns ErrStepOrder.
// After a step fails with an I/O error the Dir refuses every further step:
// the broker should exit and start over. The methods are safe for
// concurrent use.
type Dir struct {
	path string
	opts Options
	log  logr.Logger

	mu    sync.Mutex
	phase phase
	lock  *os.File
	// Set by Identify.
	facts   Facts
	id      StorageID
	rotated bool
}

// Open prepares path as a data directory: it creates the directory if it
// does not exist and takes its exclusive lock (ErrLocked if another broker
// holds it). Open reads no identity file; Identify does.
func Open(path string, opts Options) (*Dir, error) {
	if !opts.Fsync.Valid() {
		return nil, fmt.Errorf("datadir: Options.Fsync must be set, got %v", opts.Fsync)
	}
	if opts.Rand == nil {
		opts.Rand = rand.Reader
	}
	if opts.BootIDPath == "" {
		opts.BootIDPath = DefaultBootIDPath
	}
	if opts.SyncFS == nil {
		opts.SyncFS = SyncFS
	}
	if opts.Logger.GetSink() == nil {
		opts.Logger = logr.Discard()
	}
	if err := ensureDir(path); err != nil {
		return nil, err
	}
	lock, err := lockDir(path)
	if err != nil {
		return nil, err
	}
	// Leftovers of an interrupted atomic write are never read; drop them.
	for _, name := range []string{StorageIDFile, RegistrationFile, RunStateFile} {
		_ = os.Remove(filepath.Join(path, name+tmpSuffix))
	}
	return &Dir{path: path, opts: opts, log: opts.Logger, phase: phaseOpened, lock: lock}, nil
}

// ensureDir creates path (and parents) if missing and makes the new entry
// durable in its parent.
func ensureDir(path string) error {
	st, err := os.Stat(path)
	if err == nil {
		if !st.IsDir() {
			return fmt.Errorf("datadir: %s is not a directory", path)
		}
		return nil
	}
	if err := os.MkdirAll(path, 0o750); err != nil {
		return fmt.Errorf("datadir: create %s: %w", path, err)
	}
	return syncDir(filepath.Dir(filepath.Clean(path)))
}

// Path returns the data directory's path.
func (d *Dir) Path() string { return d.path }

// Close releases the directory's lock. It does not write run-state: a
// Dir closed while running (without MarkCleanStop) reads as an unclean
// stop at the next start. Close is idempotent.
func (d *Dir) Close() error {
	d.mu.Lock()
	defer d.mu.Unlock()
	if d.phase == phaseClosed {
		return nil
	}
	d.phase = phaseClosed
	if err := d.lock.Close(); err != nil {
		return fmt.Errorf("datadir: release lock: %w", err)
	}
	return nil
}

// advance moves the Dir from phase from to phase to, or reports
// ErrStepOrder naming the step that was misused. Callers hold d.mu.
func (d *Dir) advance(step string, from, to phase) error {
	if d.phase != from {
		return fmt.Errorf("%w: %s needs phase %v, directory is %v", ErrStepOrder, step, from, d.phase)
	}
	d.phase = to
	return nil
}

// fail marks the Dir failed after a step's I/O error and returns err.
// Callers hold d.mu.
func (d *Dir) fail(err error) error {
	if d.phase != phaseClosed {
		d.phase = phaseFailed
	}
	return err
}

// rotate makes, writes and adopts a new storage id. Callers hold d.mu.
func (d *Dir) rotate() error {
	id, err := newStorageID(d.opts.Rand)
	if err != nil {
		return err
	}
	if err := writeFileAtomic(d.path, StorageIDFile, encodeStorageIDFile(id)); err != nil {
		return err
	}
	d.id, d.rotated = id, true
	return nil
}

// writeRunState writes the run-state record for this run. Callers hold
// d.mu.
func (d *Dir) writeRunState(p RunPhase) error {
	data, err := encodeRunStateFile(RunState{Phase: p, BootID: d.facts.CurrentBootID, Fsync: d.opts.Fsync})
	if err != nil {
		return err
	}
	return writeFileAtomic(d.path, RunStateFile, data)
}
