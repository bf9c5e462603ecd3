package member

import (
	"bytes"
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/go-logr/logr/testr"

	"felix.dev/felix/broker/datadir"
	"felix.dev/felix/broker/logstore"
	"felix.dev/felix/broker/record"
	"felix.dev/felix/internal/diskfault"
)

var (
	damagedLog = record.LogID{ShardID: record.ShardID{Stream: "orders", Shard: 0}, Log: record.LogData}
	intactLog  = record.LogID{ShardID: record.ShardID{Stream: "orders", Shard: 1}, Log: record.LogData}
)

// startRun runs the [ID-4] steps up to MarkRunning (standalone: the
// control plane's part is giveUpDamaged's register func here).
func startRun(t *testing.T, dir string) (*datadir.Dir, *datadir.Running) {
	t.Helper()
	d, err := datadir.Open(dir, datadir.Options{Fsync: datadir.FsyncOnCommit, Logger: testr.New(t)})
	if err != nil {
		t.Fatal(err)
	}
	idf, err := d.Identify()
	if err != nil {
		t.Fatal(err)
	}
	p, err := idf.Standalone()
	if err != nil {
		t.Fatal(err)
	}
	run, err := p.MarkRunning()
	if err != nil {
		t.Fatal(err)
	}
	return d, run
}

// Issue 25: a cluster member whose store finds damaged acknowledged data
// on open gives up its claim as a storage-id rotation does: a new id,
// durable before the damaged log is emptied, registered (and the grant
// recorded) before anything is served; the damaged log is empty (to be
// copied again from the leader), the other logs keep their data, and the
// next start keeps the new id.
func TestDamageOnOpenRotatesTheStorageIDAndEmptiesTheDamagedLog(t *testing.T) {
	dir := t.TempDir()
	storeDir := filepath.Join(dir, LogStoreDir)
	o := logstore.Options{Dir: storeDir, Fsync: logstore.FsyncOnCommit, CommitLogValues: true, ValueThreshold: logstore.BrokerValueThreshold, Logger: testr.New(t)}

	// First run: write both logs, stop cleanly.
	d, run := startRun(t, dir)
	oldID := run.StorageID()
	s, err := logstore.Open(o)
	if err != nil {
		t.Fatal(err)
	}
	for _, id := range []record.LogID{damagedLog, intactLog} {
		l, err := s.Log(id)
		if err != nil {
			t.Fatal(err)
		}
		for i := 0; i < 5; i++ {
			p := fmt.Sprintf("%d-%d-%s", id.Shard, i, strings.Repeat("x", 2000))
			if _, err := l.Append(t.Context(), []record.Record{{Payload: []byte(p)}}, nil); err != nil {
				t.Fatal(err)
			}
		}
	}
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	if err := run.MarkCleanStop(); err != nil {
		t.Fatal(err)
	}
	_ = d.Close()
	flipIn(t, storeDir, []byte("0-4-xxxx"))

	// Second run: the store finds the damage.
	d, run = startRun(t, dir)
	if run.StorageID() != oldID {
		t.Fatal("a clean stop must keep the id")
	}
	o.LastRun = LastRunOf(run.Decision())
	if o.LastRun != logstore.LastRunComplete {
		t.Fatalf("LastRunOf(clean stop) = %v", o.LastRun)
	}
	s, err = logstore.Open(o)
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	damaged := s.Damaged()
	if len(damaged) != 1 || damaged[0].Log != damagedLog {
		t.Fatalf("damaged = %v", damaged)
	}
	var registered []datadir.StorageID
	id, inc, err := giveUpDamaged(t.Context(), testr.New(t), s, run, damaged, 3, func(_ context.Context, id datadir.StorageID) (int64, error) {
		registered = append(registered, id)
		return 4, nil
	})
	if err != nil {
		t.Fatal(err)
	}
	if run.Decision().Reason != datadir.ReasonLogStoreDamaged || run.Decision().Action != datadir.New {
		t.Fatalf("decision after the rotation: %+v", run.Decision())
	}
	if id == oldID || run.StorageID() != id || inc != 4 || len(registered) != 1 || registered[0] != id {
		t.Fatalf("id %s (old %s), inc %d, registered %v: the claim was not given up", id, oldID, inc, registered)
	}
	dl, _ := s.Log(damagedLog)
	if got := dl.Describe(); got.Damaged || got.Tail != got.Base || got.Start != got.Base {
		t.Fatalf("damaged log not emptied: %+v", got)
	}
	il, _ := s.Log(intactLog)
	if got := il.Describe(); got.Damaged || got.Tail != 5 {
		t.Fatalf("intact log: %+v", got)
	}
	if b, err := os.ReadFile(filepath.Join(dir, datadir.RegistrationFile)); err != nil || !bytes.Contains(b, []byte("incarnation=4 ")) {
		t.Fatalf("registration file %q (%v), want incarnation 4", b, err)
	}
	_ = s.Close()
	_ = d.Close()

	// The next start (an unclean one here) keeps the new id.
	d, run = startRun(t, dir)
	defer d.Close()
	if run.StorageID() != id {
		t.Fatalf("next start: id %s, want the rotated %s", run.StorageID(), id)
	}
}

func flipIn(t *testing.T, dir string, marker []byte) {
	t.Helper()
	if f, err := diskfault.FlipMarker(dir, marker); err != nil || len(f) != 1 {
		t.Fatalf("marker found %d times (%v)", len(f), err)
	}
}

// LastRunOf reads the [ID-3] local decision: only the rules that keep the
// id because nothing acknowledged can be missing make the store treat an
// unreadable batch as damage.
func TestLastRunOfLocalDecision(t *testing.T) {
	for _, tc := range []struct {
		local datadir.Reason
		want  logstore.LastRun
	}{
		{datadir.ReasonCleanStop, logstore.LastRunComplete},
		{datadir.ReasonUncleanSameBootSynced, logstore.LastRunComplete},
		{datadir.ReasonUncleanOnCommit, logstore.LastRunAcknowledgedDurable},
		{datadir.ReasonUncleanBootChanged, logstore.LastRunUnknown},
		{datadir.ReasonUncleanBootUnknown, logstore.LastRunUnknown},
		{datadir.ReasonUncleanSyncFSFailed, logstore.LastRunUnknown},
		{datadir.ReasonRunStateMissing, logstore.LastRunUnknown},
		{datadir.ReasonRunStateCorrupt, logstore.LastRunUnknown},
		{datadir.ReasonStorageIDMissing, logstore.LastRunUnknown},
		{datadir.ReasonStorageIDCorrupt, logstore.LastRunUnknown},
	} {
		if got := LastRunOf(datadir.Decision{Local: tc.local}); got != tc.want {
			t.Errorf("LastRunOf(%s) = %s, want %s", tc.local, got, tc.want)
		}
	}
}
