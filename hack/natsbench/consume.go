package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"sync"
	"sync/atomic"
	"time"

	"github.com/nats-io/nats.go/jetstream"
)

// consumeResult is what --consume-records measures for one acknowledgement
// policy: the records a durable pull consumer shared by --consumers
// fetchers processed and acknowledged per second of wall time, from the
// first fetch until the consumer's ack floor reached the last record.
type consumeResult struct {
	Peer          string  `json:"peer"`
	Mode          string  `json:"mode"`
	Consumers     int     `json:"consumers"`
	Batch         int     `json:"batch"`
	MaxAckPending int     `json:"maxAckPending"`
	RecordSize    int     `json:"recordSize"`
	Records       int64   `json:"records"`
	Seconds       float64 `json:"seconds"`
	RecordsPerSec float64 `json:"recordsPerSec"`
}

// preload publishes n messages of payload to the stream's subjects
// bench.0 .. bench.(subjects-1), in turn, with 256 publishes in flight.
func preload(ctx context.Context, js jetstream.JetStream, n, subjects int, payload []byte) error {
	window := make(chan jetstream.PubAckFuture, 256)
	errc := make(chan error, 1)
	go func() {
		var first error
		for f := range window {
			select {
			case <-f.Ok():
			case err := <-f.Err():
				if first == nil {
					first = err
				}
			}
		}
		errc <- first
	}()
	for i := 0; i < n; i++ {
		f, err := js.PublishAsync(fmt.Sprintf("bench.%d", i%subjects), payload)
		if err != nil {
			close(window)
			<-errc
			return fmt.Errorf("preload: %w", err)
		}
		window <- f
	}
	close(window)
	if err := <-errc; err != nil {
		return fmt.Errorf("preload: %w", err)
	}
	return nil
}

// consume has c.consumers fetchers, each on its own connection, share one
// durable pull consumer of the stream with policy: explicit (every
// message acknowledged with Ack, which the client does not wait for;
// maxAckPending outstanding in all) or all (the last message of each
// fetched batch acknowledged with DoubleAck, which waits for the server,
// as a Felix cumulative commit does).
func consume(ctx context.Context, c config, urls []string, certs *tlsFiles, js jetstream.JetStream, name string, policy jetstream.AckPolicy, batch, maxAckPending int, total int64) (consumeResult, error) {
	cctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	_, err := js.CreateOrUpdateConsumer(cctx, "BENCH", jetstream.ConsumerConfig{Durable: name, AckPolicy: policy,
		MaxAckPending: maxAckPending, AckWait: 30 * time.Second, Replicas: c.replicas})
	cancel()
	if err != nil {
		return consumeResult{}, fmt.Errorf("create consumer %s: %w", name, err)
	}
	var fetched atomic.Int64
	errc := make(chan error, c.consumers)
	start := time.Now()
	var wg sync.WaitGroup
	for i := 0; i < c.consumers; i++ {
		nc, err := connect(urls, certs)
		if err != nil {
			return consumeResult{}, err
		}
		defer nc.Close()
		fjs, err := jetstream.New(nc)
		if err != nil {
			return consumeResult{}, err
		}
		cons, err := fjs.Consumer(ctx, "BENCH", name)
		if err != nil {
			return consumeResult{}, err
		}
		wg.Add(1)
		go func() {
			defer wg.Done()
			for fetched.Load() < total {
				b, err := cons.Fetch(batch, jetstream.FetchMaxWait(time.Second))
				if err != nil {
					errc <- err
					return
				}
				var last jetstream.Msg
				for m := range b.Messages() {
					fetched.Add(1)
					last = m
					if policy == jetstream.AckExplicitPolicy {
						if err := m.Ack(); err != nil {
							errc <- err
							return
						}
					}
				}
				if err := b.Error(); err != nil && !errors.Is(err, jetstream.ErrNoMessages) && !errors.Is(err, context.DeadlineExceeded) {
					errc <- err
					return
				}
				if last != nil && policy == jetstream.AckAllPolicy {
					actx, cancel := context.WithTimeout(ctx, 10*time.Second)
					err := last.DoubleAck(actx)
					cancel()
					if err != nil {
						errc <- err
						return
					}
				}
			}
			errc <- nil
		}()
	}
	wg.Wait()
	for i := 0; i < c.consumers; i++ {
		if err := <-errc; err != nil {
			return consumeResult{}, err
		}
	}
	// Every record is processed; it is acknowledged when the consumer's
	// ack floor reaches the last one.
	cons, err := js.Consumer(ctx, "BENCH", name)
	if err != nil {
		return consumeResult{}, err
	}
	deadline := time.Now().Add(60 * time.Second)
	for {
		info, err := cons.Info(ctx)
		if err == nil && int64(info.AckFloor.Stream) >= total && info.NumAckPending == 0 {
			break
		}
		if time.Now().After(deadline) {
			return consumeResult{}, fmt.Errorf("consumer %s: ack floor did not reach %d: %+v %v", name, total, info, err)
		}
		time.Sleep(5 * time.Millisecond)
	}
	secs := time.Since(start).Seconds()
	return consumeResult{Peer: "nats-jetstream", Mode: name, Consumers: c.consumers, Batch: batch, MaxAckPending: maxAckPending,
		RecordSize: c.size, Records: fetched.Load(), Seconds: secs, RecordsPerSec: float64(fetched.Load()) / secs}, nil
}

// runConsume starts the servers, creates the stream, preloads it and
// measures both policies, printing one JSON object each.
func runConsume(c config) error {
	peer, err := startPeer(c, jetstream.WithPublishAsyncMaxPending(1024)) // above preload's window of 256
	if err != nil {
		return err
	}
	defer peer.close()
	urls, certs, js := peer.urls, peer.certs, peer.js
	ctx := context.Background()
	if _, err := createStream(ctx, js, jetstream.StreamConfig{Name: "BENCH", Subjects: []string{"bench.>"},
		Replicas: c.replicas, Storage: jetstream.FileStorage}); err != nil {
		return err
	}
	payload := make([]byte, c.size)
	for i := range payload {
		payload[i] = byte('a' + i%26)
	}
	if err := preload(ctx, js, c.consumeRecords, 4, payload); err != nil {
		return err
	}
	enc := json.NewEncoder(os.Stdout)
	for _, m := range []struct {
		name          string
		policy        jetstream.AckPolicy
		batch, window int
	}{{"explicit", jetstream.AckExplicitPolicy, 256, 4 * 256}, {"all", jetstream.AckAllPolicy, 1000, 4 * 1000}} {
		res, err := consume(ctx, c, urls, certs, js, m.name, m.policy, m.batch, m.window, int64(c.consumeRecords))
		if err != nil {
			return err
		}
		if err := enc.Encode(res); err != nil {
			return err
		}
	}
	return nil
}
