package e2e

import (
	"fmt"
	"testing"
	"time"

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

// BenchmarkClusterCounterAdd measures counter adds in the shape of the
// peer's counters (hack/natsbench --counter-keys): the three brokers of
// BenchmarkClusterQuorumAppend with fsync on commit, one 3-replica Quorum
// stream of four shards, and one `felix bench --counter-key` process
// whose connections are routing clients, each adding 1 to the key on its
// shard, one add at a time, for FELIX_CLUSTER_BENCH_DURATION after the
// warm-up. "1shard" puts every connection on shard 0 (one counter, as the
// peer with one key); "4shards" spreads them over the four shards (four
// counters of one key, as the peer with four keys). records/s is adds
// per second; felix bench fails unless the counters grew by exactly the
// adds acknowledged. Every run adds to a new key. Run it with
//
//	go test -run XXX -bench ClusterCounterAdd -benchtime 1x ./test/e2e
func BenchmarkClusterCounterAdd(b *testing.B) {
	cfg := benchConfigFromEnv()
	c := cfg.startCluster(b, felixv1.FsyncOnCommit)
	const stream, shards = "bench-counters", 4
	c.createStreamShards(b, stream, 3, shards)
	for i := 0; i < shards; i++ {
		c.eventually(fmt.Sprintf("a serving leader for %s-%d", stream, i), 90*time.Second, func() (bool, string) {
			sh := c.shard(stream, i)
			ok := sh != nil && sh.Status.Assignment != nil && sh.Status.Report != nil && sh.Status.Report.Epoch == sh.Status.Assignment.Epoch
			return ok, shardState(sh)
		})
	}
	run := 0
	for _, layout := range []struct {
		name   string
		shards []string
	}{{"1shard", []string{"--shard", "0"}}, {"4shards", []string{"--shards", fmt.Sprint(shards)}}} {
		for _, clients := range []int{8, 16} {
			b.Run(fmt.Sprintf("%s/clients%d", layout.name, clients), func(b *testing.B) {
				run++
				args := append(c.bootstrapArgs(), "--stream", stream, "--connections", fmt.Sprint(clients), "--pipeline", "1",
					"--counter-key", fmt.Sprintf("bench-%d", run))
				cfg.run(b, c, fmt.Sprintf("counter-%s-%d", layout.name, clients), append(args, layout.shards...))
			})
		}
	}
}
