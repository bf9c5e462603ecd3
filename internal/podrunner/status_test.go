package podrunner

import (
	"net/netip"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
)

func TestProbeThresholds_FlipAfterStreaks(t *testing.T) {
	// Period 1s, failure threshold 3: failing once failures span 2s.
	probe := &corev1.Probe{PeriodSeconds: 1, SuccessThreshold: 2, FailureThreshold: 3}
	for _, tc := range []struct {
		name  string
		every time.Duration // how often the runner probes
		steps []struct{ ok, want, changed bool }
	}{
		{"at the spec period", time.Second, []struct{ ok, want, changed bool }{
			{true, false, false}, {true, true, true}, {false, true, false}, {false, true, false},
			{true, true, false}, {false, true, false}, {false, true, false}, {false, false, true},
			{true, false, false}, {true, true, true},
		}},
		{"probing 4x as often keeps the 2s window", 250 * time.Millisecond, []struct{ ok, want, changed bool }{
			{true, false, false}, {true, true, true},
			{false, true, false}, {false, true, false}, {false, true, false}, {false, true, false},
			{false, true, false}, {false, true, false}, {false, true, false}, {false, true, false},
			{false, false, true}, // 2s after the first failure
		}},
	} {
		th := newProbeThresholds(probe, false)
		now := time.Unix(0, 0)
		for i, s := range tc.steps {
			got, changed := th.observe(s.ok, now)
			if got != s.want || changed != s.changed {
				t.Fatalf("%s: step %d (ok=%v): state %v changed %v, want %v %v", tc.name, i, s.ok, got, changed, s.want, s.changed)
			}
			now = now.Add(tc.every)
		}
	}
}

func TestPodPhase_FromContainerStates(t *testing.T) {
	running := corev1.ContainerStatus{State: corev1.ContainerState{Running: &corev1.ContainerStateRunning{}}}
	backoff := corev1.ContainerStatus{
		State:                corev1.ContainerState{Waiting: &corev1.ContainerStateWaiting{Reason: "CrashLoopBackOff"}},
		LastTerminationState: corev1.ContainerState{Terminated: &corev1.ContainerStateTerminated{ExitCode: 1}},
	}
	creating := corev1.ContainerStatus{State: corev1.ContainerState{Waiting: &corev1.ContainerStateWaiting{Reason: "ContainerCreating"}}}
	done := func(code int32) corev1.ContainerStatus {
		return corev1.ContainerStatus{State: corev1.ContainerState{Terminated: &corev1.ContainerStateTerminated{ExitCode: code}}}
	}
	for _, tc := range []struct {
		name string
		v    podView
		want corev1.PodPhase
	}{
		{"init pending", podView{containers: []corev1.ContainerStatus{creating}}, corev1.PodPending},
		{"init failed", podView{failed: true}, corev1.PodFailed},
		{"creating", podView{initDone: true, containers: []corev1.ContainerStatus{creating}}, corev1.PodPending},
		{"running", podView{initDone: true, containers: []corev1.ContainerStatus{running, creating}}, corev1.PodRunning},
		{"crash loop is running", podView{initDone: true, containers: []corev1.ContainerStatus{backoff}}, corev1.PodRunning},
		{"all done ok", podView{initDone: true, containers: []corev1.ContainerStatus{done(0), done(0)}}, corev1.PodSucceeded},
		{"one failed", podView{initDone: true, containers: []corev1.ContainerStatus{done(0), done(137)}}, corev1.PodFailed},
	} {
		if got := podPhase(tc.v); got != tc.want {
			t.Errorf("%s: phase %s, want %s", tc.name, got, tc.want)
		}
	}
}

func TestApplyStatus_ReadyNeedsEveryContainerAndKeepsSchedulerCondition(t *testing.T) {
	now := time.Unix(1000, 0)
	s := &corev1.PodStatus{Conditions: []corev1.PodCondition{{Type: corev1.PodScheduled, Status: corev1.ConditionTrue}}}
	ready := corev1.ContainerStatus{Name: "a", Ready: true, State: corev1.ContainerState{Running: &corev1.ContainerStateRunning{}}}
	notReady := corev1.ContainerStatus{Name: "b", State: corev1.ContainerState{Running: &corev1.ContainerStateRunning{}}}
	v := podView{ip: netip.MustParseAddr("127.0.0.9"), initDone: true, containers: []corev1.ContainerStatus{ready, notReady}}
	if !applyStatus(s, v, now) {
		t.Fatal("first apply reported no change")
	}
	if s.PodIP != "127.0.0.9" || s.Phase != corev1.PodRunning || cond(s, corev1.PodReady) != corev1.ConditionFalse {
		t.Fatalf("ip %s phase %s ready %s", s.PodIP, s.Phase, cond(s, corev1.PodReady))
	}
	if cond(s, corev1.PodScheduled) != corev1.ConditionTrue {
		t.Fatal("PodScheduled was dropped")
	}
	if applyStatus(s, v, now.Add(time.Second)) {
		t.Fatal("re-applying the same view reported a change")
	}
	v.containers[1].Ready = true
	applyStatus(s, v, now.Add(2*time.Second))
	if cond(s, corev1.PodReady) != corev1.ConditionTrue || cond(s, corev1.ContainersReady) != corev1.ConditionTrue {
		t.Fatal("pod not Ready with every container ready")
	}
}

func cond(s *corev1.PodStatus, t corev1.PodConditionType) corev1.ConditionStatus {
	for _, c := range s.Conditions {
		if c.Type == t {
			return c.Status
		}
	}
	return ""
}
