package main

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"math"
	"net/http"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/spf13/cobra"

	"felix.dev/felix/broker/client"
	"felix.dev/felix/broker/record"
	"felix.dev/felix/broker/wire"
)

type benchFlags struct {
	// to says where the appends go: --broker, or a routing client with
	// --bootstrap (FELIX_BOOTSTRAP, --cluster through the kubeconfig),
	// and the TLS flags.
	to shardFlags
	// routing are the resolved bootstrap addresses; none: --broker.
	routing     []string
	stream      string
	shards      int
	shardList   []uint
	connections int
	pipeline    int
	batch       int
	recordSize  int
	duration    time.Duration
	warmup      time.Duration
	reads       bool
	output      string
	brokerHTTP  string
	// counterKey, when set, makes every connection add 1 to this
	// counter of its shard instead of appending (benchcounter.go).
	counterKey string
}

// benchResult is what felix bench prints.
type benchResult struct {
	Connections int `json:"connections"`
	Pipeline    int `json:"pipeline"`
	Batch       int `json:"batch"`
	RecordSize  int `json:"recordSize"`
	Shards      int `json:"shards"`
	// Routing: the appends went through a routing client (--bootstrap),
	// each to its shard's leader.
	Routing bool `json:"routing,omitempty"`
	// CounterKey is --counter-key: Records counts counter adds, and
	// CounterAdds is every add acknowledged, warm-up included, which
	// the counters were checked to have grown by.
	CounterKey    string  `json:"counterKey,omitempty"`
	CounterAdds   int64   `json:"counterAdds,omitempty"`
	Seconds       float64 `json:"seconds"`
	Records       int64   `json:"records"`
	RecordsPerSec float64 `json:"recordsPerSec"`
	MBPerSec      float64 `json:"mbPerSec"`
	Requests      int64   `json:"requests"`
	P50Ms         float64 `json:"p50Ms"`
	P99Ms         float64 `json:"p99Ms"`
	P999Ms        float64 `json:"p999Ms"`
	ReadRecords   int64   `json:"readRecords,omitempty"`
	ReadPerSec    float64 `json:"readRecordsPerSec,omitempty"`
	Errors        int64   `json:"errors"`
	// CPU per record, in microseconds: the bench process's own, and the
	// broker's when --broker-http is given (from its
	// process_cpu_seconds_total). Load-independent cost figures.
	ClientCPUMicros float64 `json:"clientCpuMicrosPerRecord"`
	BrokerCPUMicros float64 `json:"brokerCpuMicrosPerRecord,omitempty"`
}

func newBenchCmd() *cobra.Command {
	var f benchFlags
	cmd := &cobra.Command{
		Use:   "bench (--broker HOST:PORT | --bootstrap HOST:PORT ...) [--shards N | --shard S ...] [--connections N] [--pipeline P] [--batch B] [--record-size S] [--duration D] [--reads | --counter-key K]",
		Short: "Drive appends (and optionally reads) over the network and report throughput and latency",
		Long: `Drive appends against a broker over N connections, each with P appends in
flight at once (pipelining on the one connection), B records of S bytes per
append. Connection i appends to shard i mod --shards of --stream (or to
the i mod n-th of the n shards --shard lists). After
--warmup, it counts acknowledged records for --duration and reports
records/s, MB/s (payload bytes, 1 MB = 10^6 bytes) and the p50/p99/p999
latency of one append request.

With --reads, every connection also has a follow-mode reader on its shard
and the records read per second are reported.

With --bootstrap (repeatable; or FELIX_BOOTSTRAP, or --cluster through the
kubeconfig, as the other client commands) the appends go through the
routing client instead of one broker's connection: each connection is a
routing client of its own, which learns the cluster's metadata and sends
its shard's appends to that shard's leader (pipelined with
Cluster.AppendAsync), so writers spread over shards led by several
brokers reach all of them. --broker (the default) speaks to one broker.

With --counter-key K every connection is a routing client (for --broker
too, as felix counter add) that adds 1 to the counter K of its shard, one
add at a time (Cluster.CounterAdd, idempotent), instead of appending;
records/s is then acknowledged adds per second and the latency that of
one add. After the run the counters must have grown by exactly the adds
acknowledged (warm-up included), or the command fails. --pipeline and
--batch must be 1 (the default --pipeline is taken as 1) and --reads is
refused.`,
		Example: `  felix bench --broker 127.0.0.1:7100 --connections 16 --pipeline 8 --batch 1 --record-size 1024 --duration 10s
  felix bench --broker 127.0.0.1:7100 --connections 16 --pipeline 4 --batch 16 --reads -o table
  felix bench --bootstrap 10.0.0.1:7100 --bootstrap 10.0.0.2:7100 --stream bench --shards 4 --connections 16
  felix bench --bootstrap 10.0.0.1:7100 --stream bench --shard 0 --connections 8 --counter-key hits`,
		Args: noArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if f.connections < 1 || f.pipeline < 1 || f.batch < 1 || f.recordSize < 0 || f.duration <= 0 {
				return usageErr(cmd, errors.New("--connections, --pipeline and --batch must be at least 1, --duration positive"))
			}
			for _, s := range f.shardList {
				if s > math.MaxUint32 {
					return usageErr(cmd, fmt.Errorf("--shard %d is not a shard number", s))
				}
			}
			if f.shards < 1 {
				f.shards = f.connections
			}
			if len(f.shardList) > 0 {
				if cmd.Flags().Changed("shards") {
					return usageErr(cmd, errors.New("--shards and --shard exclude each other"))
				}
				f.shards = len(f.shardList)
			}
			if f.counterKey != "" {
				if f.reads || f.batch != 1 || (cmd.Flags().Changed("pipeline") && f.pipeline != 1) {
					return usageErr(cmd, errors.New("--counter-key takes --pipeline 1 and --batch 1, and no --reads"))
				}
				f.pipeline = 1
			}
			if f.output != "json" && f.output != "table" {
				return usageErr(cmd, fmt.Errorf("unknown output format %q", f.output))
			}
			ctx, cancel := context.WithTimeout(cmd.Context(), f.to.timeout)
			boot, opts, err := f.to.endpoints(ctx, cmd)
			cancel()
			if err != nil {
				return err // reported
			}
			f.routing = boot
			run := runBench
			if f.counterKey != "" {
				if len(f.routing) == 0 {
					// Only a routing client numbers counter adds (as
					// felix counter add); a standalone broker lists no
					// shards, so it serves them itself.
					f.routing = []string{f.to.broker}
				}
				run = runCounterBench
			}
			res, err := run(cmd.Context(), f, opts)
			if err != nil {
				return reportErr(cmd, err)
			}
			p := newPrinter(cmd, f.output, "CONNS", "PIPELINE", "BATCH", "SIZE", "RECORDS/S", "MB/S", "P50_MS", "P99_MS", "P999_MS", "READ/S", "ERRORS", "CLIENT_CPU_US/REC", "BROKER_CPU_US/REC")
			if err := p.print(res, res.Connections, res.Pipeline, res.Batch, res.RecordSize,
				fmt.Sprintf("%.0f", res.RecordsPerSec), fmt.Sprintf("%.1f", res.MBPerSec),
				fmt.Sprintf("%.2f", res.P50Ms), fmt.Sprintf("%.2f", res.P99Ms), fmt.Sprintf("%.2f", res.P999Ms),
				fmt.Sprintf("%.0f", res.ReadPerSec), res.Errors, fmt.Sprintf("%.1f", res.ClientCPUMicros), fmt.Sprintf("%.1f", res.BrokerCPUMicros)); err != nil {
				return err
			}
			return p.flush()
		},
	}
	fl := cmd.Flags()
	fl.StringVar(&f.stream, "stream", "bench", "stream to append to")
	fl.IntVar(&f.shards, "shards", 0, "shards to spread connections over, 0 to N-1 (default: one per connection)")
	fl.UintSliceVar(&f.shardList, "shard", nil, "shard numbers to spread connections over (repeatable or comma-separated; instead of --shards)")
	fl.IntVar(&f.connections, "connections", 16, "connections")
	fl.IntVar(&f.pipeline, "pipeline", 8, "appends in flight per connection")
	fl.IntVar(&f.batch, "batch", 1, "records per append")
	fl.IntVar(&f.recordSize, "record-size", 1024, "payload bytes per record")
	fl.DurationVar(&f.duration, "duration", 10*time.Second, "measured duration")
	fl.DurationVar(&f.warmup, "warmup", time.Second, "unmeasured run before the measurement")
	fl.BoolVar(&f.reads, "reads", false, "also read every shard in follow mode")
	fl.StringVarP(&f.output, "output", "o", "json", "output format: json or table")
	fl.StringVar(&f.brokerHTTP, "broker-http", "", "the broker's HTTP address: also report its CPU per record from /metrics")
	fl.StringVar(&f.counterKey, "counter-key", "", "add 1 to this counter of each connection's shard, one add at a time, instead of appending; checks the counters grew by the adds acknowledged")
	f.to.timeout = 30 * time.Second // of the kubeconfig lookup
	f.to.registerTarget(cmd)
	return cmd
}

// shardOf is the shard connection ci appends to.
func (f benchFlags) shardOf(ci int) record.ShardID {
	if len(f.shardList) > 0 {
		return record.ShardID{Stream: f.stream, Shard: uint32(f.shardList[ci%len(f.shardList)])}
	}
	return record.ShardID{Stream: f.stream, Shard: uint32(ci % f.shards)}
}

func runBench(ctx context.Context, f benchFlags, opts client.Options) (benchResult, error) {
	var closers []io.Closer
	defer func() {
		for _, c := range closers {
			_ = c.Close()
		}
	}()
	// dial opens one connection's client: a routing client with
	// --bootstrap, else a connection to --broker.
	dial := func() (benchConn, error) {
		dctx, cancel := context.WithTimeout(ctx, 10*time.Second)
		defer cancel()
		if len(f.routing) > 0 {
			c, err := client.NewCluster(dctx, client.ClusterOptions{Options: opts}, f.routing...)
			if err != nil {
				return benchConn{}, err
			}
			closers = append(closers, c)
			return connOf[*client.ClusterPendingAppend](c), nil
		}
		c, err := client.Dial(dctx, f.to.broker, opts)
		if err != nil {
			return benchConn{}, err
		}
		closers = append(closers, c)
		return connOf[*client.PendingAppend](c), nil
	}
	payload := make([]byte, f.recordSize)
	for i := range payload {
		payload[i] = byte('a' + i%26)
	}
	batch := make([]record.Record, f.batch)
	for i := range batch {
		batch[i] = record.Record{Payload: payload}
	}

	var measuring atomic.Bool
	var records, requests, errCount, readRecords atomic.Int64
	runCtx, stop := context.WithCancel(ctx)
	defer stop()
	var wg sync.WaitGroup
	lat := make([][]time.Duration, f.connections)
	var firstErr error
	var errOnce sync.Once
	// done counts one answered append (sent at t0) of connection ci.
	done := func(ci int, t0 time.Time, err error) {
		if err != nil {
			if runCtx.Err() == nil {
				errCount.Add(1)
				errOnce.Do(func() { firstErr = err })
			}
			return
		}
		if measuring.Load() {
			records.Add(int64(f.batch))
			requests.Add(1)
			lat[ci] = append(lat[ci], time.Since(t0))
		}
	}
	for ci := 0; ci < f.connections; ci++ {
		c, err := dial()
		if err != nil {
			return benchResult{}, err
		}
		shard := f.shardOf(ci)
		wg.Add(1)
		if f.pipeline == 1 {
			// A synchronous producer: one append at a time.
			go func() {
				defer wg.Done()
				for runCtx.Err() == nil {
					t0 := time.Now()
					err := c.appendSync(runCtx, shard, batch)
					done(ci, t0, err)
				}
			}()
		} else {
			// A pipelining producer: one goroutine sends while up to
			// --pipeline appends are unanswered, another takes the
			// answers in order (as the peer's harness publishes).
			go func() {
				defer wg.Done()
				type inflight struct {
					p  pendingAppend
					t0 time.Time
				}
				// In flight: one the collector waits for, pipeline-2
				// queued, and one the sender holds while the queue is
				// full.
				window := make(chan inflight, f.pipeline-2)
				collected := make(chan struct{})
				go func() {
					defer close(collected)
					for in := range window {
						_, err := in.p.Wait(runCtx)
						done(ci, in.t0, err)
					}
				}()
				for runCtx.Err() == nil {
					t0 := time.Now()
					p, err := c.appendAsync(runCtx, shard, batch)
					if err != nil {
						done(ci, t0, err)
						continue
					}
					window <- inflight{p, t0}
				}
				close(window)
				<-collected
			}()
		}
		if f.reads {
			rc, err := dial()
			if err != nil {
				return benchResult{}, err
			}
			wg.Add(1)
			go func() {
				defer wg.Done()
				req := wire.ReadRequest{Shard: shard, From: wire.FromLatest, MaxBytes: 1 << 20, WaitMillis: 500}
				for runCtx.Err() == nil {
					rctx, cancel := context.WithTimeout(runCtx, 5*time.Second)
					r, err := rc.read(rctx, req)
					cancel()
					if err != nil {
						continue
					}
					if measuring.Load() {
						readRecords.Add(int64(len(r.Records)))
					}
					req.From, req.Offset = wire.FromOffset, r.Next
				}
			}()
		}
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
	if err := sleep(f.warmup); err != nil {
		stop()
		wg.Wait()
		return benchResult{}, err
	}
	brokerCPU0, brokerErr := brokerCPU(ctx, f.brokerHTTP)
	clientCPU0 := processCPU()
	measuring.Store(true)
	start := time.Now()
	err := sleep(f.duration)
	measuring.Store(false)
	elapsed := time.Since(start)
	clientCPU := processCPU() - clientCPU0
	brokerCPU1, brokerErr1 := brokerCPU(ctx, f.brokerHTTP)
	stop()
	wg.Wait()
	if err != nil {
		return benchResult{}, err
	}
	var all []time.Duration
	for _, l := range lat {
		all = append(all, l...)
	}
	slices.Sort(all)
	pct := func(p float64) float64 { return latencyMs(all, p) }
	secs := elapsed.Seconds()
	res := benchResult{Connections: f.connections, Pipeline: f.pipeline, Batch: f.batch, RecordSize: f.recordSize, Shards: f.shards, Routing: len(f.routing) > 0,
		Seconds: secs, Records: records.Load(), Requests: requests.Load(), Errors: errCount.Load(),
		RecordsPerSec: float64(records.Load()) / secs, MBPerSec: float64(records.Load()) * float64(f.recordSize) / secs / 1e6,
		P50Ms: pct(0.50), P99Ms: pct(0.99), P999Ms: pct(0.999), ReadRecords: readRecords.Load(), ReadPerSec: float64(readRecords.Load()) / secs}
	if n := float64(res.Records + res.ReadRecords); n > 0 {
		res.ClientCPUMicros = clientCPU.Seconds() * 1e6 / n
		if f.brokerHTTP != "" && brokerErr == nil && brokerErr1 == nil {
			res.BrokerCPUMicros = (brokerCPU1 - brokerCPU0) * 1e6 / n
		}
	}
	if res.Records == 0 && firstErr != nil {
		return res, firstErr
	}
	return res, nil
}

// latencyMs is the p-quantile of the sorted latencies all, in
// milliseconds (0 for none).
func latencyMs(all []time.Duration, p float64) float64 {
	if len(all) == 0 {
		return 0
	}
	i := int(p * float64(len(all)))
	if i >= len(all) {
		i = len(all) - 1
	}
	return float64(all[i]) / float64(time.Millisecond)
}

// processCPU returns the user plus system CPU time this process used.
func processCPU() time.Duration {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		return 0
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

// brokerCPU reads process_cpu_seconds_total from a broker's /metrics.
func brokerCPU(ctx context.Context, addr string) (float64, error) {
	if addr == "" {
		return 0, nil
	}
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, "http://"+addr+"/metrics", nil)
	if err != nil {
		return 0, err
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return 0, err
	}
	defer func() { _ = resp.Body.Close() }()
	sc := bufio.NewScanner(resp.Body)
	sc.Buffer(make([]byte, 64<<10), 1<<20)
	for sc.Scan() {
		if v, ok := strings.CutPrefix(sc.Text(), "process_cpu_seconds_total "); ok {
			return strconv.ParseFloat(strings.TrimSpace(v), 64)
		}
	}
	return 0, fmt.Errorf("no process_cpu_seconds_total in %s/metrics", addr)
}
