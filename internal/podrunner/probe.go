package podrunner

import (
	"context"
	"crypto/tls"
	"fmt"
	"net"
	"net/http"
	"net/netip"
	"strconv"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/util/intstr"
)

// probeThresholds turns a stream of probe results into a state, as the
// kubelet does: the state flips to succeeding after successThreshold
// consecutive successes, and to failing once consecutive failures span
// (failureThreshold-1) x periodSeconds of the spec, which is when the
// kubelet sees its failureThreshold-th failure. Measuring the span rather
// than counting keeps the kubelet's timing when the runner probes more
// often than the spec says (Config.MaxProbePeriod).
type probeThresholds struct {
	success     int32
	failWindow  time.Duration
	ok          bool
	streak      int32
	streakOK    bool
	streakStart time.Time
}

func newProbeThresholds(p *corev1.Probe, initial bool) *probeThresholds {
	t := &probeThresholds{success: p.SuccessThreshold, ok: initial}
	if t.success <= 0 {
		t.success = 1
	}
	failures := p.FailureThreshold
	if failures <= 0 {
		failures = 3
	}
	t.failWindow = time.Duration(failures-1) * specPeriod(p)
	return t
}

// observe records one result seen at now and returns the state and
// whether it changed.
func (t *probeThresholds) observe(ok bool, now time.Time) (state, changed bool) {
	if ok == t.streakOK && t.streak > 0 {
		t.streak++
	} else {
		t.streakOK, t.streak, t.streakStart = ok, 1, now
	}
	prev := t.ok
	if ok && t.streak >= t.success {
		t.ok = true
	}
	if !ok && now.Sub(t.streakStart) >= t.failWindow {
		t.ok = false
	}
	return t.ok, t.ok != prev
}

// specPeriod is a probe's periodSeconds (default 10s).
func specPeriod(p *corev1.Probe) time.Duration {
	if p.PeriodSeconds <= 0 {
		return 10 * time.Second
	}
	return time.Duration(p.PeriodSeconds) * time.Second
}

// probePeriod is how often the runner probes: the spec's period, capped by
// maxPeriod when set.
func probePeriod(p *corev1.Probe, maxPeriod time.Duration) time.Duration {
	d := specPeriod(p)
	if maxPeriod > 0 && d > maxPeriod {
		d = maxPeriod
	}
	return d
}

// resolvePort finds the number of a probe port given by number or by the
// name of one of the container's ports.
func resolvePort(port intstr.IntOrString, c *corev1.Container) (int, error) {
	if port.Type == intstr.Int {
		return port.IntValue(), nil
	}
	if n, err := strconv.Atoi(port.StrVal); err == nil {
		return n, nil
	}
	for _, p := range c.Ports {
		if p.Name == port.StrVal {
			return int(p.ContainerPort), nil
		}
	}
	return 0, fmt.Errorf("%w: no container port named %q", errConfig, port.StrVal)
}

// checkProbe runs one probe against the pod address. Exec and gRPC probes
// are not emulated and always succeed (supported reports false).
func checkProbe(ctx context.Context, p *corev1.Probe, c *corev1.Container, ip netip.Addr) (ok, supported bool) {
	timeout := time.Duration(p.TimeoutSeconds) * time.Second
	if timeout <= 0 {
		timeout = time.Second
	}
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	switch {
	case p.HTTPGet != nil:
		g := p.HTTPGet
		port, err := resolvePort(g.Port, c)
		if err != nil {
			return false, true
		}
		host := g.Host
		if host == "" {
			host = ip.String()
		}
		scheme := "http"
		if g.Scheme == corev1.URISchemeHTTPS {
			scheme = "https"
		}
		url := fmt.Sprintf("%s://%s%s", scheme, net.JoinHostPort(host, strconv.Itoa(port)), g.Path)
		req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
		if err != nil {
			return false, true
		}
		for _, h := range g.HTTPHeaders {
			req.Header.Add(h.Name, h.Value)
		}
		tr := &http.Transport{
			// Probes skip certificate checks as the kubelet's do.
			TLSClientConfig:   &tls.Config{InsecureSkipVerify: true}, //nolint:gosec
			DisableKeepAlives: true,
		}
		resp, err := (&http.Client{Transport: tr, CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }}).Do(req)
		if err != nil {
			return false, true
		}
		_ = resp.Body.Close()
		return resp.StatusCode >= 200 && resp.StatusCode < 400, true
	case p.TCPSocket != nil:
		port, err := resolvePort(p.TCPSocket.Port, c)
		if err != nil {
			return false, true
		}
		host := p.TCPSocket.Host
		if host == "" {
			host = ip.String()
		}
		var d net.Dialer
		conn, err := d.DialContext(ctx, "tcp", net.JoinHostPort(host, strconv.Itoa(port)))
		if err != nil {
			return false, true
		}
		_ = conn.Close()
		return true, true
	default:
		return true, false
	}
}

// runProbe probes every period until ctx ends, calling onChange whenever
// the thresholded state changes. initial is the state before the first
// probe (false for readiness, true for liveness).
func runProbe(ctx context.Context, p *corev1.Probe, c *corev1.Container, ip netip.Addr, maxPeriod time.Duration, initial bool, onChange func(bool)) {
	th := newProbeThresholds(p, initial)
	period := probePeriod(p, maxPeriod)
	delay := time.Duration(p.InitialDelaySeconds) * time.Second
	t := time.NewTimer(delay)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
		ok, _ := checkProbe(ctx, p, c, ip)
		if ctx.Err() != nil {
			return
		}
		if state, changed := th.observe(ok, time.Now()); changed {
			onChange(state)
		}
		t.Reset(period)
	}
}
