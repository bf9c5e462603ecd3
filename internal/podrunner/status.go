package podrunner

import (
	"net/netip"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/equality"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// podView is a worker's state at one instant, the input of applyStatus.
type podView struct {
	ip         netip.Addr
	hostIP     string // default: the host's loopback address
	startTime  time.Time
	initDone   bool
	failed     bool
	reason     string
	message    string
	inits      []corev1.ContainerStatus
	containers []corev1.ContainerStatus
}

// viewLocked snapshots the worker; w.mu must be held.
func (w *podWorker) viewLocked() podView {
	v := podView{
		ip: w.ip, hostIP: w.r.hostIP(), startTime: w.startTime, initDone: w.initDone, failed: w.failed,
		reason: w.reason, message: w.message,
	}
	for _, cs := range w.inits {
		v.inits = append(v.inits, cs.status(false))
	}
	for _, cs := range w.containers {
		v.containers = append(v.containers, cs.status(true))
	}
	return v
}

func (cs *containerState) status(main bool) corev1.ContainerStatus {
	st := corev1.ContainerStatus{
		Name:                 cs.spec.Name,
		Image:                cs.spec.Image,
		RestartCount:         cs.restarts,
		State:                *cs.state.DeepCopy(),
		LastTerminationState: *cs.last.DeepCopy(),
		Ready:                cs.ready && cs.state.Running != nil,
	}
	if cs.binary != "" {
		st.ImageID = "local://" + cs.binary
	}
	if cs.proc != nil {
		st.ContainerID = containerID(cs.proc)
	}
	if main {
		started := cs.state.Running != nil
		st.Started = &started
	}
	return st
}

// podPhase derives the pod phase from a view, as the kubelet does.
// A container is Terminated (rather than Waiting in back-off) only when it
// will not run again: its restart policy said so or the pod is stopping; so
// all containers terminated is a terminal phase under every policy, as for
// a deleted pod in a kubelet.
func podPhase(v podView) corev1.PodPhase {
	if v.failed {
		return corev1.PodFailed
	}
	if !v.initDone {
		return corev1.PodPending
	}
	running, ran, terminated, failed := 0, 0, 0, 0
	for _, c := range v.containers {
		switch {
		case c.State.Running != nil:
			running++
			ran++
		case c.State.Terminated != nil:
			terminated++
			ran++
			if c.State.Terminated.ExitCode != 0 {
				failed++
			}
		case c.LastTerminationState.Terminated != nil:
			ran++ // restarting after a crash
		}
	}
	switch {
	case len(v.containers) > 0 && terminated == len(v.containers):
		if failed > 0 {
			return corev1.PodFailed
		}
		return corev1.PodSucceeded
	case ran > 0:
		return corev1.PodRunning
	default:
		return corev1.PodPending
	}
}

// applyStatus writes a view into a pod status, keeping what others own
// (e.g. the PodScheduled condition). It reports whether anything changed.
func applyStatus(s *corev1.PodStatus, v podView, now time.Time) bool {
	before := s.DeepCopy()
	s.Phase = podPhase(v)
	s.Reason, s.Message = v.reason, v.message
	s.HostIP = v.hostIP
	if s.HostIP == "" {
		s.HostIP = hostIP
	}
	s.HostIPs = []corev1.HostIP{{IP: s.HostIP}}
	if v.ip.IsValid() {
		s.PodIP = v.ip.String()
		s.PodIPs = []corev1.PodIP{{IP: s.PodIP}}
	}
	if s.StartTime == nil && !v.startTime.IsZero() {
		t := metav1.NewTime(v.startTime)
		s.StartTime = &t
	}
	s.InitContainerStatuses = v.inits
	s.ContainerStatuses = v.containers
	ready := s.Phase == corev1.PodRunning && len(v.containers) > 0
	for _, c := range v.containers {
		ready = ready && c.Ready
	}
	setCondition(s, corev1.PodReadyToStartContainers, v.ip.IsValid(), now)
	setCondition(s, corev1.PodInitialized, v.initDone, now)
	setCondition(s, corev1.ContainersReady, ready, now)
	setCondition(s, corev1.PodReady, ready, now)
	return !equality.Semantic.DeepEqual(before, s)
}

func setCondition(s *corev1.PodStatus, t corev1.PodConditionType, ok bool, now time.Time) {
	status := corev1.ConditionFalse
	if ok {
		status = corev1.ConditionTrue
	}
	for i := range s.Conditions {
		c := &s.Conditions[i]
		if c.Type != t {
			continue
		}
		if c.Status != status {
			c.Status = status
			c.LastTransitionTime = metav1.NewTime(now)
		}
		return
	}
	s.Conditions = append(s.Conditions, corev1.PodCondition{Type: t, Status: status, LastTransitionTime: metav1.NewTime(now)})
}
