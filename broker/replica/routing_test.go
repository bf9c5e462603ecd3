package replica

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"maps"
	"slices"
	"sort"
	"sync"
	"testing"
	"time"

	"felix.dev/felix/broker/client"
	"felix.dev/felix/broker/logstore"
	"felix.dev/felix/broker/record"
	"felix.dev/felix/broker/replication"
	"felix.dev/felix/broker/wire"
)

// routeMeta is a test cluster's metadata as the operator's FelixShards
// would give it: the test shard's current assignment, and every node's
// client address.
type routeMeta struct {
	dir *directory
	mu  sync.Mutex
	a   replication.Assignment
}

func (m *routeMeta) set(a replication.Assignment) {
	m.mu.Lock()
	defer m.mu.Unlock()
	m.a = a
}

func (m *routeMeta) Brokers(context.Context) ([]wire.BrokerInfo, error) {
	m.dir.mu.Lock()
	defer m.dir.mu.Unlock()
	var out []wire.BrokerInfo
	for n, a := range m.dir.addrs {
		out = append(out, wire.BrokerInfo{Name: string(n), Address: a})
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Name < out[j].Name })
	return out, nil
}

func (m *routeMeta) Shards(_ context.Context, streams []string) ([]wire.ShardInfo, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	if len(streams) > 0 && streams[0] != testShard.Stream {
		return nil, nil
	}
	s := wire.ShardInfo{Shard: testShard, Replicas: []string{"a", "b", "c"}}
	if m.a.Epoch > 0 {
		s.Leader, s.Epoch = string(m.a.Leader), m.a.Epoch
	}
	return []wire.ShardInfo{s}, nil
}

// routedCluster runs brokers a, b, c (the test shard's replicas) and d
// (no replica), every one answering Metadata from meta.
func routedCluster(t *testing.T) (*cluster, *routeMeta) {
	meta := &routeMeta{}
	c := newClusterCfg(t, logstore.FsyncPeriodic, t.TempDir, 20*time.Millisecond, func(c *cluster) {
		meta.dir = c.clientDir
		c.meta = meta
	}, "a", "b", "c", "d")
	c.ensure(replication.AckQuorum, "a", "b", "c")
	return c, meta
}

// assignReplicas gives a to the running replicas and to the metadata.
func assignReplicas(t *testing.T, c *cluster, meta *routeMeta, a replication.Assignment) {
	t.Helper()
	for _, nm := range c.replicas() {
		n := c.nodes[nm]
		if n.srv == nil {
			continue
		}
		if err := n.mgr.SetAssignment(testShard, a); err != nil {
			t.Fatal(err)
		}
	}
	meta.set(a)
}

func replicaAssignment(c *cluster, leader replication.NodeID, epoch uint64) replication.Assignment {
	a := replication.Assignment{Leader: leader, Epoch: epoch, LeaderIncarnation: c.nodes[leader].incarnation,
		Counted: map[replication.NodeID]replication.StorageID{}}
	for _, nm := range c.replicas() {
		a.Counted[nm] = replication.StorageID(c.nodes[nm].id.String())
	}
	return a
}

func newRoutingClient(t *testing.T, bootstrap ...string) *client.Cluster {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	cl, err := client.NewCluster(ctx, client.ClusterOptions{Attempts: 40}, bootstrap...)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = cl.Close() })
	return cl
}

// TestClusterClientRoutesThroughANonReplica: a client that knows only a
// broker holding no replica of the shard appends and reads through the
// leader; the broker itself refuses the shard with ShardUnknown naming
// the leader.
func TestClusterClientRoutesThroughANonReplica(t *testing.T) {
	c, meta := routedCluster(t)
	assignReplicas(t, c, meta, replicaAssignment(c, "a", 1))
	c.waitLeading(c.nodes["a"])

	_, err := dial(t, c.nodes["d"]).Append(context.Background(), testShard, []record.Record{{Payload: []byte("x")}}, nil)
	var we *wire.Error
	if !errors.As(err, &we) || we.Code != wire.CodeShardUnknown || we.Leader != c.nodes["a"].addr || we.Epoch != 1 {
		t.Fatalf("append to a broker without a replica: %v (%+v), want ShardUnknown naming %s at epoch 1", err, we, c.nodes["a"].addr)
	}

	cl := newRoutingClient(t, c.nodes["d"].addr)
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	for i := range 10 {
		if _, err := cl.Append(ctx, testShard, []record.Record{{Payload: fmt.Appendf(nil, "r%d", i)}}, nil); err != nil {
			t.Fatalf("append %d through d: %v", i, err)
		}
	}
	res, err := cl.Read(ctx, wire.ReadRequest{Shard: testShard, From: wire.FromEarliest})
	if err != nil {
		t.Fatal(err)
	}
	if len(res.Records) != 10 || !bytes.Equal(res.Records[9].Payload, []byte("r9")) {
		t.Fatalf("read back %d records, want r0..r9", len(res.Records))
	}
	if got := readAll(t, c.nodes["a"]); len(got) != 10 {
		t.Fatalf("leader a holds %d records, want 10", len(got))
	}
}

// appender appends "r0", "r1", ... through a Cluster, one at a time,
// until stopped, recording the acknowledged ones and counting those with
// an unknown outcome; any other error stops it.
type appender struct {
	mu      sync.Mutex
	acked   []ack
	unknown int
	stop    chan struct{}
	done    chan error
}

type ack struct {
	payload []byte
	off     uint64
}

func startAppender(ctx context.Context, cl *client.Cluster) *appender {
	a := &appender{stop: make(chan struct{}), done: make(chan error, 1)}
	go func() {
		for i := 0; ; i++ {
			select {
			case <-a.stop:
				a.done <- nil
				return
			default:
			}
			p := fmt.Appendf(nil, "r%d", i)
			res, err := cl.Append(ctx, testShard, []record.Record{{Payload: p}}, nil)
			a.mu.Lock()
			switch {
			case err == nil:
				a.acked = append(a.acked, ack{p, res.First})
			case errors.Is(err, client.ErrUnknownOutcome):
				a.unknown++
			default:
				a.mu.Unlock()
				a.done <- fmt.Errorf("append %d: %w", i, err)
				return
			}
			a.mu.Unlock()
		}
	}()
	return a
}

func (a *appender) count() int { a.mu.Lock(); defer a.mu.Unlock(); return len(a.acked) }

// waitAcked waits until n appends are acknowledged, failing if the
// appender stopped.
func (a *appender) waitAcked(t *testing.T, what string, n int, d time.Duration) {
	t.Helper()
	eventually(t, what, d, func() bool {
		select {
		case err := <-a.done:
			t.Fatalf("appender stopped: %v", err)
		default:
		}
		return a.count() >= n
	})
}

// finish stops the appender and returns what it acknowledged and how many
// outcomes were unknown.
func (a *appender) finish(t *testing.T) ([]ack, int) {
	t.Helper()
	close(a.stop)
	if err := <-a.done; err != nil {
		t.Fatal(err)
	}
	a.mu.Lock()
	defer a.mu.Unlock()
	return a.acked, a.unknown
}

// failover stops leader a and promotes b at epoch 2.
func failover(t *testing.T, c *cluster, meta *routeMeta) {
	t.Helper()
	c.nodes["a"].stop()
	assignReplicas(t, c, meta, replicaAssignment(c, "b", 2))
}

// TestClusterClientFollowsAFailover: appends stream through a Cluster
// while the leader stops and a follower is promoted; the client finds
// the new leader by itself, every acknowledged append is on it, and the
// metadata names the promoted leader at its epoch. Appends that were in
// flight when the leader stopped may end with an unknown outcome, never
// with another error.
func TestClusterClientFollowsAFailover(t *testing.T) {
	c, meta := routedCluster(t)
	assignReplicas(t, c, meta, replicaAssignment(c, "a", 1))
	c.waitLeading(c.nodes["a"])
	cl := newRoutingClient(t, c.nodes["d"].addr, c.nodes["c"].addr)

	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	app := startAppender(ctx, cl)
	app.waitAcked(t, "50 appends acknowledged by a", 50, 20*time.Second)
	before := app.count()
	failover(t, c, meta)
	app.waitAcked(t, "50 more appends acknowledged after the failover", before+50, 30*time.Second)
	acked, unknown := app.finish(t)

	got := readAll(t, c.nodes["b"])
	for _, a := range acked {
		if !bytes.Equal(got[a.off], a.payload) {
			t.Fatalf("acknowledged %q at %d, new leader holds %q", a.payload, a.off, got[a.off])
		}
	}
	t.Logf("%d appends acknowledged, %d with an unknown outcome", len(acked), unknown)

	m, err := cl.Metadata(ctx, testShard.Stream)
	if err != nil {
		t.Fatal(err)
	}
	if len(m.Shards) != 1 || m.Shards[0].Leader != "b" || m.Shards[0].Epoch != 2 {
		t.Fatalf("metadata after the promotion: %+v, want leader b at epoch 2", m.Shards)
	}
	if addr, _, ok := m.LeaderAddress(testShard); !ok || addr != c.nodes["b"].addr {
		t.Fatalf("leader address %q, want b's %s", addr, c.nodes["b"].addr)
	}
}

// TestClusterClientFollowReadsAcrossAFailover: a reader follows the shard
// from its start through a Cluster (Follow) while a producer appends and
// the leader fails over; it reads every record the new leader holds,
// in offset order with none twice and none skipped, and every
// acknowledged append among them.
func TestClusterClientFollowReadsAcrossAFailover(t *testing.T) {
	c, meta := routedCluster(t)
	assignReplicas(t, c, meta, replicaAssignment(c, "a", 1))
	c.waitLeading(c.nodes["a"])
	producer := newRoutingClient(t, c.nodes["d"].addr)
	// One try per read: every failure the failover causes reaches
	// Follow's own retry, which must keep the position.
	reader, err := client.NewCluster(context.Background(), client.ClusterOptions{Attempts: 1}, c.nodes["c"].addr)
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = reader.Close() }()

	ctx, cancel := context.WithTimeout(context.Background(), 90*time.Second)
	defer cancel()
	var (
		mu      sync.Mutex
		offsets []uint64
		payload = map[uint64][]byte{}
		retries int
	)
	read := func() int { mu.Lock(); defer mu.Unlock(); return len(offsets) }
	fctx, stopFollowing := context.WithCancel(ctx)
	followed := make(chan error, 1)
	go func() {
		followed <- reader.Follow(fctx, wire.ReadRequest{Shard: testShard, From: wire.FromEarliest},
			client.FollowOptions{Wait: 200 * time.Millisecond, OnRetry: func(error, time.Duration) { mu.Lock(); retries++; mu.Unlock() }},
			func(res wire.ReadOK) error {
				mu.Lock()
				defer mu.Unlock()
				for _, r := range res.Records {
					offsets = append(offsets, r.Offset)
					payload[r.Offset] = r.Payload
				}
				return nil
			})
	}()

	app := startAppender(ctx, producer)
	app.waitAcked(t, "50 appends acknowledged by a", 50, 20*time.Second)
	eventually(t, "the reader to read 20 records from a", 20*time.Second, func() bool { return read() >= 20 })
	before := app.count()
	failover(t, c, meta)
	app.waitAcked(t, "50 more appends acknowledged after the failover", before+50, 30*time.Second)
	acked, _ := app.finish(t)

	held := readAll(t, c.nodes["b"])
	eventually(t, "the reader to read everything b holds", 30*time.Second, func() bool { return read() >= len(held) })
	stopFollowing()
	if err := <-followed; err != nil {
		t.Fatalf("Follow: %v", err)
	}
	mu.Lock()
	defer mu.Unlock()
	// What the leader serves (fence records are not served, so offsets
	// have gaps where they are): the reader must have read exactly that,
	// in order.
	want := slices.Sorted(maps.Keys(held))
	if len(offsets) != len(want) {
		t.Fatalf("read %d records, the leader serves %d", len(offsets), len(want))
	}
	for i, off := range offsets {
		if off != want[i] {
			t.Fatalf("record %d read at offset %d, the leader serves it at %d: records skipped or read twice", i, off, want[i])
		}
		if !bytes.Equal(payload[off], held[off]) {
			t.Fatalf("read %q at %d, the leader holds %q", payload[off], off, held[off])
		}
	}
	for _, a := range acked {
		if !bytes.Equal(payload[a.off], a.payload) {
			t.Fatalf("acknowledged %q at %d, the reader read %q", a.payload, a.off, payload[a.off])
		}
	}
	if retries == 0 {
		t.Fatal("no read was retried: the failover did not reach Follow")
	}
	t.Logf("read %d records across the failover (%d acknowledged), %d reads retried", len(offsets), len(acked), retries)
}
