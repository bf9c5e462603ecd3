package server

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"testing"

	"github.com/google/go-cmp/cmp"

	"felix.dev/felix/broker/auth"
	"felix.dev/felix/broker/client"
	"felix.dev/felix/broker/logstore"
	"felix.dev/felix/broker/record"
	"felix.dev/felix/broker/wire"
)

// staticMetadata is a cluster's metadata fixed by the test.
type staticMetadata struct {
	brokers []wire.BrokerInfo
	shards  []wire.ShardInfo
}

func (m staticMetadata) Brokers(context.Context) ([]wire.BrokerInfo, error) { return m.brokers, nil }

func (m staticMetadata) Shards(_ context.Context, streams []string) ([]wire.ShardInfo, error) {
	var out []wire.ShardInfo
	for _, s := range m.shards {
		if len(streams) == 0 || slices.Contains(streams, s.Shard.Stream) {
			out = append(out, s)
		}
	}
	return out, nil
}

// holdsOnly serves the store's shards of one stream and refuses every
// other shard as a broker without its replica does.
type holdsOnly struct {
	Shards
	stream string
}

func (h holdsOnly) DataLog(s record.ShardID) (Log, error) {
	if s.Stream != h.stream {
		return nil, fmt.Errorf("test: %s: %w", s, record.ErrShardUnknown)
	}
	return h.Shards.DataLog(s)
}

var testMeta = staticMetadata{
	brokers: []wire.BrokerInfo{{Name: "b-0", Address: "10.0.0.1:7100"}, {Name: "b-1", Address: "10.0.0.2:7100"}},
	shards: []wire.ShardInfo{
		{Shard: record.ShardID{Stream: "orders", Shard: 0}, Leader: "b-0", Epoch: 3, Replicas: []string{"b-0", "b-1"}},
		{Shard: record.ShardID{Stream: "payments", Shard: 0}, Leader: "b-1", Epoch: 7, Replicas: []string{"b-1"}},
		{Shard: record.ShardID{Stream: "secret", Shard: 0}, Leader: "b-1", Epoch: 1, Replicas: []string{"b-1"}},
	},
}

func startMetaBroker(t *testing.T, meta Metadata) *broker {
	t.Helper()
	tb := auth.NewTable()
	tb.Set("alice", "uid-alice", []auth.Grant{{Stream: "orders", Ops: []auth.Operation{auth.OpAppend, auth.OpDescribe}},
		{Stream: "payments", Ops: []auth.Operation{auth.OpAppend, auth.OpDescribe}}})
	return startBrokerWith(t, logstore.FsyncNone, Options{Metadata: meta, Authorizer: tb,
		Authenticate: as(auth.Principal{Kind: auth.User, Name: "alice", UID: "uid-alice"})},
		func(s *logstore.Store, _ *Metrics) Shards { return holdsOnly{Shards: StoreShards(s), stream: "orders"} })
}

// TestMetadataAnswers: a Metadata request lists the brokers and the
// shards of the streams named (Describe needed on each), or of every
// stream the principal may Describe when none is named; a standalone
// broker knows no cluster.
func TestMetadataAnswers(t *testing.T) {
	for _, tc := range []struct {
		name     string
		meta     Metadata
		streams  []string
		want     wire.MetadataOK
		wantCode wire.Code
	}{
		{name: "named stream", meta: testMeta, streams: []string{"payments"},
			want: wire.MetadataOK{Brokers: testMeta.brokers, Shards: testMeta.shards[1:2]}},
		{name: "every describable stream", meta: testMeta,
			want: wire.MetadataOK{Brokers: testMeta.brokers, Shards: testMeta.shards[:2]}},
		{name: "stream not granted", meta: testMeta, streams: []string{"orders", "secret"}, wantCode: wire.CodeNotAuthorized},
		{name: "standalone", meta: nil, want: wire.MetadataOK{}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			b := startMetaBroker(t, tc.meta)
			c := dial(t, b.addr, client.Options{})
			got, err := c.Metadata(ctxT(t), tc.streams...)
			if tc.wantCode != 0 {
				var we *wire.Error
				if !errors.As(err, &we) || we.Code != tc.wantCode {
					t.Fatalf("metadata: %v, want %v", err, tc.wantCode)
				}
				if !errors.Is(err, client.ErrNotAuthorized) {
					t.Fatalf("metadata: %v does not match client.ErrNotAuthorized", err)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if diff := cmp.Diff(tc.want, got); diff != "" {
				t.Fatalf("metadata (-want +got):\n%s", diff)
			}
		})
	}
}

// TestMetadataNeedsTheFeature: a connection that did not negotiate
// metadata gets BadRequest for a Metadata frame, as before the feature,
// and keeps its connection.
func TestMetadataNeedsTheFeature(t *testing.T) {
	b := startMetaBroker(t, testMeta)
	r := dialRaw(t, b.addr)
	r.hello(wire.FeatureAuth)
	body, err := wire.EncodeMetadata(wire.MetadataRequest{})
	if err != nil {
		t.Fatal(err)
	}
	r.send(wire.MsgMetadata, 5, body)
	f := r.recv()
	if e := decodeErr(t, f, wire.FeatureAuth); e.Code != wire.CodeBadRequest || f.ReqID != 5 {
		t.Fatalf("metadata without the feature: %v (id %d), want BadRequest for id 5", e, f.ReqID)
	}
	d, err := wire.EncodeDescribe(wire.DescribeRequest{Shard: shardA})
	if err != nil {
		t.Fatal(err)
	}
	r.send(wire.MsgDescribe, 6, d)
	if f := r.recv(); f.Type != wire.MsgDescribeOK || f.ReqID != 6 {
		t.Fatalf("describe after the refused metadata: %v id %d", f.Type, f.ReqID)
	}
}

// TestShardUnknownNamesTheLeader: a broker without a replica of the
// shard refuses it with ShardUnknown naming the leader's address and
// epoch, to connections that negotiated metadata; others get the
// ShardUnknown they always did.
func TestShardUnknownNamesTheLeader(t *testing.T) {
	payments := record.ShardID{Stream: "payments", Shard: 0}
	for _, tc := range []struct {
		name       string
		meta       Metadata
		shard      record.ShardID
		feats      wire.Features
		wantLeader string
		wantEpoch  uint64
	}{
		{name: "hint", meta: testMeta, shard: payments, wantLeader: "10.0.0.2:7100", wantEpoch: 7},
		{name: "no metadata feature", meta: testMeta, shard: payments, feats: wire.FeatureAuth},
		{name: "leader unknown", meta: staticMetadata{brokers: testMeta.brokers}, shard: payments},
		{name: "standalone", meta: nil, shard: payments},
	} {
		t.Run(tc.name, func(t *testing.T) {
			b := startMetaBroker(t, tc.meta)
			c := dial(t, b.addr, client.Options{Features: tc.feats})
			ctx := ctxT(t)
			for _, op := range []struct {
				name string
				call func() error
			}{
				{"append", func() error { _, err := c.Append(ctx, tc.shard, recs("x"), nil); return err }},
				{"describe", func() error { _, err := c.Describe(ctx, tc.shard); return err }},
			} {
				err := op.call()
				var we *wire.Error
				if !errors.As(err, &we) || we.Code != wire.CodeShardUnknown {
					t.Fatalf("%s: %v, want ShardUnknown", op.name, err)
				}
				if we.Leader != tc.wantLeader || we.Epoch != tc.wantEpoch {
					t.Fatalf("%s: hint %q epoch %d, want %q epoch %d", op.name, we.Leader, we.Epoch, tc.wantLeader, tc.wantEpoch)
				}
			}
		})
	}
}
