// Package history records the client operations of a fault-injection run
// against shard logs and checks the history for linearizability with
// porcupine against a model of the shard log contract.
//
// A Recorder, safe for concurrent use, takes each operation's invocation
// and completion from an injected monotonic clock. An operation completes
// in one of three ways: ok (with the offsets or records the broker
// returned), a definite refusal (nothing written: OffsetMismatch,
// CursorTooOld, or another refusal the protocol defines as writing
// nothing), or unknown (a timeout, ErrUnknownOutcome, a lost connection).
// An unknown operation may take effect at any time after its invocation,
// so it is given the end of the history as its completion.
//
// The model (Model) is one shard log: its tail, its floor, and the data
// records at their offsets. It encodes:
//
//   - an acknowledged append lands its records at [first, first+n) with
//     first at or above the tail, and nowhere else, exactly once;
//   - a conditional append acknowledged at expected tail e lands at e, so
//     two acknowledged at the same e cannot both be legal;
//   - a trim acknowledged with expected tail e is a record at e that moves
//     the floor to the floor asked for (at most e) [TR-2], or a no-op that
//     still required the tail e [TR-3];
//   - a read served from offset f is legal only if f is at or above the
//     floor, and returns exactly the data records of the log in
//     [f, next): none missing, none added, none below the floor; a read
//     refused with CursorTooOld is legal only below the floor it names,
//     which must not be above the floor of the trims linearized so far
//     [TR-4]. A read may stop short of the tail (its limits, or the
//     serving broker's committed end): the model does not check that a
//     read sees the latest acknowledged record, only that what it returns
//     is the log.
//
// Offsets a leader takes for its own bookkeeping (the fence record a new
// leader writes at its epoch) are not client operations: the model lets
// the tail move past offsets that hold no data record when an
// acknowledgement or a read shows it did. A conditional append or trim
// refused with OffsetMismatch is legal when the tail differed, or when a
// record that is not a client's data takes the expected offset (a fence,
// or a trim written and not yet committed, whose floor reads do not see
// until it commits [TR-2]): the offset is then reserved, and no data may
// land there. The tail the refusal names is not checked, since it may
// count records not yet committed.
//
// Unknown appends are resolved from the reads of the same history: one
// whose records some read returned landed there (once, at those offsets);
// one no read returned is taken as not landed (its offsets, if it did
// land, are indistinguishable from bookkeeping records to every read).
//
// porcupine keeps a bitset of a whole partition per cached state, so
// memory grows with the square of a partition's length; a shard's history
// longer than 10,000 operations is cut at quiescent points into segments,
// each checked from a snapshot of what the earlier ones leave (see
// segments). Operations that are legal in every state and change none
// (unanswered reads, unknown appends no read returned, refusals that
// write nothing and check nothing) are dropped first.
package history
