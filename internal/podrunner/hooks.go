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
