package main

import (
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"

	"github.com/spf13/cobra"

	"felix.dev/felix/broker/datadir"
	"felix.dev/felix/broker/logstore"
	"felix.dev/felix/broker/record"
)

func newLogCmd() *cobra.Command {
	cmd := &cobra.Command{
		Use:   "log",
		Short: "Inspect and repair the logs in a stopped broker's data directory",
		Long: `log works on the log store of a broker data directory while no broker
holds it (the directory's lock is taken). inspect lists each log's marks and
any damage; repair explicitly gives up a damaged log's records from an offset
on. See docs/operator.md, "Corrupt logs".`,
	}
	cmd.AddCommand(newLogInspectCmd(), newLogRepairCmd())
	return cmd
}

type logSel struct {
	dataDir string
	stream  string
	shard   int64
	kind    string
}

func (s *logSel) flags(cmd *cobra.Command) {
	cmd.Flags().StringVar(&s.dataDir, "data-dir", "", "broker data directory (required)")
	cmd.Flags().StringVar(&s.stream, "stream", "", "only this stream")
	cmd.Flags().Int64Var(&s.shard, "shard", -1, "only this shard (with --stream)")
	cmd.Flags().StringVar(&s.kind, "log", "data", "which log of the shard, for repair: data, group, dead-letter or counter")
}

func (s *logSel) match(id record.LogID) bool {
	return (s.stream == "" || id.Stream == s.stream) && (s.shard < 0 || int64(id.Shard) == s.shard)
}

// openForRepair locks the data directory and opens its log store so that
// open drops nothing: every batch that does not read back is reported as
// damage (logstore.LastRunComplete), whatever the last run left.
func openForRepair(dataDir string) (*datadir.Dir, *logstore.Store, error) {
	if dataDir == "" {
		return nil, nil, errors.New("--data-dir is required")
	}
	dir := filepath.Join(dataDir, logStoreDir)
	if _, err := os.Stat(dir); err != nil {
		return nil, nil, fmt.Errorf("no log store in %s: %w", dataDir, err)
	}
	d, err := datadir.Open(dataDir, datadir.Options{Fsync: datadir.FsyncOnCommit})
	if err != nil {
		return nil, nil, err
	}
	s, err := logstore.Open(logstore.Options{Dir: dir, Fsync: logstore.FsyncOnCommit,
		ValueThreshold: logstore.BrokerValueThreshold, LastRun: logstore.LastRunComplete})
	if err != nil {
		_ = d.Close()
		return nil, nil, fmt.Errorf("open log store: %w", err)
	}
	return d, s, nil
}

func newLogInspectCmd() *cobra.Command {
	var sel logSel
	cmd := &cobra.Command{
		Use:   "inspect --data-dir DIR [--stream S [--shard N]]",
		Short: "List the logs of a data directory, their ranges and any damage",
		Long: `inspect prints one JSON object per log: its marks (base, start, floor,
committed, tail) and, if a stored batch does not read back, "damaged": true
with the first damaged offset and why. Every stored batch is read and checked.
It drops nothing; it exits 4 if any log is damaged.`,
		Example: `  felix log inspect --data-dir /var/lib/felix --stream orders`,
		Args:    cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			d, s, err := openForRepair(sel.dataDir)
			if err != nil {
				return err
			}
			defer func() { _ = d.Close() }()
			defer func() { _ = s.Close() }()
			enc := json.NewEncoder(cmd.OutOrStdout())
			damaged := 0
			for _, id := range s.Logs() {
				if !sel.match(id) {
					continue
				}
				l, err := s.Log(id)
				if err != nil {
					return err
				}
				dmg, err := l.Verify()
				if err != nil {
					return fmt.Errorf("inspect %s: %w", id, err)
				}
				info := l.Describe()
				out := map[string]any{"stream": id.Stream, "shard": id.Shard, "log": id.Log.String(),
					"base": info.Base, "start": info.Start, "floor": info.Floor, "committed": info.Committed, "tail": info.Tail,
					"damaged": dmg != nil}
				if dmg != nil {
					damaged++
					out["damageOffset"], out["damageReason"] = dmg.Offset, dmg.Reason
				}
				if err := enc.Encode(out); err != nil {
					return err
				}
			}
			if damaged > 0 {
				return &exitError{code: exitDamaged, err: fmt.Errorf("%d damaged logs", damaged)}
			}
			return nil
		},
	}
	sel.flags(cmd)
	return cmd
}

// exitDamaged is felix log inspect's exit code when a log is damaged.
const exitDamaged = 4

func newLogRepairCmd() *cobra.Command {
	var sel logSel
	var at uint64
	var atSet, yes, force bool
	cmd := &cobra.Command{
		Use:   "repair --data-dir DIR --stream S --shard N --truncate-at OFFSET --yes",
		Short: "Explicitly truncate a damaged log, giving up its records from OFFSET on",
		Long: `repair truncates one log at OFFSET: every record from OFFSET on is deleted,
acknowledged or not, whatever the committed mark, and the log serves again
from its start to OFFSET. OFFSET must be at or below the first damaged offset
felix log inspect reports, and above the trim record that set the log's floor
(a cut at or below it would read records below an acknowledged trim again;
such a log can only be reset). A log without damage is refused unless
--force is given. It also deletes the directory's storage-id, so the
broker's next start makes a new id [ID-3]: in a cluster its leaders then copy
the shard again instead of counting what this directory no longer holds.
Nothing happens without --yes.`,
		Example: `  felix log repair --data-dir /var/lib/felix --stream orders --shard 3 --truncate-at 1200 --yes`,
		Args:    cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			atSet = cmd.Flags().Changed("truncate-at")
			if sel.stream == "" || sel.shard < 0 || !atSet {
				return errors.New("--stream, --shard and --truncate-at are required")
			}
			if !yes {
				return errors.New("repair deletes records; pass --yes to do it")
			}
			kind, err := parseLogKind(sel.kind)
			if err != nil {
				return err
			}
			id := record.LogID{ShardID: record.ShardID{Stream: sel.stream, Shard: uint32(sel.shard)}, Log: kind}
			d, s, err := openForRepair(sel.dataDir)
			if err != nil {
				return err
			}
			defer func() { _ = d.Close() }()
			defer func() { _ = s.Close() }()
			found := false
			for _, have := range s.Logs() {
				found = found || have == id
			}
			if !found {
				return fmt.Errorf("no log %s in %s", id, sel.dataDir)
			}
			l, err := s.Log(id)
			if err != nil {
				return err
			}
			opts := logstore.RepairOptions{Force: force}
			if err := l.CheckRepair(at, opts); err != nil {
				return fmt.Errorf("repair refused, nothing changed: %w", err)
			}
			before := l.Describe()
			// The claim goes first: a crash after it costs a copy, never a
			// directory counted as holding what the repair removes.
			if err := d.ForgetStorageID(); err != nil {
				return err
			}
			if err := l.Repair(at, opts); err != nil {
				return err
			}
			after := l.Describe()
			return json.NewEncoder(cmd.OutOrStdout()).Encode(map[string]any{"stream": id.Stream, "shard": id.Shard, "log": id.Log.String(),
				"truncatedAt": at, "tailBefore": before.Tail, "tail": after.Tail, "storageID": "removed: the next start makes a new one"})
		},
	}
	sel.flags(cmd)
	cmd.Flags().Uint64Var(&at, "truncate-at", 0, "first offset to delete (required)")
	cmd.Flags().BoolVar(&yes, "yes", false, "really delete the records")
	cmd.Flags().BoolVar(&force, "force", false, "truncate even though no damage is recorded or found")
	return cmd
}

func parseLogKind(s string) (record.LogKind, error) {
	for _, k := range record.LogKinds {
		if k.String() == s {
			return k, nil
		}
	}
	return 0, fmt.Errorf("unknown log %q: want data, group, dead-letter or counter", s)
}
