package main

import (
	"context"
	"encoding/json"
	"fmt"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
)

// counterResult is what --counter-keys measures: the peer's distributed
// counters (nats-server 2.12 and later). Records counts the adds
// acknowledged in the measured window; AckedAdds every add acknowledged,
// warm-up included, which the counters' final values were checked to sum
// to.
type counterResult struct {
	Peer          string  `json:"peer"`
	Mode          string  `json:"mode"`
	Replicas      int     `json:"replicas"`
	SyncAlways    bool    `json:"syncAlways"`
	TLS           bool    `json:"tls"`
	Publishers    int     `json:"publishers"`
	Pending       int     `json:"pending"`
	Keys          int     `json:"keys"`
	Seconds       float64 `json:"seconds"`
	Records       int64   `json:"records"`
	RecordsPerSec float64 `json:"recordsPerSec"`
	P50Ms         float64 `json:"p50Ms"`
	P99Ms         float64 `json:"p99Ms"`
	P999Ms        float64 `json:"p999Ms"`
	Errors        int64   `json:"errors"`
	AckedAdds     int64   `json:"ackedAdds"`
	// CPU per add counted, as result's per record.
	ServersCPUMicros float64 `json:"serversCpuMicrosPerRecord"`
	ClientCPUMicros  float64 `json:"clientCpuMicrosPerRecord"`
}

// runCounter creates a counter stream (AllowMsgCounter) with c.replicas
// replicas and has c.publishers clients, each on its own connection, add
// 1 to the counter subject counter.(i mod c.counterKeys) with a
// synchronous publish carrying the header Nats-Incr: +1 and no payload,
// one add at a time, for c.warmup then c.duration. Every add runs to its
// answer (none is cut off at the end), so that each counter's final value
// must equal the adds acknowledged on it; runCounter fails if one does
// not.
func runCounter(c config) (counterResult, error) {
	peer, err := startPeer(c)
	if err != nil {
		return counterResult{}, err
	}
	defer peer.close()
	urls, pids, certs, js := peer.urls, peer.pids, peer.certs, peer.js
	ctx := context.Background()
	stream, err := createStream(ctx, js, jetstream.StreamConfig{Name: "COUNTERS", Subjects: []string{"counter.>"},
		Replicas: c.replicas, Storage: jetstream.FileStorage, AllowMsgCounter: true})
	if err != nil {
		return counterResult{}, err
	}

	var counting, stopping atomic.Bool
	var records, errs atomic.Int64
	acked := make([]atomic.Int64, c.counterKeys)
	var mu sync.Mutex
	var lats []time.Duration
	var firstErr error
	serversCPU0, clientCPU0, err := cpuNow(pids)
	if err != nil {
		return counterResult{}, err
	}
	var wg sync.WaitGroup
	for p := 0; p < c.publishers; p++ {
		nc, err := connect(urls, certs)
		if err != nil {
			return counterResult{}, err
		}
		defer nc.Close()
		pjs, err := jetstream.New(nc)
		if err != nil {
			return counterResult{}, err
		}
		key := p % c.counterKeys
		wg.Add(1)
		go func() {
			defer wg.Done()
			subj := fmt.Sprintf("counter.%d", key)
			var local []time.Duration
			for !stopping.Load() {
				m := nats.NewMsg(subj)
				m.Header.Set("Nats-Incr", "+1")
				t0 := time.Now()
				_, err := pjs.PublishMsg(ctx, m)
				if err != nil {
					errs.Add(1)
					mu.Lock()
					if firstErr == nil {
						firstErr = err
					}
					mu.Unlock()
					continue
				}
				acked[key].Add(1)
				if counting.Load() {
					records.Add(1)
					local = append(local, time.Since(t0))
				}
			}
			mu.Lock()
			lats = append(lats, local...)
			mu.Unlock()
		}()
	}
	time.Sleep(c.warmup)
	counting.Store(true)
	t0 := time.Now()
	time.Sleep(c.duration)
	counting.Store(false)
	secs := time.Since(t0).Seconds()
	stopping.Store(true)
	wg.Wait()
	serversCPU1, clientCPU1, err := cpuNow(pids)
	if err != nil {
		return counterResult{}, err
	}

	// Each counter's value is the payload {"val":"N"} of the last
	// message on its subject.
	var total int64
	for k := range acked {
		subj := fmt.Sprintf("counter.%d", k)
		gctx, cancel := context.WithTimeout(ctx, 10*time.Second)
		m, err := stream.GetLastMsgForSubject(gctx, subj)
		cancel()
		if err != nil {
			return counterResult{}, fmt.Errorf("read %s: %w", subj, err)
		}
		var v struct {
			Val string `json:"val"`
		}
		if err := json.Unmarshal(m.Data, &v); err != nil {
			return counterResult{}, fmt.Errorf("%s holds %q: %w", subj, m.Data, err)
		}
		got, err := strconv.ParseInt(v.Val, 10, 64)
		if err != nil {
			return counterResult{}, fmt.Errorf("%s holds %q: %w", subj, m.Data, err)
		}
		if want := acked[k].Load(); got != want {
			return counterResult{}, fmt.Errorf("%s is %d, %d adds to it were acknowledged (%d adds failed; first: %v)", subj, got, want, errs.Load(), firstErr)
		}
		total += got
	}

	pct := percentiles(lats)
	n := records.Load()
	perRecord := func(d time.Duration) float64 { return microsPer(d, n) }
	return counterResult{ServersCPUMicros: perRecord(serversCPU1 - serversCPU0), ClientCPUMicros: perRecord(clientCPU1 - clientCPU0),
		Peer: "nats-jetstream", Mode: "counter", Replicas: c.replicas, SyncAlways: c.syncAlways, TLS: c.tls,
		Publishers: c.publishers, Pending: 1, Keys: c.counterKeys,
		Seconds: secs, Records: n, RecordsPerSec: float64(n) / secs,
		P50Ms: pct(0.50), P99Ms: pct(0.99), P999Ms: pct(0.999), Errors: errs.Load(), AckedAdds: total}, nil
}
