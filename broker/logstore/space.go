package logstore

import (
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"golang.org/x/sys/unix"

	"felix.dev/felix/broker/record"
)

// A full disk. Two defences, in this order:
//
//   - The free-space floor (Options.MinFreeBytes). A monitor measures the
//     free space of the file system holding the store (statfs) every
//     Options.SpaceCheckInterval, and the writer measures again whenever
//     it has written a quarter of the floor since the last measure. Below
//     the floor the store refuses new appends with ErrStorageFull before
//     they touch the disk; trims (they free space and write one small
//     record) are still taken. badger writes its memtable and value log
//     through memory maps, and a write to a mapped page the file system
//     cannot back kills the process with SIGBUS, so the floor is the
//     defence that matters: it must stay above what badger and the commit
//     log write in the background (a memtable flush, a spare commit-log
//     file, compactions).
//   - ENOSPC or EDQUOT from a write the store has not acknowledged (a
//     commit-log write or sync, a checkpoint): nothing after the failed
//     write was acknowledged, so the store does not fail for good as it
//     does for other I/O errors (EIO). It refuses every write with
//     ErrStorageFull, and once some room is back it rolls back to its
//     last durable state: it waits for the syncer to answer everything
//     handed to it, checkpoints the commit log past the file the failed
//     frames went to (so no replay brings them back), and truncates every
//     log whose tail is above what was acknowledged. Until then Describe
//     reports the acknowledged tail.
//
// Writes resume by themselves when the free space is back above the floor
// plus a margin (ResumeFreeBytes), so the state does not flap at the floor.

// DefaultMinFreeBytes is the free-space floor brokers use unless told
// otherwise: room for a 64 MiB memtable flush, a 64 MiB commit-log spare
// and compactions, with some to spare.
const DefaultMinFreeBytes = 256 << 20

// DefaultSpaceCheckInterval is how often the monitor measures free space
// when Options.SpaceCheckInterval is zero.
const DefaultSpaceCheckInterval = time.Second

// minResumeMargin is the least margin above the floor before writes
// resume, and the room a rollback after ENOSPC waits for.
const minResumeMargin = 4 << 20

// StorageFullError is the error of a write refused for want of space. It
// matches record.ErrStorageFull (errors.Is).
type StorageFullError struct {
	// Reason says why: "below the free-space floor" or the ENOSPC error.
	Reason string
	// Free and Floor are the free bytes last measured and the floor.
	Free, Floor uint64
	// Err is the ENOSPC or EDQUOT error, if one was the cause.
	Err error
}

// Unwrap returns the ENOSPC or EDQUOT error, if one was the cause.
func (e *StorageFullError) Unwrap() error { return e.Err }

// asFull returns err as a StorageFullError when it is ENOSPC or EDQUOT.
func asFull(err error) error {
	if !isNoSpace(err) {
		return err
	}
	return &StorageFullError{Reason: "a write ran out of space and was not acknowledged", Err: err}
}

func (e *StorageFullError) Error() string {
	return fmt.Sprintf("storage full: %s (%d bytes free, floor %d); writes resume when space returns", e.Reason, e.Free, e.Floor)
}

// Is makes errors.Is(err, record.ErrStorageFull) true.
func (e *StorageFullError) Is(target error) bool { return target == record.ErrStorageFull }

// ErrStorageFull is record.ErrStorageFull.
var ErrStorageFull = record.ErrStorageFull

// isNoSpace reports whether err is the file system running out of space
// or quota: recoverable, unlike other I/O errors.
func isNoSpace(err error) bool {
	return errors.Is(err, syscall.ENOSPC) || errors.Is(err, syscall.EDQUOT)
}

// SpaceMetrics is an optional interface of Options.Metrics: a Metrics that
// implements it is told about the free space and every write refused for
// want of it.
type SpaceMetrics interface {
	// ObserveSpace is called after every measure: whether writes are
	// refused, and the free bytes.
	ObserveSpace(full bool, free uint64)
	// ObserveStorageFullRefusal is called once per write refused with
	// ErrStorageFull.
	ObserveStorageFullRefusal()
}

// SpaceState is the store's view of its free space (Store.Space).
type SpaceState struct {
	// Full: new appends are refused with ErrStorageFull.
	Full bool
	// Reason says why when Full.
	Reason string
	// Free is the free bytes last measured; Floor and Resume the
	// thresholds (Options.MinFreeBytes, ResumeFreeBytes).
	Free, Floor, Resume uint64
	// RollbackPending: a write hit ENOSPC and the store has not yet rolled
	// back to its last durable state (every write is refused until then,
	// trims too).
	RollbackPending bool
}

// space is the store's full-disk state.
type space struct {
	full atomic.Bool // fast path of the refusal
	// sinceCheck counts bytes written since the last measure.
	sinceCheck atomic.Int64

	mu       sync.Mutex
	reason   string
	free     uint64
	noSpace  error // the ENOSPC error awaiting rollback
	measured bool
}

// ResumeFreeBytes is the free space at which writes refused under the
// floor resume: the floor plus an eighth of it, at least 4 MiB more.
func ResumeFreeBytes(minFree uint64) uint64 {
	return minFree + max(minFree/8, minResumeMargin)
}

// statfsFree returns the bytes available to unprivileged writers on the
// file system holding dir.
func statfsFree(dir string) (uint64, error) {
	var st unix.Statfs_t
	if err := unix.Statfs(dir, &st); err != nil {
		return 0, fmt.Errorf("logstore: statfs %s: %w", dir, err)
	}
	return st.Bavail * uint64(st.Bsize), nil
}

// Space returns the store's free-space state.
func (s *Store) Space() SpaceState {
	s.space.mu.Lock()
	defer s.space.mu.Unlock()
	return SpaceState{Full: s.space.full.Load(), Reason: s.space.reason, Free: s.space.free,
		Floor: s.opts.MinFreeBytes, Resume: ResumeFreeBytes(s.opts.MinFreeBytes), RollbackPending: s.space.noSpace != nil}
}

// fullError returns the refusal for r, or nil if r may be written.
// Trims (and replicated batches of trims only) are taken under the floor:
// they free space. Nothing is taken while a rollback is pending.
func (s *Store) fullError(r *writeReq) error {
	if !s.space.full.Load() {
		return nil
	}
	s.space.mu.Lock()
	defer s.space.mu.Unlock()
	if !s.space.full.Load() {
		return nil
	}
	if s.space.noSpace == nil && (r.op == opTrim || (r.op == opReplicated && len(r.trims) == r.n)) {
		return nil
	}
	return &StorageFullError{Reason: s.space.reason, Free: s.space.free, Floor: s.opts.MinFreeBytes}
}

// rollbackPending reports whether a write hit ENOSPC and the store has not
// rolled back yet.
func (s *Store) rollbackPending() bool {
	if !s.space.full.Load() {
		return false
	}
	s.space.mu.Lock()
	defer s.space.mu.Unlock()
	return s.space.noSpace != nil
}

// noSpace puts the store in the ENOSPC state: every write refused until
// the rollback (CheckSpace).
func (s *Store) noSpace(err error) {
	s.space.mu.Lock()
	defer s.space.mu.Unlock()
	if s.space.noSpace != nil {
		return
	}
	s.space.noSpace = err
	s.space.reason = err.Error()
	if !s.space.full.Swap(true) {
		s.log.Error(err, "storage full: the disk is out of space; writes are refused until space returns, reads are served",
			"floor", s.opts.MinFreeBytes)
	}
	if m, ok := s.opts.Metrics.(SpaceMetrics); ok {
		m.ObserveSpace(true, s.space.free)
	}
}

// noteWritten counts bytes the writer wrote and measures free space again
// once they reach a quarter of the floor, so a fast writer cannot run far
// past the floor between two monitor ticks. Caller holds wmu.
func (s *Store) noteWritten(n int) {
	if s.opts.MinFreeBytes == 0 {
		return
	}
	if s.space.sinceCheck.Add(int64(n)) >= int64(max(s.opts.MinFreeBytes/4, 1<<20)) {
		s.measureLocked()
	}
}

// CheckSpace measures the free space once and moves the store's state:
// full below the floor, writes resumed at ResumeFreeBytes, and after an
// ENOSPC the rollback once there is room for it. The monitor calls it
// every Options.SpaceCheckInterval; tests call it directly.
func (s *Store) CheckSpace() error {
	if err := s.enter(); err != nil {
		return err
	}
	defer s.leave()
	free, err := s.measure()
	if err != nil {
		return err
	}
	if s.rollbackPending() && free >= ResumeFreeBytes(s.opts.MinFreeBytes)-s.opts.MinFreeBytes {
		s.wmu.Lock()
		err = s.rollBackLocked()
		s.wmu.Unlock()
		if err != nil {
			return err
		}
		_, err = s.measure()
	}
	return err
}

// measure takes wmu and measures.
func (s *Store) measure() (uint64, error) {
	s.wmu.Lock()
	defer s.wmu.Unlock()
	return s.measureLocked()
}

// measureLocked measures the free space and applies the floor. Caller
// holds wmu.
func (s *Store) measureLocked() (uint64, error) {
	s.space.sinceCheck.Store(0)
	free, err := s.opts.FreeSpace(s.opts.Dir)
	if err != nil {
		return 0, err
	}
	floor, resume := s.opts.MinFreeBytes, ResumeFreeBytes(s.opts.MinFreeBytes)
	s.space.mu.Lock()
	defer s.space.mu.Unlock()
	s.space.free, s.space.measured = free, true
	full := s.space.full.Load()
	switch {
	case s.space.noSpace != nil:
		// Full until the rollback.
	case !full && floor > 0 && free < floor:
		s.space.reason = "below the free-space floor"
		s.space.full.Store(true)
		full = true
		s.log.Error(&StorageFullError{Reason: s.space.reason, Free: free, Floor: floor},
			"storage full: appends are refused until space returns, reads are served", "free", free, "floor", floor, "resumeAt", resume)
	case full && free >= resume:
		s.space.reason = ""
		s.space.full.Store(false)
		full = false
		s.log.Info("storage space is back: appends resume", "free", free, "floor", floor)
	}
	if m, ok := s.opts.Metrics.(SpaceMetrics); ok {
		m.ObserveSpace(full, free)
	}
	return free, nil
}

// spaceMonitor measures every SpaceCheckInterval until Close; first is
// the error of the measure Open made (already logged).
func (s *Store) spaceMonitor(first error) {
	defer s.wg.Done()
	t := time.NewTicker(s.opts.SpaceCheckInterval)
	defer t.Stop()
	// A failing check is logged when it starts failing and when the
	// failure changes class (checkErrClass), not on every tick.
	failing, last := first != nil, checkErrClass(first)
	for {
		select {
		case <-s.done:
			return
		case <-t.C:
			err := s.CheckSpace()
			switch {
			case err == nil:
				if failing {
					s.log.Info("free-space check succeeds again")
				}
				failing = false
			case errors.Is(err, record.ErrClosed):
				return
			case !failing || checkErrClass(err) != last:
				failing, last = true, checkErrClass(err)
				s.log.Error(err, "free-space check")
			}
		}
	}
}

// checkErrClass tells two failed free-space checks apart for logging: by
// the system error number they carry (zero for none), never by their text.
func checkErrClass(err error) syscall.Errno {
	var errno syscall.Errno
	if err != nil {
		errors.As(err, &errno)
	}
	return errno
}

// rollBackLocked brings the store back to its last durable state after a
// write hit ENOSPC, so writes can resume: every group handed to the syncer
// is answered (they all failed), the commit log is checkpointed past the
// file the failed frames went to, and each log whose tail is above what
// was acknowledged is truncated back. Caller holds wmu (the writer takes
// nothing meanwhile) and has entered the store.
func (s *Store) rollBackLocked() error {
	if err := s.failure(); err != nil {
		return fmt.Errorf("logstore: store failed earlier: %w", err)
	}
	if s.cl != nil {
		// The writer holds wmu while it hands groups to the syncer, so
		// the barrier goes after all of them.
		b := &syncGroup{committed: make(chan struct{}), barrier: make(chan struct{})}
		close(b.committed)
		s.syncQ <- b
		<-b.barrier
		// Frames past the durable size failed; the checkpoint must not
		// wait for them, and the file they went to is never written
		// again (the checkpoint rotates).
		s.clNext = s.cl.durableSize.Load()
		s.cl.clearFailure()
	}
	if err := s.checkpointLocked(); err != nil {
		if s.cl != nil {
			s.cl.fail(err)
		}
		return err
	}
	if s.cl == nil {
		// Everything badger committed is made durable before the
		// truncations below decide what stays.
		if err := s.sync(); err != nil {
			s.fail(err)
			return err
		}
	}
	s.mu.Lock()
	logs := make([]*Log, 0, len(s.logs))
	for _, l := range s.logs {
		logs = append(logs, l)
	}
	s.mu.Unlock()
	for _, l := range logs {
		l.mu.Lock()
		next, start := l.next, l.start
		// Badger's copy is synced now (the checkpoint): what is committed
		// stays, what was never acknowledged goes.
		cut := max(l.durable, l.committed)
		l.mu.Unlock()
		if next <= cut {
			continue
		}
		if err := l.truncateLocked(cut, next, start); err != nil {
			if s.cl != nil {
				s.cl.fail(err)
			}
			return err
		}
		l.mu.Lock()
		l.durable = max(l.durable, cut)
		if s.opts.AutoCommit {
			l.applyCommittedLocked(l.durable)
		}
		l.wakeLocked()
		l.mu.Unlock()
		s.log.Info("rolled back writes that were not acknowledged", "log", l.id.String(), "from", cut, "tail", next)
	}
	s.space.mu.Lock()
	cause := s.space.noSpace
	s.space.noSpace = nil
	s.space.reason = "below the free-space floor"
	s.space.mu.Unlock()
	s.log.Info("rolled back to the last durable state after running out of space", "cause", cause.Error())
	return nil
}

// roomForSpare reports whether a commit-log spare (commitLogMaxBytes of
// zeros) fits above the free-space floor: a spare written into the last
// free space would make the next frame hit ENOSPC.
func (s *Store) roomForSpare() bool {
	free, err := s.opts.FreeSpace(s.opts.Dir)
	return err == nil && free >= s.opts.MinFreeBytes+commitLogMaxBytes+minResumeMargin
}

// SpaceErr returns a StorageFullError while appends are refused for want
// of space, else nil: the reason a broker's /ready gives.
func (s *Store) SpaceErr() error {
	st := s.Space()
	if !st.Full {
		return nil
	}
	return &StorageFullError{Reason: st.Reason, Free: st.Free, Floor: st.Floor}
}

// countRefusal tells the metrics about a write refused (or failed) with
// ErrStorageFull.
func (s *Store) countRefusal(err error) {
	if m, ok := s.opts.Metrics.(SpaceMetrics); ok && errors.Is(err, ErrStorageFull) {
		m.ObserveStorageFullRefusal()
	}
}
