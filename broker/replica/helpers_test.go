package replica

import (
	"context"
	"fmt"
	"net"
	"os"
	"sync"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"felix.dev/felix/broker/client"
	"felix.dev/felix/broker/datadir"
	"felix.dev/felix/broker/logstore"
	"felix.dev/felix/broker/record"
	"felix.dev/felix/broker/replication"
	"felix.dev/felix/broker/server"
	"felix.dev/felix/broker/wire"
)

// testShard is the shard every cluster test uses.
var testShard = record.ShardID{Stream: "orders", Shard: 0}

// directory is the test's address book: node -> host:port, changed when a
// node restarts on a new port.
type directory struct {
	mu    sync.Mutex
	addrs map[replication.NodeID]string
}

func (d *directory) set(n replication.NodeID, a string) {
	d.mu.Lock()
	defer d.mu.Unlock()
	d.addrs[n] = a
}

func (d *directory) resolve(n replication.NodeID) (string, error) {
	d.mu.Lock()
	defer d.mu.Unlock()
	a, ok := d.addrs[n]
	if !ok {
		return "", fmt.Errorf("unknown node %s", n)
	}
	return a, nil
}

// node is one broker of a test cluster: a real badger store in its own
// directory, a Manager and a server on a real loopback listener.
type node struct {
	name        replication.NodeID
	dir         string
	id          datadir.StorageID
	incarnation uint64
	store       *logstore.Store
	mgr         *Manager
	metrics     *Metrics
	registry    *prometheus.Registry
	srv         *server.Server
	addr        string
	// With cluster.pki: the peer port (mutual TLS) and the servers'
	// metrics (both ports share them).
	peerSrv    *server.Server
	peerAddr   string
	srvMetrics *server.Metrics
	srvReg     *prometheus.Registry

	repMu   sync.Mutex
	reports []replication.Report
	viewAts []reportTimes
}

type cluster struct {
	t       testing.TB
	dir     *directory
	nodes   map[replication.NodeID]*node
	fsync   logstore.FsyncMode
	pass    time.Duration
	nextGen byte
	// segRecs is the stores' segment size (logstore default when 0).
	segRecs uint64
	// maintain is the Managers' MaintainInterval (default when 0; tests
	// that call Maintain themselves set it negative).
	maintain time.Duration
	// metrics, when set, makes each started node's Manager metrics.
	metrics bool
	// minFree and freeSpace, when set, are the stores' free-space floor
	// and measure (logstore.Options.MinFreeBytes, FreeSpace).
	minFree   uint64
	freeSpace func(dir string) (uint64, error)
	// pki, when set, runs each node as a broker does: a client port that
	// refuses replication and a peer port with mutual TLS (peerauth_test.go);
	// dir then maps to peer ports and clientDir to client ports. Without
	// it nodes replicate over their client ports
	// (server.Options.InsecurePeersOnClientPort).
	pki       *testPKI
	clientDir *directory
	// meta, when set, is every node's server.Options.Metadata.
	meta server.Metadata
	// features, when set, are a node's servers' Options.Features (zero:
	// every known bit), e.g. without wire.FeatureShipBundle.
	features map[replication.NodeID]wire.Features
}

func newCluster(t testing.TB, fsync logstore.FsyncMode, names ...replication.NodeID) *cluster {
	return newClusterIn(t, fsync, t.TempDir, 20*time.Millisecond, names...)
}

// newClusterIn is newCluster with the nodes' directories made by mkdir and
// the given pass interval (FELIX_PASS overrides it).
func newClusterIn(t testing.TB, fsync logstore.FsyncMode, mkdir func() string, pass time.Duration, names ...replication.NodeID) *cluster {
	return newClusterCfg(t, fsync, mkdir, pass, nil, names...)
}

// newClusterCfg is newClusterIn with cfg applied to the cluster before any
// node starts (segment size, maintenance, metrics).
func newClusterCfg(t testing.TB, fsync logstore.FsyncMode, mkdir func() string, pass time.Duration, cfg func(*cluster), names ...replication.NodeID) *cluster {
	c := &cluster{t: t, dir: &directory{addrs: map[replication.NodeID]string{}}, nodes: map[replication.NodeID]*node{},
		fsync: fsync, pass: pass, clientDir: &directory{addrs: map[replication.NodeID]string{}}}
	if benchPass > 0 {
		c.pass = benchPass
	}
	if cfg != nil {
		cfg(c)
	}
	for _, n := range names {
		c.start(n, mkdir(), 1)
	}
	t.Cleanup(func() {
		for _, n := range c.nodes {
			n.stop()
		}
	})
	return c
}

// storageID returns a fresh, distinct id (deterministic per cluster).
func (c *cluster) storageID() datadir.StorageID {
	c.nextGen++
	var id datadir.StorageID
	for i := range id {
		id[i] = c.nextGen ^ byte(i*7+1)
	}
	return id
}

// start runs node name on dir with a new storage id.
func (c *cluster) start(name replication.NodeID, dir string, incarnation uint64) *node {
	return c.startWithID(name, dir, incarnation, c.storageID())
}

// startWithID runs node name on dir presenting id.
func (c *cluster) startWithID(name replication.NodeID, dir string, incarnation uint64, id datadir.StorageID) *node {
	t := c.t
	n := &node{name: name, dir: dir, id: id, incarnation: incarnation}
	var err error
	n.store, err = logstore.Open(logstore.Options{Dir: dir, Fsync: c.fsync, SegmentRecords: c.segRecs,
		ValueThreshold: logstore.BrokerValueThreshold, CommitLogValues: true, // as brokers open theirs
		MinFreeBytes: c.minFree, FreeSpace: c.freeSpace, SpaceCheckInterval: 10 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	if c.metrics {
		n.registry = prometheus.NewRegistry()
		if n.metrics, err = NewMetrics(n.registry); err != nil {
			t.Fatal(err)
		}
	}
	var dialPeer func(context.Context, string) (net.Conn, error)
	var clientAddr func(replication.NodeID) (string, error)
	if c.pki != nil {
		dialPeer, clientAddr = c.pki.dialer(t, name), c.clientDir.resolve
	}
	n.mgr, err = NewManager(Options{
		Store: n.store, Self: name, SelfStorageID: n.id, Incarnation: incarnation, Dial: dialPeer, ClientAddr: clientAddr,
		Resolve: c.dir.resolve, PassInterval: c.pass, MaxInflight: benchInflight, MaxBatch: benchBatch,
		MaintainInterval: c.maintain, Metrics: n.metrics,
		OnReport: func(r replication.Report, viewAt time.Time) {
			n.repMu.Lock()
			n.reports = append(n.reports, r)
			n.viewAts = append(n.viewAts, reportTimes{pass: r.Pass, viewAt: viewAt, delivered: time.Now()})
			if len(n.viewAts) > 64 {
				n.viewAts = n.viewAts[len(n.viewAts)-64:]
			}
			if len(n.reports) > 64 {
				n.reports = n.reports[len(n.reports)-64:]
			}
			n.repMu.Unlock()
		},
	})
	if err != nil {
		t.Fatal(err)
	}
	if c.pki != nil {
		n.srvReg = prometheus.NewRegistry()
		if n.srvMetrics, err = server.NewMetrics(n.srvReg); err != nil {
			t.Fatal(err)
		}
	}
	n.srv = server.New(n.mgr.Shards(), server.Options{StorageID: n.id[:], Replication: n.mgr.ReplicationHandler(),
		InsecurePeersOnClientPort: c.pki == nil, Metrics: n.srvMetrics, Metadata: c.meta, Features: c.features[name]})
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	n.addr = l.Addr().String()
	go func() { _ = n.srv.Serve(l) }()
	c.clientDir.set(name, n.addr)
	c.dir.set(name, n.addr)
	if c.pki != nil {
		n.peerSrv = server.New(n.mgr.Shards(), server.Options{Role: server.RolePeer, StorageID: n.id[:],
			Replication: n.mgr.ReplicationHandler(), TLS: c.pki.serverConfig(t), Authenticate: c.pki.authenticate,
			Metrics: n.srvMetrics, Features: c.features[name]})
		pl, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			t.Fatal(err)
		}
		n.peerAddr = pl.Addr().String()
		go func() { _ = n.peerSrv.Serve(pl) }()
		c.dir.set(name, n.peerAddr)
	}
	c.nodes[name] = n
	return n
}

// stop closes the node's server, manager and store (a broker that stops).
func (n *node) stop() {
	if n.srv == nil {
		return
	}
	n.srv.Close()
	if n.peerSrv != nil {
		n.peerSrv.Close()
	}
	n.mgr.Close()
	_ = n.store.Close()
	n.srv = nil
}

func (n *node) lastReport() (replication.Report, bool) {
	n.repMu.Lock()
	defer n.repMu.Unlock()
	if len(n.reports) == 0 {
		return replication.Report{}, false
	}
	return n.reports[len(n.reports)-1], true
}

// ensure starts the test shard's replica on every named node.
func (c *cluster) ensure(mode replication.AckMode, names ...replication.NodeID) {
	for _, nm := range names {
		if err := c.nodes[nm].mgr.EnsureShard(testShard, c.replicas(), mode, 0); err != nil {
			c.t.Fatal(err)
		}
	}
}

func (c *cluster) replicas() []replication.NodeID {
	return []replication.NodeID{"a", "b", "c"}
}

// assign feeds a to every running node.
func (c *cluster) assign(a replication.Assignment) {
	for _, n := range c.nodes {
		if n.srv == nil {
			continue
		}
		if err := n.mgr.SetAssignment(testShard, a); err != nil {
			c.t.Fatal(err)
		}
	}
}

// firstAssignment leads epoch 1 with leader, counting every node's id.
func (c *cluster) firstAssignment(leader replication.NodeID) replication.Assignment {
	a := replication.Assignment{Leader: leader, Epoch: 1, LeaderIncarnation: c.nodes[leader].incarnation,
		Counted: map[replication.NodeID]replication.StorageID{}}
	for nm, n := range c.nodes {
		a.Counted[nm] = replication.StorageID(n.id.String())
	}
	return a
}

// eventually polls cond until it holds or the deadline passes.
func eventually(t testing.TB, what string, d time.Duration, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(d)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting for %s", what)
		}
		time.Sleep(5 * time.Millisecond)
	}
}

// waitLeading waits until n leads with its fence committed and serves
// reads (the fence commit applied to its logs [TR-4]).
func (c *cluster) waitLeading(n *node) {
	c.t.Helper()
	eventually(c.t, string(n.name)+" leading", 10*time.Second, func() bool {
		st, err := n.mgr.Status(testShard)
		if err != nil || st.Role != replication.RoleLeader || !st.FenceCommitted {
			return false
		}
		s, err := n.mgr.shard(testShard)
		return err == nil && s.readable() == nil
	})
}

func dial(t testing.TB, n *node) *client.Client {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	cl, err := client.Dial(ctx, n.addr, client.Options{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = cl.Close() })
	return cl
}

// readAllRaw returns every stored record of one log of the test shard.
func readAllRaw(t testing.TB, n *node, l record.LogKind) []record.Record {
	t.Helper()
	lg, ok := n.store.Lookup(record.LogID{ShardID: testShard, Log: l})
	if !ok {
		t.Fatalf("%s has no %s log", n.name, l)
	}
	info := lg.Describe()
	var out []record.Record
	for from := info.Start; from < info.Tail; {
		res, err := lg.ReadRaw(from, logstore.ReadOptions{UpTo: info.Tail})
		if err != nil {
			t.Fatal(err)
		}
		out = append(out, res.Records...)
		if res.Next <= from {
			break
		}
		from = res.Next
	}
	return out
}

// Knobs for exploring the benchmarks (zero: the Options defaults):
// FELIX_INFLIGHT (Options.MaxInflight), FELIX_BATCH (Options.MaxBatch),
// FELIX_PASS (pass interval, e.g. 50ms).
var benchInflight = func() int { n := 0; fmt.Sscan(os.Getenv("FELIX_INFLIGHT"), &n); return n }()

var benchBatch = func() int { n := 0; fmt.Sscan(os.Getenv("FELIX_BATCH"), &n); return n }()

var benchPass = func() time.Duration { d, _ := time.ParseDuration(os.Getenv("FELIX_PASS")); return d }()
