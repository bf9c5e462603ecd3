package client

import (
	"context"
	"sync"
	"time"

	"felix.dev/felix/broker/record"
	"felix.dev/felix/broker/wire"
)

// BatcherOptions bounds a Batcher's batches. Zero values take defaults.
type BatcherOptions struct {
	// MaxRecords sends a batch once it holds this many records (default
	// 256, capped at the broker's advertised limit).
	MaxRecords int
	// MaxBytes sends a batch once its payloads and headers reach this many
	// bytes (default 1 MiB).
	MaxBytes int
	// Linger sends a non-empty batch this long after its first record
	// (default 1ms).
	Linger time.Duration
	// Timeout bounds each batch's append (default 30s).
	Timeout time.Duration
}

// Batcher gathers unconditional records for one shard into append batches,
// so many small Add calls cost few requests. Conditional appends do not go
// through a Batcher. Safe for concurrent use.
type Batcher struct {
	c     *Client
	shard record.ShardID
	o     BatcherOptions

	mu      sync.Mutex
	recs    []record.Record
	futs    []*Future
	bytes   int
	timer   *time.Timer
	flights sync.WaitGroup
}

// Future is the outcome of one record given to a Batcher.
type Future struct {
	done   chan struct{}
	offset uint64
	err    error
}

// Wait returns the record's offset once its batch is answered, or ctx's
// error.
func (f *Future) Wait(ctx context.Context) (uint64, error) {
	select {
	case <-f.done:
		return f.offset, f.err
	case <-ctx.Done():
		return 0, ctx.Err()
	}
}

// NewBatcher returns a batcher appending to shard over c.
func (c *Client) NewBatcher(shard record.ShardID, o BatcherOptions) *Batcher {
	if o.MaxRecords <= 0 {
		o.MaxRecords = 256
	}
	if _, limit := c.Limits(); limit > 0 && o.MaxRecords > int(limit) {
		o.MaxRecords = int(limit)
	}
	if o.MaxBytes <= 0 {
		o.MaxBytes = 1 << 20
	}
	if o.Linger <= 0 {
		o.Linger = time.Millisecond
	}
	if o.Timeout <= 0 {
		o.Timeout = 30 * time.Second
	}
	return &Batcher{c: c, shard: shard, o: o}
}

// Add queues rec (its Headers and Payload) and returns its future.
func (b *Batcher) Add(rec record.Record) *Future {
	f := &Future{done: make(chan struct{})}
	b.mu.Lock()
	defer b.mu.Unlock()
	b.recs = append(b.recs, rec)
	b.futs = append(b.futs, f)
	b.bytes += len(rec.Payload)
	for _, h := range rec.Headers {
		b.bytes += len(h.Key) + len(h.Value)
	}
	switch {
	case len(b.recs) >= b.o.MaxRecords || b.bytes >= b.o.MaxBytes:
		b.sendLocked()
	case len(b.recs) == 1:
		b.timer = time.AfterFunc(b.o.Linger, b.lingerDone)
	}
	return f
}

func (b *Batcher) lingerDone() {
	b.mu.Lock()
	defer b.mu.Unlock()
	b.sendLocked()
}

// Flush sends what is queued and waits until every batch sent is answered.
func (b *Batcher) Flush() {
	b.mu.Lock()
	b.sendLocked()
	b.mu.Unlock()
	b.flights.Wait()
}

func (b *Batcher) sendLocked() {
	if b.timer != nil {
		b.timer.Stop()
		b.timer = nil
	}
	if len(b.recs) == 0 {
		return
	}
	recs, futs := b.recs, b.futs
	b.recs, b.futs, b.bytes = nil, nil, 0
	// Send under the lock so batches go out in the order they filled;
	// wait for the answers concurrently (pipelining).
	ctx, cancel := context.WithTimeout(context.Background(), b.o.Timeout)
	p, err := b.c.AppendAsync(ctx, b.shard, recs, nil)
	b.flights.Add(1)
	go func() {
		defer b.flights.Done()
		defer cancel()
		var res wire.AppendOK
		if err == nil {
			res, err = p.Wait(ctx)
		}
		for i, f := range futs {
			f.err = err
			if err == nil {
				f.offset = res.First + uint64(i)
			}
			close(f.done)
		}
	}()
}
