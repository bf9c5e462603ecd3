package logstore

import (
	"encoding/binary"
	"errors"
	"fmt"

	"felix.dev/felix/broker/record"
)

// Key layout (all integers big-endian so badger's byte order is offset
// order):
//
//	'c' | uvarint len(stream) | stream | shard u32 | log kind u8  -> log meta
//	'd' | log number u32 | segment u64 | first offset u64         -> batch
//	't' | log number u32 | trim offset u64                       -> trim index entry
//	'x' | log number u32                                         -> trim index marker
//	'v' | log number u32                                         -> last value-log batch
//	'g'                                                          -> value-log GC under way
//	'f' | commit-log file u64 | log number u32                   -> highest batch start of the log in the file
//	'w'                                                          -> first commit-log file a replay reads
//	'k' | log number u32                                         -> floor kept across ResetAt (a trim index entry)
//	's'                                                          -> newest badger version a completed sync covered
//
// A log number is a small integer the catalog assigns at creation, so data
// keys stay short. A batch never straddles a segment: the writer splits an
// append at segment boundaries into several keys of one transaction, so a
// segment is exactly the keys under 'd' | log | segment, and deleting one is
// a key-only scan of that prefix plus deletes ([TR-6]).
const (
	prefixCatalog  = 'c'
	prefixData     = 'd'
	prefixTrim     = 't'
	prefixTrimMark = 'x'
	prefixVlogMark = 'v'
	prefixGCMark   = 'g'
	prefixFilePin  = 'f'
	prefixReplay   = 'w'
	prefixKeptFlr  = 'k'
	prefixSyncMark = 's'
)

const dataKeyLen = 1 + 4 + 8 + 8

func catalogKey(id record.LogID) []byte {
	k := make([]byte, 0, 1+binary.MaxVarintLen64+len(id.Stream)+5)
	k = append(k, prefixCatalog)
	k = binary.AppendUvarint(k, uint64(len(id.Stream)))
	k = append(k, id.Stream...)
	k = binary.BigEndian.AppendUint32(k, id.Shard)
	return append(k, byte(id.Log))
}

var errBadKey = errors.New("malformed key")

func parseCatalogKey(k []byte) (record.LogID, error) {
	if len(k) < 1 || k[0] != prefixCatalog {
		return record.LogID{}, errBadKey
	}
	n, w := binary.Uvarint(k[1:])
	if w <= 0 || w != len(binary.AppendUvarint(nil, n)) || uint64(len(k)-1-w) != n+5 {
		return record.LogID{}, fmt.Errorf("%w: catalog key length", errBadKey)
	}
	p := 1 + w
	id := record.LogID{ShardID: record.ShardID{Stream: string(k[p : p+int(n)])}}
	p += int(n)
	id.Shard = binary.BigEndian.Uint32(k[p:])
	id.Log = record.LogKind(k[p+4])
	return id, nil
}

func logPrefix(prefix byte, num uint32) []byte {
	k := make([]byte, 5, dataKeyLen)
	k[0] = prefix
	binary.BigEndian.PutUint32(k[1:], num)
	return k
}

func segmentPrefix(num uint32, seg uint64) []byte {
	return binary.BigEndian.AppendUint64(logPrefix(prefixData, num), seg)
}

func dataKey(num uint32, seg, first uint64) []byte {
	return binary.BigEndian.AppendUint64(segmentPrefix(num, seg), first)
}

// parseDataKey returns the segment and first offset of a data key.
func parseDataKey(k []byte) (seg, first uint64, err error) {
	if len(k) != dataKeyLen || k[0] != prefixData {
		return 0, 0, errBadKey
	}
	return binary.BigEndian.Uint64(k[5:]), binary.BigEndian.Uint64(k[13:]), nil
}

func trimKey(num uint32, off uint64) []byte {
	return binary.BigEndian.AppendUint64(logPrefix(prefixTrim, num), off)
}

func parseTrimKey(k []byte) (uint64, error) {
	if len(k) != 13 || k[0] != prefixTrim {
		return 0, errBadKey
	}
	return binary.BigEndian.Uint64(k[5:]), nil
}

func trimMarkKey(num uint32) []byte { return logPrefix(prefixTrimMark, num) }

// keptFloorKey holds the floor, and the entry of the trim that set it, that
// ResetAt kept when it dropped the records and the trim index [TR-5].
// Directories written before it existed have none; older versions ignore
// it (their ResetAt lowers the floor, as it always did).
func keptFloorKey(num uint32) []byte { return logPrefix(prefixKeptFlr, num) }

// vlogMarkKey holds the first offset of the log's newest batch that badger
// keeps in its value log (see Log.repairLost). Directories written before it
// existed have none, and older versions ignore it.
func vlogMarkKey(num uint32) []byte { return logPrefix(prefixVlogMark, num) }

// gcMarkKey exists while value-log garbage collection runs (Store.CollectValueLog):
// found on open, it says a crash interrupted one, and every batch of every
// log is checked (Log.repairLost).
func gcMarkKey() []byte { return []byte{prefixGCMark} }

// filePinKey records that log num has batches in commit-log file seq (refs
// to it, ref.go); its value is the highest first offset of those batches.
func filePinKey(seq uint64, num uint32) []byte {
	k := make([]byte, 0, 1+8+4)
	k = append(k, prefixFilePin)
	k = binary.BigEndian.AppendUint64(k, seq)
	return binary.BigEndian.AppendUint32(k, num)
}

func parseFilePinKey(k []byte) (seq uint64, num uint32, err error) {
	if len(k) != 1+8+4 || k[0] != prefixFilePin {
		return 0, 0, errBadKey
	}
	return binary.BigEndian.Uint64(k[1:]), binary.BigEndian.Uint32(k[9:]), nil
}

// syncMarkKey holds the sync mark (syncmark.go): every transaction of a
// badger version at or below it was on disk when it was written.
// Directories written before it existed have none; older versions ignore
// it.
func syncMarkKey() []byte { return []byte{prefixSyncMark} }

// replayMarkKey holds the sequence number of the first commit-log file a
// replay reads: every earlier file's frames are in badger, synced.
func replayMarkKey() []byte { return []byte{prefixReplay} }
