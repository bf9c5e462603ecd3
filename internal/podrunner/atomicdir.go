package podrunner

import (
	"bytes"
	"errors"
	"fmt"
	"io/fs"
	"maps"
	"os"
	"path/filepath"
	"strings"
	"time"
)

// The kubelet's layout of a Secret or ConfigMap volume, which lets it
// update the volume in place while processes read it:
//
//	dir/..2026_12_02_00_45_03.123456789/   the files of one version
//	dir/..data -> ..2026_12_02_00_45_03.123456789
//	dir/<key>  -> ..data/<key>             one per top-level name
//
// An update writes the new version into a new timestamped directory,
// points a new symlink at it and renames that symlink over ..data: one
// atomic step, so a path through ..data resolves to the old set or the
// new one, never a mix or a partly written file. Then the top-level
// links are added or removed and the old version is deleted.
const (
	atomicDataLink  = "..data"
	atomicTempLink  = "..data_tmp"
	atomicTimestamp = "2006_01_02_15_04_05.000000000"
)

// WriteAtomicDir makes dir hold exactly files (relative slash paths to
// content) in the layout above and reports whether it changed anything:
// when ..data already holds the same set, nothing is written. now names
// the new version's directory.
func WriteAtomicDir(dir string, files map[string][]byte, now time.Time) (bool, error) {
	clean := make(map[string][]byte, len(files))
	for rel, b := range files {
		p := strings.TrimPrefix(filepath.Clean("/"+rel), "/")
		if p == "" || strings.HasPrefix(p, "..") {
			return false, fmt.Errorf("%w: volume file %q: not a file name", errConfig, rel)
		}
		clean[filepath.ToSlash(p)] = b
	}
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return false, err
	}
	oldVersion, _ := os.Readlink(filepath.Join(dir, atomicDataLink))
	if oldVersion != "" {
		cur, err := readTree(filepath.Join(dir, oldVersion))
		if err == nil && maps.EqualFunc(cur, clean, bytes.Equal) {
			return false, nil
		}
	}
	// 1. The new version, complete, under a name no reader follows yet.
	version := ".." + now.UTC().Format(atomicTimestamp)
	if err := os.Mkdir(filepath.Join(dir, version), 0o755); err != nil {
		if !errors.Is(err, fs.ErrExist) {
			return false, err
		}
		// Same clock reading as an earlier version: make the name unique.
		tmp, err := os.MkdirTemp(dir, version+".")
		if err != nil {
			return false, err
		}
		if err := os.Chmod(tmp, 0o755); err != nil {
			return false, err
		}
		version = filepath.Base(tmp)
	}
	for rel, b := range clean {
		p := filepath.Join(dir, version, rel)
		if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
			return false, err
		}
		if err := os.WriteFile(p, b, 0o644); err != nil {
			return false, err
		}
	}
	// 2. The switch: rename a fresh link over ..data.
	tmpLink := filepath.Join(dir, atomicTempLink)
	if err := os.Remove(tmpLink); err != nil && !errors.Is(err, fs.ErrNotExist) {
		return false, err
	}
	if err := os.Symlink(version, tmpLink); err != nil {
		return false, err
	}
	if err := os.Rename(tmpLink, filepath.Join(dir, atomicDataLink)); err != nil {
		return false, err
	}
	// 3. Top-level links: one per first path component, through ..data.
	want := map[string]bool{}
	for rel := range clean {
		top, _, _ := strings.Cut(filepath.ToSlash(rel), "/")
		want[top] = true
	}
	for top := range want {
		link := filepath.Join(dir, top)
		target := filepath.Join(atomicDataLink, top)
		if got, err := os.Readlink(link); err == nil && got == target {
			continue
		}
		if err := os.RemoveAll(link); err != nil {
			return false, err
		}
		if err := os.Symlink(target, link); err != nil {
			return false, err
		}
	}
	entries, err := os.ReadDir(dir)
	if err != nil {
		return false, err
	}
	for _, e := range entries {
		name := e.Name()
		switch {
		case name == atomicDataLink || name == version:
		case strings.HasPrefix(name, ".."):
			// An older version (or a leftover of an interrupted update).
			if err := os.RemoveAll(filepath.Join(dir, name)); err != nil {
				return false, err
			}
		case !want[name]:
			// A key that is gone (or a file of the pre-layout format).
			if err := os.RemoveAll(filepath.Join(dir, name)); err != nil {
				return false, err
			}
		}
	}
	return true, nil
}

// readTree reads every regular file under root by relative slash path.
func readTree(root string) (map[string][]byte, error) {
	out := map[string][]byte{}
	err := filepath.WalkDir(root, func(p string, d fs.DirEntry, err error) error {
		if err != nil || d.IsDir() {
			return err
		}
		b, err := os.ReadFile(p)
		if err != nil {
			return err
		}
		rel, err := filepath.Rel(root, p)
		if err != nil {
			return err
		}
		out[filepath.ToSlash(rel)] = b
		return nil
	})
	return out, err
}
