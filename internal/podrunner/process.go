package podrunner

import (
	"bytes"
	"errors"
	"os"
	"os/exec"
	"strconv"
	"syscall"
	"time"
)

// process is one running container process. It leads its own process
// group, so signals reach whatever it forked too, and it gets SIGKILL if
// the runner's thread that started it dies (Pdeathsig), so a crashed runner
// leaves no broker behind.
type process struct {
	cmd     *exec.Cmd
	pid     int
	started time.Time
	done    chan struct{} // closed once the process has been reaped
	state   *os.ProcessState
}

type procSpec struct {
	path string
	args []string
	env  []string
	dir  string
	out  *os.File
}

func startProcess(spec procSpec, now time.Time) (*process, error) {
	cmd := exec.Command(spec.path, spec.args...)
	cmd.Env = spec.env
	cmd.Dir = spec.dir
	cmd.Stdout = spec.out
	cmd.Stderr = spec.out
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true, Pdeathsig: syscall.SIGKILL}
	if err := cmd.Start(); err != nil {
		return nil, err
	}
	p := &process{cmd: cmd, pid: cmd.Process.Pid, started: now, done: make(chan struct{})}
	go func() {
		_ = cmd.Wait()
		p.state = cmd.ProcessState
		close(p.done)
	}()
	return p, nil
}

// signal sends sig to the process group.
func (p *process) signal(sig syscall.Signal) error {
	err := syscall.Kill(-p.pid, sig)
	if errors.Is(err, syscall.ESRCH) {
		return nil
	}
	return err
}

// exited reports whether the process has been reaped.
func (p *process) exited() bool {
	select {
	case <-p.done:
		return true
	default:
		return false
	}
}

// terminate stops the process as a kubelet stops a container: SIGTERM (and
// SIGCONT, so a frozen process can act on it), then SIGKILL once grace has
// passed. It returns when the process has been reaped.
func (p *process) terminate(grace time.Duration) {
	_ = p.signal(syscall.SIGTERM)
	_ = p.signal(syscall.SIGCONT)
	t := time.NewTimer(grace)
	defer t.Stop()
	select {
	case <-p.done:
		return
	case <-t.C:
	}
	_ = p.signal(syscall.SIGKILL)
	<-p.done
}

// exitInfo describes how a reaped process ended: its exit code (128+n for
// a signal, as container runtimes report it), the signal, and a reason.
func (p *process) exitInfo() (code int32, signal int32, reason string) {
	st := p.state
	if st == nil {
		return -1, 0, "Unknown"
	}
	if ws, ok := st.Sys().(syscall.WaitStatus); ok && ws.Signaled() {
		sig := ws.Signal()
		return int32(128 + sig), int32(sig), "Error"
	}
	code = int32(st.ExitCode())
	if code == 0 {
		return 0, 0, "Completed"
	}
	return code, 0, "Error"
}

// waitStopped polls /proc until the process is in the stopped state (a
// SIGSTOP takes effect asynchronously) or the deadline passes.
func (p *process) waitStopped(deadline time.Time) bool {
	for time.Now().Before(deadline) {
		b, err := os.ReadFile("/proc/" + strconv.Itoa(p.pid) + "/stat")
		if err != nil {
			return false
		}
		// The state follows the parenthesised command name.
		if i := bytes.LastIndexByte(b, ')'); i >= 0 && i+2 < len(b) && (b[i+2] == 'T' || b[i+2] == 't') {
			return true
		}
		time.Sleep(time.Millisecond)
	}
	return false
}
