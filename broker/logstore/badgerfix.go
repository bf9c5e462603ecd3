package logstore

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"

	"github.com/go-logr/logr"
)

// removeEmptyLogFiles deletes 0-byte badger WAL (.mem) and value log
// (.vlog) files before badger opens the directory. A crash between creating
// such a file and sizing it leaves it empty, and badger v4.9.6 then refuses
// to open ("while opening memtables ... Create a new file", upstream issue
// dgraph-io/badger#2207). An empty file holds no entries, so removing it
// loses nothing. Our crash test hits this within a few dozen SIGKILLs.
func removeEmptyLogFiles(dir string, log logr.Logger) error {
	entries, err := os.ReadDir(dir)
	if os.IsNotExist(err) {
		return nil
	}
	if err != nil {
		return fmt.Errorf("logstore: list %s: %w", dir, err)
	}
	for _, e := range entries {
		name := e.Name()
		if e.IsDir() || !(strings.HasSuffix(name, ".mem") || strings.HasSuffix(name, ".vlog")) {
			continue
		}
		info, err := e.Info()
		if err != nil {
			if os.IsNotExist(err) {
				continue
			}
			return fmt.Errorf("logstore: stat %s: %w", name, err)
		}
		if info.Size() != 0 {
			continue
		}
		if err := os.Remove(filepath.Join(dir, name)); err != nil {
			return fmt.Errorf("logstore: remove empty %s: %w", name, err)
		}
		log.Info("removed empty badger log file left by a crash", "file", name)
	}
	return nil
}
