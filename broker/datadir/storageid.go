package datadir

import (
	"encoding/hex"
	"errors"
	"fmt"
	"io"
)

// StorageIDFile is the name of the storage id file inside the data directory.
const StorageIDFile = "storage-id"

// storageIDMagic heads the storage-id file; the /1 is the format version.
const storageIDMagic = "felix-storage-id/1"

// StorageID is the random 16-byte name of the data in one data directory
// [ID-1]. It names the data, not the node: a restart keeps it, and a
// directory that may hold less than its peers were told gets a new one
// [ID-3]. The zero value means "no id" and is never generated.
type StorageID [16]byte

// String returns the id as 32 lowercase hex digits, the form used in files,
// logs and the control plane's registry.
func (id StorageID) String() string { return hex.EncodeToString(id[:]) }

// IsZero reports whether id is the zero value ("no id").
func (id StorageID) IsZero() bool { return id == StorageID{} }

// errZeroID reports an all-zero id, which is never generated.
var errZeroID = errors.New("all-zero storage id")

// ParseStorageID parses the 32-lowercase-hex-digit form produced by String.
// The all-zero id is refused.
func ParseStorageID(s string) (StorageID, error) {
	var id StorageID
	if len(s) != 2*len(id) {
		return StorageID{}, fmt.Errorf("storage id %q: want %d hex digits", s, 2*len(id))
	}
	for i := 0; i < len(id); i++ {
		hi, ok1 := hexDigit(s[2*i])
		lo, ok2 := hexDigit(s[2*i+1])
		if !ok1 || !ok2 {
			return StorageID{}, fmt.Errorf("storage id %q: not lowercase hex", s)
		}
		id[i] = hi<<4 | lo
	}
	if id.IsZero() {
		return StorageID{}, fmt.Errorf("storage id %q: %w", s, errZeroID)
	}
	return id, nil
}

// newStorageID reads 16 bytes from rand. An all-zero draw (which a working
// random source never produces) is refused rather than used.
func newStorageID(rand io.Reader) (StorageID, error) {
	var id StorageID
	if _, err := io.ReadFull(rand, id[:]); err != nil {
		return StorageID{}, fmt.Errorf("datadir: read random storage id: %w", err)
	}
	if id.IsZero() {
		return StorageID{}, fmt.Errorf("datadir: random source returned %w", errZeroID)
	}
	return id, nil
}

// encodeStorageIDFile renders the storage-id file:
//
//	felix-storage-id/1 id=<32 hex> crc32c=<8 hex>\n
func encodeStorageIDFile(id StorageID) []byte {
	return encodeLine(storageIDMagic, []field{{"id", id.String()}})
}

// decodeStorageIDFile parses the storage-id file. Every failure wraps
// errCorruptFile.
func decodeStorageIDFile(data []byte) (StorageID, error) {
	v, err := decodeLine(storageIDMagic, []string{"id"}, data)
	if err != nil {
		return StorageID{}, fmt.Errorf("%s: %w", StorageIDFile, err)
	}
	id, err := ParseStorageID(v[0])
	if err != nil {
		return StorageID{}, fmt.Errorf("%s: %w: %v", StorageIDFile, errCorruptFile, err)
	}
	return id, nil
}
