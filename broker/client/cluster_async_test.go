package client_test

import (
	"context"
	"errors"
	"strings"
	"sync"
	"testing"
	"time"

	"felix.dev/felix/broker/client"
	"felix.dev/felix/broker/record"
	"felix.dev/felix/broker/wire"
)

// TestClusterAppendAsyncPipelinesToTheLeader: appends sent with
// AppendAsync go to the shard's leader in the order sent, several in
// flight at once, and each Wait returns its own answer.
func TestClusterAppendAsyncPipelinesToTheLeader(t *testing.T) {
	var (
		b    *scripted
		mu   sync.Mutex
		seen []string
	)
	b = startScripted(t, func(f wire.Frame, n int) (wire.MsgType, []byte, bool) {
		if f.Type == wire.MsgMetadata {
			return wire.MsgMetadataOK, metaLeading(b.addr), true
		}
		req, err := wire.DecodeAppend(f.Body)
		if err != nil {
			return 0, nil, false
		}
		mu.Lock()
		seen = append(seen, string(req.Records[0].Payload))
		mu.Unlock()
		return wire.MsgAppendOK, wire.EncodeAppendOK(wire.AppendOK{First: uint64(n - 1), Tail: uint64(n)}), true
	})
	c := newTestCluster(t, 4, b.addr)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	var pending []*client.ClusterPendingAppend
	for i := 0; i < 8; i++ {
		p, err := c.AppendAsync(ctx, shard, []record.Record{{Payload: []byte{byte('a' + i)}}}, nil)
		if err != nil {
			t.Fatal(err)
		}
		pending = append(pending, p)
	}
	for i, p := range pending {
		res, err := p.Wait(ctx)
		if err != nil || res.First != uint64(i) {
			t.Fatalf("append %d: %+v, %v", i, res, err)
		}
		if again, err := p.Wait(ctx); err != nil || again != res {
			t.Fatalf("second Wait of append %d: %+v, %v", i, again, err)
		}
	}
	mu.Lock()
	defer mu.Unlock()
	if got := strings.Join(seen, ""); got != "abcdefgh" {
		t.Fatalf("the leader saw %q, want abcdefgh in order", got)
	}
}

// TestClusterAppendAsyncLeaderChange: an asynchronous append refused
// NotLeader fails (it is not sent again), and the next goes to the leader
// the refusal named; one refused without a hint makes the next send learn
// the metadata again.
func TestClusterAppendAsyncLeaderChange(t *testing.T) {
	recs := []record.Record{{Payload: []byte("x")}}
	leader := startScripted(t, func(f wire.Frame, _ int) (wire.MsgType, []byte, bool) {
		return wire.MsgAppendOK, wire.EncodeAppendOK(wire.AppendOK{First: 7, Tail: 8}), true
	})
	var old *scripted
	old = startScripted(t, func(f wire.Frame, n int) (wire.MsgType, []byte, bool) {
		if f.Type == wire.MsgMetadata {
			return wire.MsgMetadataOK, metaLeading(old.addr), true // stale: names itself
		}
		hint := leader.addr
		if n == 2 {
			hint = "" // the second refusal knows no leader
		}
		return wire.MsgError, errBody(&wire.Error{Code: wire.CodeNotLeader, Message: "not leader", Leader: hint, Epoch: 2}), true
	})
	c := newTestCluster(t, 4, old.addr)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	wait := func() (wire.AppendOK, error) {
		t.Helper()
		p, err := c.AppendAsync(ctx, shard, recs, nil)
		if err != nil {
			t.Fatal(err)
		}
		return p.Wait(ctx)
	}
	var we *wire.Error
	if _, err := wait(); !errors.As(err, &we) || we.Code != wire.CodeNotLeader || errors.Is(err, client.ErrUnknownOutcome) {
		t.Fatalf("first append: %v, want NotLeader (nothing written)", err)
	}
	if res, err := wait(); err != nil || res.First != 7 {
		t.Fatalf("second append: %+v, %v; want the hinted leader's answer", res, err)
	}
	if old.count(wire.MsgAppend) != 1 || leader.count(wire.MsgAppend) != 1 {
		t.Fatalf("appends: %d to the old leader, %d to the new, want 1 and 1", old.count(wire.MsgAppend), leader.count(wire.MsgAppend))
	}
	// The metadata names the old broker again (the hint is dropped): it
	// refuses without a hint, and the next send asks for the metadata.
	if _, err := c.Metadata(ctx, shard.Stream); err != nil {
		t.Fatal(err)
	}
	metas := old.count(wire.MsgMetadata)
	if _, err := wait(); !errors.As(err, &we) || we.Code != wire.CodeNotLeader {
		t.Fatalf("third append: %v, want NotLeader", err)
	}
	_, _ = wait()
	if got := old.count(wire.MsgMetadata); got != metas+1 {
		t.Fatalf("metadata requests after a refusal without a hint: %d, want %d", got, metas+1)
	}
}

// TestClusterAppendAsyncUnansweredIsUnknown: an asynchronous append whose
// connection broke before the answer fails with ErrUnknownOutcome and is
// not sent again; the next one is sent on a new connection.
func TestClusterAppendAsyncUnansweredIsUnknown(t *testing.T) {
	recs := []record.Record{{Payload: []byte("x")}}
	var b *scripted
	b = startScripted(t, func(f wire.Frame, n int) (wire.MsgType, []byte, bool) {
		if f.Type == wire.MsgMetadata {
			return wire.MsgMetadataOK, metaLeading(b.addr), true
		}
		if n == 1 {
			return 0, nil, false
		}
		return wire.MsgAppendOK, wire.EncodeAppendOK(wire.AppendOK{First: 1, Tail: 2}), true
	})
	c := newTestCluster(t, 4, b.addr)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	p, err := c.AppendAsync(ctx, shard, recs, nil)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := p.Wait(ctx); !errors.Is(err, client.ErrUnknownOutcome) {
		t.Fatalf("unanswered append: %v, want ErrUnknownOutcome", err)
	}
	p, err = c.AppendAsync(ctx, shard, recs, nil)
	if err != nil {
		t.Fatal(err)
	}
	if res, err := p.Wait(ctx); err != nil || res.First != 1 {
		t.Fatalf("next append: %+v, %v", res, err)
	}
	if n := b.count(wire.MsgAppend); n != 2 {
		t.Fatalf("broker saw %d appends, want 2 (none resent)", n)
	}
}

// TestClusterAppendAsyncIdempotent: in idempotent mode asynchronous
// appends of one shard take consecutive sequences in the order of the
// calls, and one whose outcome is unknown is sent again under its own.
func TestClusterAppendAsyncIdempotent(t *testing.T) {
	var (
		b    *scripted
		mu   sync.Mutex
		seqs []uint64
	)
	b = startScriptedWith(t, allFeatures|wire.FeatureIdempotent, func(f wire.Frame, n int) (wire.MsgType, []byte, bool) {
		if f.Type == wire.MsgMetadata {
			return wire.MsgMetadataOK, metaLeading(b.addr), true
		}
		req, err := wire.DecodeAppendFor(f.Body, wire.FeatureIdempotent)
		if err != nil || req.Producer == nil {
			return 0, nil, false
		}
		mu.Lock()
		seqs = append(seqs, req.Producer.Seq)
		mu.Unlock()
		if n == 2 {
			return 0, nil, false // the second append's first send is not answered
		}
		return wire.MsgAppendOK, wire.EncodeAppendOK(wire.AppendOK{First: req.Producer.Seq, Tail: req.Producer.Seq + 1}), true
	})
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	c, err := client.NewCluster(ctx, client.ClusterOptions{Attempts: 4, After: noWait, Idempotent: true}, b.addr)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	var pending []*client.ClusterPendingAppend
	for i := 0; i < 3; i++ {
		p, err := c.AppendAsync(ctx, shard, []record.Record{{Payload: []byte("x")}}, nil)
		if err != nil {
			t.Fatal(err)
		}
		pending = append(pending, p)
	}
	for i, p := range pending {
		if res, err := p.Wait(ctx); err != nil || res.First != uint64(i) {
			t.Fatalf("append %d: %+v, %v", i, res, err)
		}
	}
	mu.Lock()
	defer mu.Unlock()
	want := []uint64{0, 1, 1, 2}
	if len(seqs) != len(want) {
		t.Fatalf("broker saw sequences %v, want %v", seqs, want)
	}
	for i := range want {
		if seqs[i] != want[i] {
			t.Fatalf("broker saw sequences %v, want %v", seqs, want)
		}
	}
}
