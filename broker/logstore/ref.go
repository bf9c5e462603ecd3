package logstore

import (
	"encoding/binary"
	"fmt"
	"os"
	"path/filepath"
	"sync"

	"golang.org/x/sys/unix"
)

// Batches kept in the commit log (Options.CommitLogValues).
//
// Under FsyncOnCommit every batch is written to the commit log, and before
// this option also to badger's value log: each record's bytes went to the
// device twice per broker, and the value log's copy went through new
// page-cache pages, which cost ten times a recycled page on these virtual
// machines (docs/performance.md, "New pages cost ten times reused ones").
// With the option, a batch of at least the value threshold is written once,
// in its commit-log frame, and badger holds a ref to it: the file's
// sequence number, the offset and length of the batch in the file and the
// batch's checksum. Reads resolve refs through the files (refFiles).
//
// A commit-log file then lives as long as a ref into it: a checkpoint no
// longer removes or recycles it, it is kept until no log holds a batch in
// it (filePins), and replay starts at the first file a checkpoint has not
// covered (the replay marker). While more than Options.CommitLogFiles files
// are kept, new batches go to badger's value log as before, so a log with
// long retention bounds the disk the files take.
//
// A ref is refTag, u64 file sequence number, u64 offset, u32 length and
// the batch's own checksum (from its header), all big-endian; a read
// checks that the bytes it finds carry that checksum, and decoding checks
// that it holds. refTag is not a batch version, so a ref never decodes as
// a batch and a batch never as a ref.

const (
	refTag = 0x52 // 'R'
	refLen = 1 + 8 + 8 + 4 + 4
)

// batchRef locates a batch in a commit-log file.
type batchRef struct {
	seq uint64
	off int64
	n   uint32
	crc uint32
}

func encodeRef(r batchRef) []byte {
	b := make([]byte, refLen)
	b[0] = refTag
	binary.BigEndian.PutUint64(b[1:], r.seq)
	binary.BigEndian.PutUint64(b[9:], uint64(r.off))
	binary.BigEndian.PutUint32(b[17:], r.n)
	binary.BigEndian.PutUint32(b[21:], r.crc)
	return b
}

// isRef reports whether a stored data value is a ref rather than a batch.
func isRef(v []byte) bool { return len(v) == refLen && v[0] == refTag }

func decodeRef(v []byte) (batchRef, error) {
	if !isRef(v) {
		return batchRef{}, fmt.Errorf("%w: not a commit-log ref", errCorrupt)
	}
	return batchRef{
		seq: binary.BigEndian.Uint64(v[1:]),
		off: int64(binary.BigEndian.Uint64(v[9:])),
		n:   binary.BigEndian.Uint32(v[17:]),
		crc: binary.BigEndian.Uint32(v[21:]),
	}, nil
}

// refFiles reads batches out of commit-log files. Files are opened on
// first use and stay open until forget. Reads run concurrently; forget is
// called only while no read runs (Store.readMu held exclusively), so a
// file is never closed under a read.
type refFiles struct {
	dir   string
	mu    sync.Mutex // guards files
	files map[uint64]*os.File
}

func newRefFiles(dir string) *refFiles {
	return &refFiles{dir: dir, files: map[uint64]*os.File{}}
}

// read returns the bytes r names if they carry the checksum r recorded
// (errCorrupt otherwise: a frame that never reached the device before a
// crash, or a file's bytes changed). The batch's own checksum is left to
// decodeBatch, which every reader runs, so it is computed once per read.
func (f *refFiles) read(r batchRef) ([]byte, error) {
	if r.off < 0 || r.n < batchHeaderLen || r.n > maxTxnBytes {
		// No batch is larger than a transaction: a damaged ref must not
		// make the reader allocate whatever it says.
		return nil, fmt.Errorf("%w: ref to %d bytes at %d in commit log %d", errCorrupt, r.n, r.off, r.seq)
	}
	f.mu.Lock()
	file := f.files[r.seq]
	if file == nil {
		var err error
		if file, err = os.Open(filepath.Join(f.dir, commitLogName(r.seq))); err != nil {
			f.mu.Unlock()
			return nil, fmt.Errorf("%w: batch in commit log %d: %w", errCorrupt, r.seq, err)
		}
		// Batches are written around the page cache, so reads go to the
		// device; catch-up and tailing reads go through a file in order,
		// and a larger read-ahead serves them.
		_ = unix.Fadvise(int(file.Fd()), 0, 0, unix.FADV_SEQUENTIAL)
		f.files[r.seq] = file
	}
	f.mu.Unlock()
	b := make([]byte, r.n)
	if n, err := file.ReadAt(b, r.off); n < len(b) {
		return nil, fmt.Errorf("%w: batch of %d bytes at %d in commit log %d: read %d: %v", errCorrupt, r.n, r.off, r.seq, n, err)
	}
	if binary.LittleEndian.Uint32(b[1:5]) != r.crc {
		return nil, fmt.Errorf("%w: the %d bytes at %d in commit log %d are not the batch its ref names", errCorrupt, r.n, r.off, r.seq)
	}
	return b, nil
}

// forget closes file seq if it is open, before the caller removes it. No
// read may run (Store.readMu held exclusively).
func (f *refFiles) forget(seq uint64) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if file := f.files[seq]; file != nil {
		_ = file.Close()
		delete(f.files, seq)
	}
}

// close closes every open file.
func (f *refFiles) close() {
	f.mu.Lock()
	defer f.mu.Unlock()
	for seq, file := range f.files {
		_ = file.Close()
		delete(f.files, seq)
	}
}
