package e2e

import (
	"context"
	"fmt"
	"testing"
	"time"

	"sigs.k8s.io/controller-runtime/pkg/client"

	felixv1 "felix.dev/felix/api/v1alpha1"
)

// benchShards is the number of shards of BenchmarkClusterQuorumShards'
// stream.
const benchShards = 4

// BenchmarkClusterQuorumShards is BenchmarkClusterQuorumAppend's harness
// (OnCommit, three brokers, 1 KiB records, the same two shapes) on a
// stream of four 3-replica Quorum shards, written through the routing
// client (`felix bench --bootstrap` with every broker, --shards 4: four
// connections a shard): "spread" with shard i led by broker i mod 3 (two
// shards on the first broker, one on each other), "oneleader" with all
// four led by the first broker. Leadership is arranged with the
// felix.dev/preferred-leader annotation (a switchover) before each run.
// Both layouts run on one cluster, spread first.
//
//	go test -run XXX -bench ClusterQuorumShards -benchtime 1x ./test/e2e
func BenchmarkClusterQuorumShards(b *testing.B) {
	cfg := benchConfigFromEnv()
	for _, shape := range benchShapes {
		b.Run(shape.name, func(b *testing.B) {
			c := cfg.startCluster(b, felixv1.FsyncOnCommit)
			c.createStreamShards(b, "bench", 3, benchShards)
			args := append(c.bootstrapArgs(), "--stream", "bench", "--shards", fmt.Sprint(benchShards),
				"--connections", "16", "--pipeline", fmt.Sprint(shape.pipeline))
			for _, layout := range []struct {
				name   string
				leader func(shard int) int // broker ordinal
			}{{"spread", func(i int) int { return i % 3 }}, {"oneleader", func(int) int { return 0 }}} {
				b.Run(layout.name, func(b *testing.B) {
					c.leadShards(b, "bench", benchShards, func(i int) string { return fmt.Sprintf("%s-%d", c.name, layout.leader(i)) })
					cfg.run(b, c, "shards-"+shape.name+"-"+layout.name, args)
				})
			}
		})
	}
}

// leadShards moves the leadership of each of stream's shards to
// leader(i) (the preferred-leader annotation) and waits until each such
// leader serves: its report names it at the assigned epoch.
func (c *cluster) leadShards(t testing.TB, stream string, shards int, leader func(i int) string) {
	t.Helper()
	ctx := context.Background()
	for i := 0; i < shards; i++ {
		sh := c.shard(stream, i)
		if sh == nil {
			t.Fatalf("no shard %s-%d", stream, i)
		}
		orig := sh.DeepCopy()
		if sh.Annotations == nil {
			sh.Annotations = map[string]string{}
		}
		sh.Annotations[felixv1.AnnotationPreferredLeader] = leader(i)
		if err := c.c.Patch(ctx, sh, client.MergeFrom(orig)); err != nil {
			t.Fatal(err)
		}
	}
	for i := 0; i < shards; i++ {
		want := leader(i)
		c.eventually(fmt.Sprintf("%s-%d led by %s", stream, i, want), 120*time.Second, func() (bool, string) {
			sh := c.shard(stream, i)
			if sh == nil || sh.Status.Assignment == nil || sh.Status.Report == nil {
				return false, shardState(sh)
			}
			a, r := sh.Status.Assignment, sh.Status.Report
			return a.Leader == want && r.Leader == want && r.Epoch == a.Epoch, shardState(sh)
		})
	}
}
