package record

import (
	"errors"
	"fmt"
)

// ErrOffsetMismatch is matched (errors.Is) by every *OffsetMismatchError.
var ErrOffsetMismatch = errors.New("offset mismatch")

// ErrCursorTooOld is matched (errors.Is) by every *CursorTooOldError.
var ErrCursorTooOld = errors.New("cursor too old")

// ErrShardUnknown is returned for a shard this broker does not hold.
var ErrShardUnknown = errors.New("shard unknown")

// ErrRecordTooLarge is returned for a record or batch over the configured
// limits; nothing of the batch is written.
var ErrRecordTooLarge = errors.New("record too large")

// ErrCorrupt is matched by every *CorruptError.
var ErrCorrupt = errors.New("corrupt record")

// ErrClosed is returned by a store or log used after Close.
var ErrClosed = errors.New("closed")

// OffsetMismatchError refuses a conditional append or trim whose expected
// tail differs from the log's next offset [TR-1]. Tail is the log's next
// offset at the time of the refusal. A lease-holding writer must never adopt
// it as its next expected tail [FD-2].
type OffsetMismatchError struct {
	Expected uint64
	Tail     uint64
}

func (e *OffsetMismatchError) Error() string {
	return fmt.Sprintf("offset mismatch: expected tail %d, current tail %d", e.Expected, e.Tail)
}

// Is makes errors.Is(err, ErrOffsetMismatch) true.
func (e *OffsetMismatchError) Is(target error) bool { return target == ErrOffsetMismatch }

// CursorTooOldError refuses a read starting below the readable start [TR-4].
// Floor is the readable start. TrimHeaders are the headers of the trim record
// that set the floor; nil when no trim set it or when the reader did not
// negotiate the trim tag.
type CursorTooOldError struct {
	From        uint64
	Floor       uint64
	TrimHeaders []Header
}

func (e *CursorTooOldError) Error() string {
	return fmt.Sprintf("cursor too old: read from %d is below the readable start %d", e.From, e.Floor)
}

// Is makes errors.Is(err, ErrCursorTooOld) true.
func (e *CursorTooOldError) Is(target error) bool { return target == ErrCursorTooOld }

// CorruptError reports a record that failed its checksum or could not be
// decoded. It is never skipped silently.
type CorruptError struct {
	Log    LogID
	Offset uint64
	Reason string
}

func (e *CorruptError) Error() string {
	return fmt.Sprintf("corrupt record in %s at offset %d: %s", e.Log, e.Offset, e.Reason)
}

// Is makes errors.Is(err, ErrCorrupt) true.
func (e *CorruptError) Is(target error) bool { return target == ErrCorrupt }

// ErrStorageFull refuses a write because the broker's disk is below its
// free-space floor, or a write hit ENOSPC or EDQUOT and the store has not
// yet rolled back to its last durable state. Reads are still served, and
// writes resume by themselves once space returns: it is retryable. Under
// the floor nothing of the refused write was stored; after ENOSPC the
// write was not acknowledged and is rolled back before writes resume.
var ErrStorageFull = errors.New("storage full")
