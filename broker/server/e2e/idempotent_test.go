package e2e

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"testing"
	"time"

	"felix.dev/felix/broker/client"
	"felix.dev/felix/broker/record"
	"felix.dev/felix/broker/wire"
)

// [TR-8] A real broker process killed (SIGKILL) after acknowledging
// idempotent appends answers their retries, once restarted on the same
// data directory, with the original offsets and writes nothing: the
// producer table is rebuilt from the log on disk.
func TestTR8_KilledBrokerAnswersRetriesFromItsLog(t *testing.T) {
	bin := felixBin(t)
	dir := t.TempDir()
	b := startBroker(t, bin, dir, "on-commit")
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	shard := record.ShardID{Stream: "idem", Shard: 0}
	c, err := client.Dial(ctx, b.listen, client.Options{})
	if err != nil {
		t.Fatal(err)
	}
	p := func(seq uint64) wire.Producer { return wire.Producer{ID: [16]byte{0x1d, 0xe0}, Seq: seq} }
	var acked []wire.AppendOK
	for i := range 20 {
		ok, err := c.AppendIdempotent(ctx, shard, []record.Record{{Payload: fmt.Appendf(nil, "r%d", i)}}, nil, p(uint64(i)))
		if err != nil {
			t.Fatalf("append r%d: %v", i, err)
		}
		acked = append(acked, ok)
	}
	_ = c.Close()
	if err := b.cmd.Process.Kill(); err != nil {
		t.Fatal(err)
	}
	<-b.exited

	b2 := startBroker(t, bin, dir, "on-commit")
	c2, err := client.Dial(ctx, b2.listen, client.Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer c2.Close()
	for _, i := range []int{19, 18, 5} {
		ok, err := c2.AppendIdempotent(ctx, shard, []record.Record{{Payload: fmt.Appendf(nil, "r%d", i)}}, nil, p(uint64(i)))
		if i == 5 {
			// Older than the window of 8 batches: refused, not written.
			if !errorsIsOutOfSequence(err) {
				t.Fatalf("retry of r5 after the restart: %+v %v, want OutOfSequence", ok, err)
			}
			continue
		}
		if err != nil || ok != acked[i] {
			t.Fatalf("retry of r%d after the restart: %+v %v, want the original %+v", i, ok, err, acked[i])
		}
	}
	if _, err := c2.AppendIdempotent(ctx, shard, []record.Record{{Payload: []byte("r20")}}, nil, p(20)); err != nil {
		t.Fatalf("the next sequence after the restart: %v", err)
	}
	var got []string
	for _, r := range readAllFrom(ctx, t, c2, shard) {
		got = append(got, string(r.Payload))
	}
	want := make([]string, 21)
	for i := range want {
		want[i] = fmt.Sprintf("r%d", i)
	}
	if !slices.Equal(got, want) {
		t.Fatalf("log holds %q, want r0..r20 once each", got)
	}
	b2.stop(t)
}

func errorsIsOutOfSequence(err error) bool {
	var we *wire.Error
	return errors.Is(err, wire.ErrOutOfSequence) && errors.As(err, &we) && we.Next == 20
}
