package logstore

import (
	"errors"
	"fmt"

	badger "github.com/dgraph-io/badger/v4"

	"felix.dev/felix/broker/record"
)

// Read returns data records from `from` (or FromEarliest / FromLatest),
// bounded by opts, skipping bookkeeping records (trim, fence) while Next
// advances past them. A start below the readable start (the floor, or the
// first stored offset if higher) is refused with *record.CursorTooOldError
// carrying the readable start and, if opts.WithTrimTag, the headers of the
// trim that set the floor [TR-4]. FromEarliest resolves to the readable
// start and so is never refused. A start above the tail is refused with
// ErrBeyondTail. A record failing its checksum is returned as
// *record.CorruptError, never skipped.
func (l *Log) Read(from uint64, opts ReadOptions) (ReadResult, error) {
	return l.read(from, opts, false)
}

// ReadRaw is Read for replication: it returns every kind (trim and fence
// records included, with their Floor) and is refused only below the first
// stored offset (the floor does not apply: followers copy what is stored).
func (l *Log) ReadRaw(from uint64, opts ReadOptions) (ReadResult, error) {
	return l.read(from, opts, true)
}

func (l *Log) read(from uint64, opts ReadOptions, raw bool) (ReadResult, error) {
	if err := l.refuseDamaged(); err != nil {
		return ReadResult{}, err
	}
	if err := l.s.enter(); err != nil {
		return ReadResult{}, err
	}
	defer l.s.leave()
	l.s.readMu.RLock() // no commit-log file holding a batch goes meanwhile
	defer l.s.readMu.RUnlock()
	// Appends publish their tail after they commit; deletions and
	// truncations change the state before they commit. So: the end comes
	// from state read before the snapshot, the start from state read after.
	l.mu.Lock()
	end := l.durable
	l.mu.Unlock()
	txn := l.s.db.NewTransaction(false)
	defer txn.Discard()
	l.mu.Lock()
	lowest := max(l.start, l.floor)
	if raw {
		lowest = l.start
	}
	var tag []record.Header
	if opts.WithTrimTag && l.floorTrim != nil && l.floorTrim.Offset >= l.start {
		tag = cloneHeaders(l.floorTrim.Headers)
	}
	next := l.next
	end = min(end, l.durable)
	l.mu.Unlock()
	switch from {
	case FromEarliest:
		from = lowest
	case FromLatest:
		from = end
	}
	if from < lowest {
		return ReadResult{}, &record.CursorTooOldError{From: from, Floor: lowest, TrimHeaders: tag}
	}
	if from > next {
		if from == lowest {
			// A floor ResetAt kept above the offset it reset to [TR-5]:
			// nothing is readable until the log reaches it.
			return ReadResult{Next: from}, nil
		}
		return ReadResult{}, fmt.Errorf("logstore: read %s from %d above tail %d: %w", l.id, from, next, ErrBeyondTail)
	}
	if opts.UpTo != 0 && opts.UpTo < end {
		end = opts.UpTo
	}
	return l.readRange(txn, from, end, raw, opts)
}

// readRange reads [from, end) from the snapshot txn. The caller checked
// that every offset in range is in the snapshot.
func (l *Log) readRange(txn *badger.Txn, from, end uint64, raw bool, opts ReadOptions) (ReadResult, error) {
	res := ReadResult{Next: from}
	if from >= end {
		return res, nil
	}
	prefix := logPrefix(prefixData, l.num)
	it := txn.NewIterator(badger.IteratorOptions{Prefix: prefix})
	defer it.Close()
	seek := dataKey(l.num, l.segment(from), from)
	it.Seek(seek)
	if !it.Valid() || !keyStartsAt(it.Item().Key(), from) {
		// The batch holding `from` starts before it: find the last key at
		// or below the seek key.
		rit := txn.NewIterator(badger.IteratorOptions{Prefix: prefix, Reverse: true})
		rit.Seek(seek)
		if rit.Valid() {
			k := rit.Item().KeyCopy(nil)
			rit.Close()
			it.Seek(k)
		} else {
			rit.Close()
		}
	}
	next := from
	bytes := 0
	full := false
	for ; it.Valid() && next < end && !full; it.Next() {
		item := it.Item()
		_, keyFirst, err := parseDataKey(item.Key())
		if err != nil {
			return ReadResult{}, &record.CorruptError{Log: l.id, Offset: next, Reason: fmt.Sprintf("data key %x: %v", item.Key(), err)}
		}
		if keyFirst > next {
			return ReadResult{}, &record.CorruptError{Log: l.id, Offset: next, Reason: fmt.Sprintf("records %d..%d missing", next, keyFirst-1)}
		}
		first, recs, err := l.s.readBatch(item)
		if err != nil && !errors.Is(err, errCorrupt) {
			return ReadResult{}, fmt.Errorf("logstore: read %s at %d: %w", l.id, keyFirst, err)
		}
		if err != nil {
			return ReadResult{}, &record.CorruptError{Log: l.id, Offset: keyFirst, Reason: err.Error()}
		}
		if first != keyFirst {
			return ReadResult{}, &record.CorruptError{Log: l.id, Offset: keyFirst, Reason: fmt.Sprintf("batch says first offset %d", first)}
		}
		if first+uint64(len(recs)) <= next {
			continue
		}
		for _, r := range recs[next-first:] {
			if r.Offset >= end {
				break
			}
			if !raw && r.Kind.Bookkeeping() {
				next = r.Offset + 1
				continue
			}
			if opts.MaxRecords > 0 && len(res.Records) >= opts.MaxRecords {
				full = true
				break
			}
			sz := recordSize(&r)
			if opts.MaxBytes > 0 && len(res.Records) > 0 && bytes+sz > opts.MaxBytes {
				full = true
				break
			}
			if !raw {
				r.Floor = 0
			}
			res.Records = append(res.Records, r)
			bytes += sz
			next = r.Offset + 1
			if opts.MaxRecords > 0 && len(res.Records) >= opts.MaxRecords {
				full = true
				break
			}
		}
	}
	if !full && next < end {
		return ReadResult{}, &record.CorruptError{Log: l.id, Offset: next, Reason: fmt.Sprintf("records %d..%d missing", next, end-1)}
	}
	res.Next = next
	return res, nil
}

func keyStartsAt(k []byte, off uint64) bool {
	_, first, err := parseDataKey(k)
	return err == nil && first == off
}
