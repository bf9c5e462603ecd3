package main

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"

	"github.com/spf13/cobra"

	"felix.dev/felix/broker/datadir"
	"felix.dev/felix/broker/logstore"
)

func newRestorePointCmd() *cobra.Command {
	var dataDir string
	cmd := &cobra.Command{
		Use:   "restore-point --data-dir DIR",
		Short: "Prepare a data directory put back from a backup, before its broker first starts",
		Long: `restore-point prepares a broker data directory that was restored from a
snapshot or a copy. It first deletes storage-id [ID-5], so the broker's next
start makes a new storage id and its leaders copy the shard again from the
base instead of trusting positions learned from the newer copy. Only then does
it cut every log to its committed mark: records above the mark were never
acknowledged under Quorum and are dropped.

The operator runs it as an init step on a restored broker's first start only.
Run it by hand on a directory you put back yourself (see docs/backup-restore.md).
No broker may hold the directory while it runs.`,
		Example: `  felix restore-point --data-dir /var/lib/felix`,
		Args:    cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if dataDir == "" {
				return errors.New("--data-dir is required")
			}
			log := newLogger(cmd.ErrOrStderr())
			return datadir.RestorePoint(cmd.Context(), dataDir, datadir.RestoreOptions{
				Cut:    cutToCommitted,
				Logger: log.WithName("restore-point"),
			})
		},
	}
	cmd.Flags().StringVar(&dataDir, "data-dir", "", "broker data directory (required)")
	return cmd
}

// cutToCommitted truncates every log of the store in dataDir to its
// committed mark. A directory without a log store (a broker that never
// opened one) has nothing to cut.
func cutToCommitted(ctx context.Context, dataDir string) error {
	dir := filepath.Join(dataDir, logStoreDir)
	if _, err := os.Stat(dir); errors.Is(err, os.ErrNotExist) {
		return nil
	}
	store, err := logstore.Open(logstore.Options{Dir: dir, Fsync: logstore.FsyncOnCommit})
	if err != nil {
		return fmt.Errorf("open log store: %w", err)
	}
	for _, id := range store.Logs() {
		if err := ctx.Err(); err != nil {
			_ = store.Close()
			return err
		}
		l, ok := store.Lookup(id)
		if !ok {
			continue
		}
		info := l.Describe()
		if info.Tail > info.Committed {
			if err := l.TruncateFrom(info.Committed); err != nil {
				_ = store.Close()
				return fmt.Errorf("cut %s at %d: %w", id, info.Committed, err)
			}
		}
	}
	return store.Close()
}
