package member

import (
	"context"
	"slices"
	"sort"
	"sync"
	"time"

	felixv1 "felix.dev/felix/api/v1alpha1"
	"felix.dev/felix/broker/record"
	"felix.dev/felix/broker/replication"
	"felix.dev/felix/broker/server"
	"felix.dev/felix/broker/wire"
)

// addrTTL is how long a broker's client address, read from its
// FelixBroker, is used before it is read again.
const addrTTL = 10 * time.Second

// clusterShards is what the metadata needs of the shard watch.
type clusterShards interface {
	ClusterShards(ctx context.Context, streams []string) ([]felixv1.FelixShard, error)
}

// metadata answers the Metadata request from the cluster's FelixShards
// (the watch the broker already runs for its assignments) and the
// brokers' registered client addresses (status.address). The brokers
// listed are those named in any shard's replica set, and this one.
type metadata struct {
	shards clusterShards
	self   string
	addrs  *addrCache
}

var _ server.Metadata = (*metadata)(nil)

// Shards returns the shards of streams (every stream when none), with
// the operator's current assignment of each.
func (m *metadata) Shards(ctx context.Context, streams []string) ([]wire.ShardInfo, error) {
	list, err := m.shards.ClusterShards(ctx, streams)
	if err != nil {
		return nil, err
	}
	out := make([]wire.ShardInfo, 0, len(list))
	for _, s := range list {
		if s.Spec.Index < 0 || wire.CheckStreamName(s.Spec.Stream) != nil {
			continue
		}
		si := wire.ShardInfo{Shard: record.ShardID{Stream: s.Spec.Stream, Shard: uint32(s.Spec.Index)},
			Replicas: slices.Clone(s.Spec.Replicas)}
		if a := s.Status.Assignment; a != nil && a.Epoch > 0 {
			si.Leader, si.Epoch = a.Leader, uint64(a.Epoch)
		}
		out = append(out, si)
	}
	return out, nil
}

// Brokers returns the brokers named by the cluster's shards, and this
// one, with the client address each registered (empty when it has not
// registered one, or it could not be read).
func (m *metadata) Brokers(ctx context.Context) ([]wire.BrokerInfo, error) {
	list, err := m.shards.ClusterShards(ctx, nil)
	if err != nil {
		return nil, err
	}
	names := map[string]bool{m.self: true}
	for _, s := range list {
		for _, r := range s.Spec.Replicas {
			names[r] = true
		}
	}
	out := make([]wire.BrokerInfo, 0, len(names))
	for n := range names {
		out = append(out, wire.BrokerInfo{Name: n, Address: m.addrs.get(n)})
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Name < out[j].Name })
	return out, nil
}

// addrCache remembers brokers' client addresses for addrTTL, so a
// metadata request costs the API server at most one read per broker and
// period.
type addrCache struct {
	resolve func(replication.NodeID) (string, error)
	now     func() time.Time

	mu sync.Mutex
	m  map[string]cachedAddr
}

type cachedAddr struct {
	addr string
	at   time.Time
}

func newAddrCache(resolve func(replication.NodeID) (string, error), now func() time.Time) *addrCache {
	return &addrCache{resolve: resolve, now: now, m: map[string]cachedAddr{}}
}

// get returns n's client address, "" when it is unknown.
func (c *addrCache) get(n string) string {
	c.mu.Lock()
	e, ok := c.m[n]
	c.mu.Unlock()
	if ok && c.now().Sub(e.at) < addrTTL {
		return e.addr
	}
	a, err := c.resolve(replication.NodeID(n))
	if err != nil {
		a = e.addr // keep the last address known rather than none
	}
	c.mu.Lock()
	c.m[n] = cachedAddr{addr: a, at: c.now()}
	c.mu.Unlock()
	return a
}
