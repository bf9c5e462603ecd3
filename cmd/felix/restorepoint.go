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
it open the log store, which brings every log to the prefix that reached the
disk (a snapshot of a running broker can end in the middle of a write), and
close it. It drops nothing else: which records of a shard survive is decided
by the shard's recovery when its replicas are back.

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
				Cut:    openConsistent,
				Logger: log.WithName("restore-point"),
			})
		},
	}
	cmd.Flags().StringVar(&dataDir, "data-dir", "", "broker data directory (required)")
	return cmd
}

// openConsistent is restore-point's log step: it opens the log store in
// dataDir, which recovers every log to the prefix that reached the disk
// (logstore's open-time checks), and closes it, so the broker's first
// start finds logs it can serve whole. It cuts nothing above that prefix.
// A cluster member's log store does not hold the shard's committed
// position (the replication core learns it from its leader and the store
// persists it only when it moves a floor), so a cut at the stored mark
// would drop acknowledged records; records a restored copy holds beyond
// what was committed are sorted out by the shard's recovery like any
// uncommitted suffix. A directory without a log store (a broker that never
// opened one) has nothing to open.
func openConsistent(ctx context.Context, dataDir string) error {
	dir := filepath.Join(dataDir, logStoreDir)
	if _, err := os.Stat(dir); errors.Is(err, os.ErrNotExist) {
		return nil
	}
	if err := ctx.Err(); err != nil {
		return err
	}
	store, err := logstore.Open(logstore.Options{Dir: dir, Fsync: logstore.FsyncOnCommit,
		ValueThreshold: logstore.BrokerValueThreshold})
	if err != nil {
		return fmt.Errorf("open log store: %w", err)
	}
	return store.Close()
}
