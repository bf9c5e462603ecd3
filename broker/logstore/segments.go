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
	floor, start, next := l.floor, l.start, l.next
	l.mu.Unlock()
	// The highest segment boundary at or below the floor, but not above
	// the active segment's start.
	boundary := l.segmentStart(l.segment(floor))
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
// stored bytes exceed MaxBytes [TR-7]. A fenced log refuses with
// ErrRetentionOnFencedStream. With retention off it deletes nothing.
func (l *Log) ApplyRetention(ctx context.Context) (DeleteResult, error) {
	if err := l.s.enter(); err != nil {
		return DeleteResult{}, err
	}
	defer l.s.leave()
	l.s.wmu.Lock()
	defer l.s.wmu.Unlock()
	l.mu.Lock()
	p, fenced, start, next := l.retention, l.fenced, l.start, l.next
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
	active := l.segment(next)
	boundary := start
	for _, st := range segs {
		if st.seg >= active {
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
			st.bytes += item.ValueSize()
			st.lastKey = item.KeyCopy(st.lastKey[:0])
		}
		it.Close()
		for i := range out {
			st := &out[i]
			item, err := txn.Get(st.lastKey)
			if err != nil {
				return err
			}
			v, err := item.ValueCopy(nil)
			if err != nil {
				return err
			}
			_, recs, err := decodeBatch(v)
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
			bytes += item.ValueSize()
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
		return add(catalogKey(l.id), encodeMeta(meta), false)
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
		if err := s.valueLogGC(ctx); err != nil {
			errs = append(errs, err)
		}
	}
	return total, errors.Join(errs...)
}

// valueLogGC rewrites value log files that are mostly garbage, until badger
// finds none (a bounded number of rounds).
func (s *Store) valueLogGC(ctx context.Context) error {
	if err := s.enter(); err != nil {
		return err
	}
	defer s.leave()
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
