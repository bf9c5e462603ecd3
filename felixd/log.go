package felixd

import (
	"context"
	"errors"

	"felix.dev/felix/broker/record"
)

// Position says where a read starts: at Offset, or at the shard's readable
// start when Earliest is set. felixd itself never reads from earliest
// [FD-1]; the field exists so Log implementations can serve other readers.
type Position struct {
	Offset   uint64
	Earliest bool
}

// At returns the position of an explicit offset.
func At(off uint64) Position { return Position{Offset: off} }

// ReadResult holds data records in offset order (bookkeeping records such as
// trims are skipped by the log) and Next, the offset the following read
// starts at; Next moves past skipped records too.
type ReadResult struct {
	Records []record.Record
	Next    uint64
}

// TrimResult answers a trim: the shard's tail and floor after it. For a
// no-op trim (floor at or below the current floor) Tail is the unchanged
// tail, which the log checked against the expected tail [TR-3].
type TrimResult struct {
	Tail  uint64
	Floor uint64
}

// Retention says whether a log deletes records by age or size.
type Retention uint8

const (
	// RetentionUnknown: the log cannot tell (a broker without the
	// log-policy feature); CheckStream then relies on the FelixStream
	// object, and the broker keeps retention off on a fenced log [TR-7]
	// and a fenced log that holds records fenced [FD-4].
	RetentionUnknown Retention = iota
	// RetentionOff: nothing is deleted except below trims.
	RetentionOff
	// RetentionOn: records may be deleted by age or size [FD-4].
	RetentionOn
)

// Info describes a shard log: Base its first offset ever, Floor the readable
// start, Tail the next offset, and Retention when the log knows it.
type Info struct {
	Base      uint64
	Floor     uint64
	Tail      uint64
	Retention Retention
}

// Log is the shard log a holder writes. broker/client satisfies it through
// ClientLog; tests use an in-process logstore adapter.
//
// Errors: a conditional append or trim whose expected tail is wrong fails
// with an error matching (errors.As) *record.OffsetMismatchError; a read
// below the readable start fails with *record.CursorTooOldError whose
// TrimHeaders are the headers of the trim that set the floor (the trim tag
// must be negotiated). An append or trim whose outcome is unknown fails
// with an error matching ErrUnknownOutcome; felixd then re-reads from its
// cursor rather than sending it again.
type Log interface {
	// Append appends recs as one batch only if the tail equals
	// expectTail, and returns the tail after it.
	Append(ctx context.Context, recs []record.Record, expectTail uint64) (tail uint64, err error)
	// Read returns data records from pos, at most max of them.
	Read(ctx context.Context, pos Position, max int) (ReadResult, error)
	// Trim appends a trim record asking for floor, carrying headers, only
	// if the tail equals expectTail; a no-op trim still checks the tail.
	Trim(ctx context.Context, floor, expectTail uint64, headers []record.Header) (TrimResult, error)
	// Describe returns the log's positions.
	Describe(ctx context.Context) (Info, error)
}

// ErrUnknownOutcome is matched by Log errors of appends and trims that were
// sent but not answered: they may have landed.
var ErrUnknownOutcome = errors.New("felixd: outcome unknown")

// ErrRetired is returned once a holder saw a newer epoch: another holder
// took the workload over. The holder must not write again.
var ErrRetired = errors.New("felixd: retired: a newer epoch holds the workload")

// ErrRetention is returned by CheckStream and Holder.Start for a stream
// whose retention is on, or that is not marked fenced [FD-4].
var ErrRetention = errors.New("felixd: stream must keep retention off")

// ErrAckLeader is returned by CheckStream for a stream acknowledged on
// ack Leader [FD-4]: an acknowledged fenced write held only by the leader
// can vanish at failover, and with it the fence.
var ErrAckLeader = errors.New("felixd: stream must acknowledge on Quorum or All")

// IsStreamRefused reports whether err is a stream check's refusal
// (ErrRetention or ErrAckLeader), as opposed to a failure to read the
// stream's settings.
func IsStreamRefused(err error) bool {
	return errors.Is(err, ErrRetention) || errors.Is(err, ErrAckLeader)
}
