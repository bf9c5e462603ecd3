package felixd

import (
	"context"
	"errors"
	"fmt"

	"github.com/go-logr/logr"

	"felix.dev/felix/broker/record"
)

// ErrNotWritten is returned by Holder.Append, Snapshot and Trim when the
// tail had moved: nothing of the call was written, the holder re-read the
// stream from its cursor (so the workload state now includes whatever
// landed) and is still in charge. Call Workload.Next again.
var ErrNotWritten = errors.New("felixd: tail moved: not written, state re-read from the cursor")

// DefaultReadBatch is the number of records a catch-up read asks for when
// HolderConfig.ReadBatch is zero.
const DefaultReadBatch = 1024

// HolderConfig configures a Holder.
type HolderConfig struct {
	// Log is the shard the workload writes. Required.
	Log Log
	// Epoch is the lease epoch this holder writes with (Lease.Acquire).
	// Required, at least 1.
	Epoch uint64
	// Workload is the state machine. Required.
	Workload Workload
	// SnapshotEvery is the number of outputs after which Due reports a
	// snapshot is due; zero means never.
	SnapshotEvery int
	// ReadBatch bounds one catch-up read; zero means DefaultReadBatch.
	ReadBatch int
	// Logger receives the holder's log lines.
	Logger logr.Logger

	// broken turns one rule off; set only by this package's tests to show
	// what goes wrong without it.
	broken brokenRule
}

// brokenRule names a rule a test switched off.
type brokenRule uint8

const (
	ruleKept                 brokenRule = iota
	brokenReadEarliest                  // [FD-1] re-read from earliest, not the cursor
	brokenTailFromRefusal               // [FD-2] adopt an OffsetMismatch's tail
	brokenNoOpTrimSkipsCheck            // [FD-3] skip a no-op trim, take the tail from Describe
	brokenIgnoreRetention               // [FD-4] start on a stream with retention on
	brokenStartAtFloor                  // [FD-1] first read at the floor Describe reports, not the base
)

// Holder writes one workload's output as the holder of one lease epoch. It
// owns the holder's cursor (where it re-reads from) and expected tail (where
// its next write must land). Not safe for concurrent use.
//
// The expected tail comes only from the holder's reads and its own
// acknowledged answers [FD-2]; the first read starts at the base and
// re-reads at the cursor, never at earliest or the floor [FD-1]; every trim is sent to the log, no-ops included, and only
// its answer moves the tail [FD-3].
type Holder struct {
	cfg      HolderConfig
	log      logr.Logger
	cursor   uint64 // next offset to re-read from
	expected uint64 // the tail the next write must find
	fenced   bool   // the fenced write was acknowledged
	retired  bool

	sinceSnapshot int    // outputs folded since the latest snapshot
	snapshotAt    uint64 // offset of the latest snapshot seen
}

// NewHolder returns a holder; Start must succeed before any other call.
func NewHolder(cfg HolderConfig) (*Holder, error) {
	if cfg.Log == nil || cfg.Workload == nil {
		return nil, errors.New("felixd: holder needs a Log and a Workload")
	}
	if cfg.Epoch == 0 {
		return nil, errors.New("felixd: epoch must be at least 1")
	}
	if cfg.ReadBatch <= 0 {
		cfg.ReadBatch = DefaultReadBatch
	}
	return &Holder{cfg: cfg, log: cfg.Logger.WithValues("epoch", cfg.Epoch)}, nil
}

// Epoch returns the holder's epoch.
func (h *Holder) Epoch() uint64 { return h.cfg.Epoch }

// Cursor returns where the holder re-reads from.
func (h *Holder) Cursor() uint64 { return h.cursor }

// Expected returns the tail the holder's next write must find.
func (h *Holder) Expected() uint64 { return h.expected }

// Retired reports whether the holder saw a newer epoch.
func (h *Holder) Retired() bool { return h.retired }

// Start refuses a log whose retention is on [FD-4], sets the cursor once to
// the shard's base (its first offset ever, not the floor [FD-1]), rebuilds
// the workload's state from there (latest snapshot plus the records after
// it) and makes the fenced write: a tail-conditional append carrying the
// epoch, before any output. It returns ErrRetired when a newer epoch is
// already visible.
//
// The first read starts at the base so that a floor set while this holder
// was acquiring (or frozen before its first write) is met as a read below
// the floor: refused with CursorTooOld carrying the trim's epoch, which
// retires the holder if that epoch is newer. Starting at the floor would be
// reading from earliest under another name: a newer holder's trim record
// at the floor is skipped by reads, and the holder would take the tail and
// write after the newer holder. A refusal whose trim epoch is not newer
// resumes at its floor.
func (h *Holder) Start(ctx context.Context) error {
	info, err := h.cfg.Log.Describe(ctx)
	if err != nil {
		return fmt.Errorf("felixd: describe: %w", err)
	}
	if info.Retention == RetentionOn && h.cfg.broken != brokenIgnoreRetention {
		return fmt.Errorf("%w: the log reports retention on [FD-4]", ErrRetention)
	}
	// The only position not learned from a read or an own answer: a
	// starting point, not a tail. The base never moves, so the first read
	// from it is refused with the trim tag whenever any trim moved the
	// floor, a newer holder's included [FD-1].
	start := info.Base
	if h.cfg.broken == brokenStartAtFloor {
		start = info.Floor // the bug: the floor, as reading from earliest would resolve it
	}
	h.cursor, h.expected = start, start
	if err := h.cfg.Workload.Restore(nil); err != nil {
		return fmt.Errorf("felixd: restore initial state: %w", err)
	}
	for {
		if err := h.catchUp(ctx); err != nil {
			return err
		}
		tail, err := h.cfg.Log.Append(ctx, []record.Record{{Headers: headersFor(h.cfg.Epoch, KindFence)}}, h.expected)
		if err == nil {
			h.expected, h.cursor, h.fenced = tail, tail, true
			h.log.Info("fenced write acknowledged", "tail", tail)
			return nil
		}
		if !isMismatch(err) && !errors.Is(err, ErrUnknownOutcome) {
			return fmt.Errorf("felixd: fenced write: %w", err)
		}
		// The tail moved (or the answer was lost): re-read from the
		// cursor and try again at the tail read [FD-2].
		h.log.V(1).Info("fenced write refused; re-reading", "err", err.Error())
		if err := ctx.Err(); err != nil {
			return err
		}
	}
}

// Append appends outputs as one batch under the tail check and, once
// acknowledged, folds them into the workload. On a moved tail it re-reads
// from the cursor and returns ErrNotWritten, or ErrRetired.
func (h *Holder) Append(ctx context.Context, outputs [][]byte) error {
	if err := h.writable(); err != nil {
		return err
	}
	if len(outputs) == 0 {
		return nil
	}
	recs := make([]record.Record, len(outputs))
	for i, p := range outputs {
		recs[i] = record.Record{Headers: headersFor(h.cfg.Epoch, KindOutput), Payload: p}
	}
	tail, err := h.cfg.Log.Append(ctx, recs, h.expected)
	if err != nil {
		return h.refused(ctx, "append", err)
	}
	for _, p := range outputs {
		if err := h.cfg.Workload.Apply(p); err != nil {
			return fmt.Errorf("felixd: apply own output: %w", err)
		}
	}
	h.sinceSnapshot += len(outputs)
	h.expected, h.cursor = tail, tail
	return nil
}

// SnapshotDue reports whether SnapshotEvery outputs were folded since the
// latest snapshot.
func (h *Holder) SnapshotDue() bool {
	return h.cfg.SnapshotEvery > 0 && h.sinceSnapshot >= h.cfg.SnapshotEvery
}

// Snapshot appends the workload's snapshot as a record with header
// felixd-kind=snapshot under the tail check, then trims below it: the trim
// floor is the snapshot's offset, so the stream starts at the snapshot.
func (h *Holder) Snapshot(ctx context.Context) error {
	if err := h.writable(); err != nil {
		return err
	}
	state, err := h.cfg.Workload.Snapshot()
	if err != nil {
		return fmt.Errorf("felixd: snapshot: %w", err)
	}
	tail, err := h.cfg.Log.Append(ctx, []record.Record{{Headers: headersFor(h.cfg.Epoch, KindSnapshot), Payload: state}}, h.expected)
	if err != nil {
		return h.refused(ctx, "snapshot", err)
	}
	h.expected, h.cursor = tail, tail
	h.snapshotAt, h.sinceSnapshot = tail-1, 0
	return h.Trim(ctx, h.snapshotAt)
}

// Trim asks for a head trim to floor (at most the holder's expected tail,
// where the trim record lands) carrying the epoch in its headers. It is
// always sent, even when floor is at or below the current floor: the log
// checks the tail of a no-op trim too, and the trim's answer is the only
// tail a holder takes from a trim [FD-3].
func (h *Holder) Trim(ctx context.Context, floor uint64) error {
	if err := h.writable(); err != nil {
		return err
	}
	if floor > h.expected {
		return fmt.Errorf("felixd: trim floor %d above the holder's tail %d", floor, h.expected)
	}
	if h.cfg.broken == brokenNoOpTrimSkipsCheck {
		if info, err := h.cfg.Log.Describe(ctx); err == nil && floor <= info.Floor {
			h.expected = info.Tail // the bug: a tail nobody checked
			return nil
		}
	}
	res, err := h.cfg.Log.Trim(ctx, floor, h.expected, headersFor(h.cfg.Epoch, KindTrim))
	if err != nil {
		return h.refused(ctx, "trim", err)
	}
	h.expected, h.cursor = res.Tail, res.Tail
	return nil
}

// CatchUp re-reads from the cursor, folding what it reads; ErrRetired if it
// saw a newer epoch.
func (h *Holder) CatchUp(ctx context.Context) error {
	if h.retired {
		return ErrRetired
	}
	return h.catchUp(ctx)
}

func (h *Holder) writable() error {
	switch {
	case h.retired:
		return ErrRetired
	case !h.fenced:
		return errors.New("felixd: no fenced write yet: call Start first")
	}
	return nil
}

// refused handles a failed conditional write: a moved tail or an unknown
// outcome means re-read from the cursor (never adopt the refusal's tail,
// [FD-2]); anything else is returned.
func (h *Holder) refused(ctx context.Context, what string, err error) error {
	var om *record.OffsetMismatchError
	switch {
	case errors.As(err, &om):
		if h.cfg.broken == brokenTailFromRefusal {
			h.expected = om.Tail // the bug: a tail the holder never read
			return ErrNotWritten
		}
	case errors.Is(err, ErrUnknownOutcome):
	default:
		return fmt.Errorf("felixd: %s: %w", what, err)
	}
	h.log.V(1).Info("write refused; re-reading from the cursor", "what", what, "cursor", h.cursor, "err", err.Error())
	if err := h.catchUp(ctx); err != nil {
		return err
	}
	return ErrNotWritten
}

// catchUp reads from the cursor to the end of the stream, folding records
// into the workload, and sets the expected tail to where it read to. A
// record or a CursorTooOld trim tag from a newer epoch retires the holder.
func (h *Holder) catchUp(ctx context.Context) error {
	pos := At(h.cursor)
	if h.cfg.broken == brokenReadEarliest {
		pos = Position{Earliest: true}
		if err := h.restore(nil); err != nil {
			return err
		}
	}
	for {
		res, err := h.cfg.Log.Read(ctx, pos, h.cfg.ReadBatch)
		var too *record.CursorTooOldError
		if errors.As(err, &too) {
			if e, ok := EpochOf(too.TrimHeaders); ok && e > h.cfg.Epoch {
				return h.retire("a CursorTooOld carries a newer epoch", e, too.Floor)
			}
			// Trimmed past by an older or the same epoch: resume at the
			// floor, where that trim's snapshot is; the state restarts.
			h.log.Info("cursor below the floor; resuming at the floor", "cursor", pos.Offset, "floor", too.Floor)
			if err := h.restore(nil); err != nil {
				return err
			}
			pos = At(too.Floor)
			continue
		}
		if err != nil {
			return fmt.Errorf("felixd: read from %d: %w", pos.Offset, err)
		}
		for i := range res.Records {
			r := &res.Records[i]
			e, ok := EpochOf(r.Headers)
			if ok && e > h.cfg.Epoch {
				return h.retire("read a record from a newer epoch", e, r.Offset)
			}
			if ok && e < h.cfg.Epoch && h.fenced {
				h.log.Error(nil, "a record from an older epoch follows this holder's fenced write", "offset", r.Offset, "recordEpoch", e)
			}
			if err := h.fold(r); err != nil {
				return err
			}
		}
		done := !pos.Earliest && len(res.Records) == 0 && res.Next == pos.Offset
		pos = At(res.Next)
		if done {
			break
		}
	}
	h.cursor, h.expected = pos.Offset, pos.Offset
	return nil
}

func (h *Holder) retire(why string, newer, at uint64) error {
	h.retired = true
	h.log.Info("retired", "reason", why, "newerEpoch", newer, "at", at)
	return ErrRetired
}

func (h *Holder) restore(snapshot []byte) error {
	h.sinceSnapshot = 0
	if err := h.cfg.Workload.Restore(snapshot); err != nil {
		return fmt.Errorf("felixd: restore: %w", err)
	}
	return nil
}

// fold applies one record read back to the workload state.
func (h *Holder) fold(r *record.Record) error {
	switch KindOf(r.Headers) {
	case KindSnapshot:
		if err := h.restore(r.Payload); err != nil {
			return fmt.Errorf("felixd: snapshot at %d: %w", r.Offset, err)
		}
		h.snapshotAt = r.Offset
	case KindOutput:
		if err := h.cfg.Workload.Apply(r.Payload); err != nil {
			return fmt.Errorf("felixd: output at %d: %w", r.Offset, err)
		}
		h.sinceSnapshot++
	case KindFence:
	default:
		h.log.V(1).Info("skipping a record felixd did not write", "offset", r.Offset)
	}
	return nil
}

func isMismatch(err error) bool {
	var om *record.OffsetMismatchError
	return errors.As(err, &om)
}
