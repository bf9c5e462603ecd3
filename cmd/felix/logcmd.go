package main

import (
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"syscall"

	"github.com/spf13/cobra"
	"golang.org/x/sys/unix"

	"felix.dev/felix/broker/datadir"
	"felix.dev/felix/broker/logstore"
	"felix.dev/felix/broker/member"
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

// lockForLogs locks the data directory (a running broker holds the lock)
// and returns it, its log store's directory and what the broker's next
// start would take the previous run to have left (member.LastRunOf of the
// local storage-identity decision), writing nothing to decide it.
func lockForLogs(dataDir string) (*datadir.Dir, string, logstore.LastRun, error) {
	if dataDir == "" {
		return nil, "", 0, errors.New("--data-dir is required")
	}
	dir := filepath.Join(dataDir, logStoreDir)
	if _, err := os.Stat(dir); err != nil {
		return nil, "", 0, fmt.Errorf("no log store in %s: %w", dataDir, err)
	}
	d, err := datadir.Open(dataDir, datadir.Options{Fsync: datadir.FsyncOnCommit})
	if err != nil {
		return nil, "", 0, err
	}
	dec, err := d.Peek()
	if err != nil {
		_ = d.Close()
		return nil, "", 0, err
	}
	return d, dir, member.LastRunOf(dec), nil
}

// openLogStore opens the log store in dir judging what does not read back
// as the broker's next start would (lastRun): a torn tail is dropped,
// damage is reported and kept.
func openLogStore(dir string, lastRun logstore.LastRun) (*logstore.Store, error) {
	s, err := logstore.Open(logstore.Options{Dir: dir, Fsync: logstore.FsyncOnCommit,
		ValueThreshold: logstore.BrokerValueThreshold, LastRun: lastRun})
	if err != nil {
		return nil, fmt.Errorf("open log store: %w", err)
	}
	return s, nil
}

// copyTree copies the regular files and directories under src to dst
// (which must not exist), syncing nothing: the copy is thrown away. Holes
// stay holes (badger's value-log and memtable files are large and mostly
// sparse).
func copyTree(src, dst string) error {
	return filepath.WalkDir(src, func(path string, e os.DirEntry, err error) error {
		if err != nil {
			return err
		}
		rel, err := filepath.Rel(src, path)
		if err != nil {
			return err
		}
		to := filepath.Join(dst, rel)
		switch {
		case e.IsDir():
			return os.Mkdir(to, 0o750)
		case !e.Type().IsRegular():
			return fmt.Errorf("copy %s: not a regular file", path)
		}
		return copySparse(path, to)
	})
}

// dataRanges calls fn for each range of f (of size bytes) that may hold
// data, in order; without SEEK_DATA support, the whole file is one range.
func dataRanges(f *os.File, size int64, fn func(from, to int64) error) error {
	for off := int64(0); off < size; {
		from, err := f.Seek(off, unix.SEEK_DATA)
		switch {
		case errors.Is(err, syscall.ENXIO):
			return nil // only a hole is left
		case errors.Is(err, syscall.EINVAL) && off == 0:
			return fn(0, size) // no SEEK_DATA here
		case err != nil:
			return err
		}
		to, err := f.Seek(from, unix.SEEK_HOLE)
		if err != nil {
			return err
		}
		to = min(to, size)
		if err := fn(from, to); err != nil {
			return err
		}
		off = to
	}
	return nil
}

// copySparse copies the file src to the new file dst, leaving holes where
// src has them.
func copySparse(src, dst string) error {
	in, err := os.Open(src)
	if err != nil {
		return err
	}
	defer func() { _ = in.Close() }()
	st, err := in.Stat()
	if err != nil {
		return err
	}
	out, err := os.OpenFile(dst, os.O_CREATE|os.O_EXCL|os.O_WRONLY, 0o640)
	if err != nil {
		return err
	}
	err = dataRanges(in, st.Size(), func(from, to int64) error {
		if _, err := in.Seek(from, io.SeekStart); err != nil {
			return err
		}
		if _, err := out.Seek(from, io.SeekStart); err != nil {
			return err
		}
		_, err := io.CopyN(out, in, to-from)
		return err
	})
	if err == nil {
		err = out.Truncate(st.Size())
	}
	if cerr := out.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		return fmt.Errorf("copy %s: %w", src, err)
	}
	return nil
}

func newLogInspectCmd() *cobra.Command {
	var sel logSel
	var scratch string
	cmd := &cobra.Command{
		Use:   "inspect --data-dir DIR [--stream S [--shard N]]",
		Short: "List the logs of a data directory, their ranges and any damage",
		Long: `inspect prints one JSON object per log: its marks (base, start, floor,
committed, tail) and, if a stored batch does not read back, "damaged": true
with the first damaged offset and why. Every stored batch is read and checked.
It judges what does not read back as the broker's next start would, from the
directory's run-state ("lastRun"): after an unclean stop under on-commit, a
batch that was never acknowledged is a torn tail the broker drops, not damage.
It changes nothing in the directory: it opens a copy of the log store in a
scratch directory (--scratch-dir, default the system temp directory; it needs
room for the whole log store) and deletes the copy. It exits 4 if any log is
damaged.`,
		Example: `  felix log inspect --data-dir /var/lib/felix --stream orders`,
		Args:    cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			d, dir, lastRun, err := lockForLogs(sel.dataDir)
			if err != nil {
				return err
			}
			defer func() { _ = d.Close() }()
			// Opening a store writes (commit-log replay, checkpoint, the
			// value-log shield): open a copy, so the broker's next start
			// finds the directory exactly as it was.
			tmp, err := os.MkdirTemp(scratch, "felix-log-inspect-")
			if err != nil {
				return fmt.Errorf("scratch directory: %w", err)
			}
			defer func() { _ = os.RemoveAll(tmp) }()
			cp := filepath.Join(tmp, logStoreDir)
			if err := copyTree(dir, cp); err != nil {
				return fmt.Errorf("copy the log store to %s: %w", tmp, err)
			}
			s, err := openLogStore(cp, lastRun)
			if err != nil {
				return err
			}
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
					"damaged": dmg != nil, "lastRun": lastRun.String()}
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
	cmd.Flags().StringVar(&scratch, "scratch-dir", "", "where to copy the log store to inspect it (default: the system temp directory)")
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
			d, dir, lastRun, err := lockForLogs(sel.dataDir)
			if err != nil {
				return err
			}
			defer func() { _ = d.Close() }()
			s, err := openLogStore(dir, lastRun)
			if err != nil {
				return err
			}
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
