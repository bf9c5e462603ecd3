package logstore

import (
	"context"
	"errors"
	"fmt"
	"testing"

	"felix.dev/felix/broker/record"
)

// replicated returns n data records at offsets [from, from+n) of epoch 1.
func replicated(from uint64, n int) []record.Record {
	out := make([]record.Record, n)
	for i := range out {
		out[i] = record.Record{Offset: from + uint64(i), Epoch: 1, Kind: record.KindData, Timestamp: 1,
			Payload: []byte(fmt.Sprintf("p%d", from+uint64(i)))}
	}
	return out
}

// TestSubmitReplicatedPipelines: batches submitted back to back, each
// starting at the tail the previous one leaves, are all written, in order,
// and the last one's wait covers them all; a batch that does not start at
// the tail fails, and so does every batch queued behind it.
func TestSubmitReplicatedPipelines(t *testing.T) {
	for _, mode := range []FsyncMode{FsyncOnCommit, FsyncPeriodic} {
		t.Run(mode.String(), func(t *testing.T) {
			s := openTest(t, Options{Fsync: mode})
			l := mustLog(t, s, record.LogID{ShardID: record.ShardID{Stream: "s"}, Log: record.LogData})
			ctx := context.Background()
			var waits []func(context.Context) error
			for i := 0; i < 20; i++ {
				w, err := l.SubmitReplicated(ctx, replicated(uint64(i*5), 5))
				if err != nil {
					t.Fatal(err)
				}
				waits = append(waits, w)
			}
			if err := waits[len(waits)-1](ctx); err != nil {
				t.Fatal(err)
			}
			if d := l.Describe(); d.Durable != 100 || d.Tail != 100 {
				t.Fatalf("after the last wait: %+v, want tail and durable 100", d)
			}
			for i, w := range waits {
				if err := w(ctx); err != nil {
					t.Fatalf("batch %d: %v after the last one succeeded", i, err)
				}
			}
			if got := offsets(readAll(t, l, 0, true)); len(got) != 100 || got[99] != 99 {
				t.Fatalf("read back %d records, last %v", len(got), got[len(got)-1:])
			}

			gap, err := l.SubmitReplicated(ctx, replicated(101, 1)) // 100 is missing
			if err != nil {
				t.Fatal(err)
			}
			behind, err := l.SubmitReplicated(ctx, replicated(102, 1))
			if err != nil {
				t.Fatal(err)
			}
			if err := gap(ctx); !errors.Is(err, record.ErrOffsetMismatch) {
				t.Fatalf("batch past the tail: %v, want an offset mismatch", err)
			}
			if err := behind(ctx); err == nil {
				t.Fatal("a batch queued behind a failed one succeeded")
			}
			if d := l.Describe(); d.Tail != 100 {
				t.Fatalf("tail %d after refused batches, want 100", d.Tail)
			}
		})
	}
}
