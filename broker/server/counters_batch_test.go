package server

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"slices"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/go-logr/logr"

	"felix.dev/felix/broker/client"
	"felix.dev/felix/broker/counter"
	"felix.dev/felix/broker/logstore"
	"felix.dev/felix/broker/producer"
	"felix.dev/felix/broker/record"
	"felix.dev/felix/broker/wire"
)

// countingLog counts the appends made to a counter log and their records,
// and slows each down (a replicated log's acknowledgement), so adds that
// arrive meanwhile queue up.
type countingLog struct {
	Log
	appends, records *atomic.Int64
}

func (l countingLog) Append(ctx context.Context, recs []record.Record, expectTail *uint64) (logstore.AppendResult, error) {
	l.appends.Add(1)
	l.records.Add(int64(len(recs)))
	time.Sleep(2 * time.Millisecond)
	return l.Log.Append(ctx, recs, expectTail)
}

// countingShards serves a store's shards with counting counter logs.
type countingShards struct {
	*storeShards
	appends, records atomic.Int64
}

func (s *countingShards) CounterLog(shard record.ShardID) (Log, error) {
	l, err := s.storeShards.CounterLog(shard)
	if err != nil {
		return nil, err
	}
	return countingLog{Log: l, appends: &s.appends, records: &s.records}, nil
}

// TestCounterConcurrentAddsAreBatched: many clients adding to one shard's
// counters at once, some as idempotent producers sending every add twice
// at once, get sums that are exact, values unique per key and in their
// offsets' order, each add applied once, and fewer appends than adds
// (the adds that arrive during an append go together in the next).
func TestCounterConcurrentAddsAreBatched(t *testing.T) {
	var cs *countingShards
	b := startBrokerWith(t, logstore.FsyncNone, Options{CounterSnapshotEvery: 500}, func(s *logstore.Store, _ *Metrics) Shards {
		cs = &countingShards{storeShards: StoreShards(s).(*storeShards)}
		return cs
	})
	ctx := ctxT(t)
	const (
		clients = 32
		adds    = 50
		keys    = 4
	)
	type answer struct {
		key          string
		delta, value int64
		offset       uint64
	}
	var (
		mu      sync.Mutex
		answers []answer
		wg      sync.WaitGroup
		errs    = make(chan error, clients*adds*2)
	)
	// add sends one add until it is answered other than Unavailable.
	add := func(c *client.Client, key string, delta int64, p *wire.Producer) (wire.CounterAddOK, error) {
		for {
			ok, err := c.CounterAdd(ctx, shardA, key, delta, p)
			var we *wire.Error
			if errors.As(err, &we) && we.Code == wire.CodeUnavailable {
				time.Sleep(time.Millisecond)
				continue
			}
			return ok, err
		}
	}
	for g := range clients {
		c := dial(t, b.addr, client.Options{})
		wg.Add(1)
		go func() {
			defer wg.Done()
			key := fmt.Sprintf("k%d", g%keys)
			idem := g%2 == 0
			for i := range adds {
				delta := int64(g*adds + i + 1)
				if !idem {
					ok, err := add(c, key, delta, nil)
					if err != nil {
						errs <- err
						return
					}
					mu.Lock()
					answers = append(answers, answer{key, delta, ok.Value, ok.Offset})
					mu.Unlock()
					continue
				}
				// The add and a retry of it at once: both answered
				// alike, applied once.
				p := &wire.Producer{ID: [16]byte{byte(g + 1)}, Seq: uint64(i)}
				var got [2]wire.CounterAddOK
				var gerr [2]error
				var both sync.WaitGroup
				for j := range 2 {
					both.Add(1)
					go func() {
						defer both.Done()
						got[j], gerr[j] = add(c, key, delta, p)
					}()
				}
				both.Wait()
				if gerr[0] != nil || gerr[1] != nil || got[0] != got[1] {
					errs <- fmt.Errorf("client %d add %d: %+v, %v and %+v, %v", g, i, got[0], gerr[0], got[1], gerr[1])
					return
				}
				mu.Lock()
				answers = append(answers, answer{key, delta, got[0].Value, got[0].Offset})
				mu.Unlock()
			}
		}()
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Fatal(err)
	}
	if len(answers) != clients*adds {
		t.Fatalf("%d answers, want %d", len(answers), clients*adds)
	}
	slices.SortFunc(answers, func(a, b answer) int { return cmp.Compare(a.offset, b.offset) })
	sums := map[string]int64{}
	offsets := map[uint64]bool{}
	for _, a := range answers {
		if offsets[a.offset] {
			t.Fatalf("two adds answered with offset %d", a.offset)
		}
		offsets[a.offset] = true
		sums[a.key] += a.delta
		if a.value != sums[a.key] {
			t.Fatalf("add of %d to %s at %d answered %d; the adds to it up to there sum to %d", a.delta, a.key, a.offset, a.value, sums[a.key])
		}
	}
	c := dial(t, b.addr, client.Options{})
	for k, want := range sums {
		if g, err := c.CounterGet(ctx, shardA, k); err != nil || g.Value != want {
			t.Fatalf("%s = %+v, %v; want %d", k, g, err, want)
		}
	}
	// A restarted server folds the log to the same values.
	c2 := dial(t, serveAgain(t, b, Options{CounterSnapshotEvery: -1}), client.Options{})
	for k, want := range sums {
		if g, err := c2.CounterGet(ctx, shardA, k); err != nil || g.Value != want {
			t.Fatalf("%s after restart = %+v, %v; want %d", k, g, err, want)
		}
	}
	n, recs := cs.appends.Load(), cs.records.Load()
	t.Logf("%d adds in %d appends (%d records, snapshots included)", clients*adds, n, recs)
	if n >= clients*adds {
		t.Fatalf("%d appends for %d adds: no add was batched", n, clients*adds)
	}
}

// switchLog fails every append with err while err is set; with written
// it writes the records first (an acknowledgement lost).
type switchLog struct {
	Log
	err     *error
	written bool
}

func (l switchLog) Append(ctx context.Context, recs []record.Record, expectTail *uint64) (logstore.AppendResult, error) {
	if *l.err == nil {
		return l.Log.Append(ctx, recs, expectTail)
	}
	if l.written {
		if _, err := l.Log.Append(ctx, recs, expectTail); err != nil {
			return logstore.AppendResult{}, err
		}
	}
	return logstore.AppendResult{}, *l.err
}

type switchShards struct {
	*storeShards
	err     error
	written bool
}

func (s *switchShards) CounterLog(shard record.ShardID) (Log, error) {
	l, err := s.storeShards.CounterLog(shard)
	if err != nil {
		return nil, err
	}
	return switchLog{Log: l, err: &s.err, written: s.written}, nil
}

// TestCounterAddBatchDecidesEachAddAsAlone: the adds of one batch are
// decided in order as if applied one at a time (values, limits, producer
// sequences, duplicates), an idempotent producer's second add waits for
// the next batch, and a failed append fails exactly the adds in it.
func TestCounterAddBatchDecidesEachAddAsAlone(t *testing.T) {
	store, err := logstore.Open(logstore.Options{Dir: t.TempDir(), Fsync: logstore.FsyncNone, AutoCommit: true})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = store.Close() })
	sh := &switchShards{storeShards: StoreShards(store).(*storeShards)}
	srv := New(sh, Options{CounterLimits: counter.Limits{MaxKeys: 2}, CounterSnapshotEvery: -1})
	t.Cleanup(srv.Close)
	c := &conn{s: srv, log: logr.Discard()}
	cs := srv.counterShard(shardA)
	prod := func(id byte, seq uint64) *wire.Producer { return &wire.Producer{ID: [16]byte{id}, Seq: seq} }
	type add struct {
		key   string
		delta int64
		p     *wire.Producer
	}
	type want struct {
		value  int64
		offset uint64
		code   wire.Code // 0: answered OK
		later  bool      // not answered by this batch
	}
	run := func(adds []add, wants []want) []*pendingAdd {
		t.Helper()
		batch := make([]*pendingAdd, len(adds))
		for i, a := range adds {
			batch[i] = &pendingAdd{c: c, req: wire.CounterAddRequest{Shard: shardA, Key: a.key, Delta: a.delta, Producer: a.p}, done: make(chan struct{})}
			if a.p != nil {
				batch[i].id = producer.Scoped(c.principal.String(), producer.ID(a.p.ID))
			}
		}
		cs.mu.Lock()
		cs.addBatch(c, shardA, batch)
		cs.queue = nil // the deferred adds: checked, not run
		cs.mu.Unlock()
		for i, w := range wants {
			p := batch[i]
			if p.answered() == w.later {
				t.Fatalf("add %d: answered %v, want %v", i, p.answered(), !w.later)
			}
			if w.later {
				continue
			}
			var we *wire.Error
			switch {
			case w.code == 0 && (p.err != nil || p.ok.Value != w.value || p.ok.Offset != w.offset):
				t.Fatalf("add %d = %+v, %v; want %d at %d", i, p.ok, p.err, w.value, w.offset)
			case w.code != 0 && (!errors.As(p.err, &we) || we.Code != w.code):
				t.Fatalf("add %d = %+v, %v; want code %v", i, p.ok, p.err, w.code)
			}
		}
		return batch
	}
	run([]add{
		{"a", 1, prod(1, 0)},
		{"b", 2, nil},
		{"a", 3, prod(1, 1)}, // the producer's second add: next batch
		{"c", 1, nil},        // a third key
		{"a", 5, prod(2, 1)}, // a producer's first add must be 0
		{"a", -10, nil},
		{"b", 1, prod(3, 0)},
	}, []want{
		{value: 1, offset: 0},
		{value: 2, offset: 1},
		{later: true},
		{code: wire.CodeCounterLimit},
		{code: wire.CodeOutOfSequence},
		{value: -9, offset: 2},
		{value: 3, offset: 3},
	})
	run([]add{
		{"a", 3, prod(1, 1)},
		{"a", 1, prod(1, 0)}, // a retry, behind the producer's add in this batch
		{"a", 4, nil},
	}, []want{{value: -6, offset: 4}, {later: true}, {value: -2, offset: 5}})
	run([]add{{"a", 1, prod(1, 0)}, {"a", 3, prod(1, 1)}, {"b", 7, prod(3, 0)}},
		[]want{{value: 1, offset: 0}, {value: -6, offset: 4}, {value: 3, offset: 3}})

	// Refused before the write: every add of the append refused, each
	// producer's add aborted, so it is the producer's next again.
	sh.err = &wire.Error{Code: wire.CodeNotLeader, Message: "not the leader"}
	run([]add{{"a", 1, prod(1, 2)}, {"b", 1, nil}, {"zz", 1, nil}},
		[]want{{code: wire.CodeNotLeader}, {code: wire.CodeNotLeader}, {code: wire.CodeCounterLimit}})
	sh.err = nil
	run([]add{{"a", 1, prod(1, 2)}, {"b", 1, nil}}, []want{{value: -1, offset: 6}, {value: 4, offset: 7}})

	// An unknown outcome (written, the acknowledgement lost): every add
	// of the append gets the error; their retries find them written.
	sh.err, sh.written = &wire.Error{Code: wire.CodeUnavailable, Message: "lost"}, true
	run([]add{{"a", 2, prod(1, 3)}, {"b", 2, prod(3, 1)}}, []want{{code: wire.CodeUnavailable}, {code: wire.CodeUnavailable}})
	sh.err, sh.written = nil, false
	run([]add{{"a", 2, prod(1, 3)}, {"b", 2, prod(3, 1)}, {"a", 1, nil}},
		[]want{{value: 1, offset: 8}, {value: 6, offset: 9}, {value: 2, offset: 10}})
}
