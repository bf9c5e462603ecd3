package logstore

import (
	"errors"

	"felix.dev/felix/broker/record"
)

// ErrBadFsyncMode is record.ErrBadFsyncMode: an unknown fsync mode.
var ErrBadFsyncMode = record.ErrBadFsyncMode

// ErrFloorAboveTrim refuses a trim whose floor is higher than the offset the
// trim record would land at [TR-2].
var ErrFloorAboveTrim = errors.New("trim floor above the trim's own offset")

// ErrRetentionOnFencedStream refuses retention on a fenced log, and fencing a
// log that has retention on [TR-7].
var ErrRetentionOnFencedStream = errors.New("retention refused on a fenced stream")

// ErrBeyondTail is returned by reads starting above the tail and by
// SetCommitted or LastEpochAt past the tail.
var ErrBeyondTail = errors.New("offset beyond tail")

// ErrTruncateCommitted refuses TruncateFrom below the committed mark.
var ErrTruncateCommitted = errors.New("truncate below the committed mark")

// ErrBadRecord refuses an append with a record this entry point does not
// accept (a trim through Append, replicated records that are not dense from
// the tail, a trim record whose floor is above its offset).
var ErrBadRecord = errors.New("bad record")

// ErrBaseMismatch is returned by CreateLog for an existing log created with
// a different base.
var ErrBaseMismatch = errors.New("log exists with a different base")

// ErrNotDamaged refuses Repair of a log with no recorded damage, unless
// RepairOptions.Force.
var ErrNotDamaged = errors.New("log is not damaged")

// ErrRepairLowersFloor refuses Repair at or below the trim record that set
// the log's floor: the floor would move down and records below an
// acknowledged trim would read again [TR-2].
var ErrRepairLowersFloor = errors.New("repair would lower the floor")
