package logstore

import (
	"errors"
	"fmt"
	"math"

	badger "github.com/dgraph-io/badger/v4"
)

// The sync mark: how far the store was known durable when it stopped.
//
// Under periodic and none, badger's files hold writes no sync covered, and
// a machine crash keeps an arbitrary subset of them: a disk's writeback
// does not keep the order of the writes, so a newer value can reach the
// disk while an older one does not. Open must drop every batch no sync
// covered from the first one that does not read back, and must never drop
// one a sync did cover (that is damage to acknowledged data, docs/
// durable-storage.md, "Torn tail or damage"). Only a record of what the
// syncs covered tells the two apart, and badger's versions give one for
// free: they grow with every transaction, in the order badger writes
// them.
//
// So after every completed DB.Sync the store writes (syncMarkKey) the
// newest version that sync covered: the read timestamp taken before it,
// for which badger waits until every transaction up to it is written. The
// mark is not synced itself; its claim was true when it was written, so
// whichever mark a crash leaves readable is a lower bound: every
// transaction at or below it reached the disk. The next sync makes it
// durable (under periodic about one interval later), and a mark is only
// written when something besides the mark itself was synced since the
// last one, so an idle store writes none.

// syncDB runs badger's DB.Sync and, once it succeeded, records the newest
// version it covered in the sync mark. Every sync of the store goes
// through it (Store.sync adds the metric).
func (s *Store) syncDB() error {
	s.syncMu.Lock()
	defer s.syncMu.Unlock()
	txn := s.db.NewTransaction(false)
	covered := txn.ReadTs() // badger waits until every commit up to it is written
	txn.Discard()
	if err := s.db.Sync(); err != nil {
		return err
	}
	if covered <= s.syncMarkAt {
		return nil // only the mark itself was written since the last mark
	}
	err := s.db.Update(func(txn *badger.Txn) error { return txn.Set(syncMarkKey(), encodeSyncMark(covered)) })
	if err != nil {
		return fmt.Errorf("logstore: write the sync mark: %w", err)
	}
	at, err := keyVersion(s.db, syncMarkKey())
	if err != nil {
		return fmt.Errorf("logstore: read the sync mark back: %w", err)
	}
	s.syncMarkAt = at
	return nil
}

// encodeSyncMark frames the covered version like the trim index marker.
func encodeSyncMark(version uint64) []byte { return encodeTrimMark(version) }

// readSyncMark returns the stored sync mark: every transaction of a
// version at or below covered reached the disk. found is false for a
// store without one (new, or written before the mark existed). A mark
// that does not decode is damage to the store's own records: it answers
// the highest version with an error wrapping errCorrupt, so that nothing
// is taken for a torn tail (every lost batch is reported, never dropped).
func readSyncMark(db *badger.DB) (covered uint64, found bool, err error) {
	var v []byte
	err = db.View(func(txn *badger.Txn) error {
		item, err := txn.Get(syncMarkKey())
		if err != nil {
			return err
		}
		v, err = item.ValueCopy(nil)
		return err
	})
	if errors.Is(err, badger.ErrKeyNotFound) {
		return 0, false, nil
	}
	if err != nil {
		return 0, false, fmt.Errorf("logstore: read the sync mark: %w", err)
	}
	covered, err = decodeTrimMark(v)
	if err != nil {
		return math.MaxUint64, true, fmt.Errorf("logstore: sync mark: %w", err)
	}
	return covered, true, nil
}

// keyVersion returns badger's version of key.
func keyVersion(db *badger.DB, key []byte) (uint64, error) {
	var v uint64
	err := db.View(func(txn *badger.Txn) error {
		item, err := txn.Get(key)
		if err != nil {
			return err
		}
		v = item.Version()
		return nil
	})
	return v, err
}
