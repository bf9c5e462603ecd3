package podrunner

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"syscall"
	"time"

	"k8s.io/apimachinery/pkg/types"
)

// ErrPodNotRunning is returned by a fault hook when the pod has no running
// container process on this runner.
var ErrPodNotRunning = errors.New("podrunner: pod has no running process")

func (r *Runner) signalPod(namespace, name string, sig func(*containerState) error) error {
	w := r.worker(types.NamespacedName{Namespace: namespace, Name: name})
	if w == nil {
		return fmt.Errorf("%w: %s/%s", ErrPodNotRunning, namespace, name)
	}
	ok, err := w.signalContainers(sig)
	if err != nil {
		return fmt.Errorf("podrunner: signal %s/%s: %w", namespace, name, err)
	}
	if !ok {
		return fmt.Errorf("%w: %s/%s", ErrPodNotRunning, namespace, name)
	}
	return nil
}

// Kill sends SIGKILL to every container process of the pod (kill -9, a
// crash). The runner restarts them per the pod's restartPolicy, counting
// restarts.
func (r *Runner) Kill(namespace, name string) error {
	return r.signalPod(namespace, name, func(cs *containerState) error {
		return cs.proc.signal(syscall.SIGKILL)
	})
}

// Terminate sends SIGTERM to every container process of the pod (a clean
// stop: the program shuts down on its own terms). The runner restarts the
// containers per the pod's restartPolicy, counting restarts, as it does
// after Kill; in container mode it is docker kill --signal 15.
func (r *Runner) Terminate(namespace, name string) error {
	return r.signalPod(namespace, name, func(cs *containerState) error {
		return cs.proc.signal(syscall.SIGTERM)
	})
}

// Freeze sends SIGSTOP to every container process of the pod: it stops
// running (and answering) without exiting, like a long GC pause or a
// paused VM. Its probes then fail as they would in a cluster.
func (r *Runner) Freeze(namespace, name string) error {
	return r.signalPod(namespace, name, func(cs *containerState) error {
		if err := cs.proc.signal(syscall.SIGSTOP); err != nil {
			return err
		}
		cs.frozen = true
		return nil
	})
}

// Thaw sends SIGCONT to every container process of the pod, resuming a
// Freeze.
func (r *Runner) Thaw(namespace, name string) error {
	return r.signalPod(namespace, name, func(cs *containerState) error {
		if err := cs.proc.signal(syscall.SIGCONT); err != nil {
			return err
		}
		cs.frozen = false
		return nil
	})
}

// WipeVolume deletes everything in the directory of claim namespace/claim,
// leaving it empty, as a replaced or reformatted disk. Processes using it
// keep their open files; pair it with Kill to model a restart on an empty
// disk.
func (r *Runner) WipeVolume(namespace, claim string) error {
	r.volMu.Lock()
	defer r.volMu.Unlock()
	dir := ClaimDir(r.cfg.StateDir, namespace, claim)
	entries, err := os.ReadDir(dir)
	if err != nil {
		return fmt.Errorf("podrunner: wipe %s/%s: %w", namespace, claim, err)
	}
	for _, e := range entries {
		if err := os.RemoveAll(dir + string(os.PathSeparator) + e.Name()); err != nil {
			return fmt.Errorf("podrunner: wipe %s/%s: %w", namespace, claim, err)
		}
	}
	return nil
}

// CopyVolume copies the directory of claim namespace/claim to dst (which
// must not exist) with the processes using the claim frozen meanwhile, so
// the copy is crash-consistent, as a volume snapshot is. It returns the
// bytes copied. RestoreVolume puts such a copy back.
func (r *Runner) CopyVolume(namespace, claim, dst string) (int64, error) {
	thaw, err := r.FreezeClaim(namespace, claim)
	if err != nil {
		return 0, err
	}
	defer thaw()
	r.volMu.Lock()
	defer r.volMu.Unlock()
	n, err := CopyDir(ClaimDir(r.cfg.StateDir, namespace, claim), dst)
	if err != nil {
		return 0, fmt.Errorf("podrunner: copy volume %s/%s: %w", namespace, claim, err)
	}
	return n, nil
}

// RestoreVolume replaces the content of claim namespace/claim's directory
// with a copy of src (a volume rolled back to an older copy, e.g. one
// CopyVolume made). As with WipeVolume, running processes keep their open
// files: pair it with Kill for "restart on the restored disk".
func (r *Runner) RestoreVolume(namespace, claim, src string) error {
	r.volMu.Lock()
	defer r.volMu.Unlock()
	dir := ClaimDir(r.cfg.StateDir, namespace, claim)
	tmp := dir + ".restore"
	if err := os.RemoveAll(tmp); err != nil {
		return fmt.Errorf("podrunner: restore %s/%s: %w", namespace, claim, err)
	}
	if _, err := CopyDir(src, tmp); err != nil {
		return fmt.Errorf("podrunner: restore %s/%s: %w", namespace, claim, err)
	}
	defer func() { _ = os.RemoveAll(tmp) }()
	entries, err := os.ReadDir(dir)
	if err != nil {
		return fmt.Errorf("podrunner: restore %s/%s: %w", namespace, claim, err)
	}
	// The claim directory itself stays (its mounts and ownership file are
	// tied to it); its entries are replaced.
	for _, e := range entries {
		if err := os.RemoveAll(filepath.Join(dir, e.Name())); err != nil {
			return fmt.Errorf("podrunner: restore %s/%s: %w", namespace, claim, err)
		}
	}
	moved, err := os.ReadDir(tmp)
	if err != nil {
		return fmt.Errorf("podrunner: restore %s/%s: %w", namespace, claim, err)
	}
	for _, e := range moved {
		if err := os.Rename(filepath.Join(tmp, e.Name()), filepath.Join(dir, e.Name())); err != nil {
			return fmt.Errorf("podrunner: restore %s/%s: %w", namespace, claim, err)
		}
	}
	return nil
}

// FreezeClaim stops (SIGSTOP) every process of pods mounting claim
// namespace/claim that is not frozen already, and returns a function that
// resumes exactly those. While they are stopped, a copy of the claim's
// directory is crash-consistent, as a CSI snapshot is.
func (r *Runner) FreezeClaim(namespace, claim string) (thaw func(), err error) {
	r.mu.Lock()
	var ws []*podWorker
	for key, w := range r.workers {
		if key.Namespace == namespace && w.usesClaim(claim) {
			ws = append(ws, w)
		}
	}
	r.mu.Unlock()
	var stopped []*process
	thaw = func() {
		for _, p := range stopped {
			_ = p.signal(syscall.SIGCONT)
		}
	}
	for _, w := range ws {
		w.mu.Lock()
		for _, cs := range append(append([]*containerState(nil), w.inits...), w.containers...) {
			if cs.proc == nil || cs.proc.exited() || cs.frozen {
				continue
			}
			if err := cs.proc.signal(syscall.SIGSTOP); err != nil {
				w.mu.Unlock()
				thaw()
				return func() {}, fmt.Errorf("podrunner: freeze %s: %w", w.key, err)
			}
			stopped = append(stopped, cs.proc)
			cs.proc.waitStopped(time.Now().Add(time.Second))
		}
		w.mu.Unlock()
	}
	return thaw, nil
}

// ClaimDir is the directory standing for claim namespace/claim.
func (r *Runner) ClaimDir(namespace, claim string) string {
	return ClaimDir(r.cfg.StateDir, namespace, claim)
}

// LogPath is the log file of pod namespace/name.
func (r *Runner) LogPath(namespace, name string) string {
	return LogPath(r.cfg.StateDir, namespace, name)
}

// Partition cuts pod namespace/name off the network in bridge container
// mode (Config.Docker.Network): every container of the pod is
// disconnected from the bridge network (docker network disconnect), so it
// reaches neither its peers, nor the API server, nor the host, and nothing
// reaches it (clients and probes included: the pod turns unready, and a
// partition longer than its liveness probe allows gets it restarted),
// until Heal. Its processes keep running and keep their sockets, bound
// to the pod IP. A container (re)started while the pod is partitioned is
// created on the network and disconnected before it starts (with
// net.ipv4.ip_nonlocal_bind=1, so it can still bind its pod IP): the pod
// stays partitioned across restarts. Partitioning a partitioned pod does
// nothing. It returns an error wrapping ErrNotBridgeMode outside bridge
// mode and ErrPodNotRunning when the runner does not run the pod (not
// started, ended, or the runner stopped).
func (r *Runner) Partition(namespace, name string) error {
	return r.setPartitioned(namespace, name, true)
}

// Heal undoes Partition: every container of the pod is connected to the
// bridge network again at the pod's address (docker network connect
// --ip), and containers started from now on are connected. Healing a pod
// that is not partitioned does nothing. Errors are those of Partition.
func (r *Runner) Heal(namespace, name string) error {
	return r.setPartitioned(namespace, name, false)
}

func (r *Runner) setPartitioned(namespace, name string, cut bool) error {
	what := map[bool]string{true: "partition", false: "heal"}[cut]
	if r.net == nil {
		return fmt.Errorf("%w: %s %s/%s", ErrNotBridgeMode, what, namespace, name)
	}
	w := r.worker(types.NamespacedName{Namespace: namespace, Name: name})
	if w == nil || w.isDone() {
		return fmt.Errorf("%w: %s %s/%s", ErrPodNotRunning, what, namespace, name)
	}
	w.mu.Lock()
	ip := w.ip
	w.mu.Unlock()
	w.netMu.Lock()
	defer w.netMu.Unlock()
	if w.partitioned == cut {
		return nil
	}
	docker := r.cfg.Docker.dockerCLI()
	var done []string // containers already changed, undone on failure
	for container, p := range w.attached {
		args := []string{"network", "connect", "--ip", ip.String(), r.net.Name, container}
		undo := []string{"network", "disconnect", r.net.Name, container}
		if cut {
			args, undo = undo, args
		}
		if _, err := dockerOutput(docker, args...); err != nil {
			if exitedSoon(p) {
				continue // the container ended meanwhile; its successor follows the flag
			}
			for _, c := range done {
				u := append(append([]string(nil), undo[:len(undo)-1]...), c)
				_, _ = dockerOutput(docker, u...)
			}
			return fmt.Errorf("podrunner: %s %s/%s: %w", what, namespace, name, err)
		}
		done = append(done, container)
	}
	w.partitioned = cut
	w.log.Info("network "+what, "containers", len(done))
	return nil
}

// exitedSoon reports whether the process is reaped within a moment (a
// docker command on a container that just exited fails before the docker
// CLI standing for it has returned).
func exitedSoon(p *process) bool {
	t := time.NewTimer(2 * time.Second)
	defer t.Stop()
	select {
	case <-p.done:
		return true
	case <-t.C:
		return false
	}
}
