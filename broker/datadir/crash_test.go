package datadir

import (
	"bufio"
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"
)

// The crash tests re-execute this test binary as a child that opens a data
// directory, marks it running and is SIGKILLed; the next child (or the
// parent) restarts on the same directory and the decision is checked
// against [ID-3]. FELIX_CRASH_ROUNDS sets the rounds per case (default 20).

const (
	envChild = "FELIX_DATADIR_CHILD" // "run" or "churn"
	envDir   = "FELIX_DATADIR_DIR"
	envBoot  = "FELIX_DATADIR_BOOT_PATH"
	envFsync = "FELIX_DATADIR_FSYNC"
)

func crashRounds(t *testing.T) int {
	s := os.Getenv("FELIX_CRASH_ROUNDS")
	if s == "" {
		return 20
	}
	n, err := strconv.Atoi(s)
	if err != nil || n < 1 {
		t.Fatalf("FELIX_CRASH_ROUNDS=%q: want a positive integer", s)
	}
	return n
}

// TestCrashChild is the child process body; it does nothing unless run by
// a crash test.
func TestCrashChild(t *testing.T) {
	kind := os.Getenv(envChild)
	if kind == "" {
		t.Skip("only runs as a crash-test child")
	}
	if err := crashChild(kind); err != nil {
		fmt.Printf("ERROR %v\n", err)
		os.Exit(3)
	}
	os.Exit(4) // unreachable unless stdin closed early
}

func crashChild(kind string) error {
	mode, err := ParseFsyncMode(os.Getenv(envFsync))
	if err != nil {
		return err
	}
	d, err := Open(os.Getenv(envDir), Options{Fsync: mode, BootIDPath: os.Getenv(envBoot)})
	if err != nil {
		return err
	}
	idf, err := d.Identify()
	if err != nil {
		return err
	}
	p, err := idf.Standalone()
	if err != nil {
		return err
	}
	r, err := p.MarkRunning()
	if err != nil {
		return err
	}
	dec := r.Decision()
	fmt.Printf("RUNNING %s %s %s\n", dec.Action, dec.Reason, r.StorageID())
	if kind == "churn" {
		// Rewrite every identity file in a loop until killed, reporting
		// each completed pass, so the kill lands inside some write.
		for n := uint64(1); ; n++ {
			d.mu.Lock()
			err := d.rotate()
			if err == nil {
				err = writeFileAtomic(d.path, RegistrationFile, encodeRegistrationFile(Incarnation(n)))
			}
			if err == nil {
				err = d.writeRunState(PhaseRunning)
			}
			d.mu.Unlock()
			if err != nil {
				return err
			}
			fmt.Printf("W %d\n", n)
		}
	}
	// Block until killed (or until the parent goes away).
	_, _ = io.Copy(io.Discard, os.Stdin)
	return errors.New("stdin closed before the kill")
}

// child is one running crash-test child.
type child struct {
	cmd   *exec.Cmd
	out   *bufio.Scanner
	stdin io.Closer
}

func startChild(t *testing.T, kind, dir, bootPath string, mode FsyncMode) *child {
	t.Helper()
	cmd := exec.Command(os.Args[0], "-test.run=^TestCrashChild$", "-test.count=1", "-test.timeout=60s")
	cmd.Env = append(os.Environ(), envChild+"="+kind, envDir+"="+dir, envBoot+"="+bootPath, envFsync+"="+mode.String())
	cmd.Stderr = os.Stderr
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	stdin, err := cmd.StdinPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	c := &child{cmd: cmd, out: bufio.NewScanner(stdout), stdin: stdin}
	t.Cleanup(func() {
		if c.cmd.ProcessState == nil {
			_ = c.cmd.Process.Kill()
			_ = c.cmd.Wait()
		}
	})
	return c
}

// line reads the child's next output line, failing on EOF or timeout.
func (c *child) line(t *testing.T) string {
	t.Helper()
	got := make(chan bool, 1)
	go func() { got <- c.out.Scan() }()
	select {
	case ok := <-got:
		if !ok {
			t.Fatalf("child output ended: %v", c.out.Err())
		}
	case <-time.After(30 * time.Second):
		t.Fatal("child produced no output within 30s")
	}
	s := c.out.Text()
	if strings.HasPrefix(s, "ERROR ") {
		t.Fatalf("child: %s", s)
	}
	return s
}

// sigkill kills the child with SIGKILL and checks that is how it died.
func (c *child) sigkill(t *testing.T) {
	t.Helper()
	if err := c.cmd.Process.Signal(syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	_ = c.cmd.Wait()
	_ = c.stdin.Close()
	ws, ok := c.cmd.ProcessState.Sys().(syscall.WaitStatus)
	if !ok || !ws.Signaled() || ws.Signal() != syscall.SIGKILL {
		t.Fatalf("child ended with %v, want SIGKILL", c.cmd.ProcessState)
	}
}

// running parses "RUNNING <action> <reason> <id>".
func running(t *testing.T, s string) (Action, string, StorageID) {
	t.Helper()
	f := strings.Fields(s)
	if len(f) != 4 || f[0] != "RUNNING" {
		t.Fatalf("unexpected child line %q", s)
	}
	id, err := ParseStorageID(f[3])
	if err != nil {
		t.Fatal(err)
	}
	a := Keep
	if f[1] == New.String() {
		a = New
	}
	return a, f[2], id
}

// TestID3_CrashRealProcess: children are SIGKILLed while running; each
// restart keeps or rotates the id exactly per [ID-3].
func TestID3_CrashRealProcess(t *testing.T) {
	if testing.Short() {
		t.Skip("spawns processes")
	}
	rounds := crashRounds(t)
	cases := []struct {
		name   string
		mode   FsyncMode
		reboot bool // a new boot id before every restart (machine crash)
		alter  bool // rewrite the recorded boot id after every kill
		action Action
		reason Reason
	}{
		{"periodic/same boot", FsyncPeriodic, false, false, Keep, ReasonUncleanSameBootSynced},
		{"periodic/reboot", FsyncPeriodic, true, false, New, ReasonUncleanBootChanged},
		{"periodic/recorded boot altered", FsyncPeriodic, false, true, New, ReasonUncleanBootChanged},
		{"none/same boot", FsyncNone, false, false, Keep, ReasonUncleanSameBootSynced},
		{"none/reboot", FsyncNone, true, false, New, ReasonUncleanBootChanged},
		{"on-commit/same boot", FsyncOnCommit, false, false, Keep, ReasonUncleanOnCommit},
		{"on-commit/reboot", FsyncOnCommit, true, false, Keep, ReasonUncleanOnCommit},
		{"on-commit/recorded boot altered", FsyncOnCommit, false, true, Keep, ReasonUncleanOnCommit},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			dir := filepath.Join(t.TempDir(), "data")
			bootPath := filepath.Join(t.TempDir(), "boot_id")
			rng := rand.New(rand.NewPCG(uint64(len(c.name)), 3))
			setBoot := func() {
				b := fmt.Sprintf("%08x-%04x-%04x-%04x-%012x", rng.Uint32(), rng.Uint32()&0xffff,
					rng.Uint32()&0xffff, rng.Uint32()&0xffff, rng.Uint64()&0xffffffffffff)
				if err := os.WriteFile(bootPath, []byte(b+"\n"), 0o600); err != nil {
					t.Fatal(err)
				}
			}
			setBoot()
			var prev StorageID
			for round := 0; round <= rounds; round++ {
				if round > 0 && c.reboot {
					setBoot()
				}
				ch := startChild(t, "run", dir, bootPath, c.mode)
				action, reason, id := running(t, ch.line(t))
				ch.sigkill(t)
				if c.alter {
					alterRecordedBoot(t, dir)
				}
				if round == 0 {
					if action != New || reason != ReasonStorageIDMissing.String() {
						t.Fatalf("first start: %v %s", action, reason)
					}
				} else {
					if action != c.action || reason != c.reason.String() {
						t.Fatalf("round %d: %v %s, want %v %v", round, action, reason, c.action, c.reason)
					}
					if (id == prev) != (c.action == Keep) {
						t.Fatalf("round %d: id %v -> %v under %v", round, prev, id, action)
					}
				}
				prev = id
			}
			// The run-state the last child left says running, in its mode.
			rs := readRunState(t, dir)
			if rs.Phase != PhaseRunning || rs.Fsync != c.mode {
				t.Fatalf("run-state after kill: %+v", rs)
			}
		})
	}
}

// TestID1_CrashDuringIdentityWrites: a child rewriting storage-id,
// registration and run-state in a loop is SIGKILLed at a random pass;
// every file it leaves decodes (atomic writes never expose a torn file).
func TestID1_CrashDuringIdentityWrites(t *testing.T) {
	if testing.Short() {
		t.Skip("spawns processes")
	}
	rounds := crashRounds(t)
	dir := filepath.Join(t.TempDir(), "data")
	bootPath := filepath.Join(t.TempDir(), "boot_id")
	if err := os.WriteFile(bootPath, []byte(bootA+"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	rng := rand.New(rand.NewPCG(7, 11))
	for round := 0; round < rounds; round++ {
		ch := startChild(t, "churn", dir, bootPath, FsyncPeriodic)
		_, reason, _ := running(t, ch.line(t))
		if strings.HasSuffix(reason, "_corrupt") {
			t.Fatalf("round %d: child found a corrupt file: %s", round, reason)
		}
		passes := 1 + rng.IntN(40)
		for i := 0; i < passes; i++ {
			ch.line(t)
		}
		ch.sigkill(t)
		for _, name := range []string{StorageIDFile, RegistrationFile, RunStateFile} {
			data, err := os.ReadFile(filepath.Join(dir, name))
			if err != nil {
				t.Fatalf("round %d: %s: %v", round, name, err)
			}
			var derr error
			switch name {
			case StorageIDFile:
				_, derr = decodeStorageIDFile(data)
			case RegistrationFile:
				_, derr = decodeRegistrationFile(data)
			case RunStateFile:
				_, derr = decodeRunStateFile(data)
			}
			if derr != nil {
				t.Fatalf("round %d: torn %s after kill: %v", round, name, derr)
			}
		}
	}
	// The parent restarts in-process: same boot, syncfs ok, Periodic: keep.
	d, err := Open(dir, Options{Fsync: FsyncPeriodic, BootIDPath: bootPath})
	if err != nil {
		t.Fatal(err)
	}
	defer d.Close()
	idf, err := d.Identify()
	if err != nil {
		t.Fatal(err)
	}
	if dec := idf.Decision(); dec.Action != Keep || dec.Reason != ReasonUncleanSameBootSynced {
		t.Fatalf("restart after churn: %+v", dec)
	}
}

func readRunState(t *testing.T, dir string) RunState {
	t.Helper()
	data, err := os.ReadFile(filepath.Join(dir, RunStateFile))
	if err != nil {
		t.Fatal(err)
	}
	rs, err := decodeRunStateFile(data)
	if err != nil {
		t.Fatal(err)
	}
	return rs
}

// alterRecordedBoot rewrites the run-state a killed child left so that it
// names another boot, as if the run had happened before a reboot.
func alterRecordedBoot(t *testing.T, dir string) {
	t.Helper()
	rs := readRunState(t, dir)
	if rs.BootID == bootB {
		t.Fatal("test boot ids collide")
	}
	rs.BootID = bootB
	data, err := encodeRunStateFile(rs)
	if err != nil {
		t.Fatal(err)
	}
	if err := writeFileAtomic(dir, RunStateFile, data); err != nil {
		t.Fatal(err)
	}
}
