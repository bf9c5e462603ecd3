package server

import (
	"net"
	"net/http"
	"time"

	"golang.org/x/net/netutil"
)

// Bounds of the broker's HTTP servers (probes, /metrics).
const (
	// HTTPReadHeaderTimeout bounds the time to read a request's headers.
	HTTPReadHeaderTimeout = 10 * time.Second
	// HTTPReadTimeout bounds the time to read a whole request.
	HTTPReadTimeout = 30 * time.Second
	// HTTPWriteTimeout bounds the time to write an answer: a /metrics
	// exposition of many shards can take a while to write.
	HTTPWriteTimeout = 30 * time.Second
	// HTTPIdleTimeout closes a keep-alive connection idle this long.
	HTTPIdleTimeout = 60 * time.Second
	// HTTPMaxConnections bounds the open connections of one HTTP
	// listener; more wait in the kernel's accept queue. Probes and
	// scrapers need a handful.
	HTTPMaxConnections = 64
)

// NewHTTPServer returns an http.Server for h with the bounds above.
func NewHTTPServer(h http.Handler) *http.Server {
	return &http.Server{Handler: h, ReadHeaderTimeout: HTTPReadHeaderTimeout, ReadTimeout: HTTPReadTimeout,
		WriteTimeout: HTTPWriteTimeout, IdleTimeout: HTTPIdleTimeout}
}

// LimitHTTPListener bounds l to HTTPMaxConnections open connections
// (max when positive): Accept waits while that many are open.
func LimitHTTPListener(l net.Listener, max int) net.Listener {
	if max <= 0 {
		max = HTTPMaxConnections
	}
	return netutil.LimitListener(l, max)
}
