package podrunner

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// errImage marks a container whose image has no local binary (the
// kubelet's ErrImageNeverPull).
var errImage = errors.New("no local binary for image")

// containerState is what the runner knows of one container; it is read
// and written under the pod worker's lock.
type containerState struct {
	spec     *corev1.Container
	binary   string
	restarts int32
	state    corev1.ContainerState
	last     corev1.ContainerState
	started  bool
	ready    bool
	proc     *process
	frozen   bool
	// lastEnv is the environment resolved at the container's previous
	// start: reused when the API server cannot be reached, as the
	// kubelet's ConfigMap and Secret caches serve the last values seen.
	lastEnv *envVars
}

// restartDelay is the backoff before the n-th consecutive restart (n >= 1).
func restartDelay(first, max time.Duration, n int) time.Duration {
	d := first
	for i := 1; i < n && d < max; i++ {
		d *= 2
	}
	if d > max {
		d = max
	}
	return d
}

// shouldRestart applies a pod's restartPolicy to a container that exited
// with code.
func shouldRestart(policy corev1.RestartPolicy, code int32) bool {
	switch policy {
	case corev1.RestartPolicyNever:
		return false
	case corev1.RestartPolicyOnFailure:
		return code != 0
	default:
		return true
	}
}

// launch resolves a container's command line and environment and starts
// its process. Resolution happens at every start, as the kubelet resolves
// them for every new container.
func (w *podWorker) launch(ctx context.Context, cs *containerState, main bool) (*process, error) {
	c := cs.spec
	bin, ok := w.r.cfg.binaryFor(c.Image)
	if !ok {
		return nil, fmt.Errorf("%w %q", errImage, c.Image)
	}
	w.mu.Lock()
	cs.binary = bin
	w.mu.Unlock()
	env := &envVars{}
	pd := podDir(w.r.cfg.StateDir, w.pod.Namespace, w.pod.Name)
	tmp := filepath.Join(pd, "tmp")
	if err := os.MkdirAll(tmp, 0o755); err != nil {
		return nil, err
	}
	env.set("PATH", os.Getenv("PATH"))
	env.set("HOME", pd)
	env.set("TMPDIR", tmp)
	env.set("HOSTNAME", w.hostname())
	if kc := w.kubeconfig; kc != "" {
		env.set("KUBECONFIG", kc)
	}
	user, err := resolveEnv(ctx, w.r.reader, w.pod, c, w.ip, w.r.cfg.NodeName, w.r.hostIP())
	w.mu.Lock()
	last := cs.lastEnv
	w.mu.Unlock()
	switch {
	case err == nil:
		w.mu.Lock()
		cs.lastEnv = user
		w.mu.Unlock()
	case last != nil && unreachable(err):
		// A restart while the API server is down: the kubelet starts
		// the container with what its caches last saw.
		w.log.Info("API server unreachable; restarting with the environment of the previous start",
			"container", c.Name, "err", err.Error())
		user = last
	default:
		return nil, err
	}
	for _, n := range user.names {
		env.set(n, user.values[n])
	}
	mounts, err := containerMounts(c, w.volumes)
	if err != nil {
		return nil, err
	}
	for _, m := range mounts {
		if strings.TrimRight(m.ContainerPath, "/") == "/tmp" {
			env.set("TMPDIR", m.HostPath)
		}
	}
	rw := NewRewriter(mounts, w.ip, w.dnsNames())
	var argv []string
	if len(c.Command) > 1 {
		argv = append(argv, c.Command[1:]...)
	}
	argv = append(argv, c.Args...)
	for i, a := range argv {
		argv[i] = rw.Rewrite(ExpandVars(a, user.lookup))
	}
	for _, n := range user.names {
		env.set(n, rw.Rewrite(env.values[n]))
	}
	if pl := w.r.cfg.PowerLoss; main && pl != nil && pl.BootIDFlag != "" && w.onPower() {
		if err := w.ensureBootID(); err != nil {
			return nil, err
		}
		argv = append(argv, pl.BootIDFlag, bootIDFile(w.r.cfg.StateDir, w.key.Namespace, w.key.Name))
	}
	dir := pd
	if c.WorkingDir != "" {
		dir = rw.Rewrite(c.WorkingDir)
	}
	_, _ = fmt.Fprintf(w.logFile, "=== %s podrunner: container %s start (restart %d): %s %s\n",
		w.r.now().UTC().Format(time.RFC3339Nano), c.Name, cs.restarts, bin, strings.Join(argv, " "))
	if d := w.r.cfg.Docker; d != nil {
		spec := dockerSpec{
			name:   fmt.Sprintf("felix-%s-%s-%s-%d", w.pod.Namespace, w.pod.Name, c.Name, w.r.now().UnixNano()),
			mounts: dockerMounts(mounts, pd, w.kubeconfig),
			args:   argv, env: env.list(), out: w.logFile,
		}
		if w.r.net == nil {
			return startContainer(*d, spec, w.r.now())
		}
		if n := len(w.pod.Spec.Containers); n > 1 {
			// Each container is a Docker container of its own: two could
			// not share the pod's address (no pause container holds it).
			return nil, fmt.Errorf("%w: bridge network mode runs pods of one container (init containers aside); this one has %d", errConfig, n)
		}
		return w.startOnBridge(*d, spec)
	}
	return startProcess(procSpec{path: bin, args: argv, env: env.list(), dir: dir, out: w.logFile}, w.r.now())
}

// startOnBridge starts a container on the bridge network at the pod's
// address, disconnected if the pod is partitioned, and tracks it so
// Partition and Heal reach it until it exits.
func (w *podWorker) startOnBridge(d DockerConfig, spec dockerSpec) (*process, error) {
	w.netMu.Lock()
	defer w.netMu.Unlock()
	spec.network, spec.ip, spec.cut = w.r.net.Name, w.ip, w.partitioned
	p, err := startContainer(d, spec, w.r.now())
	if err != nil {
		return nil, err
	}
	w.attached[spec.name] = p
	go func() {
		<-p.done
		w.netMu.Lock()
		delete(w.attached, spec.name)
		w.netMu.Unlock()
	}()
	return p, nil
}

// unreachable reports whether err is a failure to reach the API server
// (no answer), rather than an answer such as NotFound or Forbidden.
func unreachable(err error) bool {
	var status apierrors.APIStatus
	return !errors.As(err, &status)
}

// dockerMounts lists the host directories a container needs at the same
// path: its volumes, its pod directory and the kubeconfig's directory.
func dockerMounts(mounts []Mount, podDir, kubeconfig string) []string {
	seen := map[string]bool{}
	var out []string
	add := func(p string) {
		if p != "" && !seen[p] {
			seen[p] = true
			out = append(out, p)
		}
	}
	for _, m := range mounts {
		add(m.HostPath)
	}
	add(podDir)
	if kubeconfig != "" {
		add(filepath.Dir(kubeconfig))
	}
	return out
}

// waitingReason maps a launch error to the kubelet's waiting reason.
func waitingReason(err error) string {
	switch {
	case errors.Is(err, errImage):
		return "ErrImageNeverPull"
	case errors.Is(err, errConfig):
		return "CreateContainerConfigError"
	default:
		return "RunContainerError"
	}
}

func runningState(p *process) corev1.ContainerState {
	return corev1.ContainerState{Running: &corev1.ContainerStateRunning{StartedAt: metav1.NewTime(p.started)}}
}

func terminatedState(p *process, finished time.Time) corev1.ContainerState {
	code, sig, reason := p.exitInfo()
	return corev1.ContainerState{Terminated: &corev1.ContainerStateTerminated{
		ExitCode:    code,
		Signal:      sig,
		Reason:      reason,
		StartedAt:   metav1.NewTime(p.started),
		FinishedAt:  metav1.NewTime(finished),
		ContainerID: containerID(p),
	}}
}

func containerID(p *process) string { return fmt.Sprintf("podrunner://%d", p.pid) }

// outcome of one container run.
type outcome int

const (
	exitedRun   outcome = iota // the process exited by itself (or by a hook)
	stoppedRun                 // the pod is being stopped
	shutdownRun                // the runner is shutting down
)

// runOnce starts a container's process and waits for it to end, running
// its probes meanwhile. It returns the reaped process (nil if it did not
// start, with the launch error).
func (w *podWorker) runOnce(ctx context.Context, cs *containerState, probes bool) (*process, outcome, error) {
	// A power cut in progress holds the start until its claims are
	// mounted again; one starting now sees the process and kills it.
	w.powerMu.Lock()
	w.syncPowerClaims()
	p, err := w.launch(ctx, cs, probes)
	if err != nil {
		w.powerMu.Unlock()
		return nil, exitedRun, err
	}
	w.mu.Lock()
	cs.proc, cs.frozen = p, false
	cs.state = runningState(p)
	cs.started = true
	cs.ready = probes && cs.spec.ReadinessProbe == nil
	w.mu.Unlock()
	w.powerMu.Unlock()
	w.markDirty()

	runCtx, cancel := context.WithCancel(ctx)
	defer cancel()
	livenessFailed := make(chan struct{}, 1)
	if probes {
		if rp := cs.spec.ReadinessProbe; rp != nil {
			go runProbe(runCtx, rp, cs.spec, w.ip, w.r.cfg.MaxProbePeriod, false, func(ok bool) {
				w.mu.Lock()
				if cs.proc == p {
					cs.ready = ok
				}
				w.mu.Unlock()
				w.markDirty()
			})
		}
		if lp := cs.spec.LivenessProbe; lp != nil {
			go runProbe(runCtx, lp, cs.spec, w.ip, w.r.cfg.MaxProbePeriod, true, func(ok bool) {
				if !ok {
					select {
					case livenessFailed <- struct{}{}:
					default:
					}
				}
			})
		}
	}
	select {
	case <-p.done:
		return p, exitedRun, nil
	case <-livenessFailed:
		w.log.Info("liveness probe failed; restarting container", "container", cs.spec.Name)
		cancel()
		p.terminate(w.grace())
		return p, exitedRun, nil
	case <-w.stopCh:
		cancel()
		p.terminate(w.grace())
		return p, stoppedRun, nil
	case <-ctx.Done():
		cancel()
		g := w.grace()
		if g > w.r.cfg.ShutdownGrace {
			g = w.r.cfg.ShutdownGrace
		}
		p.terminate(g)
		return p, shutdownRun, nil
	}
}

// supervise runs a main container for the life of the pod, restarting it
// per the pod's restartPolicy with exponential backoff.
func (w *podWorker) supervise(ctx context.Context, cs *containerState) {
	consecutive := 0
	for {
		p, how, err := w.runOnce(ctx, cs, true)
		if err != nil {
			w.log.Info("container did not start", "container", cs.spec.Name, "err", err.Error())
			w.mu.Lock()
			cs.state = corev1.ContainerState{Waiting: &corev1.ContainerStateWaiting{Reason: waitingReason(err), Message: err.Error()}}
			w.mu.Unlock()
			w.markDirty()
			consecutive++
			if !w.sleep(ctx, restartDelay(w.r.cfg.RestartBackoff, w.r.cfg.MaxRestartBackoff, consecutive)) {
				return
			}
			continue
		}
		now := w.r.now()
		term := terminatedState(p, now)
		if how != exitedRun {
			w.mu.Lock()
			cs.state, cs.ready = term, false
			w.mu.Unlock()
			w.markDirty()
			return
		}
		if now.Sub(p.started) >= w.r.cfg.BackoffReset {
			consecutive = 0
		}
		code := term.Terminated.ExitCode
		w.log.Info("container exited", "container", cs.spec.Name, "exitCode", code)
		if !shouldRestart(w.pod.Spec.RestartPolicy, code) {
			w.mu.Lock()
			cs.state, cs.ready = term, false
			w.mu.Unlock()
			w.markDirty()
			return
		}
		consecutive++
		delay := restartDelay(w.r.cfg.RestartBackoff, w.r.cfg.MaxRestartBackoff, consecutive)
		w.mu.Lock()
		cs.last, cs.ready = term, false
		cs.state = corev1.ContainerState{Waiting: &corev1.ContainerStateWaiting{
			Reason:  "CrashLoopBackOff",
			Message: fmt.Sprintf("back-off %s restarting failed container %s", delay, cs.spec.Name),
		}}
		w.mu.Unlock()
		w.markDirty()
		if !w.sleep(ctx, delay) {
			return
		}
		w.mu.Lock()
		cs.restarts++
		w.mu.Unlock()
	}
}

// runInit runs an init container to successful completion, retrying a
// failure per restartPolicy. It reports false if the pod must not go on
// (the container failed under restartPolicy Never, or the pod is
// stopping).
func (w *podWorker) runInit(ctx context.Context, cs *containerState) (ok bool, failed bool) {
	consecutive := 0
	for {
		p, how, err := w.runOnce(ctx, cs, false)
		if err != nil {
			w.mu.Lock()
			cs.state = corev1.ContainerState{Waiting: &corev1.ContainerStateWaiting{Reason: waitingReason(err), Message: err.Error()}}
			w.mu.Unlock()
			w.markDirty()
		} else {
			term := terminatedState(p, w.r.now())
			w.mu.Lock()
			cs.state = term
			w.mu.Unlock()
			w.markDirty()
			if how != exitedRun {
				return false, false
			}
			if term.Terminated.ExitCode == 0 {
				return true, false
			}
			if w.pod.Spec.RestartPolicy == corev1.RestartPolicyNever {
				return false, true
			}
			w.mu.Lock()
			cs.last = term
			cs.state = corev1.ContainerState{Waiting: &corev1.ContainerStateWaiting{Reason: "CrashLoopBackOff"}}
			w.mu.Unlock()
		}
		consecutive++
		if !w.sleep(ctx, restartDelay(w.r.cfg.RestartBackoff, w.r.cfg.MaxRestartBackoff, consecutive)) {
			return false, false
		}
		if err == nil {
			w.mu.Lock()
			cs.restarts++
			w.mu.Unlock()
		}
	}
}
