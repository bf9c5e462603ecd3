package main

import (
	"context"
	"fmt"
	"os"
	"slices"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
)

// peerCluster is a started JetStream cluster with an admin connection:
// what every mode starts from.
type peerCluster struct {
	urls  []string
	pids  []int
	certs *tlsFiles
	admin *nats.Conn
	js    jetstream.JetStream
	stop  func()
	dir   string
}

// startPeer starts c's cluster in a temporary directory (with TLS files
// when c.tls) and connects an admin client; close undoes all of it.
func startPeer(c config, opts ...jetstream.JetStreamOpt) (p *peerCluster, err error) {
	p = &peerCluster{stop: func() {}}
	defer func() {
		if err != nil {
			p.close()
		}
	}()
	if p.dir, err = os.MkdirTemp("", "natsbench-"); err != nil {
		return p, err
	}
	if c.tls {
		if p.certs, err = writeTLSFiles(p.dir); err != nil {
			return p, err
		}
	}
	if p.urls, p.pids, p.stop, err = startCluster(c, p.dir, p.certs); err != nil {
		return p, err
	}
	if p.admin, err = connect(p.urls, p.certs); err != nil {
		return p, err
	}
	if p.js, err = jetstream.New(p.admin, opts...); err != nil {
		return p, err
	}
	return p, nil
}

// close closes the admin connection, stops the servers and removes the
// directory.
func (p *peerCluster) close() {
	if p.admin != nil {
		p.admin.Close()
	}
	p.stop()
	if p.dir != "" {
		_ = os.RemoveAll(p.dir)
	}
}

// createStream creates a stream, retrying for up to a minute: the
// cluster needs a meta leader first.
func createStream(ctx context.Context, js jetstream.JetStream, cfg jetstream.StreamConfig) (jetstream.Stream, error) {
	deadline := time.Now().Add(60 * time.Second)
	for {
		cctx, cancel := context.WithTimeout(ctx, 5*time.Second)
		s, err := js.CreateStream(cctx, cfg)
		cancel()
		if err == nil {
			return s, nil
		}
		if time.Now().After(deadline) {
			return nil, fmt.Errorf("create stream %s: %w", cfg.Name, err)
		}
		time.Sleep(200 * time.Millisecond)
	}
}

// percentiles sorts lats and returns the q-quantile of them in
// milliseconds (0 when there are none).
func percentiles(lats []time.Duration) func(q float64) float64 {
	slices.Sort(lats)
	return func(q float64) float64 {
		if len(lats) == 0 {
			return 0
		}
		return float64(lats[int(q*float64(len(lats)-1))].Microseconds()) / 1000
	}
}

// microsPer is d in microseconds per one of n (0 when n is 0).
func microsPer(d time.Duration, n int64) float64 {
	if n == 0 {
		return 0
	}
	return float64(d.Microseconds()) / float64(n)
}
