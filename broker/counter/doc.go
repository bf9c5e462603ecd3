// Package counter owns what a shard's counter log means: the encoding of
// its entries (an add, a snapshot) and the fold that turns the log, read in
// offset order, into every counter's value.
//
// The counter log (record.LogCounter) is replicated like the data log, so
// its entries are committed, acknowledged, fenced and trimmed by the same
// rules. The log is the only truth: a State is always rebuilt by folding
// the log, never kept only in memory. An add entry carries the key, the
// delta and the value after it, which the fold checks (a disagreement is
// a loud error, never skipped). A snapshot entry carries every counter's
// value as of its own offset, and the last add of each idempotent
// producer, so the log may be trimmed to the snapshot's offset with a
// conditional trim [TR-2] and folding starts there.
//
// The package has no I/O, clock or goroutine.
package counter
