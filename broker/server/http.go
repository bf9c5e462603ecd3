package server

import (
	"errors"
	"net/http"
	"net/http/pprof"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promhttp"
)

// HTTPHandler serves /live (200 while the process runs), /ready (200 while
// ready reports true, else 503) and /metrics (the gatherer's metrics in the
// Prometheus exposition format).
func HTTPHandler(ready func() bool, g prometheus.Gatherer) http.Handler {
	return HTTPHandlerWithReason(func() error {
		if ready == nil || !ready() {
			return errNotReady
		}
		return nil
	}, g)
}

// errNotReady is /ready's reason when the check gives none.
var errNotReady = errors.New("not ready")

// HTTPHandlerWithReason is HTTPHandler with a readiness check that says
// why: /ready answers 200 while notReady returns nil, else 503 with the
// error's text (e.g. "storage full: ..."), so a probe's log shows the
// cause. It is HealthHandler and MetricsHandler on one port, as a
// standalone broker serves them.
func HTTPHandlerWithReason(notReady func() error, g prometheus.Gatherer) http.Handler {
	mux := http.NewServeMux()
	mux.Handle("GET /live", HealthHandler(notReady))
	mux.Handle("GET /ready", HealthHandler(notReady))
	mux.Handle("GET /metrics", MetricsHandler(g))
	return mux
}

// HealthHandler serves /live (200 while the process runs) and /ready (200
// while notReady returns nil, else 503 with the error's text) and nothing
// else (404). It reveals nothing sensitive and needs no authentication: a
// cluster member serves it alone, in plain HTTP, on its probe port.
func HealthHandler(notReady func() error) http.Handler {
	mux := http.NewServeMux()
	mux.HandleFunc("GET /live", func(w http.ResponseWriter, _ *http.Request) {
		w.Header().Set("Content-Type", "text/plain; charset=utf-8")
		_, _ = w.Write([]byte("ok\n"))
	})
	mux.HandleFunc("GET /ready", func(w http.ResponseWriter, _ *http.Request) {
		w.Header().Set("Content-Type", "text/plain; charset=utf-8")
		if err := notReady(); err != nil {
			w.WriteHeader(http.StatusServiceUnavailable)
			_, _ = w.Write([]byte(err.Error() + "\n"))
			return
		}
		_, _ = w.Write([]byte("ok\n"))
	})
	return mux
}

// MetricsHandler serves /metrics (the gatherer's metrics in the Prometheus
// exposition format) and nothing else (404). It does not authenticate: a
// cluster member serves it behind its scraper check (broker/metricsauth)
// over HTTPS.
func MetricsHandler(g prometheus.Gatherer) http.Handler {
	mux := http.NewServeMux()
	mux.Handle("GET /metrics", promhttp.HandlerFor(g, promhttp.HandlerOpts{}))
	return mux
}

// WithProfiles returns a handler that serves Go's runtime profiles under
// /debug/pprof/ (index, profile, symbol, trace and the named profiles) and
// everything else from h. Profiles reveal internals and cost CPU while
// taken: brokers serve them only when asked (--pprof).
func WithProfiles(h http.Handler) http.Handler {
	mux := http.NewServeMux()
	mux.Handle("/", h)
	mux.HandleFunc("/debug/pprof/", pprof.Index)
	mux.HandleFunc("/debug/pprof/profile", pprof.Profile)
	mux.HandleFunc("/debug/pprof/symbol", pprof.Symbol)
	mux.HandleFunc("/debug/pprof/trace", pprof.Trace)
	return mux
}
