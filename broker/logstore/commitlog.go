package logstore

import (
	"encoding/binary"
	"errors"
	"fmt"
	"hash/crc32"
	"io"
	"os"
	"path/filepath"
	"slices"
	"sort"
	"strings"
	"sync"
	"sync/atomic"

	badger "github.com/dgraph-io/badger/v4"
	"golang.org/x/sys/unix"
)

// The commit log makes FsyncOnCommit cheap. badger's DB.Sync msyncs its
// memory-mapped WAL and value log; measured on these machines it costs 3-4
// times a write+fdatasync of a plain file while appends keep writing. So
// under FsyncOnCommit each transaction's keys and values also go, as one
// checksummed frame, to a plain file: the syncer writes the frames of every
// group waiting and makes them durable together (an fdatasync, or one
// direct write on a file written ahead, directwrite.go), while badger
// commits the same groups without a sync. On open, frames are
// replayed into badger (set and delete are idempotent and replayed in
// order), badger is synced and the files are removed. A checkpoint (DB.Sync,
// then a new file, then the old one removed) bounds the file and runs
// before every truncation or segment deletion, so a replay never brings
// back what those removed.
//
// Frame: u32 body length, u32 checksum, body = uvarint entry count, then
// per entry: op byte (0 set, 1 delete), uvarint key length, key, uvarint
// value length, value. The checksum is the CRC-32C of the file's sequence
// number (8 bytes, little-endian) followed by the body, so a frame checks
// only in the file it was written for. A torn or corrupt frame, or one
// left from a file's earlier use, ends the replay: it was never
// acknowledged in this file (its sync did not complete). Files named
// <seq>.log were written before checksums named their file (the CRC-32C
// of the body alone); they are replayed that way and never written.
//
// Recycled files. A rotation keeps the old file when it is full size (a
// file written ahead, or one that grew to commitLogMaxBytes) and renames
// it to commitLogRecycled: its blocks are written and its frames are
// already in badger, so it serves as the next spare without writing 64 MiB
// of zeros again (PostgreSQL recycles its WAL segments for the same
// reason). The frames it still holds carry an older sequence number, so
// they end a replay as zeros do. Open removes both spare names unread.
//
// Files written ahead. An fdatasync of a file that grows must also write
// its new size; one whose blocks are already written syncs 1.5 to 1.8
// times faster here (BenchmarkSyncFileShapes). So a goroutine prepares the
// next file ahead of time (commitLogSpare: commitLogMaxBytes of zeros,
// synced) once the current file holds spareAfterBytes of frames, and a
// rotation renames it into place; frames are written at the file's own
// offset from its start. The zeros after the last frame end a
// replay like a torn frame does (a zero header is an empty body, which no
// frame has). Without a spare ready, a rotation starts an empty file that
// grows, as before.

const (
	commitLogDir      = "commitlog"
	commitLogMaxBytes = 64 << 20
	commitLogSpare    = "spare.prep"
	commitLogRecycled = "recycled.prep"
	spareAfterBytes   = 4 << 20 // frames in a file before the next spare is prepared
	opSet             = 0
	opDelete          = 1
	// opSetRef sets the key to a ref to the value's bytes where they lie
	// in this file (ref.go); the value is the batch.
	opSetRef = 2
	// frameHeadLen is the bytes of a frame before its first entry: length,
	// checksum and the entry count, written in frameCountLen bytes so that
	// every entry's position is known before the frame is complete.
	frameHeadLen  = 8 + frameCountLen
	frameCountLen = 3
	maxFrameCount = 1<<(7*frameCountLen) - 1
)

type commitLog struct {
	dir string
	mu  sync.RWMutex // writes to f, syncs and rotations take it exclusively; tests read under it shared
	f   *os.File
	// seq, size and ahead change under mu held exclusively and are read
	// without it (the writer must not wait for a direct write to finish):
	// seq numbers f; size is the bytes of frames in f (the write offset);
	// ahead: f is a spare written ahead (not a file that grows).
	seq   atomic.Uint64
	size  atomic.Int64
	ahead atomic.Bool
	// spareAsked: the next spare was asked for while writing to f.
	spareAsked bool
	// direct writes f's frames durably (directwrite.go) when f is written
	// ahead and its file system takes O_DIRECT; nil otherwise.
	direct *directWriter
	// dirty: frames were written to f through the page cache since the
	// last sync (the syncer sets it, sync clears it, both under mu).
	dirty atomic.Bool
	// durableSize is the bytes of f's frames known durable (written
	// directly, or synced): changed under mu, read without it by reads
	// that check a batch is durable before they read it. durableCond, on
	// mu, signals its growth and a failed write (failed set).
	// Checkpoints and such reads wait on it (waitDurable).
	durableSize atomic.Int64
	failed      error
	durableCond *sync.Cond
	// keep reports whether file seq holds batches a ref points to, so
	// that a rotation or close must keep it; nil keeps nothing.
	keep func(seq uint64) bool
	// roomForSpare reports whether the disk has room for a spare above
	// the store's free-space floor; nil: always.
	roomForSpare func() bool
	// writeAt replaces f.WriteAt for page-cache writes when set (tests).
	writeAt func(f *os.File, b []byte, off int64) (int, error)

	// The spare file written ahead: ready once preparing is done; spareMu
	// guards both; prep waits for the preparing goroutine.
	spareMu   sync.Mutex
	spare     *os.File
	preparing bool
	closed    bool
	prep      sync.WaitGroup
}

// commitLogName names file seq; legacyCommitLogName names one written
// before checksums named their file.
func commitLogName(seq uint64) string       { return fmt.Sprintf("%016x.clog", seq) }
func legacyCommitLogName(seq uint64) string { return fmt.Sprintf("%016x.log", seq) }

// clFile is a commit log file found on open.
type clFile struct {
	seq    uint64
	legacy bool // named <seq>.log: checksums of the body alone
}

func (f clFile) name() string {
	if f.legacy {
		return legacyCommitLogName(f.seq)
	}
	return commitLogName(f.seq)
}

// seed is the checksum state frames of f start from.
func (f clFile) seed() uint32 {
	if f.legacy {
		return 0
	}
	return frameSeed(f.seq)
}

// frameSeed is the CRC-32C of seq (8 bytes, little-endian): frames of file
// seq are checksummed from it.
func frameSeed(seq uint64) uint32 {
	var b [8]byte
	binary.LittleEndian.PutUint64(b[:], seq)
	return crc32.Update(0, castagnoli, b[:])
}

// listCommitLogs returns the commit log files in dir in replay order.
func listCommitLogs(dir string) ([]clFile, error) {
	entries, err := os.ReadDir(dir)
	if os.IsNotExist(err) {
		return nil, nil
	}
	if err != nil {
		return nil, err
	}
	var files []clFile
	for _, e := range entries {
		f := clFile{legacy: strings.HasSuffix(e.Name(), ".log")}
		if n, err := fmt.Sscanf(e.Name(), "%016x.", &f.seq); err == nil && n == 1 && e.Name() == f.name() {
			files = append(files, f)
		}
	}
	sort.Slice(files, func(i, j int) bool {
		if files[i].seq != files[j].seq {
			return files[i].seq < files[j].seq
		}
		return files[i].legacy && !files[j].legacy
	})
	return files, nil
}

// nextFrame splits the first frame off b if it is whole and its checksum,
// started from seed, holds.
func nextFrame(b []byte, seed uint32) (body, rest []byte, ok bool) {
	if len(b) < 8 {
		return nil, nil, false
	}
	n := binary.LittleEndian.Uint32(b)
	if uint64(n) > uint64(len(b)-8) {
		return nil, nil, false
	}
	body = b[8 : 8+n]
	if crc32.Update(seed, castagnoli, body) != binary.LittleEndian.Uint32(b[4:]) {
		return nil, nil, false
	}
	return body, b[8+n:], true
}

type frameEntry struct {
	op   byte
	k, v []byte
	at   int // decoded entries: where v starts in the frame's body
}

// appendFrame appends kvs as one frame checksummed from seed (frameSeed of
// the file it is written to).
func appendFrame(dst []byte, seed uint32, kvs []frameEntry) []byte {
	need := 8 + binary.MaxVarintLen64
	for _, e := range kvs {
		need += 1 + 2*binary.MaxVarintLen64 + len(e.k) + len(e.v)
	}
	dst = slices.Grow(dst, need)
	start := len(dst)
	dst = append(dst, 0, 0, 0, 0, 0, 0, 0, 0)
	if len(kvs) > maxFrameCount {
		panic(fmt.Sprintf("logstore: %d entries in one commit-log frame", len(kvs)))
	}
	dst = appendFrameCount(dst, len(kvs))
	for _, e := range kvs {
		dst = append(dst, e.op)
		dst = binary.AppendUvarint(dst, uint64(len(e.k)))
		dst = append(dst, e.k...)
		dst = binary.AppendUvarint(dst, uint64(len(e.v)))
		dst = append(dst, e.v...)
	}
	body := dst[start+8:]
	binary.LittleEndian.PutUint32(dst[start:], uint32(len(body)))
	binary.LittleEndian.PutUint32(dst[start+4:], crc32.Update(seed, castagnoli, body))
	return dst
}

// appendFrameCount appends n, below 1<<21, as a uvarint of exactly
// frameCountLen bytes (a longer encoding than needed for small n, which
// binary.Uvarint reads all the same), so that the entries of a frame start
// at the same place whatever their number.
func appendFrameCount(dst []byte, n int) []byte {
	return append(dst, byte(n)|0x80, byte(n>>7)|0x80, byte(n>>14))
}

// frameEntryLen is the encoded size of an entry with key k and a value of
// vlen bytes; its value starts frameEntryLen(k, vlen) - vlen bytes after
// the entry.
func frameEntryLen(k []byte, vlen int) int {
	return 1 + uvarintLen(len(k)) + len(k) + uvarintLen(vlen) + vlen
}

func uvarintLen(n int) int {
	l := 1
	for ; n >= 0x80; n >>= 7 {
		l++
	}
	return l
}

func decodeFrame(body []byte) ([]frameEntry, error) {
	d := decoder{b: body}
	n := d.uvarint()
	if d.err == nil && n > uint64(len(d.b)) {
		d.fail("entry count")
	}
	var out []frameEntry
	for i := uint64(0); i < n && d.err == nil; i++ {
		op := d.byte()
		k := d.bytes()
		vlen := d.uvarint()
		at := len(body) - len(d.b)
		if d.err == nil && vlen > uint64(len(d.b)) {
			d.fail("value")
		}
		if op > opSetRef {
			d.fail("op")
		}
		if d.err != nil {
			break
		}
		v := d.b[:vlen:vlen]
		d.b = d.b[vlen:]
		out = append(out, frameEntry{op: op, k: k, v: v, at: at})
	}
	if d.err != nil {
		return nil, fmt.Errorf("%w: commit log frame: %v", errCorrupt, d.err)
	}
	if len(d.b) != 0 {
		return nil, fmt.Errorf("%w: commit log frame has trailing bytes", errCorrupt)
	}
	return out, nil
}

func applyFrame(db *badger.DB, kvs []frameEntry) error {
	wb := db.NewWriteBatch()
	defer wb.Cancel()
	for _, e := range kvs {
		var err error
		if e.op == opDelete {
			err = wb.Delete(append([]byte(nil), e.k...))
		} else {
			err = wb.Set(append([]byte(nil), e.k...), append([]byte(nil), e.v...))
		}
		if err != nil {
			return err
		}
	}
	return wb.Flush()
}

// openCommitLog creates the directory and a fresh file numbered seq.
func openCommitLog(dir string, seq uint64) (*commitLog, error) {
	if err := mkdirDurable(dir); err != nil {
		return nil, err
	}
	c := &commitLog{dir: dir}
	c.durableCond = sync.NewCond(&c.mu)
	c.seq.Store(seq)
	if err := c.create(); err != nil {
		return nil, err
	}
	return c, nil
}

// create starts file seq: the spare renamed into place when one is ready,
// else a new empty file.
func (c *commitLog) create() error {
	name := filepath.Join(c.dir, commitLogName(c.seq.Load()))
	c.spareMu.Lock()
	spare := c.spare
	c.spare = nil
	c.spareMu.Unlock()
	var f *os.File
	var direct *directWriter
	ahead := false
	if spare != nil {
		if err := os.Rename(spare.Name(), name); err != nil {
			_ = spare.Close()
			_ = os.Remove(spare.Name())
		} else {
			f, ahead = spare, true
			if d, err := openDirect(name, true); err == nil {
				_ = spare.Close()
				f, direct = d.f, d
			}
		}
	}
	if f == nil {
		var err error
		if f, err = os.OpenFile(name, os.O_CREATE|os.O_EXCL|os.O_WRONLY, 0o644); err != nil {
			return fmt.Errorf("logstore: create commit log: %w", err)
		}
	}
	if err := syncDir(c.dir); err != nil {
		_ = f.Close()
		return err
	}
	c.f, c.spareAsked, c.direct = f, false, direct
	c.size.Store(0)
	c.durableSize.Store(0)
	c.ahead.Store(ahead)
	return nil
}

// prepareSpare starts writing the next spare in the background unless one
// is ready or on its way.
func (c *commitLog) prepareSpare() {
	c.spareMu.Lock()
	defer c.spareMu.Unlock()
	if c.spare != nil || c.preparing || c.closed || (c.roomForSpare != nil && !c.roomForSpare()) {
		return
	}
	c.preparing = true
	c.prep.Add(1)
	go func() {
		defer c.prep.Done()
		f, err := writeSpare(filepath.Join(c.dir, commitLogSpare), func() bool {
			c.spareMu.Lock()
			defer c.spareMu.Unlock()
			return c.closed
		})
		c.spareMu.Lock()
		defer c.spareMu.Unlock()
		c.preparing = false
		switch {
		case err != nil:
			// A rotation without a spare starts a growing file: slower
			// syncs, nothing lost. The next rotation tries again.
		case c.closed || c.spare != nil:
			// Closed, or a rotation recycled a file meanwhile.
			_ = f.Close()
			_ = os.Remove(f.Name())
		default:
			c.spare = f
		}
	}()
}

// errSpareAbandoned stops writing a spare when the commit log closes.
var errSpareAbandoned = errors.New("logstore: commit log closed")

// writeSpare writes a file of commitLogMaxBytes zeros at path and syncs
// it; it gives up when closed reports true.
func writeSpare(path string, closed func() bool) (*os.File, error) {
	f, err := os.OpenFile(path, os.O_CREATE|os.O_TRUNC|os.O_WRONLY, 0o644)
	if err != nil {
		return nil, err
	}
	// The zeros go around the page cache where the file system allows it:
	// through it they would take 64 MiB of new pages, which cost ten
	// times recycled ones on virtual machines (docs/performance.md).
	w, zeros := f, make([]byte, 1<<20)
	if d, derr := os.OpenFile(path, os.O_WRONLY|unix.O_DIRECT, 0); derr == nil {
		defer d.Close()
		w, zeros = d, alignedBuf(1<<20)
	}
	for off := int64(0); off < commitLogMaxBytes && err == nil; off += int64(len(zeros)) {
		if closed() {
			err = errSpareAbandoned
			break
		}
		_, err = w.WriteAt(zeros, off)
	}
	if err == nil {
		err = unix.Fdatasync(int(f.Fd()))
	}
	if err != nil {
		_ = f.Close()
		_ = os.Remove(path)
		return nil, err
	}
	return f, nil
}

// current returns the sequence number of the file frames go to now.
func (c *commitLog) current() uint64 { return c.seq.Load() }

// writeFrames writes frames at offset base of file seq, where the writer
// placed them: durable on return when the file takes direct writes, else
// in the page cache until sync. Frames placed anywhere but at the end of
// the current file fail the commit log (a checkpoint waits for every
// frame of its file, so that never happens).
func (c *commitLog) writeFrames(frames []byte, seq uint64, base int64) error {
	if c == nil || len(frames) == 0 {
		return nil
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.failed != nil {
		return c.failed
	}
	size := c.size.Load()
	if c.seq.Load() != seq || size != base {
		// The writer placed these frames (and the refs into them) at
		// base of file seq: writing them anywhere else would make those
		// refs point at other bytes.
		c.failed = fmt.Errorf("logstore: commit log frames for file %d at %d, but file %d is at %d", seq, base, c.seq.Load(), size)
		c.durableCond.Broadcast()
		return c.failed
	}
	var err error
	if c.direct != nil {
		if err = c.direct.writeAt(frames, size); err == nil {
			size += int64(len(frames))
			c.durableSize.Store(size)
			c.durableCond.Broadcast()
		}
	} else {
		var n int
		if c.writeAt != nil {
			n, err = c.writeAt(c.f, frames, size)
		} else {
			n, err = c.f.WriteAt(frames, size)
		}
		size += int64(n)
		c.dirty.Store(true)
	}
	c.size.Store(size)
	if !c.spareAsked && size >= spareAfterBytes {
		// Busy enough to rotate some day: have the next file written
		// ahead. An idle or short-lived store never writes one.
		c.spareAsked = true
		c.prepareSpare()
	}
	if err != nil {
		c.failed = fmt.Errorf("logstore: write commit log: %w", err)
		c.durableCond.Broadcast()
		return c.failed
	}
	return nil
}

// fail stops the commit log: nothing more is written, and checkpoints
// waiting for durability return err.
func (c *commitLog) fail(err error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.failed == nil {
		c.failed = err
	}
	c.durableCond.Broadcast()
}

// clearFailure forgets a failed write once the store has rolled back past
// it (space.go); the next rotation leaves the file it went to.
func (c *commitLog) clearFailure() {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.failed = nil
	c.dirty.Store(false)
}

// waitDurable waits until the frames of file seq up to end are durable:
// written and synced by the syncer. It returns at once if seq is not the
// current file, and with the error of a failed write.
func (c *commitLog) waitDurable(seq uint64, end int64) error {
	if c.seq.Load() != seq || c.durableSize.Load() >= end {
		// Durable (a file is retired only once all of it is), and no
		// need to wait for the syncer's write in progress to find out.
		return nil
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	for c.failed == nil && c.seq.Load() == seq && c.durableSize.Load() < end {
		c.durableCond.Wait()
	}
	if c.seq.Load() != seq || c.durableSize.Load() >= end {
		return nil
	}
	return c.failed
}

// full reports whether the store should checkpoint and rotate: the file
// holds commitLogMaxBytes of frames, or it is a file that grows while a
// spare written ahead is ready (a store's first file, or one started when
// no spare was ready), so the syncs move to blocks already written.
func (c *commitLog) full() bool {
	if c.size.Load() >= commitLogMaxBytes {
		return true
	}
	if c.ahead.Load() {
		return false
	}
	c.spareMu.Lock()
	defer c.spareMu.Unlock()
	return c.spare != nil
}

// sync makes every frame written so far durable. Frames written
// directly already are; a rotation waits until every frame of the file it
// retires is durable (waitDurable), so only the current file's page-cache
// writes need the fdatasync.
func (c *commitLog) sync() error {
	c.mu.Lock()
	defer c.mu.Unlock()
	if !c.dirty.Swap(false) {
		return nil
	}
	if err := unix.Fdatasync(int(c.f.Fd())); err != nil {
		c.failed = fmt.Errorf("logstore: fdatasync commit log: %w", err)
		c.durableCond.Broadcast()
		return c.failed
	}
	c.durableSize.Store(c.size.Load())
	c.durableCond.Broadcast()
	return nil
}

// rotate starts a new file and retires the old one: kept while refs point
// into it, else recycled as the next spare when it is full size and
// removed otherwise. The caller has waited until the old file's frames
// are durable and synced badger, so a replay needs nothing in the old
// file. The retirement is made
// durable (the directory is synced) before rotate returns: callers go on
// to delete data that no commit-log frame records, and an old file that
// came back under its name after a crash would be replayed over it.
func (c *commitLog) rotate() error {
	c.mu.Lock()
	defer c.mu.Unlock()
	old, oldDirect, oldSeq := c.f, c.direct, c.seq.Load()
	c.seq.Store(oldSeq + 1)
	if err := c.create(); err != nil {
		c.seq.Store(oldSeq)
		return err
	}
	oldPath := filepath.Join(c.dir, commitLogName(oldSeq))
	closeErr := closeFile(old, oldDirect)
	if c.keep != nil && c.keep(oldSeq) {
		// Refs point into it: it stays, read through refFiles, until
		// no log holds a batch in it (Store.retireFilesLocked).
		return closeErr
	}
	info, err := os.Stat(oldPath)
	recycle := err == nil && info.Size() >= commitLogMaxBytes && closeErr == nil
	if recycle {
		err = os.Rename(oldPath, filepath.Join(c.dir, commitLogRecycled))
	} else {
		err = os.Remove(oldPath)
	}
	if err == nil {
		err = syncDir(c.dir)
	}
	if err == nil && recycle {
		c.keepRecycled()
	}
	return errors.Join(closeErr, err)
}

// closeFile closes a commit-log file and, when it took direct writes, the
// writer's native AIO context with it (each context holds kernel memory
// and counts against the system's fs.aio-max-nr until destroyed).
func closeFile(f *os.File, direct *directWriter) error {
	if direct != nil {
		return direct.close() // direct.f is f
	}
	return f.Close()
}

// keepRecycled makes the file just renamed to commitLogRecycled the spare.
// Failing to open it costs only speed: it is removed, and the next spare
// is written with zeros.
func (c *commitLog) keepRecycled() {
	path := filepath.Join(c.dir, commitLogRecycled)
	c.spareMu.Lock()
	defer c.spareMu.Unlock()
	if c.spare != nil || c.closed {
		_ = os.Remove(path)
		return
	}
	f, err := os.OpenFile(path, os.O_WRONLY, 0)
	if err != nil {
		_ = os.Remove(path)
		return
	}
	c.spare = f
}

// close removes the current file, unless refs point into it, and the
// spare; the caller has synced badger.
func (c *commitLog) close() error {
	c.spareMu.Lock()
	c.closed = true
	c.spareMu.Unlock()
	c.prep.Wait()
	c.mu.Lock()
	defer c.mu.Unlock()
	err := closeFile(c.f, c.direct)
	if c.keep == nil || !c.keep(c.seq.Load()) {
		if rerr := os.Remove(filepath.Join(c.dir, commitLogName(c.seq.Load()))); rerr != nil {
			err = errors.Join(err, rerr)
		}
	}
	c.spareMu.Lock()
	if c.spare != nil {
		err = errors.Join(err, c.spare.Close(), os.Remove(c.spare.Name()))
		c.spare = nil
	}
	c.spareMu.Unlock()
	return err
}

// mkdirDurable creates dir (and missing parents) and syncs the parent of
// each directory it created, so that the new names survive a power cut:
// a directory's entry is durable only once its parent is synced.
func mkdirDurable(dir string) error {
	dir = filepath.Clean(dir)
	if _, err := os.Stat(dir); err == nil {
		return nil
	}
	parent := filepath.Dir(dir)
	if parent != dir {
		if err := mkdirDurable(parent); err != nil {
			return err
		}
	}
	if err := os.Mkdir(dir, 0o755); err != nil && !errors.Is(err, os.ErrExist) {
		return fmt.Errorf("logstore: create dir: %w", err)
	}
	return syncDir(parent)
}

func syncDir(dir string) error {
	d, err := os.Open(dir)
	if err != nil {
		return fmt.Errorf("logstore: open dir %s: %w", dir, err)
	}
	defer d.Close()
	if err := d.Sync(); err != nil && !errors.Is(err, io.EOF) {
		return fmt.Errorf("logstore: sync dir %s: %w", dir, err)
	}
	return nil
}
