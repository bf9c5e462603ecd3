package replication

import (
	"fmt"
	"testing"

	"felix.dev/felix/broker/record"
)

// compactAll deletes the data records of every listed node below start,
// in its store and in its core (Compacted), as a runtime deleting the
// segments below a committed floor does.
func (c *cluster) compactAll(start uint64, nodes ...NodeID) {
	for _, n := range nodes {
		nd := c.nodes[n]
		nd.store.compact(record.LogData, start)
		nd.r.Compacted(record.LogData, start)
	}
}

// commitWatch records, per node, every committed data position published,
// failing the test when one moves back within a process life.
type commitWatch struct {
	t    *testing.T
	last map[NodeID]uint64
	inc  map[NodeID]uint64
}

func watchCommits(t *testing.T, c *cluster) *commitWatch {
	w := &commitWatch{t: t, last: map[NodeID]uint64{}, inc: map[NodeID]uint64{}}
	prev := c.onReady
	c.onReady = func(n NodeID, rd Ready) {
		if prev != nil {
			prev(n, rd)
		}
		if w.inc[n] != c.nodes[n].inc {
			w.inc[n], w.last[n] = c.nodes[n].inc, 0
		}
		for _, cm := range rd.Commits {
			if cm.Log != record.LogData {
				continue
			}
			if cm.Committed < w.last[n] {
				t.Errorf("%s: committed moved back from %d to %d", n, w.last[n], cm.Committed)
			}
			w.last[n] = cm.Committed
		}
	}
	return w
}

// resets returns the WriteResets of node n's Readies from now on.
func (c *cluster) recordResets(n NodeID) *[]LogWrite {
	var out []LogWrite
	prev := c.onReady
	c.onReady = func(id NodeID, rd Ready) {
		if prev != nil {
			prev(id, rd)
		}
		for _, w := range rd.Writes {
			if id == n && w.Op == WriteReset {
				out = append(out, w)
			}
		}
	}
	return &out
}

// TestRP_CatchUpFromLeaderStart: a follower that lost its disk comes back
// empty while every other replica has deleted its records below 8 (a
// committed floor). The leader ships from its log start with Base set; the
// follower resets its log to start there, copies the rest and is counted
// caught up. Its committed position never moves back, and it never reads
// or claims what the leader no longer has.
func TestRP_CatchUpFromLeaderStart(t *testing.T) {
	c := started(t, []string{"a", "b", "c"}, "a", 12, Rules{})
	c.tick(2)
	watchCommits(t, c)
	committed := c.nodes["a"].r.Status().Committed[record.LogData]
	if committed < 10 {
		t.Fatalf("committed %d, want every record", committed)
	}
	c.compactAll(8, "a", "b")
	c.crash("c")
	c.start("c", true) // a wiped disk: empty, new storage id
	resets := c.recordResets("c")
	c.tick(3)

	if len(*resets) != 1 || (*resets)[0].Offset != 8 || (*resets)[0].Log != record.LogData {
		t.Fatalf("c's resets %+v, want one of the data log at 8", *resets)
	}
	cs := c.nodes["c"].r.Status()
	as := c.nodes["a"].r.Status()
	if cs.Base[record.LogData] != 8 || cs.Tail[record.LogData] != as.Tail[record.LogData] {
		t.Fatalf("c's data log [%d,%d), want [8,%d)", cs.Base[record.LogData], cs.Tail[record.LogData], as.Tail[record.LogData])
	}
	if got := c.nodes["c"].store.base[record.LogData]; got != 8 {
		t.Fatalf("c's store base %d, want 8", got)
	}
	for _, r := range c.nodes["a"].store.logs[record.LogData] {
		if !holdsAt(c.nodes["c"].store, r) {
			t.Fatalf("c lacks %d@e%d", r.Offset, r.Epoch)
		}
	}
	if cs.Committed[record.LogData] < committed {
		t.Fatalf("c committed %d, want at least %d", cs.Committed[record.LogData], committed)
	}
	var rc FollowerReport
	for _, f := range c.reports["a"].Followers {
		if f.Node == "c" {
			rc = f
		}
	}
	if !rc.CaughtUp || rc.StorageID != c.nodes["c"].sid {
		t.Fatalf("report line for c %+v, want caught up under %s", rc, c.nodes["c"].sid)
	}
}

// holdsAt says whether s holds r at its offset (logs with a base).
func holdsAt(s *memLog, r record.Record) bool {
	b := s.base[record.LogData]
	recs := s.logs[record.LogData]
	if r.Offset < b || r.Offset >= b+uint64(len(recs)) {
		return false
	}
	got := recs[r.Offset-b]
	return got.Epoch == r.Epoch && string(got.Payload) == string(r.Payload)
}

// follower builds a lone follower "b" of epoch 1 over log (leader "a").
func follower(t *testing.T, log *memLog) *Replica {
	t.Helper()
	r, err := New(Config{Self: "b", Replicas: []NodeID{"a", "b", "c"}, Log: log}, log.state())
	if err != nil {
		t.Fatal(err)
	}
	r.SetKnownEpoch(2)
	return r
}

func recsAt(from uint64, epochs ...uint64) []record.Record {
	out := make([]record.Record, len(epochs))
	for i, e := range epochs {
		out[i] = record.Record{Offset: from + uint64(i), Epoch: e, Kind: record.KindData, Payload: []byte(fmt.Sprint(from + uint64(i)))}
	}
	return out
}

func logOf(base uint64, epochs ...uint64) *memLog {
	m := &memLog{}
	m.base[record.LogData] = base
	m.logs[record.LogData] = recsAt(base, epochs...)
	return m
}

// TestRP_NoResetAboveCommit: a follower resets its log only for an Append
// at the leader's log start (Base == Index) above its own base, with
// records, at or below the leader's commit, that it cannot match; every
// other Append it cannot match is refused with mismatch as before.
func TestRP_NoResetAboveCommit(t *testing.T) {
	cases := []struct {
		name      string
		log       *memLog
		m         Message
		wantReset bool
		wantMatch bool
	}{
		{"empty follower, leader start committed: reset",
			&memLog{}, Message{Index: 100, Base: 100, Commit: 102, Records: recsAt(100, 2, 2)}, true, true},
		{"empty follower, leader start above commit: mismatch",
			&memLog{}, Message{Index: 100, Base: 100, Commit: 99, Records: recsAt(100, 2, 2)}, false, false},
		{"no Base (older leader): mismatch",
			&memLog{}, Message{Index: 100, PrevEpoch: 1, Commit: 102, Records: recsAt(100, 2, 2)}, false, false},
		{"empty Append at the start: mismatch, no reset",
			&memLog{}, Message{Index: 100, Base: 100, Commit: 102}, false, false},
		{"holds the first record at its epoch: match, no reset",
			logOf(0, 1, 1, 2, 2, 2), Message{Index: 3, Base: 3, Commit: 4, Records: recsAt(3, 2, 2)}, false, true},
		{"holds the previous record at the offered epoch: match, no reset",
			logOf(0, 1, 1, 2), Message{Index: 3, Base: 3, PrevEpoch: 2, Commit: 4, Records: recsAt(3, 2)}, false, true},
		{"divergent at the start: reset",
			logOf(0, 1, 1, 1, 1), Message{Index: 2, Base: 2, Commit: 3, Records: recsAt(2, 2, 2)}, true, true},
		{"tail at the start, previous unknown: reset",
			logOf(0, 1, 1), Message{Index: 2, Base: 2, Commit: 2, Records: recsAt(2, 2)}, true, true},
		{"start at the follower's own base: plain match",
			logOf(5, 1), Message{Index: 5, Base: 5, Commit: 6, Records: recsAt(5, 1, 2)}, false, true},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			r := follower(t, tc.log)
			before := r.Status().Committed[record.LogData]
			m := tc.m
			m.Type, m.From, m.To, m.Conn, m.Epoch, m.Pass, m.Log = MsgAppend, "a", "b", 1, 2, 1, record.LogData
			r.Step(m)
			rd := r.Ready()
			gotReset := false
			for _, w := range rd.Writes {
				tc.log.apply(w)
				if w.Op == WriteReset {
					gotReset = true
					if w.Offset != m.Index {
						t.Fatalf("reset at %d, want %d", w.Offset, m.Index)
					}
				}
			}
			r.Advance(rd)
			if gotReset != tc.wantReset {
				t.Fatalf("reset %t, want %t (writes %+v)", gotReset, tc.wantReset, rd.Writes)
			}
			msgs := append(rd.Messages, r.Ready().Messages...)
			var resp *Message
			for i := range msgs {
				if msgs[i].Type == MsgAppendResp {
					resp = &msgs[i]
				}
			}
			if resp == nil || resp.Match != tc.wantMatch {
				t.Fatalf("answer %v, want match=%t", msgs, tc.wantMatch)
			}
			st := r.Status()
			if st.Committed[record.LogData] < before {
				t.Fatalf("committed moved back %d -> %d", before, st.Committed[record.LogData])
			}
			if tc.wantReset {
				end := m.Index + uint64(len(m.Records))
				if st.Base[record.LogData] != m.Index || st.Tail[record.LogData] != end || resp.MatchEnd != end {
					t.Fatalf("after reset: base %d tail %d match end %d, want %d %d %d",
						st.Base[record.LogData], st.Tail[record.LogData], resp.MatchEnd, m.Index, end, end)
				}
				if st.Committed[record.LogData] < m.Index {
					t.Fatalf("committed %d below the reset offset %d", st.Committed[record.LogData], m.Index)
				}
			}
		})
	}
}

// TestRP_RecoveryResetsAtSourceBase: a newly promoted leader whose log
// ends below the best source's log start (the others deleted their
// records below a committed floor while it was down) resets its log at
// the source's base, copies the rest and writes its fence; nothing
// acknowledged is lost and committed positions never move back.
func TestRP_RecoveryResetsAtSourceBase(t *testing.T) {
	c := started(t, []string{"a", "b", "c"}, "a", 2, Rules{})
	c.tick(1)
	c.crash("c")
	for i := 3; i <= 12; i++ {
		c.propose("a", ProposalID(i), AckQuorum, fmt.Sprintf("r%d", i))
		c.stabilize()
	}
	c.tick(2)
	watchCommits(t, c)
	c.compactAll(9, "a", "b")
	want := append([]record.Record(nil), c.nodes["b"].store.logs[record.LogData]...)
	c.crash("a")
	c.start("c", false) // back with its old, short log and its own id
	resets := c.recordResets("c")
	c.promote("c", c.registered())
	c.tick(4)
	if c.leader() != "c" {
		t.Fatalf("c not serving:\n%s", c.statusLines())
	}
	if len(*resets) == 0 || (*resets)[0].Offset != 9 {
		t.Fatalf("c's resets %+v, want one at 9", *resets)
	}
	for _, r := range want {
		if !holdsAt(c.nodes["c"].store, r) {
			t.Fatalf("new leader c lacks %d@e%d %q:\n%s", r.Offset, r.Epoch, r.Payload, c.statusLines())
		}
	}
	if st := c.nodes["c"].r.Status(); st.EpochBehindLog || st.Base[record.LogData] != 9 {
		t.Fatalf("status %+v", st)
	}
}

// TestRP4_NoResendOfInflight: on a stable connection a pass does not
// ship again what is still in flight; it asks with one empty Append at
// the cursor's next offset instead, and that answer counts for the pass
// [RP-4, RP-5]. A new connection starts over from confirmed.
func TestRP4_NoResendOfInflight(t *testing.T) {
	c := started(t, []string{"a", "b", "c"}, "a", 0, Rules{})
	c.tick(1)
	a := c.nodes["a"].r
	tail := a.Status().Tail[record.LogData]
	shipped := map[uint64]int{}
	count := func() {
		for _, m := range c.queue {
			if m.Type == MsgAppend && m.To == "b" && m.Log == record.LogData {
				for _, r := range m.Records {
					shipped[r.Offset]++
				}
			}
		}
	}
	// 12 records shipped at once (MaxBatch 4: three Appends), held in the
	// network while two passes start.
	c.propose("a", 100, AckQuorum, "p0", "p1", "p2", "p3", "p4", "p5", "p6", "p7", "p8", "p9", "p10", "p11")
	c.processReady()
	a.Tick()
	c.processReady()
	count()
	for o := tail; o < tail+12; o++ {
		if shipped[o] != 1 {
			t.Fatalf("offset %d shipped %d times within two passes, want once (shipped %v)", o, shipped[o], shipped)
		}
	}
	empties := 0
	for _, m := range c.queue {
		if m.Type == MsgAppend && m.To == "b" && m.Log == record.LogData && len(m.Records) == 0 {
			empties++
			if m.Index != tail+12 || m.Pass != a.pass {
				t.Fatalf("pass probe %s, want an empty Append at %d in pass %d", m, tail+12, a.pass)
			}
		}
	}
	if empties != 1 {
		t.Fatalf("%d empty Appends to b, want one per pass", empties)
	}
	c.stabilize()
	if got := a.Status().Committed[record.LogData]; got != tail+12 {
		t.Fatalf("committed %d, want %d", got, tail+12)
	}
	if cur := a.peers["b"].cursors[record.LogData]; cur.answered != a.pass || cur.confirmed != tail+12 || cur.inflight != 0 {
		t.Fatalf("b's cursor %+v after the pass", cur)
	}

	// A new connection (same id) starts over from confirmed: what was in
	// flight over the old one may be gone.
	shipped = map[uint64]int{}
	c.propose("a", 101, AckQuorum, "q0", "q1")
	c.processReady()
	c.queue = nil // lost with the old connection
	c.connect("a", "b")
	c.processReady()
	count()
	if shipped[tail+12] != 1 || shipped[tail+13] != 1 {
		t.Fatalf("after reconnect shipped %v, want both records again once", shipped)
	}
	c.stabilize()
	if got := a.Status().Committed[record.LogData]; got != tail+14 {
		t.Fatalf("committed %d, want %d", got, tail+14)
	}
}

// TestRP4_LostInflightIsShippedAgain: a request lost on a connection that
// stays up is found by the next pass's probe (the follower answers
// mismatch) and shipped again, so the no-resend rule never wedges.
func TestRP4_LostInflightIsShippedAgain(t *testing.T) {
	c := started(t, []string{"a", "b", "c"}, "a", 0, Rules{})
	c.tick(1)
	a := c.nodes["a"].r
	tail := a.Status().Tail[record.LogData]
	c.drop = func(m Message) bool { return m.Type == MsgAppend && m.To == "b" && len(m.Records) > 0 }
	c.propose("a", 1, AckAll, "x", "y")
	c.stabilize()
	c.drop = nil
	c.tick(2)
	if cur := a.peers["b"].cursors[record.LogData]; cur.confirmed != tail+2 {
		t.Fatalf("b confirmed %d, want %d", cur.confirmed, tail+2)
	}
	if ack := c.acks[1]; ack.Err != nil || ack.End != tail+2 {
		t.Fatalf("ack %+v", ack)
	}
}

// TestCompacted_RaisesBaseKeepsEpochs: Compacted raises the base only up
// (clamped to the persisted tail), keeps the epoch covering the new base
// as starting there, and a leader never reads below its base.
func TestCompacted_RaisesBaseKeepsEpochs(t *testing.T) {
	log := logOf(0, 1, 1, 1, 2, 2, 3)
	r, err := New(Config{Self: "b", Replicas: []NodeID{"a", "b", "c"}, Log: log}, log.state())
	if err != nil {
		t.Fatal(err)
	}
	v := &r.logs[record.LogData]
	steps := []struct {
		start      uint64
		wantBase   uint64
		wantEpochs []EpochStart
	}{
		{2, 2, []EpochStart{{1, 2}, {2, 3}, {3, 5}}},
		{1, 2, []EpochStart{{1, 2}, {2, 3}, {3, 5}}}, // never down
		{4, 4, []EpochStart{{2, 4}, {3, 5}}},
		{9, 6, nil}, // clamped to the persisted tail
	}
	for _, s := range steps {
		r.Compacted(record.LogData, s.start)
		if v.base != s.wantBase || fmt.Sprint(v.epochs) != fmt.Sprint(s.wantEpochs) {
			t.Fatalf("Compacted(%d): base %d epochs %v, want %d %v", s.start, v.base, v.epochs, s.wantBase, s.wantEpochs)
		}
		if s.wantBase < 6 {
			if e, ok := v.epochAt(s.wantBase); !ok || e != s.wantEpochs[0].Epoch {
				t.Fatalf("epochAt(base) = %d, %t", e, ok)
			}
		}
	}
	// An emptied log still knows the epoch of its last record.
	if p := v.position(); lastEpochOf(p) != 3 {
		t.Fatalf("last epoch of the emptied log %d (position %+v), want 3", lastEpochOf(p), p)
	}
	// A state whose epoch list starts below the base is normalised.
	nv := newLogView(LogState{Base: 4, Tail: 6, Epochs: []EpochStart{{1, 0}, {2, 3}, {3, 5}}})
	if fmt.Sprint(nv.epochs) != fmt.Sprint([]EpochStart{{2, 4}, {3, 5}}) {
		t.Fatalf("newLogView epochs %v", nv.epochs)
	}
}

// TestFence_NeverAtOrBelowLogEpoch: a cluster restored from snapshots
// whose shard epochs restarted low. A promoted leader whose own log, or
// the best log of its quorum, already holds records of its epoch or a
// later one writes no fence: it stays recovering with
// Status().EpochBehindLog set, until an assignment at a higher epoch.
func TestFence_NeverAtOrBelowLogEpoch(t *testing.T) {
	for _, tc := range []struct {
		name   string
		holder NodeID // the node whose log holds epoch 7
	}{{"own log", "a"}, {"best log of the quorum", "b"}} {
		t.Run(tc.name, func(t *testing.T) {
			c := newCluster(t, []string{"a", "b", "c"}, 1, Rules{})
			for _, n := range c.order {
				epochs := []uint64{1, 1}
				if n == tc.holder {
					epochs = []uint64{1, 1, 7}
				}
				c.crash(n)
				c.nodes[n].store = logOf(0, epochs...)
			}
			for _, n := range c.order {
				c.start(n, false)
			}
			before := c.nodes["a"].store.clone()
			c.promote("a", c.registered()) // epoch 1
			c.tick(3)
			st := c.nodes["a"].r.Status()
			if st.Role != RoleRecovering || !st.EpochBehindLog {
				t.Fatalf("status %+v, want recovering with EpochBehindLog", st)
			}
			for _, l := range record.LogKinds {
				for _, r := range c.nodes["a"].store.logs[l] {
					if r.Kind == record.KindFence && r.Epoch <= 7 && !containsRec(before.logs[l], r) {
						t.Fatalf("a wrote a fence at e%d on %s", r.Epoch, l)
					}
				}
			}
			c.setAssign(Assignment{Leader: "a", Epoch: 8, LeaderIncarnation: c.nodes["a"].inc, Counted: c.registered()})
			c.tick(3)
			if st := c.nodes["a"].r.Status(); st.Role != RoleLeader || !st.FenceCommitted || st.EpochBehindLog {
				t.Fatalf("at epoch 8: status %+v\n%s", st, c.statusLines())
			}
		})
	}
}

func containsRec(recs []record.Record, r record.Record) bool {
	for _, x := range recs {
		if x.Offset == r.Offset && x.Epoch == r.Epoch && x.Kind == r.Kind {
			return true
		}
	}
	return false
}

// flakyLog fails every Read while fail is set.
type flakyLog struct {
	m    *memLog
	fail bool
}

func (f *flakyLog) Read(l record.LogKind, from, to uint64, max int) ([]record.Record, error) {
	if f.fail {
		return nil, fmt.Errorf("flaky: read %s [%d,%d)", l, from, to)
	}
	return f.m.Read(l, from, to, max)
}

// TestRP4_FailedReadRetriesNextPass: records the leader cannot read are
// not shipped, but the pass still asks the follower where it is (an empty
// Append), and a later pass reads and ships them: a failed read never
// wedges the cursor.
func TestRP4_FailedReadRetriesNextPass(t *testing.T) {
	c := started(t, []string{"a", "b", "c"}, "a", 2, Rules{})
	c.tick(1)
	c.crash("b")
	for i := 3; i <= 6; i++ {
		c.propose("a", ProposalID(i), AckQuorum, fmt.Sprintf("r%d", i))
		c.stabilize()
	}
	a := c.nodes["a"].r
	flaky := &flakyLog{m: c.nodes["a"].store, fail: true}
	a.cfg.Log = flaky
	c.start("b", false)
	c.tick(2)
	cur := a.peers["b"].cursors[record.LogData]
	tail := a.Status().Tail[record.LogData]
	if cur.answered != a.pass || cur.confirmed >= tail {
		t.Fatalf("while reads fail: cursor %+v (tail %d), want answered this pass and behind", cur, tail)
	}
	flaky.fail = false
	c.tick(2)
	if cur := a.peers["b"].cursors[record.LogData]; cur.confirmed != tail {
		t.Fatalf("after reads recover: cursor %+v, want confirmed %d", cur, tail)
	}
}
