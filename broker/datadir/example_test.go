package datadir_test

import (
	"context"
	"fmt"
	"os"
	"path/filepath"

	"felix.dev/felix/broker/datadir"
)

// Example walks the [ID-4] startup of a cluster member on a fresh
// directory, then a graceful shutdown.
func Example() {
	base, err := os.MkdirTemp("", "felix-datadir-example")
	if err != nil {
		panic(err)
	}
	defer os.RemoveAll(base)
	dir := filepath.Join(base, "data")

	d, err := datadir.Open(dir, datadir.Options{Fsync: datadir.FsyncOnCommit})
	if err != nil {
		panic(err)
	}
	defer d.Close()
	idf, err := d.Identify() // (a)
	if err != nil {
		panic(err)
	}
	fmt.Println("local:", idf.Decision().Action, idf.Decision().Reason)

	// (b) The control plane has never registered this node.
	cp := datadir.ControlPlane{State: datadir.ControlPlaneNoRecord}
	v, err := idf.CheckIncarnation(cp) // (c)
	if err != nil {
		panic(err)
	}
	fmt.Println("incarnation check:", v.Decision().Incarnation)
	// Register v.StorageID() with the control plane; it answers 1.
	p, err := v.RecordRegistration(1) // (d)
	if err != nil {
		panic(err)
	}
	run, err := p.MarkRunning() // (e); open stores after this
	if err != nil {
		panic(err)
	}
	// ... serve, then close every store ...
	if err := run.MarkCleanStop(); err != nil { // (f)
		panic(err)
	}
	fmt.Println("id length:", len(run.StorageID().String()))
	// Output:
	// local: new storage_id_missing
	// incarnation check: control_plane_no_record
	// id length: 32
}

// ExampleRestorePoint shows the hook the log store plugs into
// `felix restore-point`.
func ExampleRestorePoint() {
	dir, err := os.MkdirTemp("", "felix-restore-example")
	if err != nil {
		panic(err)
	}
	defer os.RemoveAll(dir)
	cut := func(ctx context.Context, dataDir string) error {
		_, err := os.Stat(filepath.Join(dataDir, datadir.StorageIDFile))
		fmt.Println("storage-id gone before the cut:", os.IsNotExist(err))
		return nil
	}
	if err := datadir.RestorePoint(context.Background(), dir, datadir.RestoreOptions{Cut: cut}); err != nil {
		panic(err)
	}
	// Output:
	// storage-id gone before the cut: true
}
