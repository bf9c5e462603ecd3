package e2e

import (
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"testing"

	felixv1 "felix.dev/felix/api/v1alpha1"
)

// benchShapes are the client shapes of the cluster benchmarks: 16
// connections with one append in flight each, or 8 each.
var benchShapes = []struct {
	name     string
	pipeline int
}{{"sync16", 1}, {"pipelined", 8}}

// benchConfig is what the environment sets for the cluster benchmarks
// (see BenchmarkClusterQuorumAppend).
type benchConfig struct {
	duration, warmup string
	profiles         string   // directory for the brokers' profiles, "" none
	brokerArgs       []string // extra flags of every broker
}

func benchConfigFromEnv() benchConfig {
	cfg := benchConfig{duration: "10s", warmup: "2s", profiles: os.Getenv("FELIX_CLUSTER_BENCH_PROFILES")}
	if d := os.Getenv("FELIX_CLUSTER_BENCH_DURATION"); d != "" {
		cfg.duration = d
	}
	if w := os.Getenv("FELIX_CLUSTER_BENCH_WARMUP"); w != "" {
		cfg.warmup = w
	}
	if cfg.profiles != "" {
		cfg.brokerArgs = append(cfg.brokerArgs, "--pprof")
	}
	return cfg
}

// startCluster starts three brokers with the product's timings.
func (cfg benchConfig) startCluster(b *testing.B, fsync felixv1.FsyncMode) *cluster {
	c := newTimedCluster(b, 3, fsync, productTiming)
	for i := 0; i < 3; i++ {
		c.startBroker(i, cfg.brokerArgs...)
	}
	return c
}

// bootstrapArgs are felix bench's --bootstrap flags naming every broker.
func (c *cluster) bootstrapArgs() []string {
	c.mu.Lock()
	defer c.mu.Unlock()
	var out []string
	for i := 0; i < len(c.brokers); i++ {
		if bp := c.brokers[fmt.Sprintf("%s-%d", c.name, i)]; bp != nil {
			out = append(out, "--bootstrap", bp.addr)
		}
	}
	return out
}

// run runs `felix bench` b.N times with target (where the appends go and
// the shape), 1 KiB records one per append, and reports the mean of its
// figures and the brokers' CPU per record. tag names the profiles.
func (cfg benchConfig) run(b *testing.B, c *cluster, tag string, target []string) {
	var recs, mb, p50, p99, clientCPU, brokerCPU float64
	for i := 0; i < b.N; i++ {
		cpuBefore := c.brokersCPU(b)
		var profiled func()
		if cfg.profiles != "" && i == 0 {
			profiled = c.profileBrokers(b, cfg.profiles, tag, cfg.warmup, cfg.duration)
		}
		args := append([]string{"bench"}, target...)
		args = append(args, "--batch", "1", "--record-size", "1024", "--warmup", cfg.warmup, "--duration", cfg.duration)
		args = append(args, c.clientArgs()...) // TLS as the admin user (none with FELIX_E2E_INSECURE=1)
		out, err := exec.Command(c.bin, args...).Output()
		if err != nil {
			b.Fatalf("felix bench: %v\n%s", err, out)
		}
		if profiled != nil {
			profiled()
		}
		var res struct {
			RecordsPerSec   float64 `json:"recordsPerSec"`
			MBPerSec        float64 `json:"mbPerSec"`
			P50Ms           float64 `json:"p50Ms"`
			P99Ms           float64 `json:"p99Ms"`
			Errors          int64   `json:"errors"`
			ClientCPUMicros float64 `json:"clientCpuMicrosPerRecord"`
			Records         int64   `json:"records"`
		}
		if err := json.Unmarshal(out, &res); err != nil {
			b.Fatalf("felix bench output %q: %v", out, err)
		}
		if res.Errors != 0 || res.RecordsPerSec == 0 {
			b.Fatalf("felix bench: %+v", res)
		}
		// The brokers' CPU over the whole run (warm-up included) per
		// record acknowledged after the warm-up: an upper bound,
		// comparable between runs of one duration.
		if res.Records > 0 {
			brokerCPU += float64((c.brokersCPU(b) - cpuBefore).Microseconds()) / float64(res.Records)
		}
		recs += res.RecordsPerSec
		mb += res.MBPerSec
		p50, p99 = max(p50, res.P50Ms), max(p99, res.P99Ms)
		clientCPU += res.ClientCPUMicros
	}
	n := float64(b.N)
	b.ReportMetric(recs/n, "records/s")
	b.ReportMetric(mb/n, "MB/s")
	b.ReportMetric(p50, "p50-ms")
	b.ReportMetric(p99, "p99-ms")
	b.ReportMetric(clientCPU/n, "client-cpu-µs/record")
	b.ReportMetric(brokerCPU/n, "brokers-cpu-µs/record")
}
