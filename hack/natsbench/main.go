// Command natsbench measures the peer Felix is compared with — NATS
// JetStream with three replicas on loopback — in the same shape as
// `felix bench`: N publishers, each on its own connection, with P publishes
// in flight (P = 1 is a synchronous publisher), records of S bytes, counted
// after a warm-up for a fixed duration. It starts three nats-server
// processes (the binary given by --server, built by `make bench-nats`) in
// a cluster with JetStream file storage under a temporary directory, creates
// one stream with three replicas, runs the workload and prints one JSON
// object with records/s, MB/s (payload, 10^6 bytes), p50/p99/p999 of the
// publish-to-acknowledgement latency, and the CPU time per record of the
// three servers and of the publishing process.
//
// With --consume-records N it measures consumers instead (consume.go): it
// preloads N messages over four subjects and has --consumers fetchers
// share one durable pull consumer, once with explicit acks and once with
// ack-all, printing one JSON object per policy with the records processed
// and acknowledged per second (the peer of Felix's BenchmarkConsumers in
// test/e2e).
//
// With --counter-keys K it measures the peer's distributed counters
// instead (counter.go): --publishers synchronous clients add 1 to one of K
// counter subjects of a counter stream (AllowMsgCounter, header
// Nats-Incr), printing one JSON object with the adds per second (as
// records/s) and their latency, after checking that the counters' final
// values sum to the adds acknowledged (the peer of Felix's
// BenchmarkClusterCounterAdd in test/e2e).
//
// It is a separate module so that the product's go.mod does not depend on
// NATS.
package main

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
)

type config struct {
	server     string
	publishers int
	pending    int
	size       int
	duration   time.Duration
	warmup     time.Duration
	syncAlways bool
	replicas   int
	tls        bool
	// consumeRecords, when not zero, measures durable pull consumers
	// instead of publishing (consume.go).
	consumeRecords int
	consumers      int
	// counterKeys, when not zero, measures counter adds on that many
	// counters instead of publishing (counter.go).
	counterKeys int
}

type result struct {
	Peer          string  `json:"peer"`
	Replicas      int     `json:"replicas"`
	SyncAlways    bool    `json:"syncAlways"`
	TLS           bool    `json:"tls"`
	Publishers    int     `json:"publishers"`
	Pending       int     `json:"pending"`
	RecordSize    int     `json:"recordSize"`
	Seconds       float64 `json:"seconds"`
	Records       int64   `json:"records"`
	RecordsPerSec float64 `json:"recordsPerSec"`
	MBPerSec      float64 `json:"mbPerSec"`
	P50Ms         float64 `json:"p50Ms"`
	P99Ms         float64 `json:"p99Ms"`
	P999Ms        float64 `json:"p999Ms"`
	Errors        int64   `json:"errors"`
	// CPU per record counted: the three servers' user plus system time,
	// and this process's, from the first publish to the last answer
	// (warm-up included), as `felix bench` and the cluster benchmark report
	// the client's and the brokers'.
	ServersCPUMicros float64 `json:"serversCpuMicrosPerRecord"`
	ClientCPUMicros  float64 `json:"clientCpuMicrosPerRecord"`
}

func main() {
	var c config
	flag.StringVar(&c.server, "server", "bin/nats-server", "path to the nats-server binary")
	flag.IntVar(&c.publishers, "publishers", 16, "publishers, one connection each")
	flag.IntVar(&c.pending, "pending", 1, "publishes in flight per publisher (1: synchronous)")
	flag.IntVar(&c.size, "record-size", 1024, "payload bytes per message")
	flag.DurationVar(&c.duration, "duration", 10*time.Second, "measured duration")
	flag.DurationVar(&c.warmup, "warmup", 2*time.Second, "unmeasured warm-up")
	flag.BoolVar(&c.syncAlways, "sync-always", false, "JetStream sync_interval: always (fsync before every acknowledgement); default is the server's default durability")
	flag.IntVar(&c.replicas, "replicas", 3, "servers and stream replicas")
	flag.BoolVar(&c.tls, "tls", false, "mutual TLS on client connections and cluster routes (certificates made here, ECDSA P-256, as Felix's)")
	flag.IntVar(&c.consumeRecords, "consume-records", 0, "instead of publishing: preload this many messages over 4 subjects, then consume them with a durable pull consumer, with explicit acks and with ack-all, and print one JSON object per policy")
	flag.IntVar(&c.consumers, "consumers", 4, "with --consume-records: fetchers sharing the consumer, one connection each")
	flag.IntVar(&c.counterKeys, "counter-keys", 0, "instead of publishing: --publishers synchronous clients add 1 (header Nats-Incr) to one of this many counters of a counter stream, client i to counter i mod K; fails unless the counters end at the adds acknowledged")
	flag.Parse()
	if c.counterKeys > 0 {
		res, err := runCounter(c)
		if err != nil {
			fmt.Fprintf(os.Stderr, "natsbench: %v\n", err)
			os.Exit(1)
		}
		_ = json.NewEncoder(os.Stdout).Encode(res)
		return
	}
	if c.consumeRecords > 0 {
		if err := runConsume(c); err != nil {
			fmt.Fprintf(os.Stderr, "natsbench: %v\n", err)
			os.Exit(1)
		}
		return
	}
	res, err := run(c)
	if err != nil {
		fmt.Fprintf(os.Stderr, "natsbench: %v\n", err)
		os.Exit(1)
	}
	_ = json.NewEncoder(os.Stdout).Encode(res)
}

func freePorts(n int) ([]int, error) {
	var ls []net.Listener
	defer func() {
		for _, l := range ls {
			l.Close()
		}
	}()
	var ports []int
	for i := 0; i < n; i++ {
		l, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			return nil, err
		}
		ls = append(ls, l)
		ports = append(ports, l.Addr().(*net.TCPAddr).Port)
	}
	return ports, nil
}

// startCluster writes one config per server and starts them; the returned
// function stops them all.
func startCluster(c config, dir string, certs *tlsFiles) ([]string, []int, func(), error) {
	ports, err := freePorts(2 * c.replicas)
	if err != nil {
		return nil, nil, nil, err
	}
	scheme, tlsBlock := "nats", ""
	if certs != nil {
		// Both the client port and the routes require a certificate of
		// the bench CA, as Felix's client and peer ports do.
		scheme = "tls"
		tlsBlock = fmt.Sprintf("tls { cert_file: %q, key_file: %q, ca_file: %q, verify: true, timeout: 5 }", certs.serverCert, certs.serverKey, certs.ca)
	}
	var routes, urls []string
	for i := 0; i < c.replicas; i++ {
		routes = append(routes, fmt.Sprintf("nats-route://127.0.0.1:%d", ports[c.replicas+i]))
		urls = append(urls, fmt.Sprintf("%s://127.0.0.1:%d", scheme, ports[i]))
	}
	var cmds []*exec.Cmd
	stop := func() {
		for _, cmd := range cmds {
			_ = cmd.Process.Kill()
			_ = cmd.Wait()
		}
	}
	for i := 0; i < c.replicas; i++ {
		sync := ""
		if c.syncAlways {
			sync = "sync_interval: always"
		}
		rs, _ := json.Marshal(routes)
		conf := fmt.Sprintf(`server_name: n%d
listen: 127.0.0.1:%d
%s
jetstream { store_dir: %q, %s }
cluster { name: bench, listen: 127.0.0.1:%d, routes: %s
%s }
`, i, ports[i], tlsBlock, filepath.Join(dir, fmt.Sprintf("n%d", i)), sync, ports[c.replicas+i], rs, tlsBlock)
		path := filepath.Join(dir, fmt.Sprintf("n%d.conf", i))
		if err := os.WriteFile(path, []byte(conf), 0o644); err != nil {
			stop()
			return nil, nil, nil, err
		}
		logf, err := os.Create(filepath.Join(dir, fmt.Sprintf("n%d.log", i)))
		if err != nil {
			stop()
			return nil, nil, nil, err
		}
		cmd := exec.Command(c.server, "-c", path)
		cmd.Stdout, cmd.Stderr = logf, logf
		if err := cmd.Start(); err != nil {
			stop()
			return nil, nil, nil, fmt.Errorf("start %s: %w", c.server, err)
		}
		cmds = append(cmds, cmd)
	}
	pids := make([]int, len(cmds))
	for i, cmd := range cmds {
		pids[i] = cmd.Process.Pid
	}
	return urls, pids, stop, nil
}

// processCPU returns the user plus system CPU time of process pid (0: this
// process), from /proc.
func processCPU(pid int) (time.Duration, error) {
	name := "/proc/self/stat"
	if pid != 0 {
		name = fmt.Sprintf("/proc/%d/stat", pid)
	}
	raw, err := os.ReadFile(name)
	if err != nil {
		return 0, err
	}
	// utime and stime are the 12th and 13th fields after the command
	// name, which may hold spaces: cut at its closing parenthesis.
	f := strings.Fields(string(raw[bytes.LastIndexByte(raw, ')')+1:]))
	if len(f) < 13 {
		return 0, fmt.Errorf("short %s", name)
	}
	var ticks int64
	for _, v := range f[11:13] {
		n, err := strconv.ParseInt(v, 10, 64)
		if err != nil {
			return 0, fmt.Errorf("%s: %w", name, err)
		}
		ticks += n
	}
	return time.Duration(ticks) * time.Second / clockTicks, nil
}

// clockTicks is USER_HZ, the unit of /proc/PID/stat times (100 on Linux).
const clockTicks = 100

// cpuNow returns the CPU time used so far by the servers (pids, summed)
// and by this process.
func cpuNow(pids []int) (servers, client time.Duration, err error) {
	for _, pid := range pids {
		d, err := processCPU(pid)
		if err != nil {
			return 0, 0, err
		}
		servers += d
	}
	client, err = processCPU(0)
	return servers, client, err
}

func run(c config) (result, error) {
	peer, err := startPeer(c)
	if err != nil {
		return result{}, err
	}
	defer peer.close()
	urls, pids, certs, js := peer.urls, peer.pids, peer.certs, peer.js
	ctx := context.Background()
	if _, err := createStream(ctx, js, jetstream.StreamConfig{Name: "BENCH", Subjects: []string{"bench.>"},
		Replicas: c.replicas, Storage: jetstream.FileStorage}); err != nil {
		return result{}, err
	}

	payload := make([]byte, c.size)
	for i := range payload {
		payload[i] = byte('a' + i%26)
	}
	var counting atomic.Bool
	var records, errs atomic.Int64
	var mu sync.Mutex
	var lats []time.Duration
	serversCPU0, clientCPU0, err := cpuNow(pids)
	if err != nil {
		return result{}, err
	}
	stopAt := time.Now().Add(c.warmup + c.duration)
	var wg sync.WaitGroup
	for p := 0; p < c.publishers; p++ {
		nc, err := connect(urls, certs)
		if err != nil {
			return result{}, err
		}
		defer nc.Close()
		pjs, err := jetstream.New(nc, jetstream.WithPublishAsyncMaxPending(c.pending))
		if err != nil {
			return result{}, err
		}
		wg.Add(1)
		go func(p int) {
			defer wg.Done()
			subj := fmt.Sprintf("bench.%d", p)
			var local []time.Duration
			if c.pending <= 1 {
				for time.Now().Before(stopAt) {
					t0 := time.Now()
					_, err := pjs.Publish(ctx, subj, payload)
					if !counting.Load() {
						continue
					}
					if err != nil {
						errs.Add(1)
						continue
					}
					records.Add(1)
					local = append(local, time.Since(t0))
				}
			} else {
				type inflight struct {
					f  jetstream.PubAckFuture
					t0 time.Time
				}
				window := make(chan inflight, c.pending)
				done := make(chan struct{})
				go func() {
					defer close(done)
					for in := range window {
						select {
						case <-in.f.Ok():
							if counting.Load() {
								records.Add(1)
								local = append(local, time.Since(in.t0))
							}
						case <-in.f.Err():
							if counting.Load() {
								errs.Add(1)
							}
						}
					}
				}()
				for time.Now().Before(stopAt) {
					t0 := time.Now()
					f, err := pjs.PublishAsync(subj, payload)
					if err != nil {
						if counting.Load() {
							errs.Add(1)
						}
						continue
					}
					window <- inflight{f, t0}
				}
				close(window)
				<-done
			}
			mu.Lock()
			lats = append(lats, local...)
			mu.Unlock()
		}(p)
	}
	time.Sleep(c.warmup)
	counting.Store(true)
	t0 := time.Now()
	time.Sleep(c.duration)
	counting.Store(false)
	secs := time.Since(t0).Seconds()
	wg.Wait()
	serversCPU1, clientCPU1, err := cpuNow(pids)
	if err != nil {
		return result{}, err
	}

	pct := percentiles(lats)
	n := records.Load()
	perRecord := func(d time.Duration) float64 { return microsPer(d, n) }
	return result{ServersCPUMicros: perRecord(serversCPU1 - serversCPU0), ClientCPUMicros: perRecord(clientCPU1 - clientCPU0),
		Peer: "nats-jetstream", Replicas: c.replicas, SyncAlways: c.syncAlways, TLS: c.tls,
		Publishers: c.publishers, Pending: c.pending, RecordSize: c.size,
		Seconds: secs, Records: n, RecordsPerSec: float64(n) / secs,
		MBPerSec: float64(n) * float64(c.size) / secs / 1e6,
		P50Ms:    pct(0.50), P99Ms: pct(0.99), P999Ms: pct(0.999), Errors: errs.Load()}, nil
}

func connect(urls []string, certs *tlsFiles) (*nats.Conn, error) {
	opts := []nats.Option{nats.Timeout(2 * time.Second)}
	if certs != nil {
		opts = append(opts, nats.ClientCert(certs.clientCert, certs.clientKey), nats.RootCAs(certs.ca))
	}
	var last error
	deadline := time.Now().Add(30 * time.Second)
	for time.Now().Before(deadline) {
		nc, err := nats.Connect(urls[0], opts...)
		if err == nil {
			return nc, nil
		}
		last = err
		time.Sleep(100 * time.Millisecond)
	}
	return nil, errors.Join(errors.New("connect to nats"), last)
}
