package e2e

import (
	"bytes"
	"context"
	"fmt"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	felixv1 "felix.dev/felix/api/v1alpha1"
	felixclient "felix.dev/felix/broker/client"
	"felix.dev/felix/broker/record"
)

// Sizes of BenchmarkConsumers: records preloaded per shard, their
// payload, and how long the counter adders run.
const (
	benchGroupRecords = 100000
	benchGroupPayload = 128
	benchCounterRun   = 5 * time.Second
)

// BenchmarkConsumers measures consumer groups and counters on three
// `felix broker` processes with the product's timings (periodic fsync), a
// 3-replica Quorum stream of 4 shards; the clients run in the test
// process, each with its own client.Cluster (routing, as an application
// does).
//
//   - cumulative: 4 members (one per shard) of a new group read the
//     preloaded 4 x 100000 records of 128 bytes, 1000 per poll, and
//     commit after each batch; records/s is the records processed and
//     committed per second of wall time, from the first poll to the last
//     shard's commit reaching the tail (what describe shows).
//   - per-record: the same with per-record acknowledgement (256 in
//     flight, the broker's default cap; one Ack per batch).
//   - counters: 8 clients, each adding 1 to one key on every shard in
//     turn, one add in flight per client and shard (32 in all), for 5 s;
//     adds/s is the acknowledged adds per second, and the test checks
//     that the counters sum to them exactly.
//
// Run it with
//
//	go test -run XXX -bench Consumers -benchtime 1x ./test/e2e
func BenchmarkConsumers(b *testing.B) {
	c := benchConfigFromEnv().startCluster(b, felixv1.FsyncPeriodic)
	ctx := context.Background()
	const stream = "bench-consumers"
	c.createStreamShards(b, stream, 3, groupShards)
	for i := 0; i < groupShards; i++ {
		c.eventually(fmt.Sprintf("a serving leader for %s-%d", stream, i), 90*time.Second, func() (bool, string) {
			sh := c.shard(stream, i)
			ok := sh != nil && sh.Status.Assignment != nil && sh.Status.Report != nil && sh.Status.Report.Epoch == sh.Status.Assignment.Epoch
			return ok, shardState(sh)
		})
	}
	admin := c.benchClient(b, ctx)
	payload := bytes.Repeat([]byte("x"), benchGroupPayload)
	tails := map[uint32]uint64{}
	for s := uint32(0); s < groupShards; s++ {
		for i := 0; i < benchGroupRecords; i += 500 {
			recs := make([]record.Record, 500)
			for j := range recs {
				recs[j] = record.Record{Payload: payload}
			}
			ok, err := admin.Append(ctx, record.ShardID{Stream: stream, Shard: s}, recs, nil)
			if err != nil {
				b.Fatal(err)
			}
			tails[s] = ok.Tail
		}
	}
	round := 0
	for _, mode := range []string{"cumulative", "per-record"} {
		b.Run(mode, func(b *testing.B) {
			var rate float64
			for i := 0; i < b.N; i++ {
				round++
				rate += c.consumeAll(b, ctx, admin, stream, fmt.Sprintf("bench-%s-%d", mode, round), mode == "per-record", tails)
			}
			b.ReportMetric(rate/float64(b.N), "records/s")
		})
	}
	b.Run("counters", func(b *testing.B) {
		var rate float64
		for i := 0; i < b.N; i++ {
			round++ // a new key each run: the check sums it from 0
			rate += c.addCounters(b, ctx, stream, fmt.Sprintf("bench-%d", round))
		}
		b.ReportMetric(rate/float64(b.N), "adds/s")
	})
}

// benchClient is a routing client of the cluster as the admin user.
func (c *cluster) benchClient(b testing.TB, ctx context.Context) *felixclient.Cluster {
	b.Helper()
	conf, err := c.clientTLSAs(adminUser)
	if err != nil {
		b.Fatal(err)
	}
	var addrs []string
	for _, a := range c.bootstrapArgs() {
		if a != "--bootstrap" {
			addrs = append(addrs, a)
		}
	}
	cl, err := felixclient.NewCluster(ctx, felixclient.ClusterOptions{Options: felixclient.Options{TLS: conf}, Attempts: 20}, addrs...)
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { _ = cl.Close() })
	return cl
}

// consumeAll has one member per shard of group read stream up to tails,
// settling every batch, and returns the records per second.
func (c *cluster) consumeAll(b *testing.B, ctx context.Context, admin *felixclient.Cluster, stream, group string, ack bool, tails map[uint32]uint64) float64 {
	b.Helper()
	var total atomic.Int64
	errs := make(chan error, groupShards)
	start := time.Now()
	var wg sync.WaitGroup
	for s := uint32(0); s < groupShards; s++ {
		cl := c.benchClient(b, ctx)
		o := felixclient.GroupConsumerOptions{Stream: stream, Shards: []uint32{s}, Group: group, Member: fmt.Sprintf("m%d", s), MaxRecords: 1000}
		if ack {
			o.Ack = &felixclient.AckOptions{MaxDeliveries: 5, AckWait: 30 * time.Second, MaxInFlight: 256}
			o.MaxRecords = 256
		}
		g, err := felixclient.NewGroupConsumer(cl, o)
		if err != nil {
			b.Fatal(err)
		}
		wg.Add(1)
		go func() {
			defer wg.Done()
			shard := record.ShardID{Stream: stream, Shard: s}
			for committed := uint64(0); committed < tails[s]; {
				bs, err := g.Poll(ctx)
				if err != nil {
					errs <- err
					return
				}
				for _, batch := range bs {
					total.Add(int64(len(batch.Records)))
					if !ack {
						if err := g.Commit(ctx, shard, batch.Next); err != nil {
							errs <- err
							return
						}
						committed = batch.Next
						continue
					}
					offs := make([]uint64, len(batch.Records))
					for i, r := range batch.Records {
						offs[i] = r.Offset
					}
					ok, err := cl.GroupAck(ctx, shard, group, o.Member, batch.Generation, offs)
					if err != nil {
						errs <- err
						return
					}
					committed = ok.Committed
				}
			}
			errs <- g.Close(ctx)
		}()
	}
	wg.Wait()
	elapsed := time.Since(start)
	for s := 0; s < groupShards; s++ {
		if err := <-errs; err != nil {
			b.Fatal(err)
		}
	}
	var want int64
	for s := uint32(0); s < groupShards; s++ {
		d, err := admin.GroupDescribe(ctx, record.ShardID{Stream: stream, Shard: s}, group)
		if err != nil || len(d.Groups) != 1 || d.Groups[0].Committed != tails[s] {
			b.Fatalf("shard %d after the run: %+v %v, want committed %d", s, d, err, tails[s])
		}
		want += int64(tails[s])
	}
	b.Logf("%s: %d records (%d in the logs, fences included) in %s", group, total.Load(), want, elapsed.Round(time.Millisecond))
	return float64(total.Load()) / elapsed.Seconds()
}

// addCounters runs 8 adding clients for benchCounterRun and returns the
// acknowledged adds per second, after checking they sum exactly.
func (c *cluster) addCounters(b *testing.B, ctx context.Context, stream, key string) float64 {
	b.Helper()
	const clients = 8
	var acked atomic.Int64
	stop := make(chan struct{})
	errs := make(chan error, clients*groupShards)
	var wg sync.WaitGroup
	for i := 0; i < clients; i++ {
		cl := c.benchClient(b, ctx)
		for s := uint32(0); s < groupShards; s++ {
			wg.Add(1)
			go func() {
				defer wg.Done()
				for {
					select {
					case <-stop:
						return
					default:
					}
					if _, err := cl.CounterAdd(ctx, record.ShardID{Stream: stream, Shard: s}, key, 1); err != nil {
						errs <- err
						return
					}
					acked.Add(1)
				}
			}()
		}
	}
	start := time.Now()
	timer := time.NewTimer(benchCounterRun)
	select {
	case <-timer.C:
	case err := <-errs:
		b.Fatal(err)
	}
	close(stop)
	wg.Wait()
	elapsed := time.Since(start)
	select {
	case err := <-errs:
		b.Fatal(err)
	default:
	}
	admin := c.benchClient(b, ctx)
	var sum int64
	for s := uint32(0); s < groupShards; s++ {
		g, err := admin.CounterGet(ctx, record.ShardID{Stream: stream, Shard: s}, key)
		if err != nil {
			b.Fatal(err)
		}
		sum += g.Value
	}
	if sum != acked.Load() {
		b.Fatalf("counters sum to %d, %d adds were acknowledged", sum, acked.Load())
	}
	b.Logf("%d adds by %d clients on %d shards in %s", sum, clients, groupShards, elapsed.Round(time.Millisecond))
	return float64(sum) / elapsed.Seconds()
}
