package main

import (
	"bytes"
	"context"
	"errors"
	"os"
	"path/filepath"
	"testing"

	"felix.dev/felix/broker/datadir"
	"felix.dev/felix/broker/logstore"
	"felix.dev/felix/broker/record"
)

// TestID5_RestorePointCommand: `felix restore-point` deletes storage-id and
// keeps every stored record, also those above the log store's committed
// mark (a cluster member's store does not hold the shard's committed
// position: cutting there lost acknowledged records); the next start makes
// a new id.
func TestID5_RestorePointCommand(t *testing.T) {
	dataDir := t.TempDir()
	d, err := datadir.Open(dataDir, datadir.Options{Fsync: datadir.FsyncOnCommit})
	if err != nil {
		t.Fatal(err)
	}
	id, err := d.Identify()
	if err != nil {
		t.Fatal(err)
	}
	oldID := id.StorageID()
	prep, err := id.Standalone()
	if err != nil {
		t.Fatal(err)
	}
	run, err := prep.MarkRunning()
	if err != nil {
		t.Fatal(err)
	}
	store, err := logstore.Open(logstore.Options{Dir: filepath.Join(dataDir, logStoreDir)})
	if err != nil {
		t.Fatal(err)
	}
	lid := record.LogID{ShardID: record.ShardID{Stream: "s", Shard: 0}, Log: record.LogData}
	l, err := store.Log(lid)
	if err != nil {
		t.Fatal(err)
	}
	recs := make([]record.Record, 10)
	for i := range recs {
		recs[i] = record.Record{Payload: []byte("r")}
	}
	if _, err := l.Append(context.Background(), recs, nil); err != nil {
		t.Fatal(err)
	}
	if err := l.SetCommitted(6); err != nil {
		t.Fatal(err)
	}
	if err := store.Close(); err != nil {
		t.Fatal(err)
	}
	if err := run.MarkCleanStop(); err != nil {
		t.Fatal(err)
	}
	if err := d.Close(); err != nil {
		t.Fatal(err)
	}

	cmd := newRootCmd()
	var stderr bytes.Buffer
	cmd.SetErr(&stderr)
	cmd.SetArgs([]string{"restore-point", "--data-dir", dataDir})
	if err := cmd.ExecuteContext(context.Background()); err != nil {
		t.Fatalf("restore-point: %v\n%s", err, stderr.String())
	}
	if _, err := os.Stat(filepath.Join(dataDir, datadir.StorageIDFile)); !errors.Is(err, os.ErrNotExist) {
		t.Fatalf("storage-id still present after restore-point: %v", err)
	}

	store, err = logstore.Open(logstore.Options{Dir: filepath.Join(dataDir, logStoreDir)})
	if err != nil {
		t.Fatal(err)
	}
	l, err = store.Log(lid)
	if err != nil {
		t.Fatal(err)
	}
	if info := l.Describe(); info.Tail != 10 {
		t.Errorf("after restore-point: tail %d, want 10 (every stored record kept)", info.Tail)
	}
	if res, err := l.Read(0, logstore.ReadOptions{UpTo: 10}); err != nil || len(res.Records) != 10 {
		t.Errorf("after restore-point: read %d records (%v), want 10", len(res.Records), err)
	}
	_ = store.Close()

	d, err = datadir.Open(dataDir, datadir.Options{Fsync: datadir.FsyncOnCommit})
	if err != nil {
		t.Fatal(err)
	}
	defer d.Close()
	id, err = d.Identify()
	if err != nil {
		t.Fatal(err)
	}
	if id.StorageID() == oldID {
		t.Fatalf("storage id kept after restore-point: %s", oldID)
	}
}
