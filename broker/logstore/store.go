package logstore

import (
	"errors"
	"fmt"
	"path/filepath"
	"sort"
	"sync"
	"time"

	badger "github.com/dgraph-io/badger/v4"
	"github.com/dgraph-io/badger/v4/options"
	"github.com/go-logr/logr"

	"felix.dev/felix/broker/record"
)

// Store holds every shard log of one broker in one badger database. It is
// safe for concurrent use.
type Store struct {
	opts Options
	db   *badger.DB
	log  logr.Logger

	mu       sync.Mutex // guards logs, nextNum and creating
	logs     map[record.LogID]*Log
	nextNum  uint32
	creating map[record.LogID]chan struct{} // closed when a creation ends; nil until one starts

	// closeMu: submitters and maintenance hold it shared; Close holds it
	// exclusively to stop new work before tearing down.
	closeMu sync.RWMutex
	closed  bool
	done    chan struct{} // closed by Close; wakes Wait

	// wmu serializes the writer's group commits with truncation and
	// segment deletion, which change the same per-log state.
	wmu sync.Mutex

	reqs  chan *writeReq
	syncQ chan *syncGroup
	wg    sync.WaitGroup

	failMu sync.Mutex
	failed error // a failed DB.Sync: every later write is refused

	space space // the free-space floor and the ENOSPC state (space.go)

	cl *commitLog // FsyncOnCommit only; see commitlog.go
	// clNext is where the next frame goes in the current commit-log file:
	// the writer places frames (and the refs into them) as it builds them,
	// and the syncer writes each exactly there. Guarded by wmu.
	clNext int64
	// clRefs: batches written to the current file are kept only there
	// (refs). Decided per file, when it starts, so that the batches a
	// crash may leave behind the durable frames are all of one kind
	// (Log.repairLost). Guarded by wmu.
	clRefs bool

	// refs reads batches kept in commit-log files (ref.go); pins maps each
	// file holding such batches to the logs with batches there and the
	// highest first offset of each (the filePinKey entries), guarded by
	// wmu. readMu: reads hold it shared while they may resolve refs;
	// removing a file holds it exclusively.
	refs   *refFiles
	pins   map[uint64]map[uint32]uint64
	readMu sync.RWMutex
	// refsFormat: the store may hold refs (CommitLogValues, or files kept
	// from an earlier run), so log metas are written as metaRefsVersion.
	// Fixed at open.
	refsFormat bool

	// vlogThreshold is badger's value threshold in effect: values of at
	// least this many bytes go to its value log.
	vlogThreshold int64
	// gcInterrupted: a crash interrupted value-log garbage collection, so
	// opening checks every batch (Log.repairLost).
	gcInterrupted bool
	// replay: what the commit-log replay on open found (damage.go).
	replay replayState

	// syncedAtOpen: the sync mark found on open (syncmark.go): every
	// transaction of a version at or below it reached the disk in an
	// earlier run, so a batch of such a version that does not read back
	// is damage, never a torn tail. syncMarked: the store had one (a
	// store written before the mark existed has none).
	syncedAtOpen uint64
	syncMarked   bool
	// syncMu orders the syncs that write the sync mark; syncMarkAt is
	// the badger version of the newest mark written (0: none yet).
	syncMu     sync.Mutex
	syncMarkAt uint64
}

// Open opens (or creates) the store in opts.Dir, loads every log's state
// (tail from the last batch, the trim index, validated or rebuilt [TR-5])
// and starts the writer (and, per fsync mode, the syncer).
func Open(opts Options) (*Store, error) {
	if opts.Dir == "" {
		return nil, errors.New("logstore: Options.Dir is required")
	}
	if opts.Fsync == 0 {
		opts.Fsync = FsyncOnCommit // the documented zero value
	}
	switch opts.Fsync {
	case FsyncOnCommit, FsyncPeriodic, FsyncNone:
	default:
		return nil, fmt.Errorf("logstore: %w: %d", ErrBadFsyncMode, opts.Fsync)
	}
	opts = opts.withDefaults()
	bo := badger.DefaultOptions(opts.Dir).
		WithSyncWrites(false). // we sync ourselves, shared (group commit)
		WithDetectConflicts(false).
		WithMetricsEnabled(false).
		WithCompression(options.None).
		WithNumCompactors(2).
		WithLogger(nil)
	if opts.ValueThreshold > 0 {
		bo = bo.WithValueThreshold(opts.ValueThreshold)
	}
	if opts.BadgerLogging {
		bo = bo.WithLogger(badgerLogger{opts.Logger.WithName("badger")})
	}
	if opts.tune != nil {
		opts.tune(&bo)
	}
	if err := mkdirDurable(opts.Dir); err != nil {
		return nil, err
	}
	if err := removeEmptyLogFiles(opts.Dir, opts.Logger); err != nil {
		return nil, err
	}
	if err := shieldValueLog(opts.Dir); err != nil {
		return nil, err
	}
	db, err := badger.Open(bo)
	if err != nil {
		return nil, fmt.Errorf("logstore: open badger in %s: %w", opts.Dir, err)
	}
	// The files badger created at open (value log, MANIFEST, DISCARD)
	// must have durable names before anything is acknowledged.
	if err := syncDir(opts.Dir); err != nil {
		_ = db.Close()
		return nil, err
	}
	clDir := filepath.Join(opts.Dir, commitLogDir)
	var replay replayState
	clSeq, clFiles, frames, err := replayCommitLogs(db, clDir, &replay)
	if err != nil {
		_ = db.Close()
		return nil, err
	}
	if frames > 0 {
		opts.Logger.Info("replayed commit log", "frames", frames)
	}
	pins, err := loadPins(db)
	if err == nil {
		err = retireReplayed(db, clDir, clSeq, clFiles, pins)
	}
	if err != nil {
		_ = db.Close()
		return nil, err
	}
	if opts.Fsync == FsyncOnCommit {
		if err := probeAIO(); err != nil {
			opts.Logger.Info("commit-log direct writes use blocking pwrite: native AIO is not available", "reason", err.Error())
		} else {
			opts.Logger.V(1).Info("commit-log direct writes go through native AIO")
		}
	}
	s := &Store{
		opts:  opts,
		db:    db,
		log:   opts.Logger,
		logs:  map[record.LogID]*Log{},
		done:  make(chan struct{}),
		reqs:  make(chan *writeReq, 1024),
		syncQ: make(chan *syncGroup, 1024),

		vlogThreshold: bo.ValueThreshold,
		refs:          newRefFiles(clDir),
		pins:          pins,
		refsFormat:    opts.CommitLogValues || len(pins) > 0,
		replay:        replay,
	}
	if s.refsFormat {
		if err := markRefsFormat(db); err != nil {
			_ = db.Close()
			return nil, err
		}
	}
	s.syncedAtOpen, s.syncMarked, err = readSyncMark(db)
	if errors.Is(err, errCorrupt) {
		// Nothing is taken for a torn tail then: every batch that does
		// not read back is reported as damage.
		s.log.Error(err, "the sync mark is damaged: every stored batch that does not read back is taken for damage")
	} else if err != nil {
		_ = db.Close()
		return nil, err
	}
	if s.gcInterrupted, err = hasKey(db, gcMarkKey()); err != nil {
		_ = db.Close()
		return nil, err
	}
	if s.gcInterrupted {
		s.log.Info("value-log garbage collection was interrupted by a crash: checking every stored batch")
	}
	if err := s.loadCatalog(); err != nil {
		_ = db.Close()
		return nil, err
	}
	if s.gcInterrupted {
		err := db.Update(func(txn *badger.Txn) error { return txn.Delete(gcMarkKey()) })
		if err == nil {
			err = db.Sync()
		}
		if err != nil {
			_ = db.Close()
			return nil, fmt.Errorf("logstore: clear the value-log GC marker: %w", err)
		}
		s.gcInterrupted = false
	}
	if opts.Fsync == FsyncOnCommit {
		if s.cl, err = openCommitLog(clDir, clSeq); err != nil {
			_ = db.Close()
			return nil, err
		}
		s.cl.keep = s.pinned
		s.clRefs = s.keepsRefs()
	}
	if s.cl != nil {
		s.cl.roomForSpare, s.cl.writeAt = s.roomForSpare, opts.clWrite
	}
	_, merr := s.measureLocked()
	if merr != nil {
		s.log.Error(merr, "free-space check")
	}
	if opts.SpaceCheckInterval > 0 {
		s.wg.Add(1)
		go s.spaceMonitor(merr)
	}
	s.wg.Add(1)
	go s.writer()
	switch opts.Fsync {
	case FsyncOnCommit:
		s.wg.Add(1)
		go s.syncer()
	case FsyncPeriodic:
		s.wg.Add(1)
		go s.periodicSync()
	}
	return s, nil
}

// Close stops accepting work, lets acknowledged-to-be work finish, syncs and
// closes the database. Appends submitted after Close return record.ErrClosed.
func (s *Store) Close() error {
	s.closeMu.Lock()
	if s.closed {
		s.closeMu.Unlock()
		return nil
	}
	s.closed = true
	close(s.done)
	close(s.reqs)
	s.closeMu.Unlock()
	s.wg.Wait()
	var errs []error
	s.mu.Lock()
	logs := make([]*Log, 0, len(s.logs))
	for _, l := range s.logs {
		logs = append(logs, l)
	}
	s.mu.Unlock()
	for _, l := range logs {
		if err := l.persistMeta(false); err != nil {
			errs = append(errs, err)
		}
	}
	if err := s.syncDB(); err != nil {
		errs = append(errs, fmt.Errorf("logstore: sync on close: %w", err))
	} else if s.cl != nil {
		if err := s.cl.close(); err != nil {
			errs = append(errs, fmt.Errorf("logstore: close commit log: %w", err))
		}
	}
	s.refs.close()
	if err := s.db.Close(); err != nil {
		errs = append(errs, fmt.Errorf("logstore: close badger: %w", err))
	}
	return errors.Join(errs...)
}

// enter marks the start of an operation that touches the database; it
// fails with record.ErrClosed after Close. The caller must call leave.
func (s *Store) enter() error {
	s.closeMu.RLock()
	if s.closed {
		s.closeMu.RUnlock()
		return record.ErrClosed
	}
	return nil
}

func (s *Store) leave() { s.closeMu.RUnlock() }

// FsyncMode returns the store's durability mode.
func (s *Store) FsyncMode() FsyncMode { return s.opts.Fsync }

// Log returns the log id, creating it with base 0 on first use. An existing
// log is returned whatever its base.
func (s *Store) Log(id record.LogID) (*Log, error) {
	if l, ok := s.Lookup(id); ok {
		return l, nil
	}
	return s.CreateLog(id, LogOptions{})
}

// CreateLog returns the log id, creating it with o on first use. An existing
// log created with a different base is refused with ErrBaseMismatch. The
// creation's write and sync run outside the store's lock, so lookups of
// other logs (every request) never wait for them; concurrent creations of
// one id wait for the first.
func (s *Store) CreateLog(id record.LogID, o LogOptions) (*Log, error) {
	if err := s.enter(); err != nil {
		return nil, err
	}
	defer s.leave()
	s.mu.Lock()
	for {
		if l, ok := s.logs[id]; ok {
			s.mu.Unlock()
			if l.base != o.Base {
				return nil, fmt.Errorf("logstore: log %s has base %d, asked %d: %w", id, l.base, o.Base, ErrBaseMismatch)
			}
			return l, nil
		}
		busy, ok := s.creating[id]
		if !ok {
			break
		}
		s.mu.Unlock()
		<-busy
		s.mu.Lock()
	}
	if o.Base >= FromEarliest {
		s.mu.Unlock()
		return nil, fmt.Errorf("logstore: base %d is reserved: %w", o.Base, ErrBadRecord)
	}
	m := logMeta{num: s.nextNum, base: o.Base, segRecs: s.opts.SegmentRecords, start: o.Base, committed: o.Base}
	s.nextNum++ // a failed creation leaves an unused number: harmless
	busy := make(chan struct{})
	if s.creating == nil {
		s.creating = map[record.LogID]chan struct{}{}
	}
	s.creating[id] = busy
	s.mu.Unlock()
	err := s.db.Update(func(txn *badger.Txn) error {
		if err := txn.Set(catalogKey(id), encodeMeta(m, s.refsFormat)); err != nil {
			return err
		}
		return txn.Set(trimMarkKey(m.num), encodeTrimMark(0))
	})
	if err == nil {
		err = s.syncDB()
	}
	s.mu.Lock()
	delete(s.creating, id)
	close(busy)
	if err != nil {
		s.mu.Unlock()
		return nil, fmt.Errorf("logstore: create log %s: %w", id, err)
	}
	l := newLog(s, id, m)
	s.logs[id] = l
	s.mu.Unlock()
	s.log.V(1).Info("created log", "log", id.String(), "base", o.Base, "segmentRecords", m.segRecs)
	return l, nil
}

// Lookup returns an existing log without creating it; ok is false if the
// log does not exist.
func (s *Store) Lookup(id record.LogID) (l *Log, ok bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	l, ok = s.logs[id]
	return l, ok
}

// Logs lists the logs that exist, sorted by stream, shard and log kind.
func (s *Store) Logs() []record.LogID {
	s.mu.Lock()
	ids := make([]record.LogID, 0, len(s.logs))
	for id := range s.logs {
		ids = append(ids, id)
	}
	s.mu.Unlock()
	sort.Slice(ids, func(i, j int) bool {
		a, b := ids[i], ids[j]
		if a.Stream != b.Stream {
			return a.Stream < b.Stream
		}
		if a.Shard != b.Shard {
			return a.Shard < b.Shard
		}
		return a.Log < b.Log
	})
	return ids
}

// loadCatalog reads every log's meta and derives its state.
func (s *Store) loadCatalog() error {
	type entry struct {
		id record.LogID
		m  logMeta
	}
	var entries []entry
	err := s.db.View(func(txn *badger.Txn) error {
		it := txn.NewIterator(badger.IteratorOptions{Prefix: []byte{prefixCatalog}})
		defer it.Close()
		for it.Rewind(); it.Valid(); it.Next() {
			item := it.Item()
			id, err := parseCatalogKey(item.Key())
			if err != nil {
				return fmt.Errorf("logstore: catalog key %x: %w", item.Key(), err)
			}
			v, err := item.ValueCopy(nil)
			if err != nil {
				return err
			}
			m, err := decodeMeta(v)
			if err != nil {
				// The catalog is not derived: without it the log's number
				// and base are unknown. Refuse rather than guess.
				return &record.CorruptError{Log: id, Reason: "log meta: " + err.Error()}
			}
			entries = append(entries, entry{id, m})
		}
		return nil
	})
	if err != nil {
		return err
	}
	for _, e := range entries {
		l := newLog(s, e.id, e.m)
		if err := l.load(); err != nil {
			return err
		}
		s.logs[e.id] = l
		if e.m.num >= s.nextNum {
			s.nextNum = e.m.num + 1
		}
	}
	return nil
}

// fail stops the store taking writes: for good, unless err is ENOSPC or
// EDQUOT, which puts it in the storage-full state until it rolls back
// (space.go).
func (s *Store) fail(err error) {
	if isNoSpace(err) {
		s.noSpace(err)
		return
	}
	s.failSticky(err)
}

// failSticky stops the store taking writes for good, whatever err is.
func (s *Store) failSticky(err error) {
	s.failMu.Lock()
	if s.failed == nil {
		s.failed = err
		s.log.Error(err, "log store refuses further writes")
	}
	s.failMu.Unlock()
}

func (s *Store) failure() error {
	s.failMu.Lock()
	defer s.failMu.Unlock()
	return s.failed
}

// sync runs one DB.Sync (syncDB: it records what it covered) and reports
// it.
func (s *Store) sync() error {
	t := time.Now()
	err := s.syncDB()
	s.opts.Metrics.ObserveSync(time.Since(t))
	return err
}

// syncCommitted makes the groups whose frames it is given durable: it
// writes frames at offset base of commit-log file seq, where the writer
// placed them, and syncs the commit log (one direct write, or a write and
// an fdatasync). Only the syncer calls it, under FsyncOnCommit, where the
// commit log is always open; it does not depend on badger's commit of
// those groups having finished.
func (s *Store) syncCommitted(frames []byte, seq uint64, base int64) error {
	t := time.Now()
	err := s.cl.writeFrames(frames, seq, base)
	if err == nil {
		err = s.cl.sync()
	}
	s.opts.Metrics.ObserveSync(time.Since(t))
	return err
}

// checkpointLocked puts everything the commit log holds into badger,
// synced, and starts a new commit-log file, so no replay can bring back
// what the caller is about to remove: it waits until the current file's
// frames are durable, records that replays start at the next file and
// syncs badger with it, then rotates. Caller holds wmu.
func (s *Store) checkpointLocked() error {
	if s.cl == nil {
		return nil
	}
	seq := s.cl.current()
	err := s.cl.waitDurable(seq, s.clNext)
	if err == nil {
		err = s.db.Update(func(txn *badger.Txn) error { return txn.Set(replayMarkKey(), encodeReplayMark(seq+1)) })
	}
	if err == nil {
		err = s.sync()
	}
	if err == nil {
		err = s.cl.rotate()
	}
	if err == nil {
		s.clNext = 0
		err = s.retireFilesLocked()
		s.clRefs = s.keepsRefs()
	}
	if err != nil {
		err = fmt.Errorf("logstore: checkpoint: %w", err)
		s.fail(err)
	}
	return err
}

// hasKey reports whether key exists in db.
func hasKey(db *badger.DB, key []byte) (bool, error) {
	err := db.View(func(txn *badger.Txn) error {
		_, err := txn.Get(key)
		return err
	})
	switch {
	case err == nil:
		return true, nil
	case errors.Is(err, badger.ErrKeyNotFound):
		return false, nil
	}
	return false, fmt.Errorf("logstore: read %q: %w", key, err)
}

// badgerLogger routes badger's logging to logr at V(1).
type badgerLogger struct{ l logr.Logger }

func (b badgerLogger) Errorf(f string, a ...any) { b.l.Error(nil, fmt.Sprintf(f, a...)) }
func (b badgerLogger) Warningf(f string, a ...any) {
	b.l.Info(fmt.Sprintf(f, a...))
}
func (b badgerLogger) Infof(f string, a ...any)  { b.l.V(1).Info(fmt.Sprintf(f, a...)) }
func (b badgerLogger) Debugf(f string, a ...any) { b.l.V(2).Info(fmt.Sprintf(f, a...)) }
