package client_test

import (
	"bufio"
	"context"
	"errors"
	"net"
	"sync"
	"testing"
	"time"

	"felix.dev/felix/broker/client"
	"felix.dev/felix/broker/record"
	"felix.dev/felix/broker/wire"
)

// scripted is a broker whose answers the test scripts: answer returns the
// frame to send for each request (ok false: close the connection without
// answering). It counts the requests of each type over all connections.
type scripted struct {
	feats  wire.Features // accepted in the HelloOK; zero means allFeatures
	addr   string
	mu     sync.Mutex
	counts map[wire.MsgType]int
	answer func(f wire.Frame, n int) (wire.MsgType, []byte, bool)
}

const allFeatures = wire.FeatureTrimTag | wire.FeatureLogPolicy | wire.FeatureStorageErrors | wire.FeatureAuth | wire.FeatureMetadata

func startScripted(t *testing.T, answer func(f wire.Frame, n int) (wire.MsgType, []byte, bool)) *scripted {
	t.Helper()
	return startScriptedWith(t, allFeatures, answer)
}

// startScriptedWith is startScripted accepting feats.
func startScriptedWith(t *testing.T, feats wire.Features, answer func(f wire.Frame, n int) (wire.MsgType, []byte, bool)) *scripted {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	return serveScripted(t, l, feats, answer)
}

// serveScripted serves the scripted broker on l.
func serveScripted(t *testing.T, l net.Listener, feats wire.Features, answer func(f wire.Frame, n int) (wire.MsgType, []byte, bool)) *scripted {
	t.Helper()
	t.Cleanup(func() { _ = l.Close() })
	s := &scripted{feats: feats, addr: l.Addr().String(), counts: map[wire.MsgType]int{}, answer: answer}
	go func() {
		for {
			nc, err := l.Accept()
			if err != nil {
				return
			}
			t.Cleanup(func() { _ = nc.Close() })
			go s.serve(nc)
		}
	}()
	return s
}

func (s *scripted) serve(nc net.Conn) {
	defer nc.Close()
	br := bufio.NewReader(nc)
	if _, err := wire.ReadFrame(br, 1<<20); err != nil {
		return
	}
	body, _ := wire.EncodeHelloOK(wire.HelloOK{Version: 1, Features: s.feats, MaxFrameSize: 1 << 20, MaxBatchRecords: 100})
	if wire.WriteFrame(nc, wire.Frame{Type: wire.MsgHelloOK, Body: body}) != nil {
		return
	}
	for {
		f, err := wire.ReadFrame(br, 1<<20)
		if err != nil {
			return
		}
		s.mu.Lock()
		s.counts[f.Type]++
		n := s.counts[f.Type]
		s.mu.Unlock()
		t, b, ok := s.answer(f, n)
		if !ok {
			return
		}
		if wire.WriteFrame(nc, wire.Frame{Type: t, ReqID: f.ReqID, Body: b}) != nil {
			return
		}
	}
}

func (s *scripted) count(t wire.MsgType) int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.counts[t]
}

// metaLeading answers a Metadata request: broker "x" at addr leads shard.
func metaLeading(addr string) []byte {
	b, _ := wire.EncodeMetadataOK(wire.MetadataOK{Brokers: []wire.BrokerInfo{{Name: "x", Address: addr}},
		Shards: []wire.ShardInfo{{Shard: shard, Leader: "x", Epoch: 1, Replicas: []string{"x"}}}})
	return b
}

func errBody(e *wire.Error) []byte {
	b, _ := wire.EncodeError(e, allFeatures)
	return b
}

// noWait makes the Cluster's backoff return at once.
func noWait(time.Duration) <-chan time.Time {
	c := make(chan time.Time, 1)
	c <- time.Time{}
	return c
}

func newTestCluster(t *testing.T, attempts int, bootstrap ...string) *client.Cluster {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	c, err := client.NewCluster(ctx, client.ClusterOptions{Attempts: attempts, After: noWait}, bootstrap...)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = c.Close() })
	return c
}

// TestClusterRetries: what a Cluster tries again, and what it does not.
func TestClusterRetries(t *testing.T) {
	recs := []record.Record{{Payload: []byte("x")}}
	appendOK := wire.EncodeAppendOK(wire.AppendOK{First: 0, Tail: 1})
	readOK, _ := wire.EncodeReadOK(wire.ReadOK{Next: 0})
	unavailable := errBody(&wire.Error{Code: wire.CodeUnavailable, Message: "recovering"})
	for _, tc := range []struct {
		name string
		// answer scripts the n-th request of its type (Metadata aside).
		answer      func(t wire.MsgType, n int) (wire.MsgType, []byte, bool)
		op          wire.MsgType
		wantErr     func(error) bool
		wantRequest int
	}{
		{name: "append unanswered: unknown outcome, not resent", op: wire.MsgAppend,
			answer:  func(wire.MsgType, int) (wire.MsgType, []byte, bool) { return 0, nil, false },
			wantErr: func(err error) bool { return errors.Is(err, client.ErrUnknownOutcome) }, wantRequest: 1},
		{name: "append fenced: unknown outcome, not resent", op: wire.MsgAppend,
			answer: func(wire.MsgType, int) (wire.MsgType, []byte, bool) {
				return wire.MsgError, errBody(&wire.Error{Code: wire.CodeFenced, Message: "fenced", Epoch: 2}), true
			},
			wantErr: func(err error) bool {
				var we *wire.Error
				return errors.Is(err, client.ErrUnknownOutcome) && errors.As(err, &we) && we.Code == wire.CodeFenced
			}, wantRequest: 1},
		{name: "append after Unavailable: unknown outcome, not resent", op: wire.MsgAppend,
			answer: func(_ wire.MsgType, n int) (wire.MsgType, []byte, bool) {
				if n < 3 {
					return wire.MsgError, unavailable, true
				}
				return wire.MsgAppendOK, appendOK, true
			},
			wantErr: func(err error) bool {
				var we *wire.Error
				return errors.Is(err, client.ErrUnknownOutcome) && errors.As(err, &we) && we.Code == wire.CodeUnavailable
			}, wantRequest: 1},
		{name: "read after Unavailable", op: wire.MsgRead,
			answer: func(_ wire.MsgType, n int) (wire.MsgType, []byte, bool) {
				if n < 3 {
					return wire.MsgError, unavailable, true
				}
				return wire.MsgReadOK, readOK, true
			}, wantRequest: 3},
		{name: "read after a lost connection", op: wire.MsgRead,
			answer: func(_ wire.MsgType, n int) (wire.MsgType, []byte, bool) {
				if n == 1 {
					return 0, nil, false
				}
				return wire.MsgReadOK, readOK, true
			}, wantRequest: 2},
		{name: "gives up after its attempts", op: wire.MsgRead,
			answer: func(wire.MsgType, int) (wire.MsgType, []byte, bool) { return wire.MsgError, unavailable, true },
			wantErr: func(err error) bool {
				var we *wire.Error
				return errors.As(err, &we) && we.Code == wire.CodeUnavailable
			}, wantRequest: 4},
		{name: "OffsetMismatch is the caller's", op: wire.MsgAppend,
			answer: func(wire.MsgType, int) (wire.MsgType, []byte, bool) {
				return wire.MsgError, errBody(&wire.Error{Code: wire.CodeOffsetMismatch, Message: "m", Expected: 1, Tail: 2}), true
			},
			wantErr: func(err error) bool { return errors.Is(err, record.ErrOffsetMismatch) }, wantRequest: 1},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var b *scripted
			b = startScripted(t, func(f wire.Frame, n int) (wire.MsgType, []byte, bool) {
				if f.Type == wire.MsgMetadata {
					return wire.MsgMetadataOK, metaLeading(b.addr), true
				}
				return tc.answer(f.Type, n)
			})
			c := newTestCluster(t, 4, b.addr)
			ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
			defer cancel()
			var err error
			if tc.op == wire.MsgAppend {
				_, err = c.Append(ctx, shard, recs, nil)
			} else {
				_, err = c.Read(ctx, wire.ReadRequest{Shard: shard})
			}
			switch {
			case tc.wantErr == nil && err != nil:
				t.Fatalf("err = %v, want success", err)
			case tc.wantErr != nil && !tc.wantErr(err):
				t.Fatalf("err = %v, not the error wanted", err)
			}
			if got := b.count(tc.op); got != tc.wantRequest {
				t.Fatalf("broker saw %d %v requests, want %d", got, tc.op, tc.wantRequest)
			}
		})
	}
}

// TestClusterFollowsTheHint: a broker that refuses NotLeader naming
// another broker sends the client there at once; the append is applied
// there, once.
func TestClusterFollowsTheHint(t *testing.T) {
	leader := startScripted(t, func(f wire.Frame, _ int) (wire.MsgType, []byte, bool) {
		return wire.MsgAppendOK, wire.EncodeAppendOK(wire.AppendOK{First: 7, Tail: 8}), true
	})
	var old *scripted
	old = startScripted(t, func(f wire.Frame, _ int) (wire.MsgType, []byte, bool) {
		if f.Type == wire.MsgMetadata {
			return wire.MsgMetadataOK, metaLeading(old.addr), true // stale: names itself
		}
		return wire.MsgError, errBody(&wire.Error{Code: wire.CodeNotLeader, Message: "not leader", Leader: leader.addr, Epoch: 2}), true
	})
	c := newTestCluster(t, 4, old.addr)
	res, err := c.Append(context.Background(), shard, []record.Record{{Payload: []byte("x")}}, nil)
	if err != nil || res.First != 7 {
		t.Fatalf("append = %+v, %v; want the new leader's answer", res, err)
	}
	if old.count(wire.MsgAppend) != 1 || leader.count(wire.MsgAppend) != 1 {
		t.Fatalf("appends: %d to the old leader, %d to the new, want 1 and 1", old.count(wire.MsgAppend), leader.count(wire.MsgAppend))
	}
}

// TestClusterNeedsABootstrap: no address, or none that answers, is an
// error from NewCluster.
func TestClusterNeedsABootstrap(t *testing.T) {
	ctx := context.Background()
	if _, err := client.NewCluster(ctx, client.ClusterOptions{}); !errors.Is(err, client.ErrNoBootstrap) {
		t.Fatalf("no bootstrap: %v", err)
	}
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	dead := l.Addr().String()
	_ = l.Close()
	if _, err := client.NewCluster(ctx, client.ClusterOptions{DialTimeout: time.Second}, dead); err == nil {
		t.Fatal("NewCluster with no broker reachable succeeded")
	}
}

// TestClusterClosed: a call on a closed Cluster fails with ErrClosed at
// once, without sending anything.
func TestClusterClosed(t *testing.T) {
	var b *scripted
	b = startScripted(t, func(f wire.Frame, _ int) (wire.MsgType, []byte, bool) {
		return wire.MsgMetadataOK, metaLeading(b.addr), true
	})
	c := newTestCluster(t, 4, b.addr)
	_ = c.Close()
	if _, err := c.Describe(context.Background(), shard); !errors.Is(err, client.ErrClosed) {
		t.Fatalf("describe on a closed cluster: %v, want ErrClosed", err)
	}
	if n := b.count(wire.MsgDescribe); n != 0 {
		t.Fatalf("broker saw %d describes", n)
	}
}

// TestClusterIdempotentRetries: in idempotent mode the Cluster resends,
// under the same producer and sequence, an append whose outcome is
// unknown; after an answer the next append takes the next sequence, after
// a refusal that wrote nothing the same one, and after giving up or an
// OutOfSequence for an unsent batch a new producer.
func TestClusterIdempotentRetries(t *testing.T) {
	recs := []record.Record{{Payload: []byte("x")}}
	appendOK := wire.EncodeAppendOK(wire.AppendOK{First: 0, Tail: 1})
	unavailable := errBody(&wire.Error{Code: wire.CodeUnavailable, Message: "in flight"})
	fenced := errBody(&wire.Error{Code: wire.CodeFenced, Message: "fenced", Epoch: 2})
	mismatch := errBody(&wire.Error{Code: wire.CodeOffsetMismatch, Message: "m", Expected: 1, Tail: 2})
	outOfSeq, _ := wire.EncodeError(&wire.Error{Code: wire.CodeOutOfSequence, Message: "unknown producer", Next: 0}, allFeatures|wire.FeatureIdempotent)
	type sent struct {
		id  byte // first byte of the producer id
		seq uint64
	}
	for _, tc := range []struct {
		name string
		// answer scripts the n-th Append of the first call; the second
		// call's Append is always answered OK.
		answer  func(n int) (wire.MsgType, []byte, bool)
		wantErr func(error) bool
		// want: the (id, seq) of every Append the broker saw, ids as the
		// index of the producer drawn (0 first), the second call's last.
		want []sent
	}{
		{name: "unanswered, then answered: same sequence, then the next",
			answer: func(n int) (wire.MsgType, []byte, bool) {
				if n == 1 {
					return 0, nil, false
				}
				return wire.MsgAppendOK, appendOK, true
			}, want: []sent{{0, 0}, {0, 0}, {0, 1}}},
		{name: "Unavailable and Fenced are resent",
			answer: func(n int) (wire.MsgType, []byte, bool) {
				switch n {
				case 1:
					return wire.MsgError, unavailable, true
				case 2:
					return wire.MsgError, fenced, true
				}
				return wire.MsgAppendOK, appendOK, true
			}, want: []sent{{0, 0}, {0, 0}, {0, 0}, {0, 1}}},
		{name: "gives up unknown after its attempts, next append is a new producer",
			answer:  func(n int) (wire.MsgType, []byte, bool) { return wire.MsgError, unavailable, true },
			wantErr: func(err error) bool { return errors.Is(err, client.ErrUnknownOutcome) },
			want:    []sent{{0, 0}, {0, 0}, {0, 0}, {0, 0}, {1, 0}}},
		{name: "refusal that wrote nothing keeps the sequence",
			answer:  func(n int) (wire.MsgType, []byte, bool) { return wire.MsgError, mismatch, true },
			wantErr: func(err error) bool { return errors.Is(err, record.ErrOffsetMismatch) },
			want:    []sent{{0, 0}, {0, 0}}},
		{name: "unknown producer for an unsent batch: sent as a new producer",
			answer: func(n int) (wire.MsgType, []byte, bool) {
				if n == 1 {
					return wire.MsgError, outOfSeq, true
				}
				return wire.MsgAppendOK, appendOK, true
			}, want: []sent{{0, 0}, {1, 0}, {1, 1}}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var (
				b     *scripted
				mu    sync.Mutex
				seen  []sent
				ids   [][16]byte
				first = true
			)
			b = startScriptedWith(t, allFeatures|wire.FeatureIdempotent, func(f wire.Frame, n int) (wire.MsgType, []byte, bool) {
				if f.Type == wire.MsgMetadata {
					return wire.MsgMetadataOK, metaLeading(b.addr), true
				}
				req, err := wire.DecodeAppendFor(f.Body, wire.FeatureIdempotent)
				if err != nil || req.Producer == nil {
					t.Errorf("append without a producer: %+v %v", req, err)
					return 0, nil, false
				}
				mu.Lock()
				defer mu.Unlock()
				idx := -1
				for i, id := range ids {
					if id == req.Producer.ID {
						idx = i
					}
				}
				if idx < 0 {
					idx = len(ids)
					ids = append(ids, req.Producer.ID)
				}
				seen = append(seen, sent{byte(idx), req.Producer.Seq})
				if first {
					return tc.answer(n)
				}
				return wire.MsgAppendOK, appendOK, true
			})
			ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
			defer cancel()
			c, err := client.NewCluster(ctx, client.ClusterOptions{Attempts: 4, After: noWait, Idempotent: true}, b.addr)
			if err != nil {
				t.Fatal(err)
			}
			defer c.Close()
			_, err = c.Append(ctx, shard, recs, nil)
			switch {
			case tc.wantErr == nil && err != nil:
				t.Fatalf("err = %v, want success", err)
			case tc.wantErr != nil && !tc.wantErr(err):
				t.Fatalf("err = %v, not the error wanted", err)
			}
			mu.Lock()
			first = false
			mu.Unlock()
			if _, err := c.Append(ctx, shard, recs, nil); err != nil {
				t.Fatalf("second append: %v", err)
			}
			mu.Lock()
			defer mu.Unlock()
			if len(seen) != len(tc.want) {
				t.Fatalf("broker saw %v, want %v", seen, tc.want)
			}
			for i := range seen {
				if seen[i] != tc.want[i] {
					t.Fatalf("broker saw %v, want %v", seen, tc.want)
				}
			}
		})
	}
}
