//go:build linux

package powerfs

import (
	"fmt"
	"math/rand/v2"

	"golang.org/x/sys/unix"
)

// journal is the undo record of one file's data since its last sync.
type journal struct {
	name     string           // the backing path when the journal started, for logs
	fd       int              // our own descriptor on the backing file
	origSize int64            // size at the last sync
	pages    map[int64][]byte // page index -> contents at the last sync (only pages below origSize)
	last     [2]int64         // the last unsynced write, [start, end)
}

// newJournal starts a journal for the backing file open at fd, which it
// reopens read-write (fd may be write-only; the file may be unlinked).
func newJournal(name string, fd int) (*journal, error) {
	dup, err := unix.Open(fmt.Sprintf("/proc/self/fd/%d", fd), unix.O_RDWR|unix.O_CLOEXEC, 0)
	if err != nil {
		return nil, fmt.Errorf("powerfs: reopen: %w", err)
	}
	var st unix.Stat_t
	if err := unix.Fstat(dup, &st); err != nil {
		_ = unix.Close(dup)
		return nil, fmt.Errorf("powerfs: fstat: %w", err)
	}
	return &journal{name: name, fd: dup, origSize: st.Size, pages: map[int64][]byte{}}, nil
}

// save keeps the durable contents of the pages that [start, end) touches
// before they are overwritten.
func (j *journal) save(start, end int64) error {
	if end <= start {
		return nil
	}
	for p := start / PageSize; p*PageSize < end && p*PageSize < j.origSize; p++ {
		if _, ok := j.pages[p]; ok {
			continue
		}
		buf := make([]byte, min(PageSize, j.origSize-p*PageSize))
		n, err := unix.Pread(j.fd, buf, p*PageSize)
		if err != nil {
			return fmt.Errorf("powerfs: save page %d: %w", p, err)
		}
		// Bytes past the current size (a shrink we did not see) read as
		// zeros, as they would after the rollback's truncate and extend.
		clear(buf[n:])
		j.pages[p] = buf
	}
	return nil
}

// wrote records [start, end) as the last unsynced write.
func (j *journal) wrote(start, end int64) { j.last = [2]int64{start, end} }

// synced records that [start, end) was written durably (an O_DSYNC
// write): its pages are no longer undone and the size covers it.
func (j *journal) synced(start, end int64) {
	for p := start / PageSize; p*PageSize < end; p++ {
		delete(j.pages, p)
	}
	j.origSize = max(j.origSize, end)
	if j.last[0] < end && start < j.last[1] {
		j.last = [2]int64{}
	}
}

// rollback puts the file back to its state at the last sync, keeping a
// random page prefix of the last unsynced write when rnd is set.
func (j *journal) rollback(rnd *rand.Rand) (pages, torn int, err error) {
	size := j.origSize
	keepFrom, keepTo := int64(0), int64(0) // pages kept by tearing
	if rnd != nil && j.last[1] > j.last[0] {
		first := j.last[0] / PageSize
		n := (j.last[1]+PageSize-1)/PageSize - first
		k := rnd.Int64N(n + 1)
		keepFrom, keepTo = first, first+k
		if k > 0 {
			var st unix.Stat_t
			if err := unix.Fstat(j.fd, &st); err != nil {
				return 0, 0, err
			}
			if end := min(st.Size, keepTo*PageSize, j.last[1]); end > size {
				size = end
			}
			torn = int(k)
		}
	}
	if err := unix.Ftruncate(j.fd, size); err != nil {
		return 0, 0, fmt.Errorf("powerfs: rollback truncate: %w", err)
	}
	for p, buf := range j.pages {
		if p >= keepFrom && p < keepTo {
			continue
		}
		if _, err := unix.Pwrite(j.fd, buf, p*PageSize); err != nil {
			return pages, torn, fmt.Errorf("powerfs: rollback page %d: %w", p, err)
		}
		pages++
	}
	return pages, torn, nil
}

func (j *journal) close() { _ = unix.Close(j.fd) }
