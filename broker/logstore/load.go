package logstore

import (
	"bytes"
	"errors"
	"fmt"

	badger "github.com/dgraph-io/badger/v4"

	"felix.dev/felix/broker/record"
)

// load derives the log's state from what is stored: the first and last
// batch give start and tail, the trim index (validated, or rebuilt by a
// scan [TR-5]) and the committed mark give the floor. Batches whose values
// a crash lost are repaired first (repairLost).
func (l *Log) load() error {
	if err := l.repairLost(l.s.gcInterrupted); err != nil {
		return err
	}
	err := l.s.db.View(func(txn *badger.Txn) error {
		prefix := logPrefix(prefixData, l.num)
		it := txn.NewIterator(badger.IteratorOptions{Prefix: prefix, PrefetchValues: false})
		it.Rewind()
		if !it.Valid() {
			it.Close()
			return nil // empty: next = start from the meta
		}
		_, first, err := parseDataKey(it.Item().Key())
		it.Close()
		if err != nil {
			return &record.CorruptError{Log: l.id, Offset: l.start, Reason: err.Error()}
		}
		if first > l.start {
			// A segment deletion stopped between its chunks.
			l.start = first
		}
		rit := txn.NewIterator(badger.IteratorOptions{Prefix: prefix, Reverse: true})
		defer rit.Close()
		rit.Seek(append(append([]byte(nil), prefix...), bytes.Repeat([]byte{0xff}, 17)...))
		if !rit.Valid() {
			return errors.New("logstore: last batch vanished")
		}
		_, keyFirst, err := parseDataKey(rit.Item().Key())
		if err != nil {
			return &record.CorruptError{Log: l.id, Offset: l.start, Reason: err.Error()}
		}
		bfirst, recs, err := l.s.readBatch(rit.Item())
		if err != nil && !errors.Is(err, errCorrupt) {
			return err
		}
		if err == nil && bfirst != keyFirst {
			err = fmt.Errorf("%w: batch says first offset %d", errCorrupt, bfirst)
		}
		if err != nil {
			// Damage, not a torn tail (repairLost dropped those): the
			// tail is unknown past it, and the log is refused.
			l.damagedOnOpen(keyFirst, "last batch: "+err.Error())
			l.next = keyFirst
			return nil
		}
		l.next = keyFirst + uint64(len(recs))
		l.lastEpoch = recs[len(recs)-1].Epoch
		return nil
	})
	if err != nil {
		return fmt.Errorf("logstore: load %s: %w", l.id, err)
	}
	if l.next < l.start {
		l.next = l.start
	}
	l.durable = l.next
	if l.s.opts.AutoCommit || l.committed > l.next {
		l.committed = l.next
	}
	trims, ok, why := l.readTrimIndex()
	if !ok {
		l.s.log.Info("rebuilding trim index", "log", l.id.String(), "reason", why)
		if trims, err = l.rebuildTrimIndex(); err != nil {
			if !errors.Is(err, record.ErrCorrupt) || l.damage == nil {
				return fmt.Errorf("logstore: rebuild trim index of %s: %w", l.id, err)
			}
			trims = nil // the log is refused until repaired, which rebuilds it
		}
	}
	l.trims = trims
	l.recomputeFloorLocked()
	return l.applyKeptFloor()
}

// repairLost repairs the end of the log after a crash that lost values
// badger keeps in its value log, so the log restarts at the prefix that
// reached the disk, as the fsync modes promise.
//
// badger keeps a value of at least its value threshold in its value log
// and only a pointer in its tree (Options.ValueThreshold; by default only
// batches of 1 MiB or more). The tree's write-ahead log and the value log
// are separate files, so after a machine crash the tree may point past the
// end of a value log that did not reach the disk; badger then reads the
// value as empty (it logs the error and returns no value). Smaller values
// live in the tree itself, so a batch after a lost one can survive.
//
// Which batches the walk reads depends on what the previous run left
// (Options.LastRun). After a stop that may have lost writes
// (LastRunUnknown: periodic or none and a machine crash, or a caller that
// cannot tell), a crash keeps an arbitrary subset of the writes no sync
// covered: a disk's writeback need not keep their order, so the newest
// value can read back while an older one reads as zeros or fails its
// checksum. The walk then reads every batch newer than the sync mark the
// previous run left (syncmark.go), newest first, down to and including
// the newest batch a sync covered: about
// the writes of one or two sync intervals under periodic, everything
// since the last sync under none. A lost batch no sync covered is a torn
// tail; one a sync covered is damage.
//
// Otherwise (LastRunComplete, LastRunAcknowledgedDurable, or a store
// written before the sync mark existed, whose lost batches are all taken
// for a torn tail, as they always were) the walk only
// looks for what the commit log's replay or a rewrite left behind:
// badger writes transactions to the value log in commit order, one
// transaction's entries together, so it goes back from the newest
// value-log batch until it passes the transaction of the first one that
// reads; on a clean store it reads one or a few values.
//
// The walk starts at the log's newest value-log batch, named by the
// marker written in the same transaction (vlogMarkKey); batches kept in
// the tree always read back (badger checks its write-ahead log). A lost
// value whose older version still reads (a batch rewritten by a
// truncation that did not complete, or moved by value-log garbage
// collection) is restored from it; the oldest lost value without one cuts
// the log there: it and every later batch are dropped. A lost value that
// may not be a torn tail (Store.tornOK) is damage, reported and kept. full
// walks the whole log (after a crash during value-log garbage collection,
// which rewrites values anywhere in the log).
func (l *Log) repairLost(full bool) error {
	var cut []byte // the oldest batch whose value was lost for good
	var restore []kv
	var damaged []uint64 // first offsets of damaged batches (Options.LastRun)
	err := l.s.db.View(func(txn *badger.Txn) error {
		prefix := logPrefix(prefixData, l.num)
		seek := append(append([]byte(nil), prefix...), bytes.Repeat([]byte{0xff}, 16)...)
		if !full {
			item, err := txn.Get(vlogMarkKey(l.num))
			if errors.Is(err, badger.ErrKeyNotFound) {
				return nil // no batch ever went to the value log
			}
			if err != nil {
				return err
			}
			mv, err := item.ValueCopy(nil)
			if err != nil {
				return err
			}
			if newest, err := decodeVlogMark(mv); err == nil && newest >= l.base {
				seek = dataKey(l.num, l.segment(newest), newest)
			} // else: walk from the tail
		}
		rit := txn.NewIterator(badger.IteratorOptions{Prefix: prefix, Reverse: true, PrefetchValues: false})
		defer rit.Close()
		// After a stop that may have lost writes the walk covers every
		// batch no sync covered, down to the newest one a sync did. A
		// store from before the sync mark keeps the walk it had: what
		// it synced is not known, and walking its whole log would take
		// damage anywhere in it for a torn tail.
		bySync := l.s.opts.LastRun == LastRunUnknown && l.s.syncMarked
		var stop uint64 // version of the newest value-log batch that read back
		for rit.Seek(seek); rit.Valid(); rit.Next() {
			item := rit.Item()
			if !full && !bySync && stop != 0 && item.Version() < stop {
				return nil
			}
			v, err := item.ValueCopy(nil)
			if err != nil {
				return err
			}
			lost, err := l.s.lostValue(v, item.ValueSize())
			if err != nil {
				return err
			}
			if !lost && !isRef(v) && len(v) > 0 {
				// A value that reads but fails its check: damage, or,
				// where a crash may have torn it, zeros or a partial
				// write in the value log (open does not let badger cut
				// its newest value-log file: shieldValueLog).
				_, _, err := batchHeader(v)
				lost = errors.Is(err, errCorrupt)
			}
			switch {
			case lost && !l.s.tornOK(v, item.Version()):
				// Acknowledged data that does not read back: damage,
				// reported and kept, never dropped (nor replaced by an
				// older copy, which a synced rewrite superseded).
				_, off, _ := parseDataKey(item.Key())
				damaged = append(damaged, off)
			case lost:
				k := item.KeyCopy(nil)
				old, err := l.s.olderValue(txn, k, item.Version())
				if err != nil {
					return err
				}
				if old != nil {
					restore = append(restore, kv{k, old})
				} else {
					cut = k
				}
			case stop == 0 && (int64(len(v)) >= l.s.vlogThreshold || isRef(v)):
				stop = item.Version()
			}
			if !full && bySync && item.Version() <= l.s.syncedAtOpen {
				// A sync covered this batch, and so every older one: a
				// log's versions grow with its offsets (a truncation's
				// rewrite is newer than what it keeps, and everything
				// after it newer still).
				return nil
			}
		}
		return nil
	})
	if err != nil {
		return fmt.Errorf("logstore: load %s: check value log: %w", l.id, err)
	}
	for _, off := range damaged {
		if cut != nil {
			if _, from, _ := parseDataKey(cut); off >= from {
				continue // inside the torn tail dropped below
			}
		}
		l.damagedOnOpen(off, "stored batch does not read back")
	}
	if cut == nil && len(restore) == 0 {
		return nil
	}
	var drop [][]byte
	if cut != nil {
		err = l.s.db.View(func(txn *badger.Txn) error {
			it := txn.NewIterator(badger.IteratorOptions{Prefix: logPrefix(prefixData, l.num), PrefetchValues: false})
			defer it.Close()
			for it.Seek(cut); it.Valid(); it.Next() {
				drop = append(drop, it.Item().KeyCopy(nil))
			}
			return nil
		})
		if err != nil {
			return fmt.Errorf("logstore: load %s: %w", l.id, err)
		}
		_, from, _ := parseDataKey(cut)
		l.s.log.Info("dropping batches whose values did not reach the disk before a crash",
			"log", l.id.String(), "from", from, "batches", len(drop), "lastRun", l.s.opts.LastRun.String())
	}
	if len(restore) > 0 {
		l.s.log.Info("restoring batches from their previous copies: a rewrite did not reach the disk before a crash",
			"log", l.id.String(), "batches", len(restore))
	}
	// Newest first, so a crash part way leaves a prefix.
	err = l.applyInOrder(func(add func(k, v []byte, del bool) error) error {
		for i := len(drop) - 1; i >= 0; i-- {
			if err := add(drop[i], nil, true); err != nil {
				return err
			}
		}
		for _, e := range restore {
			if cut == nil || string(e.k) < string(cut) {
				if err := add(e.k, e.v, false); err != nil {
					return err
				}
			}
		}
		return nil
	})
	if err == nil {
		err = l.s.sync()
	}
	if err != nil {
		return fmt.Errorf("logstore: load %s: repair lost batches: %w", l.id, err)
	}
	return nil
}

// lostValue reports whether a stored data value (of size bytes in badger)
// was lost to a crash: badger reads a value-log value that did not reach
// the disk as empty, and a ref whose frame did not as a batch that does
// not check.
func (s *Store) lostValue(v []byte, size int64) (bool, error) {
	if len(v) == 0 {
		return size > 0, nil
	}
	if !isRef(v) {
		return false, nil
	}
	b, err := s.resolve(v)
	if err == nil {
		_, _, err = batchHeader(b)
	}
	if errors.Is(err, errCorrupt) {
		return true, nil
	}
	return false, err
}

// olderValue returns the newest readable value of key older than version,
// or nil if there is none (or the key was deleted before it).
func (s *Store) olderValue(txn *badger.Txn, key []byte, version uint64) ([]byte, error) {
	it := txn.NewKeyIterator(key, badger.IteratorOptions{AllVersions: true})
	defer it.Close()
	for it.Rewind(); it.Valid(); it.Next() {
		item := it.Item()
		if item.Version() >= version {
			continue
		}
		if item.IsDeletedOrExpired() {
			return nil, nil
		}
		v, err := item.ValueCopy(nil)
		if err != nil {
			return nil, err
		}
		lost, err := s.lostValue(v, item.ValueSize())
		if err != nil {
			return nil, err
		}
		if len(v) > 0 && !lost {
			return v, nil
		}
	}
	return nil, nil
}

// readTrimIndex reads the trim index and says whether it is complete:
// marker present with the entry count, every entry intact and within
// [start, tail).
func (l *Log) readTrimIndex() (trims []trimEntry, ok bool, why string) {
	err := l.s.db.View(func(txn *badger.Txn) error {
		item, err := txn.Get(trimMarkKey(l.num))
		if err != nil {
			why = "marker: " + err.Error()
			return nil
		}
		mv, err := item.ValueCopy(nil)
		if err != nil {
			return err
		}
		count, err := decodeTrimMark(mv)
		if err != nil {
			why = "marker: " + err.Error()
			return nil
		}
		it := txn.NewIterator(badger.IteratorOptions{Prefix: logPrefix(prefixTrim, l.num)})
		defer it.Close()
		for it.Rewind(); it.Valid(); it.Next() {
			off, err := parseTrimKey(it.Item().Key())
			if err != nil {
				why = "entry key: " + err.Error()
				return nil
			}
			v, err := it.Item().ValueCopy(nil)
			if err != nil {
				return err
			}
			t, err := decodeTrimEntry(v)
			if err != nil {
				why = fmt.Sprintf("entry %d: %v", off, err)
				return nil
			}
			if t.Offset != off || off < l.start || off >= l.next {
				why = fmt.Sprintf("entry %d out of place", off)
				return nil
			}
			trims = append(trims, t)
		}
		if uint64(len(trims)) != count {
			why = fmt.Sprintf("marker counts %d entries, found %d", count, len(trims))
			return nil
		}
		ok = true
		return nil
	})
	if err != nil {
		return nil, false, err.Error()
	}
	return trims, ok, why
}

// rebuildTrimIndex scans the log's records for trim records and rewrites
// the index and its marker [TR-5].
func (l *Log) rebuildTrimIndex() ([]trimEntry, error) {
	var trims []trimEntry
	for from := l.start; from < l.next; {
		var res ReadResult
		err := l.s.db.View(func(txn *badger.Txn) error {
			var err error
			res, err = l.readRange(txn, from, l.next, true, ReadOptions{MaxRecords: 4096})
			return err
		})
		if err != nil {
			return nil, err
		}
		for i := range res.Records {
			if r := &res.Records[i]; r.Kind == record.KindTrim {
				trims = append(trims, trimEntryOf(r))
			}
		}
		from = res.Next
	}
	wb := l.s.db.NewWriteBatch()
	defer wb.Cancel()
	var stale [][]byte
	err := l.s.db.View(func(txn *badger.Txn) error {
		it := txn.NewIterator(badger.IteratorOptions{Prefix: logPrefix(prefixTrim, l.num), PrefetchValues: false})
		defer it.Close()
		for it.Rewind(); it.Valid(); it.Next() {
			stale = append(stale, it.Item().KeyCopy(nil))
		}
		return nil
	})
	if err != nil {
		return nil, err
	}
	keep := map[uint64]bool{}
	for _, t := range trims {
		keep[t.Offset] = true
	}
	for _, k := range stale {
		if off, err := parseTrimKey(k); err == nil && keep[off] {
			continue
		}
		if err := wb.Delete(k); err != nil {
			return nil, err
		}
	}
	for _, t := range trims {
		if err := wb.Set(trimKey(l.num, t.Offset), encodeTrimEntry(t)); err != nil {
			return nil, err
		}
	}
	if err := wb.Set(trimMarkKey(l.num), encodeTrimMark(uint64(len(trims)))); err != nil {
		return nil, err
	}
	if err := wb.Flush(); err != nil {
		return nil, err
	}
	return trims, nil
}
