package logstore

import (
	"errors"
	"fmt"

	badger "github.com/dgraph-io/badger/v4"

	"felix.dev/felix/broker/record"
)

// TruncateFrom drops every record at offset off and above: a follower's
// divergent, uncommitted suffix. Truncating below the committed mark is
// refused with ErrTruncateCommitted. Trim records in the dropped suffix
// leave no floor behind (they were never committed, so they never moved
// it) and leave the trim index. off at or above the tail changes nothing.
// The truncation is synced before TruncateFrom returns, so a crash cannot
// bring the suffix back. Acknowledgements of appends in the dropped suffix
// still in flight do not advance the durable tail.
func (l *Log) TruncateFrom(off uint64) error {
	if err := l.s.enter(); err != nil {
		return err
	}
	defer l.s.leave()
	l.s.wmu.Lock()
	defer l.s.wmu.Unlock()
	l.mu.Lock()
	next, committed, start := l.next, l.committed, l.start
	l.mu.Unlock()
	if off >= next {
		return nil
	}
	if off < committed || off < start {
		return fmt.Errorf("logstore: truncate %s from %d, committed up to %d: %w", l.id, off, committed, ErrTruncateCommitted)
	}
	// No commit log replay may bring back what this removes.
	if err := l.s.checkpointLocked(); err != nil {
		return err
	}
	return l.truncateLocked(off, next, start)
}

// truncateLocked is TruncateFrom's work once the commit log is
// checkpointed: next and start are the log's tail and start. Caller holds
// wmu.
func (l *Log) truncateLocked(off, next, start uint64) error {
	// Plan against the current data.
	var dels [][]byte
	var rewrite *kv
	var lastEpoch uint64
	err := l.s.db.View(func(txn *badger.Txn) error {
		prefix := logPrefix(prefixData, l.num)
		seek := dataKey(l.num, l.segment(off), off)
		rit := txn.NewIterator(badger.IteratorOptions{Prefix: prefix, Reverse: true})
		rit.Seek(seek)
		if rit.Valid() {
			_, first, err := parseDataKey(rit.Item().Key())
			if err != nil {
				rit.Close()
				return &record.CorruptError{Log: l.id, Offset: off, Reason: err.Error()}
			}
			if first < off {
				_, recs, err := l.s.readBatch(rit.Item())
				if err != nil && !errors.Is(err, errCorrupt) {
					rit.Close()
					return err
				}
				if err != nil {
					rit.Close()
					return &record.CorruptError{Log: l.id, Offset: first, Reason: err.Error()}
				}
				keep := recs[:min(uint64(len(recs)), off-first)]
				rewrite = &kv{rit.Item().KeyCopy(nil), encodeBatch(first, keep)}
				lastEpoch = keep[len(keep)-1].Epoch
			}
		}
		rit.Close()
		it := txn.NewIterator(badger.IteratorOptions{Prefix: prefix})
		defer it.Close()
		for it.Seek(seek); it.Valid(); it.Next() {
			dels = append(dels, it.Item().KeyCopy(nil))
		}
		return nil
	})
	if err != nil {
		return fmt.Errorf("logstore: truncate %s: %w", l.id, err)
	}
	if rewrite == nil && off > start {
		// The record before off ends an earlier batch.
		if lastEpoch, err = l.epochBefore(off); err != nil {
			return err
		}
	}
	// State first, then the badger changes (see read).
	l.mu.Lock()
	l.next = off
	l.durable = min(l.durable, off)
	l.gen++
	l.lastEpoch = lastEpoch
	kept := l.trims[:0:0]
	var dropped []trimEntry
	for _, t := range l.trims {
		if t.Offset < off {
			kept = append(kept, t)
		} else {
			dropped = append(dropped, t)
		}
	}
	l.trims = kept
	l.wakeLocked()
	l.mu.Unlock()

	// Delete from the end backwards so a crash part way leaves a dense
	// prefix; rewrite the cut batch last.
	err = l.applyInOrder(func(add func(k, v []byte, del bool) error) error {
		for _, t := range dropped {
			if err := add(trimKey(l.num, t.Offset), nil, true); err != nil {
				return err
			}
		}
		if len(dropped) > 0 {
			if err := add(trimMarkKey(l.num), encodeTrimMark(uint64(len(kept))), false); err != nil {
				return err
			}
		}
		for i := len(dels) - 1; i >= 0; i-- {
			if err := add(dels[i], nil, true); err != nil {
				return err
			}
		}
		if rewrite != nil {
			return add(rewrite.k, rewrite.v, false)
		}
		return nil
	})
	if err == nil {
		err = l.s.sync()
	}
	if err != nil {
		err = fmt.Errorf("logstore: truncate %s from %d: %w", l.id, off, err)
		l.s.fail(err)
		return err
	}
	l.s.log.V(1).Info("truncated log", "log", l.id.String(), "from", off, "tail", next)
	return nil
}

func (l *Log) epochBefore(off uint64) (uint64, error) {
	var e uint64
	err := l.s.db.View(func(txn *badger.Txn) error {
		res, err := l.readRange(txn, off-1, off, true, ReadOptions{MaxRecords: 1})
		if err != nil {
			return err
		}
		if len(res.Records) != 1 {
			return &record.CorruptError{Log: l.id, Offset: off - 1, Reason: "record missing"}
		}
		e = res.Records[0].Epoch
		return nil
	})
	return e, err
}

// applyInOrder runs changes in badger transactions of bounded size,
// committing each in order.
func (l *Log) applyInOrder(changes func(add func(k, v []byte, del bool) error) error) error {
	txn := l.s.db.NewTransaction(true)
	n := 0
	add := func(k, v []byte, del bool) error {
		if n >= maxTxnEntries/2 {
			if err := txn.Commit(); err != nil {
				return err
			}
			txn = l.s.db.NewTransaction(true)
			n = 0
		}
		n++
		if del {
			return txn.Delete(k)
		}
		return txn.Set(k, v)
	}
	if err := changes(add); err != nil {
		txn.Discard()
		return err
	}
	return txn.Commit()
}

// ResetAt drops every record the log stores, whatever the committed mark,
// and makes it an empty log beginning at off: Start == Tail == Durable ==
// off, Committed = max(old Committed, off) (the mark never moves back). A
// follower uses it when the leader's first stored offset is above anything
// the follower can match (the leader deleted the segments in between), so
// the follower copies the leader from there.
//
// The trim index is emptied with the records (its entries describe records
// that are gone), but the floor and the entry of the trim that set it are
// kept [TR-5]: they were committed, so they hold for the shard whatever the
// records held here, and the floor never moves back. They are persisted
// apart from the records (keptFloorKey) and survive a crash. The readable
// start, max(Floor, Start), is therefore at least off, and a read below it
// is refused with *record.CursorTooOldError carrying the floor-setting
// trim's headers as long as that trim is at or above off (a reset below
// the committed mark). A follower resetting to a leader's start usually
// holds a floor set by a trim below off: its refusals carry no tag, as
// after a segment deletion, until the leader's floor-setting trim, copied
// after the reset, commits here (the replica serves no reader before:
// replication serves reads only at a leader whose fence is committed).
// Trims copied and committed later raise the floor as usual. off below
// the log's Base, or a reserved offset, is refused with an error wrapping
// ErrBadRecord.
//
// Durability, in every fsync mode: the commit log is checkpointed first and
// the deletions are synced before ResetAt returns, so a crash after it
// returns never brings back a dropped record. A crash part way leaves
// either the old log or a dense suffix of it (deletion runs oldest first),
// never a hole. Appends to the log that are in flight when it runs are
// acknowledged but do not advance the durable tail (as for TruncateFrom).
// Wait and WaitCommitted callers are woken.
func (l *Log) ResetAt(off uint64) error {
	if off < l.base || off >= FromEarliest {
		return fmt.Errorf("logstore: reset %s at %d: base is %d: %w", l.id, off, l.base, ErrBadRecord)
	}
	if err := l.s.enter(); err != nil {
		return err
	}
	defer l.s.leave()
	l.s.wmu.Lock()
	defer l.s.wmu.Unlock()
	if err := l.s.failure(); err != nil {
		return fmt.Errorf("logstore: reset %s: store failed earlier: %w", l.id, err)
	}
	// No commit log replay may bring back what this removes.
	if err := l.s.checkpointLocked(); err != nil {
		return err
	}
	var data, trims [][]byte
	err := l.s.db.View(func(txn *badger.Txn) error {
		for _, p := range []struct {
			prefix byte
			keys   *[][]byte
		}{{prefixData, &data}, {prefixTrim, &trims}} {
			it := txn.NewIterator(badger.IteratorOptions{Prefix: logPrefix(p.prefix, l.num), PrefetchValues: false})
			for it.Rewind(); it.Valid(); it.Next() {
				*p.keys = append(*p.keys, it.Item().KeyCopy(nil))
			}
			it.Close()
		}
		return nil
	})
	if err != nil {
		return fmt.Errorf("logstore: reset %s: %w", l.id, err)
	}
	// State first, then the badger changes (see read).
	l.metaMu.Lock()
	defer l.metaMu.Unlock()
	l.mu.Lock()
	oldStart, oldNext := l.start, l.next
	l.start, l.next, l.durable = off, off, off
	l.committed = max(l.committed, off)
	l.trims = nil
	l.lastEpoch = 0
	l.gen++
	l.damage = nil // nothing of the damaged data is left
	// The floor and its trim stay [TR-5]: kept apart from the trim index,
	// which goes with the records.
	var kept []byte
	if l.floor > l.base {
		kept = encodeTrimEntry(l.keptFloorLocked())
	}
	meta := l.metaLocked()
	l.wakeLocked()
	l.mu.Unlock()

	err = l.applyInOrder(func(add func(k, v []byte, del bool) error) error {
		// Oldest first: a crash part way leaves a dense suffix, and load
		// takes the first stored key as the start. The meta goes last.
		for _, k := range data {
			if err := add(k, nil, true); err != nil {
				return err
			}
		}
		for _, k := range trims {
			if err := add(k, nil, true); err != nil {
				return err
			}
		}
		if err := add(trimMarkKey(l.num), encodeTrimMark(0), false); err != nil {
			return err
		}
		if kept != nil {
			if err := add(keptFloorKey(l.num), kept, false); err != nil {
				return err
			}
		}
		return add(catalogKey(l.id), encodeMeta(meta, l.s.refsFormat), false)
	})
	if err == nil {
		err = l.s.sync()
	}
	if err != nil {
		err = fmt.Errorf("logstore: reset %s at %d: %w", l.id, off, err)
		l.s.fail(err)
		return err
	}
	l.s.log.V(1).Info("reset log", "log", l.id.String(), "at", off, "droppedFrom", oldStart, "droppedTo", oldNext, "batches", len(data))
	if err := l.s.retireFilesLocked(); err != nil {
		l.s.log.Error(err, "commit-log files holding dropped batches stay")
	}
	return nil
}

// keptFloorLocked is the entry ResetAt keeps for the floor: the trim that
// set it, or (when retention deleted that trim) the floor alone, with no
// headers to carry.
func (l *Log) keptFloorLocked() trimEntry {
	if l.floorTrim != nil && l.floorTrim.Floor == l.floor {
		t := *l.floorTrim
		t.Headers = cloneHeaders(t.Headers)
		return t
	}
	return trimEntry{Offset: l.floor, Floor: l.floor}
}

// applyKeptFloor raises the floor derived on load to the one an earlier
// ResetAt kept [TR-5]. A kept floor that does not decode, or lies below
// the base, is corruption and refused.
func (l *Log) applyKeptFloor() error {
	var v []byte
	err := l.s.db.View(func(txn *badger.Txn) error {
		item, err := txn.Get(keptFloorKey(l.num))
		if errors.Is(err, badger.ErrKeyNotFound) {
			return nil
		}
		if err != nil {
			return err
		}
		v, err = item.ValueCopy(nil)
		return err
	})
	if err != nil || v == nil {
		return err
	}
	t, err := decodeTrimEntry(v)
	if err == nil && t.Floor < l.base {
		err = fmt.Errorf("%w: kept floor %d below base %d", errCorrupt, t.Floor, l.base)
	}
	if err != nil {
		return &record.CorruptError{Log: l.id, Offset: l.start, Reason: "kept floor: " + err.Error()}
	}
	if t.Floor > l.floor {
		l.floor, l.floorTrim = t.Floor, &t
	}
	return nil
}
