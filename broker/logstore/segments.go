package logstore

import (
	"context"
	"errors"
	"fmt"
	"time"

	badger "github.com/dgraph-io/badger/v4"

	"felix.dev/felix/broker/record"
)

// DeleteBelowFloor deletes every whole segment entirely below the floor,
// never the active segment (the one the tail is in) [TR-6]. The trim that
// set the floor sits at or above the floor, so it is never deleted. It
// reports what was removed; badger reclaims the disk space in its
// compactions.
func (l *Log) DeleteBelowFloor(ctx context.Context) (DeleteResult, error) {
	if err := l.s.enter(); err != nil {
		return DeleteResult{}, err
	}
	defer l.s.leave()
	l.s.wmu.Lock()
	defer l.s.wmu.Unlock()
	l.mu.Lock()
	floor, start, next, committed := l.floor, l.start, l.next, l.committed
	l.mu.Unlock()
	// The highest segment boundary at or below the floor (which committed
	// trims set, so it is at or below the committed mark; min says so
	// anyway), but not above the active segment's start.
	boundary := l.segmentStart(l.segment(min(floor, committed)))
	if active := l.segmentStart(l.segment(next)); boundary > active {
		boundary = active
	}
	if boundary <= start {
		return DeleteResult{Start: start}, nil
	}
	return l.deleteBelow(ctx, boundary)
}

// ApplyRetention deletes the oldest whole segments, never the active one,
// while the log's retention policy asks for it: the segment's newest record
// (by timestamp of its last batch) is older than MaxAge, or the log's
// stored bytes exceed MaxBytes [TR-7]. It never deletes an uncommitted
// record: only segments entirely below the committed mark go, whatever the
// policy says (so MaxBytes may be exceeded while the mark lags). A fenced
// log refuses with ErrRetentionOnFencedStream. With retention off it
// deletes nothing.
func (l *Log) ApplyRetention(ctx context.Context) (DeleteResult, error) {
	if err := l.s.enter(); err != nil {
		return DeleteResult{}, err
	}
	defer l.s.leave()
	l.s.wmu.Lock()
	defer l.s.wmu.Unlock()
	l.mu.Lock()
	p, fenced, start, next, committed := l.retention, l.fenced, l.start, l.next, l.committed
	l.mu.Unlock()
	if !p.Enabled() {
		return DeleteResult{Start: start}, nil
	}
	if fenced {
		return DeleteResult{}, fmt.Errorf("logstore: retention on fenced %s: %w", l.id, ErrRetentionOnFencedStream)
	}
	segs, err := l.segmentStats()
	if err != nil {
		return DeleteResult{}, err
	}
	var total int64
	for _, st := range segs {
		total += st.bytes
	}
	cutoff := l.s.opts.Now().Add(-p.MaxAge).UnixNano()
	// Segments below limit hold only committed records (the committed mark
	// is at most the tail, so limit is never past the active segment; min
	// says so anyway).
	limit := min(l.segment(next), l.segment(committed))
	boundary := start
	for _, st := range segs {
		if st.seg >= limit {
			break
		}
		old := p.MaxAge > 0 && st.newest < cutoff
		big := p.MaxBytes > 0 && total > p.MaxBytes
		if !old && !big {
			break
		}
		total -= st.bytes
		boundary = l.segmentStart(st.seg + 1)
	}
	if boundary <= start {
		return DeleteResult{Start: start}, nil
	}
	return l.deleteBelow(ctx, boundary)
}

type segStat struct {
	seg     uint64
	bytes   int64
	newest  int64 // newest timestamp in the segment's last batch
	lastKey []byte
}

// segmentStats sizes every stored segment with a key-only scan and decodes
// each segment's last batch for its newest timestamp.
func (l *Log) segmentStats() ([]segStat, error) {
	l.s.readMu.RLock() // no commit-log file holding a batch goes meanwhile
	defer l.s.readMu.RUnlock()
	var out []segStat
	err := l.s.db.View(func(txn *badger.Txn) error {
		it := txn.NewIterator(badger.IteratorOptions{Prefix: logPrefix(prefixData, l.num)})
		for it.Rewind(); it.Valid(); it.Next() {
			item := it.Item()
			seg, _, err := parseDataKey(item.Key())
			if err != nil {
				it.Close()
				return &record.CorruptError{Log: l.id, Reason: err.Error()}
			}
			if len(out) == 0 || out[len(out)-1].seg != seg {
				out = append(out, segStat{seg: seg})
			}
			st := &out[len(out)-1]
			st.bytes += storedSize(item)
			st.lastKey = item.KeyCopy(st.lastKey[:0])
		}
		it.Close()
		for i := range out {
			st := &out[i]
			item, err := txn.Get(st.lastKey)
			if err != nil {
				return err
			}
			_, recs, err := l.s.readBatch(item)
			if err != nil && !errors.Is(err, errCorrupt) {
				return err
			}
			if err != nil {
				_, first, _ := parseDataKey(st.lastKey)
				return &record.CorruptError{Log: l.id, Offset: first, Reason: err.Error()}
			}
			for _, r := range recs {
				st.newest = max(st.newest, r.Timestamp)
			}
		}
		return nil
	})
	return out, err
}

// deleteBelow deletes every stored key below boundary (a segment start)
// and the trim index entries there. Caller holds wmu.
func (l *Log) deleteBelow(ctx context.Context, boundary uint64) (DeleteResult, error) {
	// No commit log replay may bring back what this removes.
	if err := l.s.checkpointLocked(); err != nil {
		return DeleteResult{}, err
	}
	t0 := time.Now()
	var keys [][]byte
	var bytes int64
	l.mu.Lock()
	start := l.start
	l.mu.Unlock()
	err := l.s.db.View(func(txn *badger.Txn) error {
		it := txn.NewIterator(badger.IteratorOptions{Prefix: logPrefix(prefixData, l.num), PrefetchValues: false})
		defer it.Close()
		end := segmentPrefix(l.num, l.segment(boundary))
		for it.Rewind(); it.Valid(); it.Next() {
			item := it.Item()
			if string(item.Key()) >= string(end) {
				break
			}
			keys = append(keys, item.KeyCopy(nil))
			bytes += storedSize(item)
		}
		return nil
	})
	if err != nil {
		return DeleteResult{}, fmt.Errorf("logstore: delete segments of %s: %w", l.id, err)
	}
	if err := ctx.Err(); err != nil {
		return DeleteResult{}, err
	}
	// State first, then the deletes (see read).
	l.metaMu.Lock()
	defer l.metaMu.Unlock()
	l.mu.Lock()
	l.start = boundary
	var dropped []trimEntry
	kept := l.trims[:0:0]
	for _, t := range l.trims {
		if t.Offset < boundary {
			dropped = append(dropped, t)
		} else {
			kept = append(kept, t)
		}
	}
	l.trims = kept
	if l.floorTrim != nil && l.floorTrim.Offset < boundary {
		l.floorTrim = nil // only retention gets here: the tag is gone
	}
	meta := l.metaLocked()
	l.mu.Unlock()
	err = l.applyInOrder(func(add func(k, v []byte, del bool) error) error {
		// Oldest first: a crash part way leaves a dense suffix, and load
		// takes the first stored key as the start.
		for _, k := range keys {
			if err := add(k, nil, true); err != nil {
				return err
			}
		}
		for _, t := range dropped {
			if err := add(trimKey(l.num, t.Offset), nil, true); err != nil {
				return err
			}
		}
		if err := add(trimMarkKey(l.num), encodeTrimMark(uint64(len(kept))), false); err != nil {
			return err
		}
		return add(catalogKey(l.id), encodeMeta(meta, l.s.refsFormat), false)
	})
	if err != nil {
		err = fmt.Errorf("logstore: delete segments of %s: %w", l.id, err)
		l.s.fail(err)
		return DeleteResult{}, err
	}
	res := DeleteResult{
		Segments: int(l.segment(boundary) - l.segment(start)),
		Records:  boundary - start,
		Bytes:    bytes,
		Start:    boundary,
	}
	l.s.opts.Metrics.ObserveDelete(int(res.Records), res.Bytes)
	l.s.log.V(1).Info("deleted segments", "log", l.id.String(), "segments", res.Segments,
		"records", res.Records, "bytes", res.Bytes, "start", boundary, "took", time.Since(t0))
	if err := l.s.retireFilesLocked(); err != nil {
		// The segments are gone; a file that stays only takes disk space
		// until the next retirement.
		l.s.log.Error(err, "commit-log files holding deleted batches stay")
	}
	return res, nil
}

// Maintain runs DeleteBelowFloor and ApplyRetention on every log and
// returns the totals (Start is left zero). A fenced log with retention set (only possible if it
// was set before fencing was introduced) is reported, not fatal: the error
// is joined and the other logs still run.
func (s *Store) Maintain(ctx context.Context) (DeleteResult, error) {
	var total DeleteResult
	var errs []error
	for _, id := range s.Logs() {
		l, ok := s.Lookup(id)
		if !ok {
			continue
		}
		for _, f := range []func(context.Context) (DeleteResult, error){l.DeleteBelowFloor, l.ApplyRetention} {
			r, err := f(ctx)
			if err != nil {
				errs = append(errs, err)
				continue
			}
			total.Segments += r.Segments
			total.Records += r.Records
			total.Bytes += r.Bytes
		}
	}
	if s.opts.ValueThreshold > 0 {
		if err := s.CollectValueLog(ctx); err != nil {
			errs = append(errs, err)
		}
	}
	return total, errors.Join(errs...)
}

// CollectValueLog rewrites value log files that are mostly garbage, until
// badger finds none (a bounded number of rounds), so the space of deleted
// batches kept in badger's value log comes back. Batches of at least the
// value threshold live there (Options.ValueThreshold; by default only
// batches of 1 MiB or more); smaller ones come back through badger's
// compactions alone. Maintain calls it when Options.ValueThreshold is set;
// a caller that deletes segments through Log.DeleteBelowFloor and
// Log.ApplyRetention directly should call it after them.
//
// badger moves the live values of such a file to the head of its value log
// and then deletes the file, without a sync in between: a machine crash
// could keep the moved pointers and lose the moved values, with the old
// file gone. So: a marker (gcMarkKey) is written and synced first; an
// iterator is held open while badger runs, which makes badger defer deleting
// the rewritten files until no iterator is open; the store syncs, and only
// then releases the iterator (the files go) and removes the marker. A crash
// before that leaves the marker, and the next open checks every batch and
// restores any whose moved value was lost from its old copy, still on disk
// (Log.repairLost).
func (s *Store) CollectValueLog(ctx context.Context) (err error) {
	if err := s.enter(); err != nil {
		return err
	}
	defer s.leave()
	if len(s.Damaged()) > 0 {
		return nil // badger would drop the values behind a damaged entry (damage.go)
	}
	err = s.db.Update(func(txn *badger.Txn) error { return txn.Set(gcMarkKey(), sealFrame(nil)) })
	if err == nil {
		err = s.sync()
	}
	if err != nil {
		return fmt.Errorf("logstore: value log gc: marker: %w", err)
	}
	hold := s.db.NewTransaction(false)
	it := hold.NewIterator(badger.IteratorOptions{Prefix: gcMarkKey(), PrefetchValues: false})
	defer func() {
		if serr := s.sync(); serr != nil {
			serr = fmt.Errorf("logstore: value log gc: sync: %w", serr)
			s.fail(serr) // the moved values may not be durable: keep the files
			err = errors.Join(err, serr)
			return
		}
		it.Close() // badger deletes the rewritten files now
		hold.Discard()
		if derr := s.db.Update(func(txn *badger.Txn) error { return txn.Delete(gcMarkKey()) }); derr != nil {
			err = errors.Join(err, fmt.Errorf("logstore: value log gc: clear marker: %w", derr))
		}
	}()
	for i := 0; i < 16 && ctx.Err() == nil; i++ {
		err := s.db.RunValueLogGC(0.5)
		if errors.Is(err, badger.ErrNoRewrite) || errors.Is(err, badger.ErrRejected) {
			return nil
		}
		if err != nil {
			return fmt.Errorf("logstore: value log gc: %w", err)
		}
	}
	return ctx.Err()
}
