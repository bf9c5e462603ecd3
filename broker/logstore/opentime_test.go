package logstore

import (
	"fmt"
	"os"
	"sort"
	"strings"
	"testing"
	"time"

	badger "github.com/dgraph-io/badger/v4"
)

// TestOpenTimeAfterPowerCut measures what opening a large periodic log
// costs after a power cut (LastRunUnknown): the walk of Log.repairLost
// reads every batch no sync covered. FELIX_OPEN_TIME_BATCHES (synced
// batches of 8 records of 512 bytes, as the power-cut test writes) turns
// it on; FELIX_OPEN_TIME_UNSYNCED batches follow the last sync (default
// 2,000: about two 100 ms intervals of the standalone broker's appends on
// powerfs). It prints the open time with the sync mark the run left and
// without one (a store from before the mark: the walk stops at the first
// batch that reads), the median of five opens of a fresh copy each, and the
// median time of the walk alone and of a walk of the whole log, run
// again on the opened store (warm page cache).
func TestOpenTimeAfterPowerCut(t *testing.T) {
	if os.Getenv("FELIX_OPEN_TIME_BATCHES") == "" {
		t.Skip("FELIX_OPEN_TIME_BATCHES not set")
	}
	synced := envInt(t, "FELIX_OPEN_TIME_BATCHES", 1)
	unsynced := envInt(t, "FELIX_OPEN_TIME_UNSYNCED", 2000)
	o := Options{Dir: t.TempDir(), Fsync: FsyncPeriodic, FsyncInterval: 1 << 40, ValueThreshold: BrokerValueThreshold, AutoCommit: true}
	s := openTest(t, o)
	l := mustLog(t, s, testLog)
	payload := strings.Repeat(".", 512)
	recs := data(payload, payload, payload, payload, payload, payload, payload, payload)
	for i := 0; i < synced; i++ {
		mustAppend(t, l, recs, nil)
	}
	if err := s.sync(); err != nil {
		t.Fatal(err)
	}
	for i := 0; i < unsynced; i++ {
		mustAppend(t, l, recs, nil)
	}
	image := t.TempDir()
	copyDir(t, o.Dir, image)
	noMark := t.TempDir()
	copyDir(t, image, noMark)
	rawDB(t, noMark, func(db *badger.DB) error {
		return db.Update(func(txn *badger.Txn) error { return txn.Delete([]byte{'s'}) })
	})
	for _, c := range []struct{ name, dir string }{{"sync mark", image}, {"no sync mark", noMark}} {
		var took, walk, whole []time.Duration
		for range 5 {
			dir := t.TempDir()
			copyDir(t, c.dir, dir)
			oo := o
			oo.Dir, oo.LastRun = dir, LastRunUnknown
			t0 := time.Now()
			s, err := Open(oo)
			if err != nil {
				t.Fatal(err)
			}
			took = append(took, time.Since(t0))
			l := mustLog(t, s, testLog)
			if got := l.Describe(); got.Damaged || got.Tail != uint64(8*(synced+unsynced)) {
				t.Fatalf("%s: %+v", c.name, got)
			}
			// The walk alone, again on the opened store (it finds
			// nothing to drop), and a walk of the whole log.
			t1 := time.Now()
			if err := l.repairLost(false); err != nil {
				t.Fatal(err)
			}
			walk = append(walk, time.Since(t1))
			t1 = time.Now()
			if err := l.repairLost(true); err != nil {
				t.Fatal(err)
			}
			whole = append(whole, time.Since(t1))
			if err := s.Close(); err != nil {
				t.Fatal(err)
			}
		}
		median := func(d []time.Duration) time.Duration {
			sort.Slice(d, func(i, j int) bool { return d[i] < d[j] })
			return d[len(d)/2].Round(100 * time.Microsecond)
		}
		fmt.Printf("OPENTIME case=%q batches=%d unsynced=%d payload_bytes=%d open=%v walk=%v whole_log_walk=%v\n",
			c.name, synced+unsynced, unsynced, (synced+unsynced)*8*512, median(took), median(walk), median(whole))
	}
}
