// Package logstore keeps a broker's shard logs on disk: dense offsets from a
// shard's base, batch appends that land whole or not at all, conditional
// appends and trims checked against the tail [TR-1..3], reads refused below
// the readable start with the floor-setting trim's headers [TR-4], the trim
// index [TR-5], whole-segment deletion below the floor [TR-6] and retention
// that fenced logs refuse [TR-7].
//
// It owns one decision: how records sit in a badger database and when an
// append may be acknowledged under the chosen fsync mode. Replication, the
// wire protocol and the data directory identity live elsewhere; they use
// this package through Store and Log.
//
// All writes of a Store go through one writer goroutine that gathers the
// appends waiting at that moment into one badger transaction, and, under
// FsyncOnCommit, a syncer goroutine that makes one DB.Sync cover every append
// committed before it started (group commit). See docs/durable-storage.md.
//
// Batches of at least Options.ValueThreshold bytes (by default badger's
// 1 MiB) live in badger's value log, a file separate from its tree. A
// machine crash can keep a pointer whose value did not reach the disk,
// and need not keep the order of the writes no sync covered. Every sync
// records the newest badger version it covered (the sync mark); opening
// checks, from a per-log marker, the batches no sync covered, drops the
// oldest lost one with every later batch, or restores an older copy of a
// rewritten batch, so a log always restarts at a prefix, and reports a
// lost batch a sync covered as damage (Log.repairLost, Options.LastRun).
// Store.CollectValueLog reclaims the value log's space with the same care.
package logstore
