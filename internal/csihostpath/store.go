package csihostpath

import (
	"crypto/rand"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"time"
)

// Errors of the store. The gRPC services map them to status codes
// (errors.Is works through the wrapping).
var (
	// ErrNotFound: no volume or snapshot has that id.
	ErrNotFound = errors.New("not found")
	// ErrInvalidID: an id that this driver never hands out (wrong prefix,
	// length or characters): no path is built from it. Such an id names no
	// object, so errors wrapping ErrInvalidID also wrap ErrNotFound, and
	// the services answer it as the CSI spec asks for an unknown id
	// (NOT_FOUND, or success for a delete).
	ErrInvalidID = errors.New("invalid id")
)

const (
	volumePrefix   = "vol-"
	snapshotPrefix = "snap-"
	metaFile       = "meta.json"
	dataDir        = "data"
	tmpPrefix      = ".tmp-"
)

// nameID derives the id of the object called name: ids are a function of
// names, so a repeated CreateVolume or CreateSnapshot with the same name
// finds the same object, even across restarts.
func nameID(prefix, name string) string {
	sum := sha256.Sum256([]byte(name))
	return prefix + hex.EncodeToString(sum[:16])
}

// checkID returns ErrInvalidID (wrapped) unless id is a well formed id
// with the given prefix: the prefix and 32 lower-case hex digits, the only
// shape nameID makes. Ids arrive from the wire; checking them before any
// path is built is what keeps "../" and "/" out.
func checkID(prefix, id string) error {
	hexPart, ok := strings.CutPrefix(id, prefix)
	ok = ok && len(hexPart) == 32
	for i := 0; ok && i < len(hexPart); i++ {
		c := hexPart[i]
		ok = c >= '0' && c <= '9' || c >= 'a' && c <= 'f'
	}
	if !ok {
		if len(id) > 80 {
			id = id[:80] + "..."
		}
		return fmt.Errorf("%w (%w): %q", ErrInvalidID, ErrNotFound, id)
	}
	return nil
}

// volumeMeta is volumes/<id>/meta.json.
type volumeMeta struct {
	ID             string    `json:"id"`
	Name           string    `json:"name"`
	CapacityBytes  int64     `json:"capacityBytes"`
	SourceSnapshot string    `json:"sourceSnapshot,omitempty"`
	Created        time.Time `json:"created"`
}

// snapshotMeta is snapshots/<id>/meta.json.
type snapshotMeta struct {
	ID           string `json:"id"`
	Name         string `json:"name"`
	SourceVolume string `json:"sourceVolume"`
	// SizeBytes is the snapshot's restore size: the capacity its source
	// volume was provisioned with (what a volume made from it must ask
	// for at least), or, for a source without one, CopiedBytes.
	SizeBytes int64 `json:"sizeBytes"`
	// CopiedBytes is the apparent size of the regular files copied. It
	// can exceed the source's capacity, which is never enforced (a
	// database's sparse, preallocated files count at their full length).
	CopiedBytes int64     `json:"copiedBytes"`
	Created     time.Time `json:"created"`
}

// store keeps volumes and snapshots under root:
//
//	root/volumes/<id>/meta.json    root/volumes/<id>/data/    (the volume's tree)
//	root/snapshots/<id>/meta.json  root/snapshots/<id>/data/  (a copy of a volume's tree)
//
// An object is built in a temporary sibling directory and renamed into
// place, so <id>/ exists only complete; leftovers of a crash (.tmp-*) are
// removed by newStore. The store does no locking: the services serialise.
type store struct {
	root string
}

// newStore creates root/volumes and root/snapshots if needed and removes
// the temporary directories a crashed operation left behind.
func newStore(root string) (*store, error) {
	if !filepath.IsAbs(root) {
		return nil, fmt.Errorf("state directory %q is not absolute", root)
	}
	s := &store{root: filepath.Clean(root)}
	for _, d := range []string{s.kindDir(volumePrefix), s.kindDir(snapshotPrefix)} {
		if err := os.MkdirAll(d, 0o700); err != nil {
			return nil, fmt.Errorf("state directory: %w", err)
		}
		ents, err := os.ReadDir(d)
		if err != nil {
			return nil, fmt.Errorf("state directory: %w", err)
		}
		for _, e := range ents {
			if strings.HasPrefix(e.Name(), tmpPrefix) {
				if err := removeAll(filepath.Join(d, e.Name())); err != nil {
					return nil, fmt.Errorf("removing leftover %s: %w", e.Name(), err)
				}
			}
		}
	}
	return s, nil
}

func (s *store) kindDir(prefix string) string {
	if prefix == volumePrefix {
		return filepath.Join(s.root, "volumes")
	}
	return filepath.Join(s.root, "snapshots")
}

// dir is the directory of the object id; id must have passed checkID.
func (s *store) dir(prefix, id string) string { return filepath.Join(s.kindDir(prefix), id) }

// volumeDataDir is the tree of volume id, the directory that is bind
// mounted into pods. id must have passed checkID.
func (s *store) volumeDataDir(id string) string {
	return filepath.Join(s.dir(volumePrefix, id), dataDir)
}

// getVolume reads the metadata of volume id: ErrInvalidID, ErrNotFound or
// an I/O error.
func (s *store) getVolume(id string) (volumeMeta, error) {
	var m volumeMeta
	if err := checkID(volumePrefix, id); err != nil {
		return m, err
	}
	err := readMeta(filepath.Join(s.dir(volumePrefix, id), metaFile), &m)
	return m, err
}

// getSnapshot reads the metadata of snapshot id: ErrInvalidID, ErrNotFound
// or an I/O error.
func (s *store) getSnapshot(id string) (snapshotMeta, error) {
	var m snapshotMeta
	if err := checkID(snapshotPrefix, id); err != nil {
		return m, err
	}
	err := readMeta(filepath.Join(s.dir(snapshotPrefix, id), metaFile), &m)
	return m, err
}

// createVolume makes volume m (m.ID from nameID), empty or holding a copy
// of the tree of snapshot m.SourceSnapshot, which must exist.
func (s *store) createVolume(m volumeMeta) error {
	return s.build(volumePrefix, m.ID, m, func(data string) error {
		if m.SourceSnapshot == "" {
			return os.Mkdir(data, 0o777)
		}
		_, err := copyTree(filepath.Join(s.dir(snapshotPrefix, m.SourceSnapshot), dataDir), data)
		return err
	})
}

// createSnapshot copies the tree of volume m.SourceVolume, provisioned
// with capacity bytes, into snapshot m (m.ID from nameID), and sets
// m.CopiedBytes to the bytes of regular files copied and m.SizeBytes to
// capacity (CopiedBytes when capacity is 0). It returns the metadata
// written.
//
// The restore size is the source's capacity, not what was copied: the
// external-provisioner refuses a claim smaller than a snapshot's size,
// and the copied apparent size of a broker's volume (its store's sparse
// preallocated files) was 2.2 GB for a 256Mi claim on the real node, so
// no claim of the source's size could be restored from it.
func (s *store) createSnapshot(m snapshotMeta, capacity int64) (snapshotMeta, error) {
	err := s.build(snapshotPrefix, m.ID, &m, func(data string) error {
		n, err := copyTree(s.volumeDataDir(m.SourceVolume), data)
		m.CopiedBytes, m.SizeBytes = n, n
		if capacity > 0 {
			m.SizeBytes = capacity
		}
		return err
	})
	return m, err
}

// build creates object id of kind prefix: a temporary directory, fill(its
// data/ path) which must create data/, the metadata (meta is marshalled
// after fill, so fill may complete it), then the rename into place and an
// fsync of the parent.
func (s *store) build(prefix, id string, meta any, fill func(data string) error) error {
	parent := s.kindDir(prefix)
	tmp, err := os.MkdirTemp(parent, tmpPrefix+id+"-")
	if err != nil {
		return err
	}
	ok := false
	defer func() {
		if !ok {
			_ = removeAll(tmp)
		}
	}()
	if err := fill(filepath.Join(tmp, dataDir)); err != nil {
		return err
	}
	// The volume's root is the pods' directory: mode 0777 like an emptyDir
	// (ownership is left to the kubelet's fsGroup handling).
	if prefix == volumePrefix {
		if err := os.Chmod(filepath.Join(tmp, dataDir), 0o777); err != nil {
			return err
		}
	}
	b, err := json.MarshalIndent(meta, "", "  ")
	if err != nil {
		return err
	}
	if err := writeFileAtomic(filepath.Join(tmp, metaFile), b); err != nil {
		return err
	}
	if err := os.Chmod(tmp, 0o755); err != nil {
		return err
	}
	if err := os.Rename(tmp, s.dir(prefix, id)); err != nil {
		return err
	}
	ok = true
	return syncDir(parent)
}

// remove deletes object id of kind prefix; a missing object, malformed
// ids included, is not an error. The directory is first renamed to a temporary name so that a
// crash half way leaves no half object behind under the id.
func (s *store) remove(prefix, id string) error {
	if checkID(prefix, id) != nil {
		return nil
	}
	dir := s.dir(prefix, id)
	trash := filepath.Join(s.kindDir(prefix), tmpPrefix+id+"-deleted-"+randHex())
	if err := os.Rename(dir, trash); err != nil {
		if errors.Is(err, fs.ErrNotExist) {
			return nil
		}
		return err
	}
	if err := syncDir(s.kindDir(prefix)); err != nil {
		return err
	}
	return removeAll(trash)
}

// listSnapshots returns every snapshot, sorted by id.
func (s *store) listSnapshots() ([]snapshotMeta, error) {
	ents, err := os.ReadDir(s.kindDir(snapshotPrefix))
	if err != nil {
		return nil, err
	}
	var out []snapshotMeta
	for _, e := range ents {
		if checkID(snapshotPrefix, e.Name()) != nil {
			continue
		}
		m, err := s.getSnapshot(e.Name())
		if errors.Is(err, ErrNotFound) {
			continue // deleted meanwhile
		}
		if err != nil {
			return nil, err
		}
		out = append(out, m)
	}
	sort.Slice(out, func(i, j int) bool { return out[i].ID < out[j].ID })
	return out, nil
}

func readMeta(path string, v any) error {
	b, err := os.ReadFile(path)
	if errors.Is(err, fs.ErrNotExist) {
		return fmt.Errorf("%w: %s", ErrNotFound, filepath.Base(filepath.Dir(path)))
	}
	if err != nil {
		return err
	}
	if err := json.Unmarshal(b, v); err != nil {
		return fmt.Errorf("%s: %w", path, err)
	}
	return nil
}

// writeFileAtomic writes b to path through a temporary file in the same
// directory: write, fsync, rename, fsync of the directory. Readers see the
// old contents or the new, never a part.
func writeFileAtomic(path string, b []byte) error {
	dir := filepath.Dir(path)
	f, err := os.CreateTemp(dir, tmpPrefix+filepath.Base(path)+"-")
	if err != nil {
		return err
	}
	tmp := f.Name()
	_, err = f.Write(b)
	if err == nil {
		err = f.Sync()
	}
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err == nil {
		err = os.Chmod(tmp, 0o644)
	}
	if err == nil {
		err = os.Rename(tmp, path)
	}
	if err != nil {
		_ = os.Remove(tmp)
		return err
	}
	return syncDir(dir)
}

func syncDir(dir string) error {
	d, err := os.Open(dir)
	if err != nil {
		return err
	}
	err = d.Sync()
	if cerr := d.Close(); err == nil {
		err = cerr
	}
	return err
}

// removeAll is os.RemoveAll after making every directory writable: a pod
// may have left read-only directories in a volume.
func removeAll(path string) error {
	_ = filepath.WalkDir(path, func(p string, d fs.DirEntry, err error) error {
		if err == nil && d.IsDir() {
			_ = os.Chmod(p, 0o700)
		}
		return nil
	})
	return os.RemoveAll(path)
}

func randHex() string {
	var b [8]byte
	_, _ = io.ReadFull(rand.Reader, b[:])
	return hex.EncodeToString(b[:])
}
