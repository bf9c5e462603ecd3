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
// scan [TR-5]) and the committed mark give the floor.
func (l *Log) load() error {
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
		v, err := rit.Item().ValueCopy(nil)
		if err != nil {
			return err
		}
		bfirst, recs, err := decodeBatch(v)
		if err != nil {
			return &record.CorruptError{Log: l.id, Offset: keyFirst, Reason: "last batch: " + err.Error()}
		}
		if bfirst != keyFirst {
			return &record.CorruptError{Log: l.id, Offset: keyFirst, Reason: fmt.Sprintf("last batch says first offset %d", bfirst)}
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
			return fmt.Errorf("logstore: rebuild trim index of %s: %w", l.id, err)
		}
	}
	l.trims = trims
	l.recomputeFloorLocked()
	return nil
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
