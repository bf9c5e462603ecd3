package datadir

import (
	"context"
	"fmt"
	"os"

	"github.com/go-logr/logr"
)

// CutFunc cuts the logs in dataDir to a consistent point. The log store
// supplies it; RestorePoint calls it only after storage-id is durably gone.
type CutFunc func(ctx context.Context, dataDir string) error

// RestoreOptions configures RestorePoint.
type RestoreOptions struct {
	// Cut is the log-cutting step. Required.
	Cut CutFunc
	// Logger receives progress. Default: discard.
	Logger logr.Logger
}

// RestorePoint prepares a data directory put back from a backup, for
// `felix restore-point --data-dir DIR`. The directory must exist and no
// broker may hold it (ErrLocked). Under its lock, and before anything else
// touches the directory's contents, it deletes storage-id and fsyncs the
// directory [ID-5]; only then does it call opts.Cut. If the cut fails or
// the process dies during it, storage-id is already gone, so the next
// start makes a new id whatever state the logs are in. Running it again
// is safe.
func RestorePoint(ctx context.Context, path string, opts RestoreOptions) error {
	if opts.Cut == nil {
		return ErrNoCutStep
	}
	log := opts.Logger
	if log.GetSink() == nil {
		log = logr.Discard()
	}
	st, err := os.Stat(path)
	if err != nil {
		return fmt.Errorf("datadir: restore point: %w", err)
	}
	if !st.IsDir() {
		return fmt.Errorf("datadir: restore point: %s is not a directory", path)
	}
	lock, err := lockDir(path)
	if err != nil {
		return fmt.Errorf("datadir: restore point: %w", err)
	}
	defer lock.Close()

	if err := removeFileDurable(path, StorageIDFile); err != nil {
		return fmt.Errorf("datadir: restore point: %w", err)
	}
	// A leftover temporary id is never read, but it must not outlive the
	// id it was meant to replace either.
	if err := removeFileDurable(path, StorageIDFile+tmpSuffix); err != nil {
		return fmt.Errorf("datadir: restore point: %w", err)
	}
	log.Info("restore point: storage-id deleted; the next start makes a new storage id", "dataDir", path)

	if err := opts.Cut(ctx, path); err != nil {
		return fmt.Errorf("datadir: restore point: cut logs: %w", err)
	}
	log.Info("restore point: logs cut", "dataDir", path)
	return nil
}
