package logstore

import (
	"encoding/binary"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"sort"
	"strconv"
	"strings"

	badger "github.com/dgraph-io/badger/v4"

	"felix.dev/felix/broker/record"
)

// LastRun says what the previous run of the store left on disk, as the
// data directory's run-state and fsync mode tell (broker/datadir). It
// decides, on open, whether a stored batch that does not read back is a
// torn tail (a write that never reached the disk, and was never
// acknowledged or whose claim a storage-id rotation gave up) that open
// drops, or damage to acknowledged data that open reports and never drops.
type LastRun uint8

const (
	// LastRunUnknown (the zero value): the previous run may have lost
	// acknowledged writes (an unclean stop under periodic or none after a
	// machine crash, so the storage id rotates [ID-3]), or the caller
	// cannot tell. A batch no sync of that run covered (the store's sync
	// mark says which were) whose value was lost is a torn tail: it and
	// every later batch of its log are dropped, as the fsync modes allow,
	// whatever the later ones read as. A lost batch a sync covered is
	// damage. (A store written before the sync mark existed: every lost
	// batch is a torn tail.)
	LastRunUnknown LastRun = iota
	// LastRunComplete: every write of the previous run is on disk: it
	// stopped cleanly (Close syncs everything, in every mode), or it
	// stopped uncleanly under periodic or none on this same boot and
	// syncfs succeeded. Any batch that does not read back is damage.
	LastRunComplete
	// LastRunAcknowledgedDurable: the previous run stopped uncleanly under
	// on-commit. Every acknowledged write is on disk; badger may hold
	// batches whose commit-log frames never were. A batch kept in the
	// commit log is torn only if it lies at or after the point where the
	// replay of its file stopped; a batch lost from badger's value log is
	// torn only if it was written after the last checkpoint (older ones
	// were synced by it). Anything else is damage.
	LastRunAcknowledgedDurable
)

// String returns "unknown", "complete" or "acknowledged-durable".
func (r LastRun) String() string {
	switch r {
	case LastRunUnknown:
		return "unknown"
	case LastRunComplete:
		return "complete"
	case LastRunAcknowledgedDurable:
		return "acknowledged-durable"
	}
	return fmt.Sprintf("LastRun(%d)", uint8(r))
}

// replayState is what open learned replaying the commit log, for telling
// a torn batch from a damaged one under LastRunAcknowledgedDurable.
type replayState struct {
	from        uint64           // the replay marker before the replay
	markVersion uint64           // badger version of that marker (0: none)
	stops       map[uint64]int64 // per replayed file: where its replay stopped
}

// tornOK reports whether a data value that does not read back (v is what
// badger returned, version its version) may be a torn tail the previous
// run never acknowledged, per Options.LastRun. Otherwise it is damage.
func (s *Store) tornOK(v []byte, version uint64) bool {
	switch s.opts.LastRun {
	case LastRunUnknown:
		// Only what no sync covered may have been lost by the crash
		// (a store without a sync mark: anything).
		return !s.syncMarked || version > s.syncedAtOpen
	case LastRunAcknowledgedDurable:
		if isRef(v) {
			r, err := decodeRef(v)
			if err != nil || r.seq < s.replay.from {
				return false // a checkpoint found this file's frames durable
			}
			stop, ok := s.replay.stops[r.seq]
			return ok && r.off >= stop
		}
		return version > s.replay.markVersion
	}
	return false
}

// markDamaged records that the log's stored data is damaged at off: the
// log refuses appends and reads with the error until it is repaired
// (Repair) or reset (ResetAt). The lowest offset wins.
func (l *Log) markDamaged(off uint64, reason string) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.damage == nil || off < l.damage.Offset {
		l.damage = &record.CorruptError{Log: l.id, Offset: off, Reason: reason}
	}
}

// damagedOnOpen marks the log damaged at off and says so at error level.
func (l *Log) damagedOnOpen(off uint64, reason string) {
	l.markDamaged(off, reason)
	l.s.log.Error(record.ErrCorrupt, "stored data of a log is damaged: it is kept as it is and the log is refused until repaired",
		"log", l.id.String(), "offset", off, "reason", reason, "lastRun", l.s.opts.LastRun.String())
}

// Damage returns the damage found in the log's stored data at open, or
// nil. A damaged log refuses appends, trims and reads with it (a
// *record.CorruptError, errors.Is record.ErrCorrupt) until Repair or
// ResetAt.
func (l *Log) Damage() *record.CorruptError {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.damage == nil {
		return nil
	}
	d := *l.damage
	return &d
}

// refuseDamaged returns the log's damage as an error, or nil.
func (l *Log) refuseDamaged() error {
	if d := l.Damage(); d != nil {
		return fmt.Errorf("logstore: %s is refused until repaired: %w", l.id, d)
	}
	return nil
}

// Damaged returns the damage of every log found damaged at open and not
// yet repaired or reset, in log order. Open never drops acknowledged data
// to get past damage: a cluster member gives up its storage id and resets
// these logs; a standalone broker refuses them (docs/operator.md).
func (s *Store) Damaged() []*record.CorruptError {
	var out []*record.CorruptError
	for _, id := range s.Logs() {
		s.mu.Lock()
		l := s.logs[id]
		s.mu.Unlock()
		if l == nil {
			continue
		}
		if d := l.Damage(); d != nil {
			out = append(out, d)
		}
	}
	return out
}

// RepairOptions are the operator's choices for Repair.
type RepairOptions struct {
	// Force truncates a log that has no recorded damage (none found on
	// open, none found by reading every batch). Without it such a repair
	// is refused with ErrNotDamaged.
	Force bool
}

// Repair explicitly truncates a damaged log at off (an operator's
// decision: the records from off on are given up), whatever the committed
// mark, and clears its damage. off must be at or below the first damaged
// offset (found on open, or by reading every batch first), at or above
// the log's start, and at a batch boundary or inside a batch that reads.
// The truncation is synced before Repair returns.
//
// A log without damage is refused with an error wrapping ErrNotDamaged
// unless opts.Force. The floor and its trim tag never move down [TR-2]: a
// cut at or below the committed trim record that set the floor, which
// would read records below an acknowledged trim again, is refused with an
// error wrapping ErrRepairLowersFloor, before anything is changed (such a
// log can only be reset: in a cluster, by the storage-id rotation).
func (l *Log) Repair(off uint64, opts RepairOptions) error {
	found, stored, err := l.repairFacts()
	if err != nil {
		return err
	}
	l.mu.Lock()
	d, err := l.checkRepairLocked(off, opts, found, stored)
	if err != nil {
		l.mu.Unlock()
		return err
	}
	if d != nil {
		// TruncateFrom deletes every stored key from off on; the damaged
		// batch may lie at the tail load computed.
		l.next = max(l.next, d.Offset+1)
	}
	l.committed = min(l.committed, off)
	l.mu.Unlock()
	if err := l.TruncateFrom(off); err != nil {
		return err
	}
	// The trim index may have been left unbuilt at open (the scan met the
	// damage): rebuild it from what is left [TR-5].
	trims, err := l.rebuildTrimIndex()
	if err != nil {
		return fmt.Errorf("logstore: repair %s: rebuild trim index: %w", l.id, err)
	}
	l.mu.Lock()
	l.damage = nil
	l.trims = trims
	l.recomputeFloorLocked()
	l.mu.Unlock()
	if err := l.persistMeta(true); err != nil {
		return err
	}
	l.s.log.Info("repaired log: truncated at the operator's request", "log", l.id.String(), "at", off, "forced", opts.Force)
	return nil
}

// CheckRepair returns the error Repair(off, opts) would refuse with, or
// nil, changing nothing: a caller runs it before steps that must not
// happen for a repair that is refused.
func (l *Log) CheckRepair(off uint64, opts RepairOptions) error {
	found, stored, err := l.repairFacts()
	if err != nil {
		return err
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	_, err = l.checkRepairLocked(off, opts, found, stored)
	return err
}

// repairFacts reads what a repair is judged on: the first damage found by
// reading every batch, and the stored trim index entries.
func (l *Log) repairFacts() (*record.CorruptError, []trimEntry, error) {
	found, err := l.Verify() // damage in the middle is found only by reading
	if err != nil {
		return nil, nil, err
	}
	stored, err := l.storedTrimEntries()
	if err != nil {
		return nil, nil, fmt.Errorf("logstore: repair %s: read trim index: %w", l.id, err)
	}
	return found, stored, nil
}

// checkRepairLocked applies Repair's refusals and returns the damage the
// repair clears (nil if forced on an undamaged log). Caller holds l.mu.
func (l *Log) checkRepairLocked(off uint64, opts RepairOptions, found *record.CorruptError, stored []trimEntry) (*record.CorruptError, error) {
	d := l.damage
	if d == nil {
		d = found
	}
	if d == nil && !opts.Force {
		return nil, fmt.Errorf("logstore: repair %s at %d: no damage recorded or found (force to truncate anyway): %w", l.id, off, ErrNotDamaged)
	}
	if d != nil && off > d.Offset {
		return nil, fmt.Errorf("logstore: repair %s at %d: the damage starts at %d: %w", l.id, off, d.Offset, ErrBadRecord)
	}
	if off < l.start {
		return nil, fmt.Errorf("logstore: repair %s at %d: the log starts at %d: %w", l.id, off, l.start, ErrBadRecord)
	}
	if t, lowers := l.repairLowersFloorLocked(off, stored); lowers {
		return nil, fmt.Errorf("logstore: repair %s at %d: the trim record at %d set the floor to %d; a cut at or below it would read records below an acknowledged trim again: %w",
			l.id, off, t.Offset, t.Floor, ErrRepairLowersFloor)
	}
	return d, nil
}

// repairLowersFloorLocked reports whether truncating at off would lower
// the log's floor or drop its tag, and the trim record that set the floor. It looks at the committed trims of the
// in-memory index and of the stored one (stored: every intact entry, the
// index may be unbuilt when open met damage). Caller holds l.mu.
func (l *Log) repairLowersFloorLocked(off uint64, stored []trimEntry) (trimEntry, bool) {
	var best trimEntry // the first committed trim with the highest floor
	consider := func(t trimEntry) {
		if t.Offset < l.committed && (t.Floor > best.Floor || (t.Floor == best.Floor && t.Offset < best.Offset)) {
			best = t
		}
	}
	for _, t := range l.trims {
		consider(t)
	}
	for _, t := range stored {
		consider(t)
	}
	if l.floorTrim != nil {
		consider(*l.floorTrim)
	}
	// A floor above the base was set by best; cutting at or below it
	// would lower the floor, or drop the tag a read below the start
	// returns (read.go), once the trim index is rebuilt.
	return best, best.Floor > l.base && off <= best.Offset
}

// storedTrimEntries returns every intact entry of the log's stored trim
// index, complete or not.
func (l *Log) storedTrimEntries() ([]trimEntry, error) {
	if err := l.s.enter(); err != nil {
		return nil, err
	}
	defer l.s.leave()
	var out []trimEntry
	err := l.s.db.View(func(txn *badger.Txn) error {
		it := txn.NewIterator(badger.IteratorOptions{Prefix: logPrefix(prefixTrim, l.num)})
		defer it.Close()
		for it.Rewind(); it.Valid(); it.Next() {
			v, err := it.Item().ValueCopy(nil)
			if err != nil {
				return err
			}
			if t, err := decodeTrimEntry(v); err == nil {
				out = append(out, t)
			}
		}
		return nil
	})
	return out, err
}

// Verify reads every stored batch of the log and returns the first damage
// it meets (nil if none): for felix log inspect.
func (l *Log) Verify() (*record.CorruptError, error) {
	if d := l.Damage(); d != nil {
		return d, nil
	}
	if err := l.s.enter(); err != nil {
		return nil, err
	}
	defer l.s.leave()
	l.s.readMu.RLock() // no commit-log file holding a batch goes meanwhile
	defer l.s.readMu.RUnlock()
	info := l.Describe()
	for from := info.Start; from < info.Tail; {
		var res ReadResult
		err := l.s.db.View(func(txn *badger.Txn) error {
			var err error
			res, err = l.readRange(txn, from, info.Tail, true, ReadOptions{MaxRecords: 4096, MaxBytes: 64 << 20})
			return err
		})
		var ce *record.CorruptError
		if errors.As(err, &ce) {
			return ce, nil
		}
		if err != nil {
			return nil, err
		}
		if res.Next <= from {
			return &record.CorruptError{Log: l.id, Offset: from, Reason: "read made no progress"}, nil
		}
		from = res.Next
	}
	return nil, nil
}

// vlogHeaderLen is the header of a badger value-log file: an 8-byte
// encryption key id (0: none) and a 12-byte IV.
const vlogHeaderLen = 20

// shieldValueLog keeps badger's open from truncating the newest value-log
// file. badger cuts that file at the first entry that fails its checksum,
// which after a torn write is the torn tail, but after damage to a synced
// file drops every intact entry behind it, batches of other logs included.
// So open gives badger an empty newest file (a header only: badger deletes
// it at the next open), and the check on open judges each log's batches
// on their own: a torn write reads back as a value that fails its check
// (zeros, or part of an entry) instead of as a missing one, and damage
// stays where it is, to be reported for the log it belongs to.
func shieldValueLog(dir string) error {
	ents, err := os.ReadDir(dir)
	if err != nil {
		if os.IsNotExist(err) {
			return nil
		}
		return fmt.Errorf("logstore: list %s: %w", dir, err)
	}
	var fids []uint64
	for _, e := range ents {
		name, ok := strings.CutSuffix(e.Name(), ".vlog")
		if !ok {
			continue
		}
		if fid, err := strconv.ParseUint(name, 10, 32); err == nil {
			fids = append(fids, fid)
		}
	}
	if len(fids) == 0 {
		return nil
	}
	sort.Slice(fids, func(i, j int) bool { return fids[i] < fids[j] })
	last := fids[len(fids)-1]
	st, err := os.Stat(filepath.Join(dir, fmt.Sprintf("%06d.vlog", last)))
	if err != nil {
		return fmt.Errorf("logstore: value log: %w", err)
	}
	if st.Size() <= vlogHeaderLen {
		return nil // nothing badger could cut
	}
	hdr := binary.BigEndian.AppendUint64(nil, 0) // key id 0: not encrypted
	hdr = append(hdr, make([]byte, vlogHeaderLen-8)...)
	name := fmt.Sprintf("%06d.vlog", last+1)
	if err := writeSynced(filepath.Join(dir, name), hdr); err != nil {
		return fmt.Errorf("logstore: shield the value log: %w", err)
	}
	return syncDir(dir)
}

// writeSynced creates path with data and syncs it.
func writeSynced(path string, data []byte) error {
	f, err := os.OpenFile(path, os.O_CREATE|os.O_EXCL|os.O_WRONLY, 0o644)
	if err != nil {
		return err
	}
	if _, err := f.Write(data); err != nil {
		_ = f.Close()
		return err
	}
	if err := f.Sync(); err != nil {
		_ = f.Close()
		return err
	}
	return f.Close()
}
