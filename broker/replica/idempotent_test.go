package replica

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"slices"
	"sync"
	"testing"
	"time"

	"felix.dev/felix/broker/client"
	"felix.dev/felix/broker/producer"
	"felix.dev/felix/broker/record"
	"felix.dev/felix/broker/wire"
)

// payloadsInOrder returns the payloads n serves for the test shard, in
// offset order.
func payloadsInOrder(t *testing.T, n *node) []string {
	t.Helper()
	got := readAll(t, n)
	offs := make([]uint64, 0, len(got))
	for o := range got {
		offs = append(offs, o)
	}
	slices.Sort(offs)
	out := make([]string, 0, len(offs))
	for _, o := range offs {
		out = append(out, string(got[o]))
	}
	return out
}

// [TR-8] A retried idempotent batch is answered by a new leader with the
// offsets the old leader gave it, and written once: the producer and
// sequence are in the replicated log, and the new leader rebuilds its
// table from its own log. The retry goes to the new leader on a new
// connection, as a client that lost the old leader's answer sends it.
func TestTR8_RetryAfterFailoverAnswersOriginalOffsets(t *testing.T) {
	c, meta := routedCluster(t)
	assignReplicas(t, c, meta, replicaAssignment(c, "a", 1))
	c.waitLeading(c.nodes["a"])
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()

	p := func(seq uint64) wire.Producer { return wire.Producer{ID: [16]byte{0xfe, 1, 2}, Seq: seq} }
	one := func(s string) []record.Record { return []record.Record{{Payload: []byte(s)}} }
	ca := dial(t, c.nodes["a"])
	if _, err := ca.Append(ctx, testShard, one("plain"), nil); err != nil {
		t.Fatal(err)
	}
	first := map[uint64]wire.AppendOK{}
	for seq, s := range []string{"r0", "r1"} {
		ok, err := ca.AppendIdempotent(ctx, testShard, one(s), nil, p(uint64(seq)))
		if err != nil {
			t.Fatalf("append %s: %v", s, err)
		}
		first[uint64(seq)] = ok
	}
	// A retry on the same leader is answered from its table.
	if ok, err := ca.AppendIdempotent(ctx, testShard, one("r1"), nil, p(1)); err != nil || ok != first[1] {
		t.Fatalf("retry on a: %+v %v, want %+v", ok, err, first[1])
	}

	c.nodes["a"].stop()
	assignReplicas(t, c, meta, replicaAssignment(c, "b", 2))
	c.waitLeading(c.nodes["b"])
	cb := dial(t, c.nodes["b"])
	for _, seq := range []uint64{1, 0} {
		ok, err := cb.AppendIdempotent(ctx, testShard, one(fmt.Sprintf("r%d", seq)), nil, p(seq))
		if err != nil || ok != first[seq] {
			t.Fatalf("retry of sequence %d on the new leader: %+v %v, want the original %+v", seq, ok, err, first[seq])
		}
	}
	// A gap is refused with OutOfSequence naming the next sequence.
	_, err := cb.AppendIdempotent(ctx, testShard, one("r3"), nil, p(3))
	var we *wire.Error
	if !errors.As(err, &we) || we.Code != wire.CodeOutOfSequence || we.Next != 2 || !errors.Is(err, wire.ErrOutOfSequence) {
		t.Fatalf("gap: %v (%+v), want OutOfSequence next 2", err, we)
	}
	ok, err := cb.AppendIdempotent(ctx, testShard, one("r2"), nil, p(2))
	if err != nil || ok.First < first[1].Tail {
		t.Fatalf("next sequence on the new leader: %+v %v", ok, err)
	}
	// A client may not forge the broker's header.
	_, err = cb.Append(ctx, testShard, []record.Record{{Payload: []byte("x"),
		Headers: []record.Header{producer.Header(producer.ID{0xfe, 1, 2}, 9, 1)}}}, nil)
	if !errors.As(err, &we) || we.Code != wire.CodeBadRequest {
		t.Fatalf("append carrying the reserved header: %v, want BadRequest", err)
	}

	if got, want := payloadsInOrder(t, c.nodes["b"]), []string{"plain", "r0", "r1", "r2"}; !slices.Equal(got, want) {
		t.Fatalf("new leader holds %q, want %q", got, want)
	}
	res, err := cb.Read(ctx, wire.ReadRequest{Shard: testShard, Offset: first[0].First, MaxRecords: 1})
	if err != nil || len(res.Records) != 1 || len(res.Records[0].Headers) != 0 {
		t.Fatalf("a reader is shown the producer header: %+v %v", res.Records, err)
	}
}

// [TR-8] One producer streams acknowledged appends through an idempotent
// Cluster while the leader is stopped and a follower promoted: every
// append is acknowledged (the unknown outcomes of the ones in flight are
// resent by the client), and the new leader holds each record exactly
// once, in the order sent, at the offset its acknowledgement named.
func TestTR8_LeaderStoppedMidStreamEachRecordOnceInOrder(t *testing.T) {
	c, meta := routedCluster(t)
	assignReplicas(t, c, meta, replicaAssignment(c, "a", 1))
	c.waitLeading(c.nodes["a"])
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	cl, err := client.NewCluster(ctx, client.ClusterOptions{Attempts: 40, Idempotent: true,
		Rand: bytes.NewReader(bytes.Repeat([]byte{7}, 64))}, c.nodes["d"].addr, c.nodes["c"].addr)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = cl.Close() })

	var (
		mu    sync.Mutex
		acked []wire.AppendOK
	)
	count := func() int { mu.Lock(); defer mu.Unlock(); return len(acked) }
	stop := make(chan struct{})
	done := make(chan error, 1)
	go func() {
		for i := 0; ; i++ {
			select {
			case <-stop:
				done <- nil
				return
			default:
			}
			res, err := cl.Append(ctx, testShard, []record.Record{{Payload: fmt.Appendf(nil, "r%d", i)}}, nil)
			if err != nil {
				done <- fmt.Errorf("append r%d: %w", i, err)
				return
			}
			mu.Lock()
			acked = append(acked, res)
			mu.Unlock()
		}
	}()
	eventually(t, "50 appends acknowledged by a", 20*time.Second, func() bool { return count() >= 50 })
	c.nodes["a"].stop()
	before := count()
	assignReplicas(t, c, meta, replicaAssignment(c, "b", 2))
	eventually(t, "50 more appends acknowledged after the failover", 30*time.Second, func() bool {
		select {
		case err := <-done:
			t.Fatalf("appender stopped: %v", err)
		default:
		}
		return count() >= before+50
	})
	close(stop)
	if err := <-done; err != nil {
		t.Fatal(err)
	}

	got := readAll(t, c.nodes["b"])
	mu.Lock()
	defer mu.Unlock()
	want := make([]string, len(acked))
	for i, a := range acked {
		want[i] = fmt.Sprintf("r%d", i)
		if string(got[a.First]) != want[i] {
			t.Fatalf("r%d acknowledged at %d, new leader holds %q there", i, a.First, got[a.First])
		}
	}
	if held := payloadsInOrder(t, c.nodes["b"]); !slices.Equal(held, want) {
		t.Fatalf("new leader holds %d records, want exactly r0..r%d once each, in order; got %q", len(held), len(want)-1, held)
	}
	t.Logf("%d appends acknowledged, %d after the failover", len(acked), len(acked)-before)
}
