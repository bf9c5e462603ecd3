// Package diskfault damages stored bytes on purpose, the way a failing disk
// does, for tests of what the broker does with data that no longer checks.
// It is test infrastructure: nothing in a broker imports it.
package diskfault

import (
	"bytes"
	"os"
	"path/filepath"
)

// Flip is one byte changed by FlipMarker.
type Flip struct {
	Path   string // the file, as found under the walked directory
	Offset int    // the byte's offset in the file
}

// FlipMarker changes the byte in the middle of every occurrence of marker
// in the regular files under dir (recursively), XOR 0x20, and returns the
// bytes it changed in walk order. Files without the marker are left
// untouched. Callers that expect one occurrence check len of the result.
func FlipMarker(dir string, marker []byte) ([]Flip, error) {
	var flips []Flip
	err := filepath.WalkDir(dir, func(p string, e os.DirEntry, err error) error {
		if err != nil || !e.Type().IsRegular() {
			return err
		}
		b, err := os.ReadFile(p)
		if err != nil {
			return err
		}
		hit := false
		for i := 0; len(marker) > 0; {
			j := bytes.Index(b[i:], marker)
			if j < 0 {
				break
			}
			at := i + j + len(marker)/2
			b[at] ^= 0x20
			flips = append(flips, Flip{Path: p, Offset: at})
			i, hit = i+j+len(marker), true
		}
		if !hit {
			return nil
		}
		return os.WriteFile(p, b, 0o644)
	})
	return flips, err
}
