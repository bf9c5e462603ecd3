package server

import (
	"net/http"
	"net/http/httptest"
	"testing"

	"github.com/prometheus/client_golang/prometheus"
)

// Profiles are served only through WithProfiles; health and metrics are
// served either way.
func TestWithProfilesServesProfilesAndHealth(t *testing.T) {
	ready := func() bool { return true }
	plain := HTTPHandler(ready, prometheus.NewRegistry())
	cases := []struct {
		name    string
		handler http.Handler
		path    string
		want    int
	}{
		{"plain live", plain, "/live", http.StatusOK},
		{"plain has no profiles", plain, "/debug/pprof/", http.StatusNotFound},
		{"profiles live", WithProfiles(plain), "/live", http.StatusOK},
		{"profiles metrics", WithProfiles(plain), "/metrics", http.StatusOK},
		{"profiles index", WithProfiles(plain), "/debug/pprof/", http.StatusOK},
		{"profiles heap", WithProfiles(plain), "/debug/pprof/heap", http.StatusOK},
		{"health live", HealthHandler(func() error { return nil }), "/live", http.StatusOK},
		{"health ready", HealthHandler(func() error { return nil }), "/ready", http.StatusOK},
		{"health not ready", HealthHandler(func() error { return errNotReady }), "/ready", http.StatusServiceUnavailable},
		{"health has no metrics", HealthHandler(func() error { return nil }), "/metrics", http.StatusNotFound},
		{"metrics only", MetricsHandler(prometheus.NewRegistry()), "/metrics", http.StatusOK},
		{"metrics has no health", MetricsHandler(prometheus.NewRegistry()), "/live", http.StatusNotFound},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			rec := httptest.NewRecorder()
			tc.handler.ServeHTTP(rec, httptest.NewRequest(http.MethodGet, tc.path, nil))
			if rec.Code != tc.want {
				t.Fatalf("GET %s: %d, want %d", tc.path, rec.Code, tc.want)
			}
		})
	}
}
