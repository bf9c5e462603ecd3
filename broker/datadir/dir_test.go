package datadir

import (
	"bytes"
	"context"
	"errors"
	"os"
	"path/filepath"
	"testing"
)

// env is a test machine: a data directory, a boot id file and a syncfs
// that can be made to fail.
type env struct {
	t        *testing.T
	dir      string
	bootPath string
	syncErr  error
	syncs    int
}

func newEnv(t *testing.T) *env {
	t.Helper()
	e := &env{t: t, dir: filepath.Join(t.TempDir(), "data"), bootPath: filepath.Join(t.TempDir(), "boot_id")}
	e.setBoot(bootA)
	return e
}

// setBoot simulates the machine being in boot b ("" makes it unreadable).
func (e *env) setBoot(b string) {
	e.t.Helper()
	if b == "" {
		if err := os.Remove(e.bootPath); err != nil && !errors.Is(err, os.ErrNotExist) {
			e.t.Fatal(err)
		}
		return
	}
	if err := os.WriteFile(e.bootPath, []byte(b+"\n"), 0o600); err != nil {
		e.t.Fatal(err)
	}
}

func (e *env) opts(mode FsyncMode) Options {
	return Options{
		Fsync:      mode,
		BootIDPath: e.bootPath,
		SyncFS: func(dir string) error {
			e.syncs++
			if e.syncErr != nil {
				return e.syncErr
			}
			return SyncFS(dir)
		},
	}
}

func (e *env) open(mode FsyncMode) *Dir {
	e.t.Helper()
	d, err := Open(e.dir, e.opts(mode))
	if err != nil {
		e.t.Fatalf("Open: %v", err)
	}
	e.t.Cleanup(func() { _ = d.Close() })
	return d
}

// startStandalone runs the standalone startup to running.
func (e *env) startStandalone(mode FsyncMode) (*Dir, *Running) {
	e.t.Helper()
	d := e.open(mode)
	id, err := d.Identify()
	if err != nil {
		e.t.Fatalf("Identify: %v", err)
	}
	p, err := id.Standalone()
	if err != nil {
		e.t.Fatalf("Standalone: %v", err)
	}
	r, err := p.MarkRunning()
	if err != nil {
		e.t.Fatalf("MarkRunning: %v", err)
	}
	return d, r
}

// startCluster runs the cluster startup to running with control plane
// answer cp; the registration it records is newInc.
func (e *env) startCluster(mode FsyncMode, cp ControlPlane, newInc Incarnation) (*Dir, *Running) {
	e.t.Helper()
	d := e.open(mode)
	id, err := d.Identify()
	if err != nil {
		e.t.Fatalf("Identify: %v", err)
	}
	v, err := id.CheckIncarnation(cp)
	if err != nil {
		e.t.Fatalf("CheckIncarnation: %v", err)
	}
	p, err := v.RecordRegistration(newInc)
	if err != nil {
		e.t.Fatalf("RecordRegistration: %v", err)
	}
	r, err := p.MarkRunning()
	if err != nil {
		e.t.Fatalf("MarkRunning: %v", err)
	}
	return d, r
}

func (e *env) stopClean(d *Dir, r *Running) {
	e.t.Helper()
	if err := r.MarkCleanStop(); err != nil {
		e.t.Fatalf("MarkCleanStop: %v", err)
	}
	if err := d.Close(); err != nil {
		e.t.Fatal(err)
	}
}

// kill abandons a running Dir the way SIGKILL would: the lock goes, the
// run-state stays "running".
func (e *env) kill(d *Dir) {
	e.t.Helper()
	if err := d.Close(); err != nil {
		e.t.Fatal(err)
	}
}

func (e *env) writeFile(name string, data []byte) {
	e.t.Helper()
	if err := os.WriteFile(filepath.Join(e.dir, name), data, 0o600); err != nil {
		e.t.Fatal(err)
	}
}

func (e *env) readFile(name string) []byte {
	e.t.Helper()
	b, err := os.ReadFile(filepath.Join(e.dir, name))
	if err != nil {
		e.t.Fatal(err)
	}
	return b
}

// TestID1_StorageIDLifecycle: a fresh directory gets an id drawn from the
// injected randomness, written in the documented format; restarts keep it;
// a wiped, deleted or corrupt id file gets a new one.
func TestID1_StorageIDLifecycle(t *testing.T) {
	e := newEnv(t)
	seed := bytes.Repeat([]byte{0xab}, 16)
	opts := e.opts(FsyncPeriodic)
	opts.Rand = bytes.NewReader(seed)
	d, err := Open(e.dir, opts)
	if err != nil {
		t.Fatal(err)
	}
	idf, err := d.Identify()
	if err != nil {
		t.Fatal(err)
	}
	want := StorageID(seed)
	if idf.StorageID() != want || idf.Decision().Reason != ReasonStorageIDMissing {
		t.Fatalf("fresh dir: id %v reason %v", idf.StorageID(), idf.Decision().Reason)
	}
	if got, err := decodeStorageIDFile(e.readFile(StorageIDFile)); err != nil || got != want {
		t.Fatalf("storage-id file holds %v, %v", got, err)
	}
	p, err := idf.Standalone()
	if err != nil {
		t.Fatal(err)
	}
	r, err := p.MarkRunning()
	if err != nil {
		t.Fatal(err)
	}
	e.stopClean(d, r)

	d, r = e.startStandalone(FsyncPeriodic)
	if r.StorageID() != want || r.Decision().Reason != ReasonCleanStop {
		t.Fatalf("restart: id %v reason %v, want kept", r.StorageID(), r.Decision().Reason)
	}
	e.stopClean(d, r)

	// Corrupt storage-id: replaced.
	e.writeFile(StorageIDFile, []byte("garbage\n"))
	d, r = e.startStandalone(FsyncPeriodic)
	if r.StorageID() == want || r.Decision().Reason != ReasonStorageIDCorrupt {
		t.Fatalf("corrupt: id %v reason %v, want new", r.StorageID(), r.Decision().Reason)
	}
	second := r.StorageID()
	e.stopClean(d, r)

	// Wiped directory: new.
	if err := os.RemoveAll(e.dir); err != nil {
		t.Fatal(err)
	}
	d, r = e.startStandalone(FsyncPeriodic)
	if r.StorageID() == second || r.Decision().Reason != ReasonStorageIDMissing {
		t.Fatalf("wiped: id %v reason %v, want new", r.StorageID(), r.Decision().Reason)
	}
	e.stopClean(d, r)
}

// TestID3_DirAppliesDecision drives the unclean-stop rows through a real
// directory with injected boot ids and syncfs results.
func TestID3_DirAppliesDecision(t *testing.T) {
	cases := []struct {
		name    string
		mode    FsyncMode
		prepare func(e *env)
		action  Action
		reason  Reason
	}{
		{"killed same boot synced", FsyncPeriodic, func(e *env) {}, Keep, ReasonUncleanSameBootSynced},
		{"killed same boot synced none", FsyncNone, func(e *env) {}, Keep, ReasonUncleanSameBootSynced},
		{"reboot periodic", FsyncPeriodic, func(e *env) { e.setBoot(bootB) }, New, ReasonUncleanBootChanged},
		{"reboot none", FsyncNone, func(e *env) { e.setBoot(bootB) }, New, ReasonUncleanBootChanged},
		{"boot unreadable", FsyncPeriodic, func(e *env) { e.setBoot("") }, New, ReasonUncleanBootUnknown},
		{"syncfs fails", FsyncNone, func(e *env) { e.syncErr = errors.New("EIO") }, New, ReasonUncleanSyncFSFailed},
		{"reboot on-commit", FsyncOnCommit, func(e *env) { e.setBoot(bootB) }, Keep, ReasonUncleanOnCommit},
		{"syncfs fails on-commit", FsyncOnCommit, func(e *env) { e.syncErr = errors.New("EIO") }, Keep, ReasonUncleanOnCommit},
		{"corrupt run-state on-commit", FsyncOnCommit, func(e *env) { e.writeFile(RunStateFile, []byte("felix-run-state/1 ???\n")) }, New, ReasonRunStateCorrupt},
		{"missing run-state", FsyncPeriodic, func(e *env) { _ = os.Remove(filepath.Join(e.dir, RunStateFile)) }, New, ReasonRunStateMissing},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			e := newEnv(t)
			d, r := e.startStandalone(c.mode)
			first := r.StorageID()
			e.kill(d)
			c.prepare(e)
			// The new run may use another mode; the recorded one decides.
			d, r = e.startStandalone(FsyncOnCommit)
			defer e.kill(d)
			if r.Decision().Action != c.action || r.Decision().Reason != c.reason {
				t.Fatalf("decision %v/%v, want %v/%v", r.Decision().Action, r.Decision().Reason, c.action, c.reason)
			}
			if kept := r.StorageID() == first; kept != (c.action == Keep) {
				t.Fatalf("id %v -> %v with action %v", first, r.StorageID(), c.action)
			}
			if e.syncs < 2 {
				t.Fatalf("syncfs ran %d times, want once per start", e.syncs)
			}
		})
	}
}

// TestID4_ClusterStartupOrder walks the cluster startup: the incarnation
// check, the registration record, and the run-state record, in order.
func TestID4_ClusterStartupOrder(t *testing.T) {
	e := newEnv(t)
	// First start: the control plane has never seen the node.
	d, r := e.startCluster(FsyncOnCommit, ControlPlane{State: ControlPlaneNoRecord}, 1)
	first := r.StorageID()
	if got, err := decodeRegistrationFile(e.readFile(RegistrationFile)); err != nil || got != 1 {
		t.Fatalf("registration = %d, %v", got, err)
	}
	rs, err := decodeRunStateFile(e.readFile(RunStateFile))
	if err != nil || rs.Phase != PhaseRunning || rs.Fsync != FsyncOnCommit || rs.BootID != bootA {
		t.Fatalf("run-state = %+v, %v", rs, err)
	}
	e.stopClean(d, r)
	if rs, _ := decodeRunStateFile(e.readFile(RunStateFile)); rs.Phase != PhaseCleanStop {
		t.Fatalf("after clean stop run-state = %+v", rs)
	}

	// Restart, control plane equal: keep.
	d, r = e.startCluster(FsyncOnCommit, known(1), 2)
	if r.StorageID() != first || r.Decision().Incarnation != ReasonControlPlaneEqual {
		t.Fatalf("equal: %v %+v", r.StorageID(), r.Decision())
	}
	e.stopClean(d, r)
	snapshot := map[string][]byte{}
	for _, n := range []string{StorageIDFile, RegistrationFile, RunStateFile} {
		snapshot[n] = e.readFile(n)
	}

	// Control plane behind (it was restored): keep.
	d, r = e.startCluster(FsyncOnCommit, known(1), 2)
	if r.StorageID() != first || r.Decision().Incarnation != ReasonControlPlaneBehind {
		t.Fatalf("behind: %v %+v", r.StorageID(), r.Decision())
	}
	e.stopClean(d, r)
	// Several registrations later...
	for inc := Incarnation(3); inc <= 5; inc++ {
		d, r = e.startCluster(FsyncOnCommit, known(inc-1), inc)
		e.stopClean(d, r)
	}
	// ...the directory is restored from the snapshot taken at
	// registration 2. Clean stop, OnCommit, same boot: only the
	// registration shows it, and it rotates.
	for n, b := range snapshot {
		e.writeFile(n, b)
	}
	d, r = e.startCluster(FsyncOnCommit, known(5), 6)
	if r.StorageID() == first || r.Decision().Reason != ReasonControlPlaneAhead || r.Decision().Local != ReasonCleanStop {
		t.Fatalf("restored: %v %+v", r.StorageID(), r.Decision())
	}
	if got, err := decodeStorageIDFile(e.readFile(StorageIDFile)); err != nil || got != r.StorageID() {
		t.Fatalf("storage-id file %v, %v; running with %v", got, err, r.StorageID())
	}
	e.stopClean(d, r)

	// Registration file corrupt while the control plane knows the node.
	e.writeFile(RegistrationFile, []byte("felix-registration/1 incarnation=6 crc32c=00000000\n"))
	prev := r.StorageID()
	d, r = e.startCluster(FsyncOnCommit, known(6), 7)
	if r.StorageID() == prev || r.Decision().Reason != ReasonRegistrationCorrupt {
		t.Fatalf("corrupt registration: %v %+v", r.StorageID(), r.Decision())
	}
	e.stopClean(d, r)
}

// TestID4_LocalRotationIsNotRepeated: when step (a) already made a new id,
// a control plane that is ahead does not make a second one.
func TestID4_LocalRotationIsNotRepeated(t *testing.T) {
	e := newEnv(t)
	d := e.open(FsyncPeriodic)
	idf, err := d.Identify()
	if err != nil {
		t.Fatal(err)
	}
	made := idf.StorageID()
	v, err := idf.CheckIncarnation(known(9))
	if err != nil {
		t.Fatal(err)
	}
	if v.StorageID() != made || v.Decision().Reason != ReasonStorageIDMissing || v.Decision().Incarnation != ReasonRegistrationMissing {
		t.Fatalf("verified %v %+v, want %v kept from step (a)", v.StorageID(), v.Decision(), made)
	}
}

// TestID4_StepsAreSingleUse: each step object works once and only in
// order; a misused one returns ErrStepOrder and changes nothing.
func TestID4_StepsAreSingleUse(t *testing.T) {
	e := newEnv(t)
	d := e.open(FsyncPeriodic)
	idf, err := d.Identify()
	if err != nil {
		t.Fatal(err)
	}
	if _, err := d.Identify(); !errors.Is(err, ErrStepOrder) {
		t.Fatalf("second Identify: %v", err)
	}
	if _, err := idf.CheckIncarnation(ControlPlane{}); !errors.Is(err, ErrStepOrder) {
		t.Fatalf("CheckIncarnation(not asked): %v", err)
	}
	v, err := idf.CheckIncarnation(known(2))
	if err != nil {
		t.Fatal(err)
	}
	if _, err := idf.Standalone(); !errors.Is(err, ErrStepOrder) {
		t.Fatalf("Standalone after CheckIncarnation: %v", err)
	}
	if _, err := idf.CheckIncarnation(known(2)); !errors.Is(err, ErrStepOrder) {
		t.Fatalf("second CheckIncarnation: %v", err)
	}
	p, err := v.RecordRegistration(3)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := v.RecordRegistration(4); !errors.Is(err, ErrStepOrder) {
		t.Fatalf("second RecordRegistration: %v", err)
	}
	if got, _ := decodeRegistrationFile(e.readFile(RegistrationFile)); got != 3 {
		t.Fatalf("registration = %d after a refused second record", got)
	}
	if _, err := os.Stat(filepath.Join(e.dir, RunStateFile)); !errors.Is(err, os.ErrNotExist) {
		t.Fatalf("run-state written before MarkRunning: %v", err)
	}
	r, err := p.MarkRunning()
	if err != nil {
		t.Fatal(err)
	}
	if _, err := p.MarkRunning(); !errors.Is(err, ErrStepOrder) {
		t.Fatalf("second MarkRunning: %v", err)
	}
	if err := r.MarkCleanStop(); err != nil {
		t.Fatal(err)
	}
	if err := r.MarkCleanStop(); !errors.Is(err, ErrStepOrder) {
		t.Fatalf("second MarkCleanStop: %v", err)
	}
	if err := d.Close(); err != nil {
		t.Fatal(err)
	}
	if err := d.Close(); err != nil {
		t.Fatalf("second Close: %v", err)
	}

	// A closed Dir refuses every step.
	d2 := e.open(FsyncPeriodic)
	idf2, err := d2.Identify()
	if err != nil {
		t.Fatal(err)
	}
	if err := d2.Close(); err != nil {
		t.Fatal(err)
	}
	if _, err := idf2.Standalone(); !errors.Is(err, ErrStepOrder) {
		t.Fatalf("Standalone after Close: %v", err)
	}
}

// TestDirLockExcludesSecondBroker: two Dirs cannot share a directory.
func TestDirLockExcludesSecondBroker(t *testing.T) {
	e := newEnv(t)
	d := e.open(FsyncNone)
	if _, err := Open(e.dir, e.opts(FsyncNone)); !errors.Is(err, ErrLocked) {
		t.Fatalf("second Open: %v, want ErrLocked", err)
	}
	if err := RestorePoint(t.Context(), e.dir, RestoreOptions{Cut: func(context.Context, string) error { return nil }}); !errors.Is(err, ErrLocked) {
		t.Fatalf("RestorePoint on a running directory: %v, want ErrLocked", err)
	}
	if err := d.Close(); err != nil {
		t.Fatal(err)
	}
	d2, err := Open(e.dir, e.opts(FsyncNone))
	if err != nil {
		t.Fatalf("Open after Close: %v", err)
	}
	_ = d2.Close()
}

func TestOpenValidatesOptions(t *testing.T) {
	if _, err := Open(t.TempDir(), Options{}); err == nil {
		t.Fatal("Open without Fsync: want error")
	}
	file := filepath.Join(t.TempDir(), "f")
	if err := os.WriteFile(file, nil, 0o600); err != nil {
		t.Fatal(err)
	}
	if _, err := Open(file, Options{Fsync: FsyncNone}); err == nil {
		t.Fatal("Open on a regular file: want error")
	}
}

// TestID1_RandomSourceFailureStopsStartup: without randomness there is no
// id, and the start fails rather than inventing one.
func TestID1_RandomSourceFailureStopsStartup(t *testing.T) {
	e := newEnv(t)
	opts := e.opts(FsyncNone)
	opts.Rand = bytes.NewReader([]byte{1, 2, 3})
	d, err := Open(e.dir, opts)
	if err != nil {
		t.Fatal(err)
	}
	defer d.Close()
	if _, err := d.Identify(); err == nil {
		t.Fatal("Identify with a short random source: want error")
	}
	if _, err := os.Stat(filepath.Join(e.dir, StorageIDFile)); !errors.Is(err, os.ErrNotExist) {
		t.Fatalf("storage-id exists after a failed start: %v", err)
	}
	opts.Rand = bytes.NewReader(make([]byte, 16))
	d2 := &Dir{path: e.dir, opts: opts}
	if err := d2.rotate(); err == nil {
		t.Fatal("rotate with an all-zero draw: want error")
	}
}

// TestID3_RealBootIDAndSyncFS uses the production sources (the kernel's
// boot id, real syncfs): a killed Periodic run restarted in the same boot
// keeps its id.
func TestID3_RealBootIDAndSyncFS(t *testing.T) {
	if _, err := ReadBootID(DefaultBootIDPath); err != nil {
		t.Skipf("no kernel boot id: %v", err)
	}
	dir := t.TempDir()
	start := func() (*Dir, *Running) {
		d, err := Open(dir, Options{Fsync: FsyncPeriodic})
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
		r, err := p.MarkRunning()
		if err != nil {
			t.Fatal(err)
		}
		return d, r
	}
	d, r := start()
	first := r.StorageID()
	_ = d.Close() // killed: no clean stop
	d, r = start()
	defer d.Close()
	if r.StorageID() != first || r.Decision().Reason != ReasonUncleanSameBootSynced {
		t.Fatalf("restart: %v (was %v) %+v", r.StorageID(), first, r.Decision())
	}
}

// TestID4_FailedStepStopsStartup: an identity file that cannot be read is
// an error, not a fact, and the Dir refuses every later step.
func TestID4_FailedStepStopsStartup(t *testing.T) {
	e := newEnv(t)
	if err := os.MkdirAll(filepath.Join(e.dir, StorageIDFile), 0o750); err != nil {
		t.Fatal(err)
	}
	d := e.open(FsyncOnCommit)
	if _, err := d.Identify(); err == nil || errors.Is(err, ErrStepOrder) {
		t.Fatalf("Identify with an unreadable storage-id: %v, want an I/O error", err)
	}
	if _, err := d.Identify(); !errors.Is(err, ErrStepOrder) {
		t.Fatalf("Identify after a failure: %v, want ErrStepOrder", err)
	}
}
