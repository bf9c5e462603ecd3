package logstore

import (
	"encoding/binary"
	"errors"
	"fmt"
	"os"
	"path/filepath"

	badger "github.com/dgraph-io/badger/v4"

	"felix.dev/felix/broker/record"
)

// How long a commit-log file holding batches lives (ref.go).
//
// The writer records, in the transaction that stores a ref, the highest
// first offset of the log's batches in the file (filePinKey); Store.pins
// mirrors those keys. A file can go once every log pinning it has deleted
// every batch at or below its pin: the log's start (a segment boundary
// after a deletion, the new base after a reset) is above the pin. Keys
// are deleted first and synced before a file is removed, so no crash can
// bring back a ref into a removed file. A log whose batches were
// truncated keeps its pin until its start passes it: that keeps a file
// longer, never shorter, than its refs.

// loadPins reads the pin keys.
func loadPins(db *badger.DB) (map[uint64]map[uint32]uint64, error) {
	pins := map[uint64]map[uint32]uint64{}
	err := db.View(func(txn *badger.Txn) error {
		it := txn.NewIterator(badger.IteratorOptions{Prefix: []byte{prefixFilePin}})
		defer it.Close()
		for it.Rewind(); it.Valid(); it.Next() {
			seq, num, err := parseFilePinKey(it.Item().Key())
			if err != nil {
				return fmt.Errorf("%w: commit-log pin key %x", errCorrupt, it.Item().Key())
			}
			var first uint64
			err = it.Item().Value(func(v []byte) error {
				if len(v) != 8 {
					return fmt.Errorf("%w: commit-log pin of %d bytes", errCorrupt, len(v))
				}
				first = binary.BigEndian.Uint64(v)
				return nil
			})
			if err != nil {
				return err
			}
			addPin(pins, seq, num, first)
		}
		return nil
	})
	if err != nil {
		return nil, fmt.Errorf("logstore: read commit-log pins: %w", err)
	}
	return pins, nil
}

// addPin raises the pin of log num in file seq to first; it reports
// whether that changed the pin.
func addPin(pins map[uint64]map[uint32]uint64, seq uint64, num uint32, first uint64) bool {
	logs := pins[seq]
	if logs == nil {
		logs = map[uint32]uint64{}
		pins[seq] = logs
	}
	if old, ok := logs[num]; ok && old >= first {
		return false
	}
	logs[num] = first
	return true
}

// retireReplayed runs on open, after the replay: every file found is in
// badger now, so replays start at next from here on, and the files no ref
// points into are removed.
func retireReplayed(db *badger.DB, dir string, next uint64, files []clFile, pins map[uint64]map[uint32]uint64) error {
	if len(files) == 0 {
		return nil
	}
	err := db.Update(func(txn *badger.Txn) error { return txn.Set(replayMarkKey(), encodeReplayMark(next)) })
	if err == nil {
		err = db.Sync()
	}
	if err != nil {
		return fmt.Errorf("logstore: commit-log replay marker: %w", err)
	}
	for _, f := range files {
		if !f.legacy && pins[f.seq] != nil {
			continue
		}
		if err := os.Remove(filepath.Join(dir, f.name())); err != nil {
			return fmt.Errorf("logstore: remove replayed commit log: %w", err)
		}
	}
	return syncDir(dir)
}

// keepsRefs reports whether batches written to a new commit-log file are
// kept only there: Options.CommitLogValues, with fewer than CommitLogFiles
// files kept. Caller holds wmu (or the store is opening).
func (s *Store) keepsRefs() bool {
	return s.opts.CommitLogValues && len(s.pins) < s.opts.CommitLogFiles
}

// pinned reports whether refs may point into commit-log file seq. The
// commit log asks at a rotation and on close, with wmu held (or the
// writer stopped).
func (s *Store) pinned(seq uint64) bool { return s.pins[seq] != nil }

// retireFilesLocked removes the commit-log files no log pins any more
// (none is the current file). Caller holds wmu.
func (s *Store) retireFilesLocked() error {
	if len(s.pins) == 0 {
		return nil
	}
	current, open := uint64(0), s.cl != nil
	if open {
		current = s.cl.current()
	}
	s.mu.Lock()
	byNum := make(map[uint32]*Log, len(s.logs))
	for _, l := range s.logs {
		byNum[l.num] = l
	}
	s.mu.Unlock()
	var gone []uint64
	for seq, logs := range s.pins {
		if open && seq >= current {
			continue
		}
		held := false
		for num, first := range logs {
			if l := byNum[num]; l != nil {
				l.mu.Lock()
				held = held || l.start <= first
				l.mu.Unlock()
			}
		}
		if !held {
			gone = append(gone, seq)
		}
	}
	if len(gone) == 0 {
		return nil
	}
	// The deletions that released them reach the disk before the files
	// leave it: a ref that came back after a crash would name a missing
	// file.
	if err := s.sync(); err != nil {
		err = fmt.Errorf("logstore: sync before removing commit logs: %w", err)
		s.fail(err)
		return err
	}
	dir := filepath.Join(s.opts.Dir, commitLogDir)
	var errs []error
	s.readMu.Lock()
	for _, seq := range gone {
		s.refs.forget(seq)
		if err := os.Remove(filepath.Join(dir, commitLogName(seq))); err != nil && !os.IsNotExist(err) {
			errs = append(errs, err)
		}
	}
	s.readMu.Unlock()
	if err := errors.Join(errs...); err != nil {
		return fmt.Errorf("logstore: remove retired commit logs: %w", err)
	}
	if err := syncDir(dir); err != nil {
		return err
	}
	err := s.db.Update(func(txn *badger.Txn) error {
		for _, seq := range gone {
			for num := range s.pins[seq] {
				if err := txn.Delete(filePinKey(seq, num)); err != nil {
					return err
				}
			}
		}
		return nil
	})
	if err != nil {
		return fmt.Errorf("logstore: remove commit-log pins: %w", err)
	}
	for _, seq := range gone {
		delete(s.pins, seq)
	}
	s.log.V(1).Info("removed commit-log files no batch needs", "files", len(gone))
	return nil
}

// readBatch returns a data key's batch, decoded, read from its commit-log
// file when badger holds a ref to it. The caller holds readMu shared, or
// wmu (no file is removed under it). Damage, wherever the batch is kept,
// is errCorrupt; any other error is the store's.
func (s *Store) readBatch(item *badger.Item) (first uint64, recs []record.Record, err error) {
	v, err := item.ValueCopy(nil)
	if err == nil {
		v, err = s.resolve(v)
	}
	if err != nil {
		return 0, nil, err
	}
	return decodeBatch(v)
}

// resolve returns the batch a stored data value holds or names.
func (s *Store) resolve(v []byte) ([]byte, error) {
	if !isRef(v) {
		return v, nil
	}
	r, err := decodeRef(v)
	if err != nil {
		return nil, err
	}
	if s.cl != nil {
		// A batch committed to badger is readable before its frame is
		// written (LastEpochAt reads up to the tail, not the durable
		// tail): wait for the syncer, at most one sync.
		if err := s.cl.waitDurable(r.seq, r.off+int64(r.n)); err != nil {
			return nil, err
		}
	}
	return s.refs.read(r)
}

// storedSize is the size of a data key's batch, wherever it is kept.
func storedSize(item *badger.Item) int64 {
	if item.ValueSize() != refLen {
		return item.ValueSize()
	}
	var n int64 = refLen
	_ = item.Value(func(v []byte) error {
		if r, err := decodeRef(v); err == nil {
			n = int64(r.n)
		}
		return nil
	})
	return n
}

// markRefsFormat rewrites every log meta still at metaVersion as
// metaRefsVersion, synced, before the store writes its first ref.
func markRefsFormat(db *badger.DB) error {
	wb := db.NewWriteBatch()
	defer wb.Cancel()
	n := 0
	err := db.View(func(txn *badger.Txn) error {
		it := txn.NewIterator(badger.IteratorOptions{Prefix: []byte{prefixCatalog}})
		defer it.Close()
		for it.Rewind(); it.Valid(); it.Next() {
			v, err := it.Item().ValueCopy(nil)
			if err != nil {
				return err
			}
			if len(v) == 0 || v[0] != metaVersion {
				continue
			}
			v[0] = metaRefsVersion
			if err := wb.Set(it.Item().KeyCopy(nil), v); err != nil {
				return err
			}
			n++
		}
		return nil
	})
	if err == nil && n > 0 {
		if err = wb.Flush(); err == nil {
			err = db.Sync()
		}
	}
	if err != nil {
		return fmt.Errorf("logstore: mark the store as keeping batches in its commit log: %w", err)
	}
	return nil
}
