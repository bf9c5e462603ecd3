package server

import (
	"context"
	"fmt"
	"net"
	"slices"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"felix.dev/felix/broker/client"
	"felix.dev/felix/broker/logstore"
	"felix.dev/felix/broker/record"
)

// BenchmarkAppend1KiB compares, under each fsync mode, 1 KiB appends made
// directly on the store by 16 writers (one per shard, one record per
// append) with the same appends made over loopback through the server by 16
// connections (one per shard) with 8 appends in flight on each. Both report
// MB/s, records/s and p50/p99 latency; run with -benchtime 20000x or more:
//
//	go test -run '^$' -bench Append1KiB -benchtime 50000x ./broker/server/
func BenchmarkAppend1KiB(b *testing.B) {
	const shards, pipeline = 16, 8
	payload := make([]byte, 1024)
	for _, mode := range []logstore.FsyncMode{logstore.FsyncPeriodic, logstore.FsyncOnCommit} {
		open := func(b *testing.B) *logstore.Store {
			m, _ := NewMetrics(prometheus.NewRegistry())
			store, err := logstore.Open(logstore.Options{Dir: b.TempDir(), Fsync: mode, AutoCommit: true, Metrics: m})
			if err != nil {
				b.Fatal(err)
			}
			b.Cleanup(func() { _ = store.Close() })
			return store
		}
		b.Run(mode.String()+"/store-16-writers", func(b *testing.B) {
			store := open(b)
			runLoad(b, shards, func(i int) func() error {
				l, err := store.Log(record.LogID{ShardID: record.ShardID{Stream: "bench", Shard: uint32(i)}})
				if err != nil {
					b.Fatal(err)
				}
				return func() error {
					_, err := l.Append(context.Background(), []record.Record{{Payload: payload}}, nil)
					return err
				}
			})
		})
		b.Run(mode.String()+"/network-16-conns-pipeline-8", func(b *testing.B) {
			store := open(b)
			srv := New(StoreShards(store), Options{})
			l, err := net.Listen("tcp", "127.0.0.1:0")
			if err != nil {
				b.Fatal(err)
			}
			go func() { _ = srv.Serve(l) }()
			b.Cleanup(srv.Close)
			clients := make([]*client.Client, shards)
			for i := range clients {
				c, err := client.Dial(context.Background(), l.Addr().String(), client.Options{})
				if err != nil {
					b.Fatal(err)
				}
				b.Cleanup(func() { _ = c.Close() })
				clients[i] = c
			}
			runLoad(b, shards*pipeline, func(i int) func() error {
				c, shard := clients[i%shards], record.ShardID{Stream: "bench", Shard: uint32(i % shards)}
				return func() error {
					_, err := c.Append(context.Background(), shard, []record.Record{{Payload: payload}}, nil)
					return err
				}
			})
		})
	}
}

// runLoad runs b.N calls of 1 KiB appends spread over n goroutines and
// reports the figures.
func runLoad(b *testing.B, n int, mk func(i int) func() error) {
	var next atomic.Int64
	lat := make([][]time.Duration, n)
	calls := make([]func() error, n)
	for i := range calls {
		calls[i] = mk(i)
	}
	b.SetBytes(1024)
	b.ResetTimer()
	start := time.Now()
	var wg sync.WaitGroup
	for i := 0; i < n; i++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for next.Add(1) <= int64(b.N) {
				t0 := time.Now()
				if err := calls[i](); err != nil {
					panic(fmt.Sprint(err))
				}
				lat[i] = append(lat[i], time.Since(t0))
			}
		}()
	}
	wg.Wait()
	elapsed := time.Since(start)
	b.StopTimer()
	all := slices.Concat(lat...)
	slices.Sort(all)
	b.ReportMetric(float64(b.N)/elapsed.Seconds(), "records/s")
	if len(all) > 0 {
		b.ReportMetric(float64(all[len(all)/2].Microseconds()), "p50-µs")
		b.ReportMetric(float64(all[len(all)*99/100].Microseconds()), "p99-µs")
	}
}
