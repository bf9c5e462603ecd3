// Package group owns what a shard's group log means: the encoding of its
// entries (a claim, a commit, a release, a snapshot) and the fold that
// turns the log, read in offset order, into each consumer group's owner,
// generation and committed offset on the shard.
//
// The group log (record.LogGroup) is replicated like the data log, so its
// entries are committed, acknowledged, fenced and trimmed by the same
// rules. The log is the only truth: a State is always rebuilt by folding
// the log, never kept only in memory. Ownership is per shard: a member
// claims the shard for its group, which makes it the owner at the next
// generation (the previous one plus one); it commits offsets and releases
// the shard under that generation. The fold checks that every commit and
// release names the current owner and generation, and that every claim
// names the next generation: a log that says otherwise is a loud error
// (ErrDiverged), never skipped. A writer of the log appends an entry only
// on the tail its fold reached (a conditional append [TR-1]), so an entry
// the fold would refuse is never written.
//
// Leases (how long an owner may stay silent) are not in the log: they are
// the leader's timer, kept in its memory. The log decides who may commit.
//
// A group can instead acknowledge each record (ack.go): an ack-config
// entry switches it, deliver entries count each offset's deliveries,
// ack and dead-lettered entries settle offsets, and the group's committed
// offset is its lowest outstanding offset, so it advances over contiguous
// settled offsets only. Such a group takes no cumulative commit. When a
// delivery is due again (its ack wait) is the leader's memory, like the
// leases; the counts are the log's [TR-10].
//
// The package has no I/O, clock or goroutine.
package group
