package logstore

import (
	"math"
	"time"

	"felix.dev/felix/broker/record"
)

// FromEarliest, passed as the start offset of Read or ReadRaw, resolves to
// the readable start (the floor, [TR-4]); a read from it is never refused as
// too old. FromLatest resolves to the tail (nothing returned until new
// records arrive). Both are reserved values no real offset reaches.
const (
	FromEarliest uint64 = math.MaxUint64 - 1
	FromLatest   uint64 = math.MaxUint64
)

// LogOptions configures a log at creation.
type LogOptions struct {
	// Base is the offset of the log's first record (the shard's base).
	Base uint64
}

// AppendResult describes an acknowledged append: the offsets of its first
// and last record and the log's tail (next offset) right after it.
type AppendResult struct {
	First, Last, Tail uint64
}

// ReadOptions bounds a read. Zero values mean no bound except UpTo, whose
// zero means the durable tail.
type ReadOptions struct {
	// MaxRecords bounds the records returned (skipped bookkeeping records
	// do not count).
	MaxRecords int
	// MaxBytes bounds the payload plus header bytes returned; at least one
	// record is returned if one is available, however large.
	MaxBytes int
	// WithTrimTag asks a CursorTooOldError to carry the headers of the trim
	// that set the floor [TR-4]. Off by default, so a reader that predates
	// trims sees the same refusal it always did.
	WithTrimTag bool
	// UpTo is an exclusive upper bound, e.g. the committed mark; 0 means
	// the durable tail. It is clamped to the durable tail.
	UpTo uint64
}

// ReadResult holds the records read and Next, the offset to read from next.
// Next advances past skipped bookkeeping records too, so Next may be greater
// than the last returned record's offset plus one, and Records may be empty
// while Next moved.
type ReadResult struct {
	Records []record.Record
	Next    uint64
}

// TrimRequest asks for a head trim [TR-2, TR-3]. ExpectTail is required:
// every trim is conditional on the tail. Headers are carried by the trim
// record and returned in CursorTooOld refusals [TR-4]; Epoch is the writer's
// epoch (stored on the record).
type TrimRequest struct {
	Floor      uint64
	ExpectTail uint64
	Headers    []record.Header
	Epoch      uint64
	// Timestamp is Unix nanoseconds; zero means the store's clock.
	Timestamp int64
}

// TrimResult answers a trim. Tail is the log's tail after it (unchanged for
// a no-op). Floor is the floor the trim asked for, or for a no-op the
// current floor. Offset is the trim record's offset (zero for a no-op).
// NoOp reports that the requested floor was at or below the current floor,
// so nothing was written; the tail was still checked [TR-3].
type TrimResult struct {
	Tail, Floor, Offset uint64
	NoOp                bool
}

// Info describes a log. Base is its first offset ever; Start is the first
// offset still stored (raised by segment deletion and retention); Floor is
// the floor set by committed trims (at least Base); Tail is the next offset
// to be written; Durable is the next offset not yet durable per the fsync
// mode (reads without UpTo stop there); Committed is the committed mark
// (exclusive: every offset below it is committed).
type Info struct {
	ID        record.LogID
	Base      uint64
	Start     uint64
	Floor     uint64
	Tail      uint64
	Durable   uint64
	Committed uint64
	Fenced    bool
	Retention RetentionPolicy
	// SegmentRecords is the segment size the log was created with.
	SegmentRecords uint64
	// Damaged: open found the log's stored data damaged (Log.Damage); the
	// log refuses appends and reads until repaired.
	Damaged bool
}

// ReadableStart is the first offset a reader may start at: max(Floor, Start).
func (i Info) ReadableStart() uint64 { return max(i.Floor, i.Start) }

// RetentionPolicy deletes whole segments by age or size [TR-7]. The zero
// value is off (the default). MaxAge deletes a segment whose newest record
// is older than it; MaxBytes deletes the oldest segments while the log's
// stored value bytes exceed it. Retention never deletes the active segment.
type RetentionPolicy struct {
	MaxAge   time.Duration
	MaxBytes int64
}

// Enabled reports whether the policy deletes anything.
func (p RetentionPolicy) Enabled() bool { return p.MaxAge > 0 || p.MaxBytes > 0 }

// DeleteResult reports what a segment deletion removed. Bytes is the size of
// the stored values (encoded batches) removed; badger reclaims the disk
// space in its compactions.
type DeleteResult struct {
	Segments int
	Records  uint64
	Bytes    int64
	// Start is the log's first stored offset afterwards.
	Start uint64
}
