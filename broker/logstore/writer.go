package logstore

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"time"

	badger "github.com/dgraph-io/badger/v4"

	"felix.dev/felix/broker/record"
)

type opKind uint8

const (
	opAppend opKind = iota
	opTrim
	opReplicated
)

// writeReq is one append, trim or replicated append on its way through the
// writer (and, under FsyncOnCommit, the syncer).
type writeReq struct {
	op        opKind
	log       *Log
	n         int
	enc       encodedBatch
	expect    *uint64
	first     uint64 // opReplicated: the offset the records carry
	trims     []trimEntry
	trim      TrimRequest
	lastEpoch uint64
	start     time.Time
	done      chan struct{}

	res   AppendResult
	floor uint64
	noop  bool
	gen   uint64
	bytes int
	err   error
}

// Bounds of one badger transaction built by the writer, well under badger's
// own limit (15% of the 64 MiB memtable), so ErrTxnTooBig is not expected.
const (
	maxTxnBytes   = 6 << 20
	maxTxnEntries = 20000
	maxGroup      = 4096
)

// submit hands r to the writer and waits for its answer.
func (s *Store) submit(ctx context.Context, r *writeReq) error {
	if err := s.enqueue(ctx, r); err != nil {
		return err
	}
	return s.await(ctx, r)
}

// enqueue hands r to the writer; requests enqueued from one goroutine are
// written in that order.
func (s *Store) enqueue(ctx context.Context, r *writeReq) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	if err := s.enter(); err != nil {
		return err
	}
	if err := s.fullError(r); err != nil {
		s.leave()
		s.countRefusal(err)
		return err
	}
	r.done = make(chan struct{})
	r.start = time.Now()
	select {
	case s.reqs <- r:
		s.leave()
		return nil
	case <-ctx.Done():
		s.leave()
		return ctx.Err()
	}
}

// await waits for an enqueued request's outcome.
func (s *Store) await(ctx context.Context, r *writeReq) error {
	select {
	case <-r.done:
		return r.err
	case <-ctx.Done():
		return fmt.Errorf("logstore: %w (the write may still land)", ctx.Err())
	}
}

func (s *Store) respond(r *writeReq) {
	if r.err == nil {
		s.opts.Metrics.ObserveAppend(r.n, r.bytes, time.Since(r.start))
	} else {
		s.countRefusal(r.err)
	}
	close(r.done)
}

// writer gathers every request waiting at the moment into one group and
// commits it (in as few badger transactions as fit).
func (s *Store) writer() {
	defer s.wg.Done()
	defer close(s.syncQ)
	group := make([]*writeReq, 0, 64)
	for r := range s.reqs {
		group = append(group[:0], r)
	drain:
		for len(group) < maxGroup {
			select {
			case r, ok := <-s.reqs:
				if !ok {
					break drain
				}
				group = append(group, r)
			default:
				break drain
			}
		}
		s.commitGroup(group)
	}
}

// pendLog is a log's state as the transaction being built will leave it.
type pendLog struct {
	next      uint64
	trimCount int
	trims     []trimEntry
	lastEpoch uint64
	epochSet  bool
	vlogFirst uint64 // first offset of the newest batch going to the value log
	vlogSet   bool
}

type txnBuild struct {
	s       *Store
	txn     *badger.Txn
	pend    map[*Log]*pendLog
	reqs    []*writeReq
	bytes   int
	entries int
	// The commit-log frame (FsyncOnCommit): its entries, the file it goes
	// to, where in it the frame starts and how long it is so far, and
	// whether batches may be kept in it (refs, Options.CommitLogValues).
	frame    []frameEntry
	clSeq    uint64
	frameAt  int64
	frameLen int
	refs     bool
	pins     map[uint32]uint64 // log number -> highest first offset kept in the file
}

func (s *Store) newTxnBuild() *txnBuild {
	b := &txnBuild{s: s, txn: s.db.NewTransaction(true), pend: map[*Log]*pendLog{}}
	if s.cl != nil {
		b.clSeq, b.frameAt, b.frameLen = s.cl.current(), s.clNext, frameHeadLen
		b.refs = s.clRefs
	}
	return b
}

// toFrame adds an entry to the commit-log frame and returns where its
// value will lie in the file.
func (b *txnBuild) toFrame(op byte, k, v []byte) int64 {
	b.frame = append(b.frame, frameEntry{op: op, k: k, v: v})
	n := frameEntryLen(k, len(v))
	b.frameLen += n
	return b.frameAt + int64(b.frameLen-len(v))
}

func (b *txnBuild) pendFor(l *Log) *pendLog {
	p, ok := b.pend[l]
	if !ok {
		l.mu.Lock()
		p = &pendLog{next: l.next, trimCount: len(l.trims)}
		l.mu.Unlock()
		b.pend[l] = p
	}
	return p
}

type kv struct{ k, v []byte }

func (s *Store) commitGroup(group []*writeReq) {
	s.wmu.Lock()
	defer s.wmu.Unlock()
	if err := s.failure(); err != nil {
		for _, r := range group {
			r.err = fmt.Errorf("logstore: store failed earlier: %w", err)
			s.respond(r)
		}
		return
	}
	b := s.newTxnBuild()
	for _, r := range group {
		if err := s.fullError(r); err != nil {
			r.err = err
			s.respond(r)
			continue
		}
		p := b.pendFor(r.log)
		kvs, err := b.plan(r, p)
		if err != nil {
			r.err = err
			s.respond(r)
			continue
		}
		size := 0
		for _, e := range kvs {
			size += len(e.k) + len(e.v) + 16
		}
		if len(b.reqs) > 0 && (b.bytes+size > maxTxnBytes || b.entries+len(kvs) > maxTxnEntries) {
			// Commit what is built; r is planned against state that the
			// commit publishes unchanged, so its plan stays valid.
			b.commit()
			b = s.newTxnBuild()
			p = b.pendFor(r.log)
		}
		if err := b.add(r, p, kvs); err != nil {
			r.err = err
			s.respond(r)
			b.abort(err)
			b = s.newTxnBuild()
			continue
		}
		b.bytes += size
		b.entries += len(kvs)
	}
	b.commit()
	written := 0
	for _, r := range group {
		written += r.bytes
	}
	s.noteWritten(written)
	if s.cl != nil && s.cl.full() {
		_ = s.checkpointLocked() // a failure marks the store failed
	}
}

// plan checks r against the pending state and computes its keys and values
// without touching the pending state.
func (b *txnBuild) plan(r *writeReq, p *pendLog) ([]kv, error) {
	l := r.log
	switch r.op {
	case opAppend:
		if r.expect != nil && *r.expect != p.next {
			return nil, &record.OffsetMismatchError{Expected: *r.expect, Tail: p.next}
		}
		return l.splitBatch(&r.enc, p.next), nil
	case opReplicated:
		if r.first != p.next {
			return nil, &record.OffsetMismatchError{Expected: r.first, Tail: p.next}
		}
		kvs := l.splitBatch(&r.enc, p.next)
		for _, t := range r.trims {
			kvs = append(kvs, kv{trimKey(l.num, t.Offset), encodeTrimEntry(t)})
		}
		if len(r.trims) > 0 {
			kvs = append(kvs, kv{trimMarkKey(l.num), encodeTrimMark(uint64(p.trimCount + len(r.trims)))})
		}
		return kvs, nil
	case opTrim:
		t := r.trim
		if t.ExpectTail != p.next {
			return nil, &record.OffsetMismatchError{Expected: t.ExpectTail, Tail: p.next}
		}
		l.mu.Lock()
		floor := l.floor
		l.mu.Unlock()
		if t.Floor <= floor {
			return nil, nil // a no-op, answered after the tail check [TR-3]
		}
		if t.Floor > p.next {
			return nil, fmt.Errorf("logstore: trim floor %d above the trim's own offset %d in %s: %w", t.Floor, p.next, l.id, ErrFloorAboveTrim)
		}
		rec := record.Record{Offset: p.next, Epoch: t.Epoch, Timestamp: t.Timestamp, Kind: record.KindTrim, Floor: t.Floor, Headers: t.Headers}
		r.trims = []trimEntry{trimEntryOf(&rec)}
		v := encodeBatch(p.next, []record.Record{rec})
		return []kv{
			{dataKey(l.num, l.segment(p.next), p.next), v},
			{trimKey(l.num, p.next), encodeTrimEntry(r.trims[0])},
			{trimMarkKey(l.num), encodeTrimMark(uint64(p.trimCount + 1))},
		}, nil
	}
	return nil, fmt.Errorf("logstore: unknown write op %d", r.op)
}

// splitBatch cuts an encoded append at segment boundaries into data keys.
func (l *Log) splitBatch(e *encodedBatch, first uint64) []kv {
	n := len(e.ends)
	var kvs []kv
	for i := 0; i < n; {
		off := first + uint64(i)
		seg := l.segment(off)
		room := l.segmentStart(seg+1) - off
		j := n
		if uint64(n-i) > room {
			j = i + int(room)
		}
		kvs = append(kvs, kv{dataKey(l.num, seg, off), e.value(i, j, off)})
		i = j
	}
	return kvs
}

// add puts r's keys into the transaction and advances the pending state.
func (b *txnBuild) add(r *writeReq, p *pendLog, kvs []kv) error {
	for _, e := range kvs {
		stored, op := e.v, byte(opSet)
		if int64(len(e.v)) >= b.s.vlogThreshold && e.k[0] == prefixData {
			_, first, _ := parseDataKey(e.k)
			p.vlogFirst, p.vlogSet = first, true
			if b.refs {
				// Kept only in the commit log: badger gets a ref to where
				// the frame puts the batch.
				op = opSetRef
				stored = encodeRef(refTo(b.clSeq, b.toFrame(op, e.k, e.v), e.v))
				if b.pins == nil {
					b.pins = map[uint32]uint64{}
				}
				b.pins[r.log.num] = max(b.pins[r.log.num], first)
			}
		}
		if err := b.txn.Set(e.k, stored); err != nil {
			return fmt.Errorf("logstore: write to %s: %w", r.log.id, err)
		}
		r.bytes += len(e.v)
		if b.s.cl != nil && op == opSet {
			b.toFrame(op, e.k, e.v)
		}
	}
	switch {
	case r.op == opTrim && len(kvs) == 0:
		r.noop = true
		r.res = AppendResult{Tail: p.next}
		r.log.mu.Lock()
		r.floor = r.log.floor
		r.log.mu.Unlock()
	default:
		r.res = AppendResult{First: p.next, Last: p.next + uint64(r.n) - 1, Tail: p.next + uint64(r.n)}
		r.floor = r.trim.Floor
		p.next += uint64(r.n)
		p.trimCount += len(r.trims)
		p.trims = append(p.trims, r.trims...)
		p.lastEpoch, p.epochSet = r.lastEpoch, true
	}
	b.reqs = append(b.reqs, r)
	return nil
}

// abort drops the transaction; every request in it fails with err.
func (b *txnBuild) abort(err error) {
	b.txn.Discard()
	for _, r := range b.reqs {
		if r.err == nil {
			r.err = err
		}
		b.s.respond(r)
	}
	b.reqs = nil
}

// commit commits the transaction, publishes the new tails and hands the
// requests to the syncer (FsyncOnCommit) or acknowledges them.
func (b *txnBuild) commit() {
	if len(b.reqs) == 0 {
		b.txn.Discard()
		return
	}
	// The value-log marker lands in the same transaction as the batch it
	// names, so after a crash it is never behind the stored batches.
	for l, p := range b.pend {
		if !p.vlogSet {
			continue
		}
		k, v := vlogMarkKey(l.num), encodeVlogMark(p.vlogFirst)
		if err := b.txn.Set(k, v); err != nil {
			b.abort(fmt.Errorf("logstore: write to %s: %w", l.id, err))
			return
		}
		if b.s.cl != nil {
			b.toFrame(opSet, k, v)
		}
	}
	// The pins land with the refs they account for (pins.go).
	for num, first := range b.pins {
		if !addPin(b.s.pins, b.clSeq, num, first) {
			continue
		}
		k, v := filePinKey(b.clSeq, num), binary.BigEndian.AppendUint64(nil, b.s.pins[b.clSeq][num])
		if err := b.txn.Set(k, v); err != nil {
			b.abort(fmt.Errorf("logstore: write commit-log pin: %w", err))
			return
		}
		b.toFrame(opSet, k, v)
	}
	var g *syncGroup
	if b.s.opts.Fsync == FsyncOnCommit {
		// The syncer writes and syncs the frame while badger commits the
		// transaction; it publishes the requests once both are done.
		g = &syncGroup{reqs: b.reqs, frame: b.frame, committed: make(chan struct{})}
		if b.s.cl != nil && len(b.frame) > 0 {
			g.clSeq, g.frameAt, g.frameLen = b.clSeq, b.frameAt, b.frameLen
			b.s.clNext = b.frameAt + int64(b.frameLen)
		}
		b.s.syncQ <- g
	}
	if err := b.txn.Commit(); err != nil {
		err = fmt.Errorf("logstore: commit: %w", err)
		if g == nil {
			b.abort(err)
			return
		}
		// The frame may be durable already: a replay could bring these
		// requests back, so the store stops acknowledging anything (the
		// callers see the failure: their writes may still land).
		b.s.failSticky(err)
		g.err = err
		close(g.committed)
		return
	}
	for l, p := range b.pend {
		l.mu.Lock()
		l.next = p.next
		if len(p.trims) > 0 {
			l.trims = append(l.trims, p.trims...)
			// Only after ResetAt below the committed mark can a trim land
			// below it; it is committed as it lands.
			for i := range p.trims {
				if t := p.trims[i]; t.Offset < l.committed && t.Floor > l.floor {
					l.floor, l.floorTrim = t.Floor, &t
				}
			}
		}
		if p.epochSet {
			l.lastEpoch = p.lastEpoch
		}
		l.mu.Unlock()
	}
	for _, r := range b.reqs {
		r.gen = r.log.gen // gen only changes under wmu, which we hold
	}
	if g != nil {
		close(g.committed)
		return
	}
	b.s.publish(b.reqs)
}

// syncGroup is one transaction on its way to the syncer under
// FsyncOnCommit: its requests, its commit-log frame entries and the commit
// log file current when it was built. committed is closed once badger's
// commit is done and the new tails are published, with err set if it
// failed.
type syncGroup struct {
	reqs      []*writeReq
	frame     []frameEntry
	clSeq     uint64
	frameAt   int64 // where the writer placed the frame in file clSeq
	frameLen  int
	committed chan struct{}
	err       error
	barrier   chan struct{} // a barrier (no requests): closed once the groups before it are answered
}

// syncer writes the commit log frames of every group waiting and makes
// one sync cover them all (group commit), then acknowledges each group
// once badger's commit of it is done too.
func (s *Store) syncer() {
	defer s.wg.Done()
	var groups []*syncGroup
	var frames []byte
	for g := range s.syncQ {
		groups = append(groups[:0], g)
	drain:
		for {
			select {
			case more, ok := <-s.syncQ:
				if !ok {
					break drain
				}
				groups = append(groups, more)
			default:
				break drain
			}
		}
		// The writer placed the groups' frames one after the other in the
		// current file (a checkpoint waits for them before it starts the
		// next), and the refs it stored point into them: they are written
		// exactly there.
		frames = frames[:0]
		var err error
		n, seq, base := 0, uint64(0), int64(-1)
		for _, g := range groups {
			n += len(g.reqs)
			if len(g.frame) == 0 {
				continue
			}
			if base < 0 {
				seq, base = g.clSeq, g.frameAt
			}
			at := len(frames)
			frames = appendFrame(frames, frameSeed(seq), g.frame)
			if g.clSeq != seq || g.frameAt != base+int64(at) || len(frames)-at != g.frameLen {
				err = fmt.Errorf("logstore: commit-log frame placed in file %d at %d (%d bytes) does not follow the frames before it: file %d at %d, %d bytes encoded",
					g.clSeq, g.frameAt, g.frameLen, seq, base+int64(at), len(frames)-at)
				break
			}
		}
		if err == nil && n == 0 && len(frames) == 0 {
			// Only barriers (space.go): nothing to sync.
		} else if err == nil {
			err = s.syncCommitted(frames, seq, base)
		} else {
			s.cl.fail(err)
		}
		if err != nil {
			err = fmt.Errorf("logstore: sync: %w", err)
			s.fail(err)
			err = asFull(err)
		} else {
			s.opts.Metrics.ObserveSyncFanIn(n)
		}
		for _, g := range groups {
			<-g.committed
			if g.barrier != nil {
				close(g.barrier) // every group before it is answered
				continue
			}
			gerr := g.err
			if gerr == nil {
				gerr = err
			}
			if gerr == nil {
				s.publish(g.reqs)
				continue
			}
			for _, r := range g.reqs {
				r.err = gerr
				s.respond(r)
			}
		}
	}
}

// publish marks the requests durable, advances durable (and committed under
// AutoCommit) and acknowledges them.
func (s *Store) publish(reqs []*writeReq) {
	for _, r := range reqs {
		l := r.log
		l.mu.Lock()
		if r.gen == l.gen && r.res.Tail > l.durable {
			l.durable = r.res.Tail
			if s.opts.AutoCommit {
				l.applyCommittedLocked(l.durable)
			}
			l.wakeLocked()
		}
		l.mu.Unlock()
		s.respond(r)
	}
}

// periodicSync syncs every FsyncInterval under FsyncPeriodic.
func (s *Store) periodicSync() {
	defer s.wg.Done()
	t := time.NewTicker(s.opts.FsyncInterval)
	defer t.Stop()
	for {
		select {
		case <-s.done:
			return
		case <-t.C:
			if err := s.sync(); err != nil && !errors.Is(err, badger.ErrDBClosed) {
				// Acknowledged writes depend on it: stays failed even on ENOSPC.
				s.failSticky(fmt.Errorf("logstore: periodic sync: %w", err))
			}
		}
	}
}
