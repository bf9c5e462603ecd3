package logstore

import (
	"encoding/binary"
	"errors"
	"fmt"
	"os"
	"path/filepath"

	badger "github.com/dgraph-io/badger/v4"
)

// Replaying the commit log on open: from the replay marker on, every
// intact frame is applied to badger in order, with refs restored from
// where the frames lie (ref.go).

// replayCommitLogs applies to db every intact frame of the files in dir
// from the replay marker on (replayMarkKey; every file when there is
// none), syncs db and removes the spares left by a crash, unread. It
// returns the next sequence number and the files found: all of their
// frames are in badger now, and the caller removes those that no ref
// points into. rs, if not nil, learns the marker and where each file's
// replay stopped (LastRunAcknowledgedDurable).
func replayCommitLogs(db *badger.DB, dir string, rs *replayState) (next uint64, files []clFile, frames int, err error) {
	for _, spare := range []string{commitLogSpare, commitLogRecycled} {
		if err := os.Remove(filepath.Join(dir, spare)); err != nil && !os.IsNotExist(err) {
			return 0, nil, 0, fmt.Errorf("logstore: remove the commit log spare: %w", err)
		}
	}
	from, err := readReplayMark(db)
	if err != nil {
		return 0, nil, 0, err
	}
	if rs != nil {
		rs.from, rs.stops = from, map[uint64]int64{}
		if rs.markVersion, err = replayMarkVersion(db); err != nil {
			return 0, nil, 0, err
		}
	}
	files, err = listCommitLogs(dir)
	if err != nil {
		return 0, nil, 0, fmt.Errorf("logstore: list commit logs: %w", err)
	}
	next = from
	replayed := false
	for _, f := range files {
		next = max(next, f.seq+1)
		if f.seq < from {
			continue // a checkpoint put its frames in badger
		}
		n, stop, err := replayCommitLogAt(db, filepath.Join(dir, f.name()), f)
		frames += n
		if rs != nil {
			rs.stops[f.seq] = stop
		}
		if err != nil {
			return 0, nil, frames, err
		}
		replayed = true
	}
	if replayed {
		if err := db.Sync(); err != nil {
			return 0, nil, frames, fmt.Errorf("logstore: sync after replay: %w", err)
		}
	}
	return next, files, frames, nil
}

// readReplayMark returns the first commit-log file a replay reads: 0
// (every file) if no checkpoint recorded one.
func readReplayMark(db *badger.DB) (uint64, error) {
	var seq uint64
	err := db.View(func(txn *badger.Txn) error {
		item, err := txn.Get(replayMarkKey())
		if errors.Is(err, badger.ErrKeyNotFound) {
			return nil
		}
		if err != nil {
			return err
		}
		return item.Value(func(v []byte) error {
			if len(v) != 8 {
				return fmt.Errorf("%w: replay marker of %d bytes", errCorrupt, len(v))
			}
			seq = binary.BigEndian.Uint64(v)
			return nil
		})
	})
	if err != nil {
		return 0, fmt.Errorf("logstore: read the commit-log replay marker: %w", err)
	}
	return seq, nil
}

func encodeReplayMark(seq uint64) []byte { return binary.BigEndian.AppendUint64(nil, seq) }

// replayCommitLogAt applies the frames of file f at path up to the first
// one that does not check, and returns how many it applied and where the
// replay stopped: the file offset of that frame (or of the end of the
// file).
func replayCommitLogAt(db *badger.DB, path string, f clFile) (int, int64, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return 0, 0, fmt.Errorf("logstore: read commit log: %w", err)
	}
	seed := f.seed()
	n, pos := 0, 0
	for len(b)-pos >= 8 {
		body, rest, ok := nextFrame(b[pos:], seed)
		if !ok {
			break // torn or corrupt tail: never acknowledged
		}
		kvs, err := decodeFrame(body)
		if err != nil {
			break
		}
		if !setRefs(kvs, f.seq, int64(pos+8)) {
			break
		}
		if err := keepNewerMarks(db, kvs); err != nil {
			return n, int64(pos), fmt.Errorf("logstore: replay commit log %s: %w", filepath.Base(path), err)
		}
		if err := applyFrame(db, kvs); err != nil {
			return n, int64(pos), fmt.Errorf("logstore: replay commit log %s: %w", filepath.Base(path), err)
		}
		n++
		pos = len(b) - len(rest)
	}
	return n, int64(pos), nil
}

// replayMarkVersion returns badger's version of the replay marker (0 when
// there is none): every data value older than it was synced by the
// checkpoint that wrote it.
func replayMarkVersion(db *badger.DB) (uint64, error) {
	var v uint64
	err := db.View(func(txn *badger.Txn) error {
		item, err := txn.Get(replayMarkKey())
		if errors.Is(err, badger.ErrKeyNotFound) {
			return nil
		}
		if err != nil {
			return err
		}
		v = item.Version()
		return nil
	})
	if err != nil {
		return 0, fmt.Errorf("logstore: read the commit-log replay marker: %w", err)
	}
	return v, nil
}

// keepNewerMarks keeps a log's value-log marker from moving back when a
// frame is replayed: badger may hold batches of transactions whose frames
// never became durable (a crash between badger's commit and the frame's
// write), and the marker it holds for them is where Log.repairLost must
// start looking for batches lost with them. A marker entry at or below
// the stored one is replayed as the stored one.
func keepNewerMarks(db *badger.DB, kvs []frameEntry) error {
	for i := range kvs {
		e := &kvs[i]
		if e.op != opSet || len(e.k) == 0 || e.k[0] != prefixVlogMark {
			continue
		}
		replayed, err := decodeVlogMark(e.v)
		if err != nil {
			continue // applied as it is; load reads past a marker it cannot decode
		}
		err = db.View(func(txn *badger.Txn) error {
			item, err := txn.Get(e.k)
			if err != nil {
				return err
			}
			return item.Value(func(v []byte) error {
				if stored, err := decodeVlogMark(v); err == nil && stored > replayed {
					e.v = append([]byte(nil), v...)
				}
				return nil
			})
		})
		if err != nil && !errors.Is(err, badger.ErrKeyNotFound) {
			return err
		}
	}
	return nil
}

// setRefs turns each opSetRef entry of a frame whose body starts at offset
// bodyAt of file seq into a set of the ref to its value, as the writer
// stored it. It reports false if such a value is not a batch.
func setRefs(kvs []frameEntry, seq uint64, bodyAt int64) bool {
	for i := range kvs {
		e := &kvs[i]
		if e.op != opSetRef {
			continue
		}
		if len(e.v) < batchHeaderLen {
			return false
		}
		e.op, e.v = opSet, encodeRef(refTo(seq, bodyAt+int64(e.at), e.v))
	}
	return true
}

// refTo is the ref to batch, stored at off in commit-log file seq.
func refTo(seq uint64, off int64, batch []byte) batchRef {
	return batchRef{seq: seq, off: off, n: uint32(len(batch)), crc: binary.LittleEndian.Uint32(batch[1:5])}
}
