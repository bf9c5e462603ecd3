package podrunner

import (
	"bytes"
	"errors"
	"fmt"
	"net/netip"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"syscall"
	"time"
)

// process is one running container process. It leads its own process
// group, so signals reach whatever it forked too, and it gets SIGKILL if
// the runner's thread that started it dies (Pdeathsig), so a crashed runner
// leaves no broker behind.
type process struct {
	// docker and container are set in container mode: signals become
	// docker commands on the named container.
	docker, container string

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

// signal sends sig to the process group, or in container mode does what
// the signal means to the container (SIGSTOP and SIGCONT pause and unpause
// it, since a stop signal cannot be forwarded).
func (p *process) signal(sig syscall.Signal) error {
	if p.container != "" {
		if p.exited() {
			return nil
		}
		var args []string
		switch sig {
		case syscall.SIGSTOP:
			args = []string{"pause", p.container}
		case syscall.SIGCONT:
			args = []string{"unpause", p.container}
		default:
			args = []string{"kill", "--signal", strconv.Itoa(int(sig)), p.container}
		}
		out, err := exec.Command(p.docker, args...).CombinedOutput()
		if err != nil && sig != syscall.SIGCONT && !p.exited() {
			return fmt.Errorf("podrunner: docker %s: %w: %s", args[0], err, bytes.TrimSpace(out))
		}
		return nil
	}
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
// SIGSTOP takes effect asynchronously) or the deadline passes. A paused
// container is frozen when docker pause returns.
func (p *process) waitStopped(deadline time.Time) bool {
	if p.container != "" {
		return true
	}
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

// dockerSpec is a container to run in container mode.
type dockerSpec struct {
	name   string
	mounts []string
	args   []string
	env    []string
	out    *os.File
	// network and ip, in bridge mode: the container runs on the network at
	// ip; cut: it is disconnected from it before it starts (its pod is
	// partitioned).
	network string
	ip      netip.Addr
	cut     bool
}

// startContainer runs the container in the foreground; the docker CLI
// process stands for the container (its exit is the container's). With
// host networking it is `docker run`; on a bridge network it is `docker
// create`, `docker network disconnect` when the pod is partitioned, then
// `docker start --attach`, so a partitioned pod's new container never
// reaches the network before it starts.
func startContainer(d DockerConfig, spec dockerSpec, now time.Time) (*process, error) {
	docker := d.dockerCLI()
	verb := "run"
	if spec.network != "" {
		verb = "create"
	}
	args := []string{verb, "--rm", "--name", spec.name,
		"--user", strconv.Itoa(os.Getuid()) + ":" + strconv.Itoa(os.Getgid())}
	if spec.network == "" {
		args = append(args, "--network", "host")
	} else {
		args = append(args, "--network", spec.network, "--ip", spec.ip.String())
		if spec.cut {
			// The pod IP is not on any interface until Heal connects the
			// container; this lets the program bind it meanwhile, as it
			// could in a partitioned pod whose interface stays up.
			args = append(args, "--sysctl", "net.ipv4.ip_nonlocal_bind=1")
		}
	}
	for _, m := range spec.mounts {
		args = append(args, "--volume", m+":"+m)
	}
	for _, e := range spec.env {
		if strings.HasPrefix(e, "PATH=") {
			continue // the image's own
		}
		args = append(args, "--env", e)
	}
	args = append(args, d.Image)
	args = append(args, spec.args...)
	if spec.network != "" {
		if _, err := dockerOutput(docker, args...); err != nil {
			return nil, err
		}
		if spec.cut {
			if _, err := dockerOutput(docker, "network", "disconnect", spec.network, spec.name); err != nil {
				_, _ = dockerOutput(docker, "rm", "--force", spec.name)
				return nil, err
			}
		}
		args = []string{"start", "--attach", spec.name}
	}
	p, err := startProcess(procSpec{path: docker, args: args, env: os.Environ(), out: spec.out}, now)
	if err != nil {
		if spec.network != "" {
			_, _ = dockerOutput(docker, "rm", "--force", spec.name)
		}
		return nil, err
	}
	p.docker, p.container = docker, spec.name
	return p, nil
}

// errDocker marks a docker command that failed.
var errDocker = errors.New("docker command failed")

// dockerOutput runs a docker CLI command and returns its standard output;
// a failure wraps errDocker and carries the command's standard error.
func dockerOutput(docker string, args ...string) ([]byte, error) {
	var stdout, stderr bytes.Buffer
	cmd := exec.Command(docker, args...)
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	if err := cmd.Run(); err != nil {
		return nil, fmt.Errorf("podrunner: %w: docker %s: %w: %s", errDocker, strings.Join(args[:min(2, len(args))], " "), err, bytes.TrimSpace(stderr.Bytes()))
	}
	return stdout.Bytes(), nil
}
