package main

import (
	"context"
	"fmt"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"felix.dev/felix/broker/client"
	"felix.dev/felix/broker/record"
)

// runCounterBench is `felix bench --counter-key K`: each of f.connections
// routing clients adds 1 to the counter K of its shard (f.shardOf), one
// add at a time, through Cluster.CounterAdd (idempotent). The adds run
// with ctx, not a context cancelled at the end, so that every add sent is
// answered: the run then checks that the counters grew by exactly the
// adds acknowledged (warm-up included) and fails if not. Records counts
// the adds acknowledged in the measured window.
func runCounterBench(ctx context.Context, f benchFlags, opts client.Options) (benchResult, error) {
	var clients []*client.Cluster
	defer func() {
		for _, c := range clients {
			_ = c.Close()
		}
	}()
	for ci := 0; ci < f.connections; ci++ {
		dctx, cancel := context.WithTimeout(ctx, 10*time.Second)
		c, err := client.NewCluster(dctx, client.ClusterOptions{Options: opts}, f.routing...)
		cancel()
		if err != nil {
			return benchResult{}, err
		}
		clients = append(clients, c)
	}
	// The counters before the run, one per shard the connections add on.
	var shards []record.ShardID
	for ci := 0; ci < f.connections; ci++ {
		if s := f.shardOf(ci); !slices.Contains(shards, s) {
			shards = append(shards, s)
		}
	}
	sum := func() (int64, error) {
		var total int64
		for _, s := range shards {
			gctx, cancel := context.WithTimeout(ctx, 30*time.Second)
			g, err := clients[0].CounterGet(gctx, s, f.counterKey)
			cancel()
			if err != nil {
				return 0, fmt.Errorf("counter get %s/%d: %w", s.Stream, s.Shard, err)
			}
			total += g.Value
		}
		return total, nil
	}
	before, err := sum()
	if err != nil {
		return benchResult{}, err
	}

	var measuring, stopping atomic.Bool
	var adds, acked, errCount atomic.Int64
	var firstErr error
	var errOnce sync.Once
	lat := make([][]time.Duration, f.connections)
	var wg sync.WaitGroup
	for ci, c := range clients {
		shard := f.shardOf(ci)
		wg.Add(1)
		go func() {
			defer wg.Done()
			for !stopping.Load() && ctx.Err() == nil {
				t0 := time.Now()
				_, err := c.CounterAdd(ctx, shard, f.counterKey, 1)
				if err != nil {
					errCount.Add(1)
					errOnce.Do(func() { firstErr = err })
					continue
				}
				acked.Add(1)
				if measuring.Load() {
					adds.Add(1)
					lat[ci] = append(lat[ci], time.Since(t0))
				}
			}
		}()
	}
	sleep := func(d time.Duration) error {
		t := time.NewTimer(d)
		defer t.Stop()
		select {
		case <-t.C:
			return nil
		case <-ctx.Done():
			return ctx.Err()
		}
	}
	err = sleep(f.warmup)
	brokerCPU0, brokerErr := brokerCPU(ctx, f.brokerHTTP)
	clientCPU0 := processCPU()
	measuring.Store(true)
	start := time.Now()
	if err == nil {
		err = sleep(f.duration)
	}
	measuring.Store(false)
	elapsed := time.Since(start)
	clientCPU := processCPU() - clientCPU0
	brokerCPU1, brokerErr1 := brokerCPU(ctx, f.brokerHTTP)
	stopping.Store(true)
	wg.Wait()
	if err != nil {
		return benchResult{}, err
	}
	after, err := sum()
	if err != nil {
		return benchResult{}, err
	}

	var all []time.Duration
	for _, l := range lat {
		all = append(all, l...)
	}
	slices.Sort(all)
	secs := elapsed.Seconds()
	n := adds.Load()
	res := benchResult{Connections: f.connections, Pipeline: 1, Batch: 1, Shards: len(shards), Routing: true,
		CounterKey: f.counterKey, CounterAdds: acked.Load(),
		Seconds: secs, Records: n, Requests: n, Errors: errCount.Load(), RecordsPerSec: float64(n) / secs,
		P50Ms: latencyMs(all, 0.50), P99Ms: latencyMs(all, 0.99), P999Ms: latencyMs(all, 0.999)}
	if n > 0 {
		res.ClientCPUMicros = clientCPU.Seconds() * 1e6 / float64(n)
		if f.brokerHTTP != "" && brokerErr == nil && brokerErr1 == nil {
			res.BrokerCPUMicros = (brokerCPU1 - brokerCPU0) * 1e6 / float64(n)
		}
	}
	if grew := after - before; grew != acked.Load() {
		return res, fmt.Errorf("counter %q grew by %d over %d shards, %d adds were acknowledged (%d failed)", f.counterKey, grew, len(shards), acked.Load(), errCount.Load())
	}
	if n == 0 && firstErr != nil {
		return res, firstErr
	}
	return res, nil
}
