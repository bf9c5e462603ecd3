package e2e

import (
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"testing"

	felixv1 "felix.dev/felix/api/v1alpha1"
)

// BenchmarkClusterQuorumAppend is the cluster benchmark harness: three
// `felix broker` processes (cluster members; the operator's reconcilers
// run in the test process against a real API server) and a `felix bench`
// process as the client, each its own OS process, as the peer's servers
// and client are in hack/natsbench. A 3-replica Quorum stream of one
// shard, 1 KiB records, one record per append; "sync16" is 16 connections
// with one append in flight each, "pipelined" 16 with 8 each. Every b.N
// iteration is one `felix bench` run of FELIX_CLUSTER_BENCH_DURATION
// (default 10s) after FELIX_CLUSTER_BENCH_WARMUP (default 2s, the peer
// harness's default warm-up, so both are measured from the same point of
// a run). Run it with
//
//	go test -run XXX -bench ClusterQuorumAppend -benchtime 1x ./test/e2e
//
// With FELIX_CLUSTER_BENCH_PROFILES set to a directory, each broker serves
// its Go profiles; during the first run a CPU profile of each is taken
// over half of the run (DIR/BROKER-SHAPE-FSYNC.cpu.pprof) with an
// execution trace of two seconds (.trace), and after it each broker's
// /metrics is saved (DIR/BROKER-SHAPE-FSYNC.metrics.txt).
func BenchmarkClusterQuorumAppend(b *testing.B) {
	duration := "10s"
	if d := os.Getenv("FELIX_CLUSTER_BENCH_DURATION"); d != "" {
		duration = d
	}
	warmup := "2s"
	if w := os.Getenv("FELIX_CLUSTER_BENCH_WARMUP"); w != "" {
		warmup = w
	}
	profiles := os.Getenv("FELIX_CLUSTER_BENCH_PROFILES")
	var brokerArgs []string
	if profiles != "" {
		brokerArgs = append(brokerArgs, "--pprof")
	}
	for _, fsync := range []felixv1.FsyncMode{felixv1.FsyncPeriodic, felixv1.FsyncOnCommit} {
		for _, shape := range []struct {
			name     string
			pipeline int
		}{{"sync16", 1}, {"pipelined", 8}} {
			b.Run(fmt.Sprintf("%s/%s", fsync, shape.name), func(b *testing.B) {
				c := newTimedCluster(b, 3, fsync, productTiming)
				for i := 0; i < 3; i++ {
					c.startBroker(i, brokerArgs...)
				}
				c.createStream(b, "bench", 3)
				c.waitServing(b, "bench")
				leader := c.shard("bench", 0).Status.Assignment.Leader
				var recs, mb, p50, p99, clientCPU, brokerCPU float64
				for i := 0; i < b.N; i++ {
					cpuBefore := c.brokersCPU(b)
					var profiled func()
					if profiles != "" && i == 0 {
						profiled = c.profileBrokers(b, profiles, shape.name+"-"+string(fsync), warmup, duration)
					}
					args := append([]string{"bench", "--broker", c.addressOf(leader), "--stream", "bench",
						"--shards", "1", "--connections", "16", "--pipeline", fmt.Sprint(shape.pipeline),
						"--batch", "1", "--record-size", "1024", "--warmup", warmup, "--duration", duration},
						c.clientArgs()...) // TLS as the admin user (none with FELIX_E2E_INSECURE=1)
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
					// The brokers' CPU over the whole run (warm-up included)
					// per record acknowledged after the warm-up: an upper
					// bound, comparable between runs of one duration.
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
			})
		}
	}
}
