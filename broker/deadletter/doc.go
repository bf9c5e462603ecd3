// Package deadletter owns what a shard's dead-letter log means: the
// encoding of its entries (a dead-lettered record, a redrive intent, a
// redrive) and the fold that turns the log, read in offset order, into
// which records are dead-lettered for which group and which of them were
// redriven into the data log.
//
// The dead-letter log (record.LogDeadLetter) is replicated like the data
// log. A record a consumer group gave up on is appended to it with its
// original offset, epoch, timestamp, headers and payload, the group, its
// delivery count and the reason. The group log then records the offset as
// settled (group.EntryDeadLettered): the dead-letter entry is always
// written first, so a crash between the two never loses the record, and a
// writer that finds the offset still outstanding asks the fold (Find)
// before it appends, so a record is dead-lettered for a group at most
// once.
//
// A redrive appends a dead-lettered record to the data log exactly once:
// the writer first appends an intent (Redriving) naming the data-log
// offset it will append at, then appends the record to the data log with
// a conditional append at that offset [TR-1], carrying the header
// RedriveHeader, then appends Redriven. A writer that finds an intent
// without its Redriven (a crash, a new leader) reads the data log at the
// intent's offset: the record is there with the header (it landed) or it
// is not (it never will: the conditional append at that offset can no
// longer succeed), so the redrive is finished or tried again, never
// doubled.
//
// The fold keeps a few words per readable entry of the log (its group,
// offset and redrive state): the dead-letter log's own size bounds it,
// and trimming the log forgets what is below its floor. The log needs no
// snapshot: an entry names only entries at lower offsets, and one naming
// an entry below the floor is skipped.
//
// The package has no I/O, clock or goroutine.
package deadletter
