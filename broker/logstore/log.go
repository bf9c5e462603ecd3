package logstore

import (
	"context"
	"fmt"
	"sort"
	"sync"

	badger "github.com/dgraph-io/badger/v4"

	"felix.dev/felix/broker/record"
)

// Log is one log of one shard. It is safe for concurrent use; writes to all
// logs of a Store are ordered by the store's single writer.
type Log struct {
	s       *Store
	id      record.LogID
	num     uint32
	base    uint64
	segRecs uint64

	metaMu sync.Mutex // orders meta writes

	mu        sync.Mutex
	start     uint64 // first stored offset
	next      uint64 // tail: next offset to write
	durable   uint64 // next offset not yet durable per the fsync mode
	committed uint64 // exclusive committed mark
	floor     uint64 // floor set by committed trims (>= base)
	floorTrim *trimEntry
	trims     []trimEntry // trim index, sorted by offset, offsets >= start
	lastEpoch uint64      // epoch of the record at next-1
	fenced    bool
	retention RetentionPolicy
	gen       uint64               // bumped by TruncateFrom; stale acks do not advance durable
	notify    chan struct{}        // closed and replaced when durable or committed advance
	damage    *record.CorruptError // found on open; refuses appends and reads (damage.go)
}

func newLog(s *Store, id record.LogID, m logMeta) *Log {
	return &Log{
		s: s, id: id, num: m.num, base: m.base, segRecs: m.segRecs,
		start: m.start, next: m.start, durable: m.start, committed: max(m.committed, m.base),
		floor: m.base, fenced: m.fenced, retention: m.retention,
		notify: make(chan struct{}),
	}
}

// ID returns the log's name.
func (l *Log) ID() record.LogID { return l.id }

func (l *Log) segment(off uint64) uint64 { return (off - l.base) / l.segRecs }

func (l *Log) segmentStart(seg uint64) uint64 { return l.base + seg*l.segRecs }

// Describe returns the log's offsets and settings.
func (l *Log) Describe() Info {
	pending := l.s.rollbackPending()
	l.mu.Lock()
	defer l.mu.Unlock()
	tail := l.next
	if pending {
		// After ENOSPC what was not acknowledged is rolled back
		// (space.go): report the tail that stays.
		tail = min(tail, max(l.durable, l.committed))
	}
	return Info{
		ID: l.id, Base: l.base, Start: l.start, Floor: l.floor, Tail: tail,
		Durable: l.durable, Committed: l.committed, Fenced: l.fenced,
		Retention: l.retention, SegmentRecords: l.segRecs, Damaged: l.damage != nil,
	}
}

// Append writes recs as one batch that lands whole or not at all and
// returns once it is durable per the store's fsync mode. Offsets are
// assigned densely from the tail; Epoch, Timestamp (zero: the store's
// clock), Kind (zero: KindData), Headers and Payload come from recs, whose
// Offset and Floor are ignored. KindTrim is refused (use Trim).
//
// With expectTail set, the batch lands only if the tail equals
// *expectTail; otherwise *record.OffsetMismatchError names the current tail
// and nothing is written [TR-1]. If ctx ends after submission the error
// wraps ctx.Err() and the batch may still land.
func (l *Log) Append(ctx context.Context, recs []record.Record, expectTail *uint64) (AppendResult, error) {
	wait, err := l.SubmitAppend(ctx, recs, expectTail)
	if err != nil {
		return AppendResult{}, err
	}
	return wait(ctx)
}

// SubmitAppend queues an append as Append does and returns without waiting
// for it: the returned function waits for the outcome Append would have
// returned (it may be called any number of times). Appends (and trims)
// submitted one after the other from one goroutine are applied in that
// order, so expectTail is checked against the tail the earlier ones leave.
// An error from SubmitAppend itself means nothing was queued.
func (l *Log) SubmitAppend(ctx context.Context, recs []record.Record, expectTail *uint64) (func(context.Context) (AppendResult, error), error) {
	r, err := l.prepare(recs, opAppend)
	if err != nil {
		return nil, err
	}
	if expectTail != nil {
		e := *expectTail
		r.expect = &e
	}
	if err := l.s.enqueue(ctx, r); err != nil {
		return nil, err
	}
	return func(ctx context.Context) (AppendResult, error) {
		if err := l.s.await(ctx, r); err != nil {
			return AppendResult{}, err
		}
		return r.res, nil
	}, nil
}

// AppendReplicated writes records copied from a leader, keeping their
// offsets, kinds (trim and fence included), floors, epochs and timestamps.
// The offsets must be dense and start at the tail; otherwise
// *record.OffsetMismatchError names the tail. Trim records enter the trim
// index; they move the floor only once committed (SetCommitted).
func (l *Log) AppendReplicated(ctx context.Context, recs []record.Record) error {
	wait, err := l.SubmitReplicated(ctx, recs)
	if err != nil {
		return err
	}
	return wait(ctx)
}

// SubmitReplicated queues recs as AppendReplicated does and returns without
// waiting for them to be written: the returned function waits until they
// are durable per the fsync mode and returns AppendReplicated's error. It
// may be called any number of times. Appends submitted one after the other
// from one goroutine are applied in that order, so a batch may start at the
// tail an earlier submitted batch leaves; and a log's appends complete in
// that order: once a later one's wait returns nil, every earlier one's on
// the same log is done and succeeded (a failed write fails every write to
// the log queued behind it). An error from SubmitReplicated itself means
// nothing was queued.
func (l *Log) SubmitReplicated(ctx context.Context, recs []record.Record) (func(context.Context) error, error) {
	r, err := l.prepare(recs, opReplicated)
	if err != nil {
		return nil, err
	}
	if err := l.s.enqueue(ctx, r); err != nil {
		return nil, err
	}
	return func(ctx context.Context) error { return l.s.await(ctx, r) }, nil
}

// prepare validates and encodes an append in the caller's goroutine.
func (l *Log) prepare(recs []record.Record, op opKind) (*writeReq, error) {
	o := &l.s.opts
	if err := l.refuseDamaged(); err != nil {
		return nil, err
	}
	if len(recs) == 0 {
		return nil, fmt.Errorf("logstore: empty append to %s: %w", l.id, ErrBadRecord)
	}
	if len(recs) > o.MaxBatchRecords {
		return nil, fmt.Errorf("logstore: %d records in one append, limit %d: %w", len(recs), o.MaxBatchRecords, record.ErrRecordTooLarge)
	}
	norm := make([]record.Record, len(recs))
	copy(norm, recs)
	now := o.Now().UnixNano()
	r := &writeReq{op: op, log: l, n: len(recs)}
	for i := range norm {
		rec := &norm[i]
		if sz := recordSize(rec); sz > o.MaxRecordBytes {
			return nil, fmt.Errorf("logstore: record %d is %d bytes, limit %d: %w", i, sz, o.MaxRecordBytes, record.ErrRecordTooLarge)
		}
		if rec.Kind == 0 {
			rec.Kind = record.KindData
		}
		switch op {
		case opAppend:
			if rec.Kind != record.KindData && rec.Kind != record.KindFence {
				return nil, fmt.Errorf("logstore: append of a %s record (use Trim): %w", rec.Kind, ErrBadRecord)
			}
			rec.Floor = 0
			if rec.Timestamp == 0 {
				rec.Timestamp = now
			}
		case opReplicated:
			if rec.Kind < record.KindData || rec.Kind > record.KindFence {
				return nil, fmt.Errorf("logstore: replicated record of kind %s: %w", rec.Kind, ErrBadRecord)
			}
			if rec.Offset != recs[0].Offset+uint64(i) {
				return nil, fmt.Errorf("logstore: replicated offsets not dense at %d: %w", rec.Offset, ErrBadRecord)
			}
			if rec.Kind == record.KindTrim {
				if rec.Floor > rec.Offset {
					return nil, fmt.Errorf("logstore: replicated trim at %d with floor %d: %w", rec.Offset, rec.Floor, ErrFloorAboveTrim)
				}
				r.trims = append(r.trims, trimEntryOf(rec))
			} else {
				rec.Floor = 0
			}
		}
	}
	r.enc = encodeRecords(norm)
	if len(r.enc.buf) > o.MaxBatchBytes {
		return nil, fmt.Errorf("logstore: append of %d bytes, limit %d: %w", len(r.enc.buf), o.MaxBatchBytes, record.ErrRecordTooLarge)
	}
	r.first = recs[0].Offset
	r.lastEpoch = norm[len(norm)-1].Epoch
	return r, nil
}

// Trim appends a trim record asking for req.Floor, under the tail check
// [TR-2]: a wrong req.ExpectTail is refused with *record.OffsetMismatchError
// and nothing is written. A floor above the offset the trim would land at
// is refused with ErrFloorAboveTrim. A floor at or below the current
// (committed) floor writes nothing, but the tail is still checked first; a
// right tail is answered with the unchanged tail and NoOp set [TR-3].
//
// The floor moves when the trim record is committed (at once under
// Options.AutoCommit). Returns once the trim (or, for a no-op, the tail it
// answers with) is durable per the fsync mode.
func (l *Log) Trim(ctx context.Context, req TrimRequest) (TrimResult, error) {
	o := &l.s.opts
	if err := l.refuseDamaged(); err != nil {
		return TrimResult{}, err
	}
	r := &writeReq{op: opTrim, log: l, n: 1, lastEpoch: req.Epoch}
	r.trim = req
	r.trim.Headers = cloneHeaders(req.Headers)
	if r.trim.Timestamp == 0 {
		r.trim.Timestamp = o.Now().UnixNano()
	}
	if sz := recordSize(&record.Record{Headers: req.Headers}); sz > o.MaxRecordBytes {
		return TrimResult{}, fmt.Errorf("logstore: trim headers of %d bytes, limit %d: %w", sz, o.MaxRecordBytes, record.ErrRecordTooLarge)
	}
	if err := l.s.submit(ctx, r); err != nil {
		return TrimResult{}, err
	}
	return TrimResult{Tail: r.res.Tail, Floor: r.floor, Offset: r.res.First, NoOp: r.noop}, nil
}

// SetCommitted raises the committed mark to c (exclusive: offsets below c
// are committed). Lower values are ignored (the mark never moves back). A
// committed trim record moves the floor [TR-2]; only committed trims do, so
// a trim later truncated leaves no floor behind. c above the tail is
// refused with ErrBeyondTail.
//
// Persistence: the mark is written (and synced) whenever it moves the
// floor, and written without sync on Close; other moves are kept in memory
// only. After a crash the mark may be lower than before; replication
// re-learns it from the leader, and the floor it implies is never lost.
// Under Options.AutoCommit the mark follows the durable tail and
// SetCommitted is not needed.
func (l *Log) SetCommitted(c uint64) error {
	if err := l.s.enter(); err != nil {
		return err
	}
	defer l.s.leave()
	l.mu.Lock()
	if c > l.next {
		tail := l.next
		l.mu.Unlock()
		return fmt.Errorf("logstore: commit %d above tail %d of %s: %w", c, tail, l.id, ErrBeyondTail)
	}
	moved := c > l.committed
	floorMoved := l.applyCommittedLocked(c)
	if moved {
		l.wakeLocked()
	}
	l.mu.Unlock()
	if floorMoved && !l.s.opts.AutoCommit {
		return l.persistMeta(true)
	}
	return nil
}

// applyCommittedLocked raises committed to c and applies the trims it
// commits; it reports whether the floor moved.
func (l *Log) applyCommittedLocked(c uint64) bool {
	if c <= l.committed {
		return false
	}
	moved := false
	i := sort.Search(len(l.trims), func(i int) bool { return l.trims[i].Offset >= l.committed })
	for ; i < len(l.trims) && l.trims[i].Offset < c; i++ {
		if t := l.trims[i]; t.Floor > l.floor {
			l.floor = t.Floor
			l.floorTrim = &t
			moved = true
		}
	}
	l.committed = c
	return moved
}

// recomputeFloorLocked derives the floor from the trim index and the
// committed mark (used on load and after the index changes).
func (l *Log) recomputeFloorLocked() {
	c := l.committed
	l.committed = l.base
	l.floor = l.base
	l.floorTrim = nil
	if c < l.base {
		c = l.base
	}
	l.applyCommittedLocked(c)
	if l.committed < c {
		l.committed = c
	}
}

func (l *Log) wakeLocked() {
	close(l.notify)
	l.notify = make(chan struct{})
}

// Wait blocks until a record at offset from or later is durable (so a Read
// from `from` can return something or advance Next), ctx ends, or the store
// closes (record.ErrClosed). It returns at once if that is already so. It
// is the follow-mode primitive: no polling.
func (l *Log) Wait(ctx context.Context, from uint64) error {
	return l.wait(ctx, func() bool { return l.durable > from })
}

// WaitCommitted is Wait for the committed mark: it returns once an offset
// at or above from is committed.
func (l *Log) WaitCommitted(ctx context.Context, from uint64) error {
	return l.wait(ctx, func() bool { return l.committed > from })
}

func (l *Log) wait(ctx context.Context, ready func() bool) error {
	for {
		l.mu.Lock()
		ok := ready()
		ch := l.notify
		l.mu.Unlock()
		if ok {
			return nil
		}
		select {
		case <-ch:
		case <-ctx.Done():
			return ctx.Err()
		case <-l.s.done:
			return record.ErrClosed
		}
	}
}

// LastEpochAt returns the epoch of the record at off, so a follower can
// check that its previous offset and epoch match the leader's. off below
// the first stored offset is refused with *record.CursorTooOldError; off at
// or above the tail with ErrBeyondTail.
func (l *Log) LastEpochAt(off uint64) (uint64, error) {
	// Tail before the snapshot (appends publish after they commit), start
	// after it (deletions change state before they commit).
	l.s.readMu.RLock() // no commit-log file holding a batch goes meanwhile
	defer l.s.readMu.RUnlock()
	l.mu.Lock()
	next := l.next
	l.mu.Unlock()
	txn := l.s.db.NewTransaction(false)
	defer txn.Discard()
	l.mu.Lock()
	start, next2, last := l.start, l.next, l.lastEpoch
	l.mu.Unlock()
	switch {
	case off == next2-1 && off >= start:
		return last, nil
	case off >= min(next, next2):
		return 0, fmt.Errorf("logstore: epoch at %d, tail %d of %s: %w", off, next2, l.id, ErrBeyondTail)
	case off < start:
		return 0, &record.CursorTooOldError{From: off, Floor: start}
	}
	res, err := l.readRange(txn, off, off+1, true, ReadOptions{MaxRecords: 1})
	if err != nil {
		return 0, err
	}
	if len(res.Records) != 1 {
		return 0, &record.CorruptError{Log: l.id, Offset: off, Reason: "record missing"}
	}
	return res.Records[0].Epoch, nil
}

// SetFenced marks the log as fenced by its tail (felixd's streams). A fenced
// log refuses retention; fencing a log with retention on is refused with
// ErrRetentionOnFencedStream [TR-7]. Persisted and synced.
func (l *Log) SetFenced(fenced bool) error {
	if err := l.s.enter(); err != nil {
		return err
	}
	defer l.s.leave()
	l.mu.Lock()
	if fenced && l.retention.Enabled() {
		l.mu.Unlock()
		return fmt.Errorf("logstore: fence %s with retention on: %w", l.id, ErrRetentionOnFencedStream)
	}
	l.fenced = fenced
	l.mu.Unlock()
	return l.persistMeta(true)
}

// SetRetention sets the log's retention policy (zero: off, the default). A
// fenced log refuses any enabled policy with ErrRetentionOnFencedStream
// [TR-7]: retention can delete the fenced write with no trim involved.
// Persisted and synced. Deletion happens in ApplyRetention.
func (l *Log) SetRetention(p RetentionPolicy) error {
	if p.MaxAge < 0 || p.MaxBytes < 0 {
		return fmt.Errorf("logstore: negative retention %+v: %w", p, ErrBadRecord)
	}
	if err := l.s.enter(); err != nil {
		return err
	}
	defer l.s.leave()
	l.mu.Lock()
	if p.Enabled() && l.fenced {
		l.mu.Unlock()
		return fmt.Errorf("logstore: retention on fenced %s: %w", l.id, ErrRetentionOnFencedStream)
	}
	l.retention = p
	l.mu.Unlock()
	return l.persistMeta(true)
}

func (l *Log) metaLocked() logMeta {
	return logMeta{
		num: l.num, base: l.base, segRecs: l.segRecs, start: l.start,
		committed: l.committed, fenced: l.fenced, retention: l.retention,
	}
}

// persistMeta writes the log's catalog entry from its current state.
func (l *Log) persistMeta(sync bool) error {
	l.metaMu.Lock()
	defer l.metaMu.Unlock()
	l.mu.Lock()
	m := l.metaLocked()
	l.mu.Unlock()
	err := l.s.db.Update(func(txn *badger.Txn) error { return txn.Set(catalogKey(l.id), encodeMeta(m, l.s.refsFormat)) })
	if err == nil && sync {
		err = l.s.sync()
	}
	if err != nil {
		return fmt.Errorf("logstore: persist meta of %s: %w", l.id, err)
	}
	return nil
}
