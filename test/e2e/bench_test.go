package e2e

import (
	"fmt"
	"testing"

	felixv1 "felix.dev/felix/api/v1alpha1"
)

// BenchmarkClusterQuorumAppend is the cluster benchmark harness: three
// `felix broker` processes (cluster members; the operator's reconcilers
// run in the test process against a real API server) and a `felix bench`
// process as the client, each its own OS process, as the peer's servers
// and client are in hack/natsbench. A 3-replica Quorum stream of one
// shard, 1 KiB records, one record per append; "sync16" is 16 connections
// with one append in flight each, "pipelined" 16 with 8 each. Each shape
// runs twice on one cluster: "direct", `felix bench --broker` with the
// shard's leader's address (the client speaks to it alone), then
// "routing", `felix bench --bootstrap` with all three brokers' addresses
// (each connection a routing client that learns the leader from the
// metadata, client.Cluster). Every b.N
// iteration is one `felix bench` run of FELIX_CLUSTER_BENCH_DURATION
// (default 10s) after FELIX_CLUSTER_BENCH_WARMUP (default 2s, the peer
// harness's default warm-up, so both are measured from the same point of
// a run). Run it with
//
//	go test -run XXX -bench ClusterQuorumAppend -benchtime 1x ./test/e2e
//
// With FELIX_CLUSTER_BENCH_PROFILES set to a directory, each broker serves
// its Go profiles; during the first run a CPU profile of each is taken
// over half of the run (DIR/BROKER-SHAPE-FSYNC.cpu.pprof, -routing added
// for routing) with an execution trace of two seconds (.trace), and after
// it each broker's /metrics is saved (DIR/BROKER-SHAPE-FSYNC.metrics.txt).
func BenchmarkClusterQuorumAppend(b *testing.B) {
	cfg := benchConfigFromEnv()
	for _, fsync := range []felixv1.FsyncMode{felixv1.FsyncPeriodic, felixv1.FsyncOnCommit} {
		for _, shape := range benchShapes {
			b.Run(fmt.Sprintf("%s/%s", fsync, shape.name), func(b *testing.B) {
				c := cfg.startCluster(b, fsync)
				c.createStream(b, "bench", 3)
				c.waitServing(b, "bench")
				leader := c.shard("bench", 0).Status.Assignment.Leader
				args := []string{"--stream", "bench", "--shards", "1", "--connections", "16", "--pipeline", fmt.Sprint(shape.pipeline)}
				tag := shape.name + "-" + string(fsync)
				b.Run("direct", func(b *testing.B) {
					cfg.run(b, c, tag, append([]string{"--broker", c.addressOf(leader)}, args...))
				})
				b.Run("routing", func(b *testing.B) {
					cfg.run(b, c, tag+"-routing", append(c.bootstrapArgs(), args...))
				})
			})
		}
	}
}
