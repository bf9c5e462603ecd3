// Package powerfs is a FUSE file system for tests that can lose power.
//
// It is a loopback over a backing directory (go-fuse's fs API): every
// operation goes through to the backing directory at once, so reads see
// the latest writes, as from a page cache. Alongside, powerfs keeps in
// memory an undo journal of everything that is not yet durable. PowerCut
// unmounts the file system and replays that journal, so the backing
// directory is left holding exactly what a machine that lost power would
// find: the state made durable by fsync, fdatasync and directory fsync,
// and nothing after it.
//
// The model (strict POSIX, stricter than ext4 or xfs):
//
//   - File data. A write, a truncation (shrinking or growing) and a
//     fallocate that grows the file are durable once the file is fsynced
//     or fdatasynced (the two are the same here), or once it was written
//     through a handle opened O_SYNC or O_DSYNC (only that write's pages).
//     The journal keeps, per file, its size at the last sync and the
//     old contents of every page (4096 bytes) changed since; a power cut
//     truncates the file back to that size and writes the old pages back.
//     msync of a shared mapping arrives as an fsync and counts.
//   - Directory entries. Creating a file, directory, symlink, device node
//     or hard link, unlinking, rmdir and rename (including one that
//     replaces an entry) are durable once a directory they changed is
//     fsynced (a rename is atomic: syncing either of its directories makes
//     it durable). Fsync of a file does not make its name durable: a file
//     created and fsynced but whose directory was never fsynced is gone
//     after a power cut. Unlinked and replaced entries are moved to a
//     trash directory beside the backing directory until their removal
//     is durable, so that a power cut can put them back.
//   - Options.JournaledMetadata relaxes that as ext4 and xfs behave: any
//     file's fsync or fdatasync makes every directory change so far
//     durable (the journal commits metadata in order), so a new file
//     fsynced keeps its name.
//   - syncfs(2) and sync(2) are not seen: FUSE has no syncfs operation
//     (the kernel only writes back its dirty pages, which arrive as
//     writes), so a broker's syncfs makes nothing durable. FS.SyncAll does
//     what a successful syncfs would, for tests that want it.
//   - Close (FUSE flush) makes nothing durable.
//   - Tearing. With Options.Rand set, a power cut keeps a random prefix,
//     in whole pages, of the last unsynced write of each file (zero pages
//     up to all of them), as a disk may write some sectors of a request
//     and not others. The kept pages hold the file's latest contents.
//
// Limits: metadata changes (mode, owner, times, xattrs) are not
// journaled and always survive; renames of directories that are not
// durable are undone by path, so a later durable change beneath a
// renamed directory may be undone with it; O_DIRECT is accepted and
// served through the loopback (the kernel's FUSE driver sends direct
// writes as ordinary writes) and copy_file_range, fallocate's collapse
// and insert ranges answer ENOTSUP. Nothing here is for production.
package powerfs
