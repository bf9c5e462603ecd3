package podrunner

import (
	"context"
	"errors"
	"fmt"
	"net/netip"
	"os"
	"path/filepath"
	"sync"
	"time"

	"github.com/go-logr/logr"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/client"
)

// podWorker runs one pod: it sets up its address and volumes, runs its
// init containers in order, then supervises its containers until the pod
// is deleted or the runner stops, pushing the pod's status as it changes.
type podWorker struct {
	r   *Runner
	key types.NamespacedName
	uid types.UID
	pod *corev1.Pod // the pod as first seen; its spec is what runs
	log logr.Logger

	stopOnce sync.Once
	stopCh   chan struct{} // closed when the pod is to be stopped
	done     chan struct{} // closed when every process has exited
	dirty    chan struct{} // status needs pushing (capacity 1)

	// Set up before any container starts, then read-only.
	ip         netip.Addr
	volumes    map[string]string
	logFile    *os.File
	kubeconfig string

	// netMu serializes, in bridge mode, Partition and Heal with container
	// starts, so a container starts either before a partition (which then
	// disconnects it) or after (created disconnected).
	// powerMu is held by PowerCut from the kill until the claims are
	// mounted again, and by every container start, so no container
	// starts on a claim in the middle of a power cut.
	powerMu sync.Mutex

	netMu       sync.Mutex
	partitioned bool                // under netMu
	attached    map[string]*process // bridge-mode containers not yet exited, by name; under netMu

	mu          sync.Mutex
	graceSet    *time.Duration
	deleteAfter bool
	stopped     bool // requestStop was called
	finished    bool // every container ended and none will restart
	initDone    bool
	failed      bool
	reason      string
	message     string
	startTime   time.Time
	inits       []*containerState
	containers  []*containerState
}

func newPodWorker(r *Runner, pod *corev1.Pod) *podWorker {
	w := &podWorker{
		r:      r,
		key:    client.ObjectKeyFromObject(pod),
		uid:    pod.UID,
		pod:    pod.DeepCopy(),
		log:    r.log.WithValues("pod", client.ObjectKeyFromObject(pod).String()),
		stopCh: make(chan struct{}),
		done:   make(chan struct{}),
		dirty:  make(chan struct{}, 1),

		attached: map[string]*process{},
	}
	for i := range w.pod.Spec.InitContainers {
		w.inits = append(w.inits, &containerState{spec: &w.pod.Spec.InitContainers[i],
			state: corev1.ContainerState{Waiting: &corev1.ContainerStateWaiting{Reason: "PodInitializing"}}})
	}
	for i := range w.pod.Spec.Containers {
		w.containers = append(w.containers, &containerState{spec: &w.pod.Spec.Containers[i],
			state: corev1.ContainerState{Waiting: &corev1.ContainerStateWaiting{Reason: "ContainerCreating"}}})
	}
	return w
}

// requestStop asks the worker to stop every process (SIGTERM, then SIGKILL
// after grace) and, if deleteObject, to delete the pod object afterwards.
func (w *podWorker) requestStop(grace time.Duration, deleteObject bool) {
	w.mu.Lock()
	if w.graceSet == nil || grace < *w.graceSet {
		w.graceSet = &grace
	}
	w.deleteAfter = w.deleteAfter || deleteObject
	w.stopped = true
	w.mu.Unlock()
	w.stopOnce.Do(func() { close(w.stopCh) })
}

// grace is how long a stopping container gets between SIGTERM and SIGKILL.
func (w *podWorker) grace() time.Duration {
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.graceSet != nil {
		return *w.graceSet
	}
	return specGrace(w.pod)
}

func specGrace(pod *corev1.Pod) time.Duration {
	if g := pod.Spec.TerminationGracePeriodSeconds; g != nil {
		return time.Duration(*g) * time.Second
	}
	return 30 * time.Second
}

// isDone reports whether every process of the worker has exited.
func (w *podWorker) isDone() bool {
	select {
	case <-w.done:
		return true
	default:
		return false
	}
}

func (w *podWorker) markDirty() {
	select {
	case w.dirty <- struct{}{}:
	default:
	}
}

// sleep waits d, returning false if the pod is stopping or the runner is
// shutting down first.
func (w *podWorker) sleep(ctx context.Context, d time.Duration) bool {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
		return true
	case <-w.stopCh:
		return false
	case <-ctx.Done():
		return false
	}
}

func (w *podWorker) hostname() string {
	if w.pod.Spec.Hostname != "" {
		return w.pod.Spec.Hostname
	}
	return w.pod.Name
}

// dnsNames are the names cluster DNS would give the pod; the runner
// replaces them by the pod IP in args and env.
func (w *podWorker) dnsNames() []string {
	if w.pod.Spec.Subdomain == "" {
		return nil
	}
	return []string{fmt.Sprintf("%s.%s.%s.svc", w.hostname(), w.pod.Spec.Subdomain, w.pod.Namespace)}
}

func (w *podWorker) setPending(reason, message string) {
	w.mu.Lock()
	changed := w.reason != reason || w.message != message
	w.reason, w.message = reason, message
	w.mu.Unlock()
	if changed {
		w.markDirty()
	}
}

// run is the worker's life. It returns once every process has exited.
func (w *podWorker) run(ctx context.Context) {
	defer close(w.done)
	stopStatus := make(chan struct{})
	statusDone := make(chan struct{})
	go func() {
		defer close(statusDone)
		w.statusLoop(ctx, stopStatus)
	}()

	w.runPod(ctx)

	// Let a push in flight finish rather than cancel it: a cancelled
	// request may still land after the final push below.
	close(stopStatus)
	<-statusDone
	if w.logFile != nil {
		_ = w.logFile.Close()
	}
	if ctx.Err() != nil {
		return // the runner is shutting down: the node goes away, the pod stays
	}
	// A last push so the final container states are recorded; nothing
	// pushes after it, so retry it for a while.
	for attempt := 1; !w.pushStatus(ctx) && attempt < 50; attempt++ {
		t := time.NewTimer(100 * time.Millisecond)
		select {
		case <-ctx.Done():
			t.Stop()
			return
		case <-t.C:
		}
	}
	w.mu.Lock()
	deleteAfter := w.deleteAfter
	stopped := w.stopped
	w.mu.Unlock()
	if stopped {
		_ = os.RemoveAll(filepath.Join(podDir(w.r.cfg.StateDir, w.key.Namespace, w.key.Name), "volumes"))
	}
	if deleteAfter {
		uid := w.uid
		err := w.r.client.Delete(ctx, &corev1.Pod{ObjectMeta: w.pod.ObjectMeta},
			client.GracePeriodSeconds(0), client.Preconditions{UID: &uid})
		if err != nil && !apierrors.IsNotFound(err) && !apierrors.IsConflict(err) {
			w.log.Error(err, "delete pod after its processes ended")
		}
	}
}

func (w *podWorker) runPod(ctx context.Context) {
	w.mu.Lock()
	w.startTime = w.r.now()
	w.mu.Unlock()
	ip, err := w.r.cfg.Addresses.Allocate(w.key.Namespace, w.key.Name)
	if err != nil {
		w.log.Error(err, "no address for pod")
		w.setPending("AddressUnavailable", err.Error())
		return
	}
	w.mu.Lock()
	w.ip = ip
	w.mu.Unlock()
	// Volumes and credentials: retry until they can be set up, as a
	// kubelet waits for attach and mount.
	for attempt := 1; ; attempt++ {
		err = w.setup(ctx)
		if err == nil {
			break
		}
		w.log.Info("pod setup failed; retrying", "err", err.Error())
		reason := "ContainerCreating"
		if errors.Is(err, errConfig) {
			reason = "CreateContainerConfigError"
		}
		w.setPending(reason, err.Error())
		if !w.sleep(ctx, restartDelay(200*time.Millisecond, 5*time.Second, attempt)) {
			return
		}
	}
	w.setPending("", "")
	go w.r.refreshVolumes(ctx, w)
	for _, cs := range w.inits {
		ok, failed := w.runInit(ctx, cs)
		if failed {
			w.mu.Lock()
			w.failed, w.finished = true, true
			w.reason, w.message = "InitContainerFailed", "init container "+cs.spec.Name+" failed"
			w.mu.Unlock()
			w.markDirty()
			return
		}
		if !ok {
			return
		}
	}
	w.mu.Lock()
	w.initDone = true
	w.mu.Unlock()
	w.markDirty()
	var wg sync.WaitGroup
	for _, cs := range w.containers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			w.supervise(ctx, cs)
		}()
	}
	wg.Wait()
	w.mu.Lock()
	w.finished = !w.stopped
	w.mu.Unlock()
	w.markDirty()
}

// setup prepares volumes, the log file and credentials.
func (w *podWorker) setup(ctx context.Context) error {
	vols, err := w.r.podVolumes(ctx, w.pod)
	if err != nil {
		return err
	}
	w.volumes = vols
	if w.logFile == nil {
		path := LogPath(w.r.cfg.StateDir, w.key.Namespace, w.key.Name)
		if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
			return err
		}
		f, err := os.OpenFile(path, os.O_CREATE|os.O_APPEND|os.O_WRONLY, 0o644)
		if err != nil {
			return err
		}
		w.logFile = f
	}
	kc, err := w.r.credentials(ctx, w)
	if err != nil {
		return err
	}
	w.kubeconfig = kc
	return nil
}

// statusLoop pushes the pod status whenever it changes, until stop is
// closed or ctx ends.
func (w *podWorker) statusLoop(ctx context.Context, stop <-chan struct{}) {
	w.markDirty()
	for {
		select {
		case <-ctx.Done():
			return
		case <-stop:
			return
		case <-w.dirty:
		}
		if !w.pushStatus(ctx) {
			// Retry soon: a conflict or a blip of the API server.
			t := time.NewTimer(200 * time.Millisecond)
			select {
			case <-ctx.Done():
				t.Stop()
				return
			case <-stop:
				t.Stop()
				return
			case <-t.C:
			}
			w.markDirty()
		}
	}
}

// pushStatus writes the worker's view into the pod's status; it reports
// false when the write should be retried.
func (w *podWorker) pushStatus(ctx context.Context) bool {
	var pod corev1.Pod
	if err := w.r.reader.Get(ctx, w.key, &pod); err != nil {
		if !apierrors.IsNotFound(err) {
			w.log.Info("pod status read failed", "err", err.Error())
		}
		return apierrors.IsNotFound(err)
	}
	if pod.UID != w.uid {
		return true
	}
	w.mu.Lock()
	view := w.viewLocked()
	w.mu.Unlock()
	if !applyStatus(&pod.Status, view, w.r.now()) {
		return true
	}
	if err := w.r.client.Status().Update(ctx, &pod); err != nil {
		if !apierrors.IsNotFound(err) {
			w.log.Info("pod status update failed", "err", err.Error())
			return false
		}
	}
	return true
}

// Kill, Freeze and Thaw signal the current process of every main
// container; they report whether any process was signalled.
func (w *podWorker) signalContainers(sig func(*containerState) error) (bool, error) {
	w.mu.Lock()
	defer w.mu.Unlock()
	signalled := false
	for _, cs := range w.containers {
		if cs.proc == nil || cs.proc.exited() {
			continue
		}
		if err := sig(cs); err != nil {
			return signalled, err
		}
		signalled = true
	}
	return signalled, nil
}

// usesClaim reports whether the pod mounts the claim.
func (w *podWorker) usesClaim(claim string) bool {
	for _, v := range w.pod.Spec.Volumes {
		if v.PersistentVolumeClaim != nil && v.PersistentVolumeClaim.ClaimName == claim {
			return true
		}
	}
	return false
}
