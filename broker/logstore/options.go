package logstore

import (
	"os"
	"time"

	badger "github.com/dgraph-io/badger/v4"
	"github.com/go-logr/logr"

	"felix.dev/felix/broker/record"
)

// FsyncMode is record.FsyncMode: one type for the mode the store applies
// and the run-state records.
type FsyncMode = record.FsyncMode

// The three modes (see record.FsyncMode).
const (
	FsyncOnCommit = record.FsyncOnCommit
	FsyncPeriodic = record.FsyncPeriodic
	FsyncNone     = record.FsyncNone
)

// ParseFsyncMode is record.ParseFsyncMode.
func ParseFsyncMode(s string) (FsyncMode, error) { return record.ParseFsyncMode(s) }

// DefaultFsyncInterval is the background sync interval of FsyncPeriodic when
// Options.FsyncInterval is zero.
const DefaultFsyncInterval = 100 * time.Millisecond

// Default limits applied when the corresponding Options field is zero.
const (
	DefaultSegmentRecords  = 65536
	DefaultMaxRecordBytes  = 1 << 20
	DefaultMaxBatchRecords = 4096
	DefaultMaxBatchBytes   = 4 << 20
)

// Metrics receives the store's measurements. The server implements it with
// prometheus; a nil Metrics in Options means no measurements. Methods are
// called from the store's goroutines and must not block.
type Metrics interface {
	// ObserveAppend is called once per acknowledged append (or trim, or
	// replicated append) with its record count, encoded bytes and the time
	// from submission to acknowledgement.
	ObserveAppend(records, bytes int, d time.Duration)
	// ObserveSyncFanIn is called once per shared DB.Sync under
	// FsyncOnCommit with the number of appends it acknowledged.
	ObserveSyncFanIn(n int)
	// ObserveSync is called once per sync with its duration: a DB.Sync
	// (any mode), or under FsyncOnCommit the commit log's write and sync.
	ObserveSync(d time.Duration)
	// ObserveDelete is called when whole segments are deleted (below the
	// floor or by retention) with the records and value bytes removed.
	ObserveDelete(records int, bytes int64)
}

// Options configures Open. Zero values take the documented defaults.
// BrokerValueThreshold is the ValueThreshold brokers open their stores
// with: every batch of 1 KiB or more is written once, to badger's value
// log, instead of through the tree's write-ahead log, memtable, level-0
// table and compactions. It multiplied the store's throughput by 2 to 6 in
// docs/performance.md ("Issue 5"); the price is value-log garbage
// collection (Store.CollectValueLog) after segments are deleted.
const BrokerValueThreshold int64 = 1 << 10

// DefaultCommitLogFiles is the default Options.CommitLogFiles: 64 files of
// 64 MiB, 4 GiB of batches kept in the commit log.
const DefaultCommitLogFiles = 64

type Options struct {
	// Dir is the badger directory. Required.
	Dir string
	// Fsync is the durability mode; the zero value is FsyncOnCommit.
	Fsync FsyncMode
	// LastRun says what the previous run left on disk (the data
	// directory's run-state tells): it decides whether a batch that does
	// not read back on open is a torn tail, dropped, or damage, reported
	// and never dropped (LastRun, Store.Damaged). The zero value,
	// LastRunUnknown, takes every lost batch that no sync covered for a
	// torn tail.
	LastRun LastRun
	// FsyncInterval is the background sync interval under FsyncPeriodic;
	// zero means DefaultFsyncInterval.
	FsyncInterval time.Duration
	// SegmentRecords is the number of offsets per segment, the unit of
	// deletion [TR-6]; zero means DefaultSegmentRecords. It is fixed per
	// log at creation (a log remembers the value it was created with).
	SegmentRecords uint64
	// MaxRecordBytes bounds one record's payload plus headers; zero means
	// DefaultMaxRecordBytes.
	MaxRecordBytes int
	// MaxBatchRecords bounds the records of one append; zero means
	// DefaultMaxBatchRecords.
	MaxBatchRecords int
	// MaxBatchBytes bounds the encoded size of one append; zero means
	// DefaultMaxBatchBytes. Values above DefaultMaxBatchBytes are lowered
	// to it, so one append always fits one badger transaction.
	MaxBatchBytes int
	// AutoCommit makes every durable write committed at once: the
	// committed mark follows the durable tail. Use it for a single broker
	// (standalone) whose durable trim counts as committed (issue 4.6).
	AutoCommit bool
	// Logger receives the store's log lines; the zero value discards them.
	Logger logr.Logger
	// Metrics receives measurements; nil means none.
	Metrics Metrics
	// Now is the clock used for default timestamps and retention by age;
	// nil means time.Now.
	Now func() time.Time
	// ValueThreshold is the stored batch size from which badger keeps the
	// batch in its value log instead of its LSM tree; zero means badger's
	// default (1 MiB, so nearly every batch is in the tree). A threshold
	// such as 16 KiB halves the bytes written for large batches (measured
	// in docs/performance.md) but deleted segments then return their space
	// only through value-log garbage collection, which Store.Maintain runs
	// when this is set.
	ValueThreshold int64
	// BadgerLogging passes badger's own log lines to Logger at V(1).
	BadgerLogging bool
	// CommitLogValues keeps each batch of at least ValueThreshold bytes
	// only in the commit log, with a ref to it in badger, instead of
	// writing it to badger's value log as well (ref.go). FsyncOnCommit
	// only. A store written with it must be opened by brokers that know
	// refs.
	CommitLogValues bool
	// CommitLogFiles bounds the commit-log files kept for the batches in
	// them under CommitLogValues: while more are kept, new batches go to
	// badger's value log. Zero means DefaultCommitLogFiles.
	CommitLogFiles int

	// MinFreeBytes is the free-space floor of the file system holding Dir:
	// below it new appends are refused with ErrStorageFull until the free
	// space is back at ResumeFreeBytes (space.go). Zero: no floor, and
	// ENOSPC is the only trigger. Brokers use DefaultMinFreeBytes.
	MinFreeBytes uint64
	// SpaceCheckInterval is how often free space is measured; zero means
	// DefaultSpaceCheckInterval, negative no monitor (CheckSpace then
	// measures, as the writer does after a quarter of the floor).
	SpaceCheckInterval time.Duration
	// FreeSpace returns the free bytes of the file system holding dir;
	// nil means statfs (the blocks available to unprivileged writers).
	FreeSpace func(dir string) (uint64, error)

	// clWrite, if set, replaces the commit log's page-cache write (tests
	// inject ENOSPC and EIO with it).
	clWrite func(f *os.File, b []byte, off int64) (int, error)

	// tune, if set, adjusts badger's options last (benchmarks compare
	// settings with it).
	tune func(*badger.Options)
}

func (o Options) withDefaults() Options {
	if o.FsyncInterval <= 0 {
		o.FsyncInterval = DefaultFsyncInterval
	}
	if o.SegmentRecords == 0 {
		o.SegmentRecords = DefaultSegmentRecords
	}
	if o.MaxRecordBytes <= 0 {
		o.MaxRecordBytes = DefaultMaxRecordBytes
	}
	if o.MaxBatchRecords <= 0 {
		o.MaxBatchRecords = DefaultMaxBatchRecords
	}
	if o.MaxBatchBytes <= 0 || o.MaxBatchBytes > DefaultMaxBatchBytes {
		o.MaxBatchBytes = DefaultMaxBatchBytes
	}
	if o.Now == nil {
		o.Now = time.Now
	}
	if o.CommitLogFiles <= 0 {
		o.CommitLogFiles = DefaultCommitLogFiles
	}
	if o.Metrics == nil {
		o.Metrics = nopMetrics{}
	}
	if o.SpaceCheckInterval == 0 {
		o.SpaceCheckInterval = DefaultSpaceCheckInterval
	}
	if o.FreeSpace == nil {
		o.FreeSpace = statfsFree
	}
	return o
}

type nopMetrics struct{}

func (nopMetrics) ObserveAppend(int, int, time.Duration) {}
func (nopMetrics) ObserveSyncFanIn(int)                  {}
func (nopMetrics) ObserveSync(time.Duration)             {}
func (nopMetrics) ObserveDelete(int, int64)              {}
