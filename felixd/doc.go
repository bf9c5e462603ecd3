// Package felixd runs a workload while it holds the workload's lease and
// writes the workload's output to one Felix shard with tail-conditional
// writes, so that a holder that lost its lease without knowing it (it froze,
// its clock ran slow) can never write after the holder that replaced it.
// This is the lease-holding writer of seed 004 ("The trim that hid the
// fence"; rules [FD-1..4] in docs/rules.md).
//
// The protocol, per holder:
//
//   - Acquire the workload's coordination.k8s.io Lease (Lease). The epoch
//     is the lease's leaseTransitions after the acquisition: every
//     acquisition raises it, so epochs are unique and monotonic per
//     workload.
//   - Check the stream (CheckStream): retention must be off [FD-4].
//   - Catch up from the holder's own cursor (initialised once from the
//     shard's base, not its floor, then moved only by its reads and its acknowledged
//     answers, never read from earliest [FD-1]), rebuilding the workload's
//     state from the latest snapshot plus the records after it.
//   - Make the fenced write: a tail-conditional append carrying the epoch
//     in the "felixd-epoch" header, before any other output.
//   - Append output under the tail check, save snapshots as records with
//     header felixd-kind=snapshot, and trim below the latest snapshot with a
//     trim carrying the epoch in its headers.
//   - Retire (ErrRetired) when a read shows a record from a newer epoch or a
//     CursorTooOld carries a newer epoch in its trim headers.
//
// The tail a holder expects comes only from what it reads and from its own
// acknowledged answers: never from an OffsetMismatch refusal [FD-2], and
// from a trim only through the trim's own answer, no-op trims included,
// which are always sent so the broker checks their tail [FD-3].
//
// The package depends on a small Log interface (Append, Read, Trim,
// Describe); ClientLog adapts broker/client to it, and one made by
// NewRedialingClientLog dials again when the broker closes its connection,
// resending only what cannot have landed. See docs/felixd.md.
package felixd
