package server

import (
	"errors"
	"net"
	"slices"
	"testing"
	"time"

	"felix.dev/felix/broker/auth"
	"felix.dev/felix/broker/client"
	"felix.dev/felix/broker/producer"
	"felix.dev/felix/broker/wire"
)

// [TR-8] On a standalone broker: a retry is answered with the original
// offsets and writes nothing, also by another server over the same store
// (the table is rebuilt from the log, not carried in memory); a client may
// not send the reserved header; readers do not see it; the producer table
// refuses new producers past its bound instead of growing.
func TestTR8_StandaloneRetryAnsweredFromTheLog(t *testing.T) {
	b := startBroker(t, Options{Idempotence: producer.Limits{MaxProducers: 2, MinAge: time.Hour}})
	ctx := ctxT(t)
	c := dial(t, b.addr, client.Options{})
	if !c.Features().Has(wire.FeatureIdempotent) {
		t.Fatalf("features %v: idempotent not negotiated", c.Features())
	}
	pA := wire.Producer{ID: [16]byte{0xa}}
	at := func(seq uint64) wire.Producer { p := pA; p.Seq = seq; return p }
	if _, err := c.Append(ctx, shardA, recs("plain"), nil); err != nil {
		t.Fatal(err)
	}
	first, err := c.AppendIdempotent(ctx, shardA, recs("r0", "r0b"), nil, at(0))
	if err != nil {
		t.Fatal(err)
	}
	second, err := c.AppendIdempotent(ctx, shardA, recs("r1"), nil, at(1))
	if err != nil {
		t.Fatal(err)
	}
	if got, err := c.AppendIdempotent(ctx, shardA, recs("r1"), nil, at(1)); err != nil || got != second {
		t.Fatalf("retry: %+v %v, want %+v", got, err, second)
	}

	// Another server over the same store knows the producer from the log.
	srv2 := New(StoreShards(b.store), Options{})
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	go func() { _ = srv2.Serve(l) }()
	t.Cleanup(srv2.Close)
	c2 := dial(t, l.Addr().String(), client.Options{})
	if got, err := c2.AppendIdempotent(ctx, shardA, recs("r0", "r0b"), nil, at(0)); err != nil || got != first {
		t.Fatalf("retry through a second server: %+v %v, want %+v", got, err, first)
	}
	_, err = c2.AppendIdempotent(ctx, shardA, recs("r5"), nil, at(5))
	if !errors.Is(err, wire.ErrOutOfSequence) {
		t.Fatalf("gap through a second server: %v, want OutOfSequence", err)
	}

	res, err := c.Read(ctx, wire.ReadRequest{Shard: shardA, From: wire.FromEarliest})
	if err != nil {
		t.Fatal(err)
	}
	var got []string
	for _, r := range res.Records {
		got = append(got, string(r.Payload))
		if _, ok := producer.Find(r.Headers); ok {
			t.Fatalf("record %d shows the producer header to a reader", r.Offset)
		}
	}
	if want := []string{"plain", "r0", "r0b", "r1"}; !slices.Equal(got, want) {
		t.Fatalf("log holds %q, want %q", got, want)
	}

	forged := recs("forged")
	forged[0].Headers = append(forged[0].Headers, producer.Header(producer.ID{0xb}, 0, 1))
	var we *wire.Error
	if _, err := c.Append(ctx, shardA, forged, nil); !errors.As(err, &we) || we.Code != wire.CodeBadRequest {
		t.Fatalf("append carrying the reserved header: %v, want BadRequest", err)
	}

	// The bound: A is known; B takes the second place; C is refused.
	if _, err := c.AppendIdempotent(ctx, shardA, recs("b0"), nil, wire.Producer{ID: [16]byte{0xb}}); err != nil {
		t.Fatal(err)
	}
	_, err = c.AppendIdempotent(ctx, shardA, recs("c0"), nil, wire.Producer{ID: [16]byte{0xc}})
	if !errors.As(err, &we) || we.Code != wire.CodeUnavailable {
		t.Fatalf("a third producer over the bound: %v, want Unavailable", err)
	}
	if _, err := c.AppendIdempotent(ctx, shardA, recs("r2"), nil, at(2)); err != nil {
		t.Fatalf("a known producer goes on when the table is full: %v", err)
	}
}

// Without the idempotent feature the producer fields cannot be sent: the
// client refuses to, and a raw frame with flag bit 1 is BadRequest.
func TestTR8_ProducerOnlyWithTheFeature(t *testing.T) {
	b := startBroker(t, Options{})
	c := dial(t, b.addr, client.Options{Features: wire.FeatureMetadata})
	if _, err := c.AppendIdempotent(ctxT(t), shardA, recs("x"), nil, wire.Producer{ID: [16]byte{1}}); !errors.Is(err, client.ErrNoIdempotence) {
		t.Fatalf("AppendIdempotent without the feature: %v, want ErrNoIdempotence", err)
	}
	r := dialRaw(t, b.addr)
	r.hello(wire.FeatureMetadata)
	body, err := wire.EncodeAppend(wire.AppendRequest{Shard: shardA, Producer: &wire.Producer{ID: [16]byte{1}}, Records: recs("x")})
	if err != nil {
		t.Fatal(err)
	}
	r.send(wire.MsgAppend, 3, body)
	if e := decodeErr(t, r.recv(), wire.FeatureMetadata); e.Code != wire.CodeBadRequest {
		t.Fatalf("producer fields without the feature: %v, want BadRequest", e)
	}
}

// [TR-8] A producer id is its principal's: another principal sending the
// same id and sequence is another producer, written as new, never
// answered with the first principal's offsets.
func TestTR8_ProducerIDsArePerPrincipal(t *testing.T) {
	alice := auth.Principal{Kind: auth.User, Name: "alice"}
	mallory := auth.Principal{Kind: auth.User, Name: "mallory"}
	b := startBroker(t, Options{Authenticate: as(alice)})
	ctx := ctxT(t)
	p := wire.Producer{ID: [16]byte{0xa1}}
	ca := dial(t, b.addr, client.Options{})
	okA, err := ca.AppendIdempotent(ctx, shardA, recs("alice"), nil, p)
	if err != nil {
		t.Fatal(err)
	}
	srv2 := New(StoreShards(b.store), Options{Authenticate: as(mallory)})
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	go func() { _ = srv2.Serve(l) }()
	t.Cleanup(srv2.Close)
	cm := dial(t, l.Addr().String(), client.Options{})
	okM, err := cm.AppendIdempotent(ctx, shardA, recs("mallory"), nil, p)
	if err != nil || okM == okA {
		t.Fatalf("mallory's batch under alice's producer id: %+v %v; alice's was %+v", okM, err, okA)
	}
	if got, err := ca.AppendIdempotent(ctx, shardA, recs("alice"), nil, p); err != nil || got != okA {
		t.Fatalf("alice's retry: %+v %v, want %+v", got, err, okA)
	}
	res, err := ca.Read(ctx, wire.ReadRequest{Shard: shardA, From: wire.FromEarliest})
	if err != nil {
		t.Fatal(err)
	}
	if len(res.Records) != 2 || string(res.Records[0].Payload) != "alice" || string(res.Records[1].Payload) != "mallory" {
		t.Fatalf("log holds %+v, want alice then mallory", res.Records)
	}
}
