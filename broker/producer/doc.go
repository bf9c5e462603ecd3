// Package producer decides whether an idempotent producer's append is new,
// a retry of a batch already written, or out of sequence, and keeps the
// bounded per-shard state that decision needs.
//
// An idempotent producer (docs/protocol.md, section 5.1, feature
// `idempotent`) names itself with a 16-byte random ID and numbers its
// appends to each shard 0, 1, 2, ... (one sequence number per append).
// The leader writes the ID and the sequence into the batch's first record
// (a reserved header, HeaderKey), so the state is part of the replicated
// log: a new leader rebuilds its Table from its own log (Observe) and
// answers a retried batch with the offsets the previous leader gave it.
//
// A Table holds at most Limits.MaxProducers producers and, per producer,
// the offsets of its last Limits.Window batches. A producer is evicted
// only when the table is full and it has written nothing for
// Limits.MinAge; when every producer is younger, a new producer is
// refused (Full) rather than any state dropped, so a client cannot make
// the broker forget a producer that may still retry, nor hold unbounded
// state. The package has no clock, goroutine or I/O: callers pass the
// time (record timestamps, Unix nanoseconds).
package producer
