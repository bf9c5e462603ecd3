package replication

import (
	"fmt"
	"sort"
	"strings"
	"testing"

	"felix.dev/felix/broker/record"
)

// memLog is a durable in-memory log store: every write applied is kept
// (a test of lost unsynced writes belongs to the simulator). Each log is a
// dense run of records from its base.
type memLog struct {
	logs [numLogs][]record.Record
	base [numLogs]uint64
}

func (m *memLog) Read(l record.LogKind, from, to uint64, max int) ([]record.Record, error) {
	recs, b := m.logs[l], m.base[l]
	if from >= to {
		return nil, nil
	}
	if from < b || to > b+uint64(len(recs)) {
		return nil, fmt.Errorf("memlog: %s [%d,%d) not found (base %d)", l, from, to, b)
	}
	if to-from > uint64(max) {
		to = from + uint64(max)
	}
	return append([]record.Record(nil), recs[from-b:to-b]...), nil
}

func (m *memLog) apply(w LogWrite) {
	recs := m.logs[w.Log]
	switch w.Op {
	case WriteTruncate:
		n := 0
		for n < len(recs) && recs[n].Offset < w.Offset {
			n++
		}
		m.logs[w.Log] = recs[:n]
	case WriteAppend:
		if tail := m.base[w.Log] + uint64(len(recs)); tail != w.Records[0].Offset {
			panic(fmt.Sprintf("memlog: append at %d, tail %d", w.Records[0].Offset, tail))
		}
		m.logs[w.Log] = append(recs, w.Records...)
	case WriteReset:
		if w.Offset < m.base[w.Log] {
			panic(fmt.Sprintf("memlog: reset at %d below base %d", w.Offset, m.base[w.Log]))
		}
		m.logs[w.Log], m.base[w.Log] = nil, w.Offset
	}
}

// compact deletes the records of l below start (at most the tail).
func (m *memLog) compact(l record.LogKind, start uint64) {
	b := m.base[l]
	start = min(start, b+uint64(len(m.logs[l])))
	if start > b {
		m.logs[l] = append([]record.Record(nil), m.logs[l][start-b:]...)
		m.base[l] = start
	}
}

func (m *memLog) clone() *memLog {
	out := &memLog{base: m.base}
	for l := range m.logs {
		out.logs[l] = append([]record.Record(nil), m.logs[l]...)
	}
	return out
}

func (m *memLog) state() State {
	var s State
	for l, recs := range m.logs {
		s.Logs[l].Base = m.base[l]
		s.Logs[l].Tail = m.base[l] + uint64(len(recs))
		for _, r := range recs {
			es := s.Logs[l].Epochs
			if len(es) == 0 || es[len(es)-1].Epoch != r.Epoch {
				s.Logs[l].Epochs = append(s.Logs[l].Epochs, EpochStart{Epoch: r.Epoch, Offset: r.Offset})
			}
		}
	}
	return s
}

// payloads renders a log as "offset:epoch:kind[:payload]".
func (m *memLog) render(l record.LogKind) string {
	var parts []string
	for _, r := range m.logs[l] {
		s := fmt.Sprintf("%d@e%d", r.Offset, r.Epoch)
		if r.Kind == record.KindFence {
			s += "F"
		} else {
			s += ":" + string(r.Payload)
		}
		parts = append(parts, s)
	}
	return strings.Join(parts, " ")
}

// node is one broker in the harness.
type node struct {
	id    NodeID
	sid   StorageID
	inc   uint64
	store *memLog
	r     *Replica
	up    bool
}

// cluster drives Replica instances in memory, deterministically: FIFO
// delivery, nodes processed in replica-set order.
type cluster struct {
	t        testing.TB
	order    []NodeID
	nodes    map[NodeID]*node
	conns    map[[2]NodeID]ConnID // (leader side, follower side)
	nextConn ConnID
	queue    []Message
	rules    Rules
	pass     int
	maxBatch int

	epoch   uint64 // the control plane's current epoch
	assign  Assignment
	acks    map[ProposalID]Ack
	reports map[NodeID]*Report
	nextSID int
	trace   []string
	verbose bool
	// drop, when set, loses matching messages.
	drop func(Message) bool
	// onReady, when set, sees every Ready after its writes are applied.
	onReady func(n NodeID, rd Ready)
	// lateNotice: peers learn of a restart (Disconnected, Connected) only
	// when notice() is called, as a runtime that looks at a connection only
	// when an exchange starts.
	lateNotice bool
	pending    []pendingConn
}

type pendingConn struct {
	from, to NodeID
	conn     ConnID
}

// notice delivers the connection events held back by lateNotice.
func (c *cluster) notice() {
	for _, p := range c.pending {
		if c.nodes[p.from].up && c.nodes[p.to].up && c.conns[[2]NodeID{p.from, p.to}] == p.conn {
			c.nodes[p.from].r.Connected(p.to, p.conn, c.nodes[p.to].sid)
		}
	}
	c.pending = nil
}

func newCluster(t testing.TB, names []string, pass int, rules Rules) *cluster {
	c := &cluster{t: t, nodes: map[NodeID]*node{}, conns: map[[2]NodeID]ConnID{}, rules: rules, pass: pass,
		acks: map[ProposalID]Ack{}, reports: map[NodeID]*Report{}, maxBatch: 4}
	for _, n := range names {
		c.order = append(c.order, NodeID(n))
	}
	for _, n := range c.order {
		c.nodes[n] = &node{id: n, store: &memLog{}}
	}
	for _, n := range c.order {
		c.start(n, true)
	}
	return c
}

func (c *cluster) newSID(n NodeID) StorageID {
	c.nextSID++
	return StorageID(fmt.Sprintf("%s-sid%d", n, c.nextSID))
}

// start (re)starts a node: a new incarnation, a new core from its store,
// SetKnownEpoch from the control plane, then connections.
func (c *cluster) start(n NodeID, wipe bool) {
	nd := c.nodes[n]
	if wipe {
		nd.store = &memLog{}
		nd.sid = c.newSID(n)
	}
	nd.inc++
	r, err := New(Config{Shard: record.ShardID{Stream: "s", Shard: 0}, Self: n, SelfStorageID: nd.sid,
		Incarnation: nd.inc, Replicas: c.order, PassInterval: c.pass, MaxBatch: c.maxBatch, Log: nd.store,
		Rules: c.rules}, nd.store.state())
	if err != nil {
		c.t.Fatal(err)
	}
	nd.r, nd.up = r, true
	nd.r.SetKnownEpoch(c.epoch)
	if c.assign.Epoch == c.epoch && c.epoch > 0 {
		nd.r.Assign(c.assign)
	}
	for _, o := range c.order {
		if o == n || !c.nodes[o].up {
			continue
		}
		c.connect(n, o)
		if c.lateNotice {
			c.nextConn++
			c.conns[[2]NodeID{o, n}] = c.nextConn
			c.pending = append(c.pending, pendingConn{from: o, to: n, conn: c.nextConn})
			continue
		}
		c.connect(o, n)
	}
}

func (c *cluster) connect(from, to NodeID) {
	c.nextConn++
	c.conns[[2]NodeID{from, to}] = c.nextConn
	c.nodes[from].r.Connected(to, c.nextConn, c.nodes[to].sid)
}

func (c *cluster) crash(n NodeID) {
	nd := c.nodes[n]
	nd.up = false
	for _, o := range c.order {
		if o == n {
			continue
		}
		k := [2]NodeID{o, n}
		if c.nodes[o].up && !c.lateNotice {
			c.nodes[o].r.Disconnected(n, c.conns[k])
		}
		delete(c.conns, k)
		delete(c.conns, [2]NodeID{n, o})
	}
}

// setAssign is the control plane writing an assignment.
func (c *cluster) setAssign(a Assignment) {
	c.assign = a
	c.epoch = a.Epoch
	for _, n := range c.order {
		if c.nodes[n].up {
			c.nodes[n].r.Assign(a)
		}
	}
}

// promote assigns leader at the next epoch, counting the given ids.
func (c *cluster) promote(leader NodeID, counted map[NodeID]StorageID) {
	c.setAssign(Assignment{Leader: leader, Epoch: c.epoch + 1, LeaderIncarnation: c.nodes[leader].inc, Counted: counted})
}

// registered returns every node's current id (what placement would count
// for a new shard).
func (c *cluster) registered() map[NodeID]StorageID {
	m := map[NodeID]StorageID{}
	for _, n := range c.order {
		m[n] = c.nodes[n].sid
	}
	return m
}

func (c *cluster) logf(format string, args ...any) {
	c.trace = append(c.trace, fmt.Sprintf(format, args...))
}

// processReady handles every node's Ready once; reports whether any had
// output.
func (c *cluster) processReady() bool {
	any := false
	for _, n := range c.order {
		nd := c.nodes[n]
		if !nd.up || !nd.r.HasReady() {
			continue
		}
		any = true
		rd := nd.r.Ready()
		for _, w := range rd.Writes {
			nd.store.apply(w)
			if c.verbose {
				switch w.Op {
				case WriteTruncate:
					c.logf("%s: truncate %s at %d", n, w.Log, w.Offset)
				case WriteReset:
					c.logf("%s: reset %s at %d", n, w.Log, w.Offset)
				default:
					c.logf("%s: append %s %d..%d", n, w.Log, w.Offset, w.Offset+uint64(len(w.Records)))
				}
			}
		}
		if c.onReady != nil {
			c.onReady(n, rd)
		}
		for _, a := range rd.Acks {
			c.acks[a.ID] = a
			if a.Err != nil {
				c.logf("%s: ack %d refused: %v", n, a.ID, a.Err)
			} else {
				c.logf("%s: ack %d ok [%d,%d)", n, a.ID, a.First, a.End)
			}
		}
		for _, cm := range rd.Commits {
			if c.verbose || cm.Log == record.LogData {
				c.logf("%s: commit %s %d", n, cm.Log, cm.Committed)
			}
		}
		if rd.Report != nil {
			if dbgDecisions {
				c.t.Logf("report from %s: %s", n, renderReport(rd.Report))
			}
			c.reports[n] = rd.Report
		}
		c.queue = append(c.queue, rd.Messages...)
		// Copied: handed back as the runtime does, so every test runs
		// with the core reusing its message arrays.
		nd.r.Recycle(rd.Messages)
		rd.Messages = nil
		nd.r.Advance(rd)
	}
	return any
}

// deliver hands queued messages to their receivers over the connection
// they name; a message over a connection that no longer exists is lost.
func (c *cluster) deliver() bool {
	q := c.queue
	c.queue = nil
	for _, m := range q {
		from, to := c.nodes[m.From], c.nodes[m.To]
		if !from.up || !to.up {
			continue
		}
		key := [2]NodeID{m.From, m.To}
		switch m.Type {
		case MsgAppendResp, MsgProbeResp, MsgFetchResp, MsgRefuse:
			key = [2]NodeID{m.To, m.From}
		}
		if c.conns[key] != m.Conn {
			continue
		}
		if c.drop != nil && c.drop(m) {
			continue
		}
		if c.verbose {
			c.logf("deliver %s", m)
		}
		to.r.Step(m)
	}
	return len(q) > 0
}

// stabilize runs Ready/deliver until quiet.
func (c *cluster) stabilize() {
	for i := 0; i < 10000; i++ {
		a := c.processReady()
		b := c.deliver()
		if !a && !b {
			return
		}
	}
	c.t.Fatal("cluster did not stabilize")
}

// tick ticks every up node n times, stabilizing after each.
func (c *cluster) tick(n int) {
	for i := 0; i < n; i++ {
		for _, id := range c.order {
			if c.nodes[id].up {
				c.nodes[id].r.Tick()
			}
		}
		c.stabilize()
	}
}

func (c *cluster) propose(n NodeID, id ProposalID, mode AckMode, payloads ...string) {
	var recs []record.Record
	for _, p := range payloads {
		recs = append(recs, record.Record{Payload: []byte(p)})
	}
	c.nodes[n].r.Propose(Proposal{ID: id, Log: record.LogData, Records: recs, Mode: mode})
}

// leader returns the node that leads with a committed fence, if any.
func (c *cluster) leader() NodeID {
	for _, n := range c.order {
		nd := c.nodes[n]
		if nd.up && nd.r.Status().Role == RoleLeader && nd.r.Status().FenceCommitted {
			return n
		}
	}
	return ""
}

func (c *cluster) takeTrace() string {
	s := strings.Join(c.trace, "\n")
	c.trace = nil
	return s
}

// statusLines prints each node's role and marks.
func (c *cluster) statusLines() string {
	var out []string
	for _, n := range c.order {
		nd := c.nodes[n]
		if !nd.up {
			out = append(out, fmt.Sprintf("%s: down", n))
			continue
		}
		s := nd.r.Status()
		fc := ""
		if s.Role == RoleLeader && !s.FenceCommitted {
			fc = " (fence pending)"
		}
		out = append(out, fmt.Sprintf("%s: %s%s e%d tail=%d commit=%d log=[%s]", n, s.Role, fc, s.Epoch,
			s.Tail[record.LogData], s.Committed[record.LogData], nd.store.render(record.LogData)))
	}
	return strings.Join(out, "\n")
}

func renderReport(r *Report) string {
	if r == nil {
		return "no report"
	}
	var b strings.Builder
	fmt.Fprintf(&b, "report by %s e%d inc%d position=%d\n", r.Leader, r.Epoch, r.LeaderIncarnation, r.Position[record.LogData])
	fs := append([]FollowerReport(nil), r.Followers...)
	sort.Slice(fs, func(i, j int) bool { return fs[i].Node < fs[j].Node })
	for _, f := range fs {
		fmt.Fprintf(&b, "  %s id=%s answered=%t confirmed=%d caught-up=%t\n", f.Node, f.StorageID, f.Answered,
			f.Confirmed[record.LogData], f.CaughtUp)
	}
	return strings.TrimRight(b.String(), "\n")
}
