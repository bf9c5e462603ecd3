package e2e

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"sync"
	"testing"
	"time"

	felixv1 "felix.dev/felix/api/v1alpha1"
	felixclient "felix.dev/felix/broker/client"
	"felix.dev/felix/broker/deadletter"
	"felix.dev/felix/broker/record"
	"felix.dev/felix/broker/wire"
)

// groupLease is the brokers' --group-lease in the consumer-group tests:
// short, so a silent member's shards are taken over in seconds.
const groupLease = 2 * time.Second

// groupShards is the shard count of the consumer-group tests' streams.
const groupShards = 4

// processedLog is what the members of a group processed: each shard's
// offsets with their payloads, and how often each offset was processed.
type processedLog struct {
	mu    sync.Mutex
	seen  map[uint32]map[uint64]string
	times map[uint32]map[uint64]int
}

func newProcessedLog() *processedLog {
	return &processedLog{seen: map[uint32]map[uint64]string{}, times: map[uint32]map[uint64]int{}}
}

func (p *processedLog) add(shard uint32, r record.Record) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.seen[shard] == nil {
		p.seen[shard], p.times[shard] = map[uint64]string{}, map[uint64]int{}
	}
	p.seen[shard][r.Offset] = string(r.Payload)
	p.times[shard][r.Offset]++
}

// missing returns how many of want's records were not processed (or were
// processed with another payload).
func (p *processedLog) missing(want map[uint32]map[uint64]string) int {
	p.mu.Lock()
	defer p.mu.Unlock()
	n := 0
	for s, offs := range want {
		for off, payload := range offs {
			if p.seen[s][off] != payload {
				n++
			}
		}
	}
	return n
}

// again returns how many records were processed more than once.
func (p *processedLog) again() int {
	p.mu.Lock()
	defer p.mu.Unlock()
	n := 0
	for _, offs := range p.times {
		for _, k := range offs {
			if k > 1 {
				n++
			}
		}
	}
	return n
}

// groupMember runs a client.GroupConsumer in a goroutine, as an
// application's consumer does: it polls, processes every record (into a
// processedLog) and then commits the batch (cumulative) or acknowledges
// its records (per record; a record whose payload is poisonPayload is
// nak'd, always).
type groupMember struct {
	g    *felixclient.GroupConsumer
	ack  bool
	stop chan struct{}
	done chan struct{}
	// killAfter, when not zero, kills the member once it processed that
	// many records: it stops between processing a batch and settling it
	// (commit or acks), and never leaves (no Close), as a process killed
	// there would: its shards stay owned until its lease runs out.
	killAfter int

	mu        sync.Mutex
	owned     map[uint32]uint64
	processed int
}

const poisonPayload = "poison"

func startGroupMember(t *testing.T, cl *felixclient.Cluster, o felixclient.GroupConsumerOptions, killAfter int, log *processedLog) *groupMember {
	t.Helper()
	g, err := felixclient.NewGroupConsumer(cl, o)
	if err != nil {
		t.Fatal(err)
	}
	m := &groupMember{g: g, ack: o.Ack != nil, stop: make(chan struct{}), done: make(chan struct{}), killAfter: killAfter}
	go m.run(log)
	return m
}

func (m *groupMember) run(log *processedLog) {
	defer close(m.done)
	tick := time.NewTicker(20 * time.Millisecond) // the poll cadence
	defer tick.Stop()
	for {
		select {
		case <-m.stop:
			ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
			_ = m.g.Close(ctx)
			cancel()
			return
		case <-tick.C:
		}
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		// Errors (a leader failing over, a shard lost) are what a
		// consumer lives with: it polls again.
		batches, _ := m.g.Poll(ctx)
		m.mu.Lock()
		m.owned = m.g.Owned()
		m.mu.Unlock()
		for _, b := range batches {
			var good, bad []uint64
			for _, r := range b.Records {
				if string(r.Payload) == poisonPayload {
					bad = append(bad, r.Offset)
					continue
				}
				log.add(b.Shard.Shard, r)
				good = append(good, r.Offset)
			}
			m.mu.Lock()
			m.processed += len(good)
			killed := m.killAfter > 0 && m.processed >= m.killAfter
			m.mu.Unlock()
			if killed {
				cancel()
				return // processed, never settled
			}
			if !m.ack {
				_ = m.g.Commit(ctx, b.Shard, b.Next)
				continue
			}
			if len(good) > 0 {
				_ = m.g.Ack(ctx, b.Shard, good...)
			}
			if len(bad) > 0 {
				_ = m.g.Nak(ctx, b.Shard, bad...)
			}
		}
		cancel()
	}
}

// leave stops the member, which releases its shards, and waits for its
// goroutine.
func (m *groupMember) leave() {
	close(m.stop)
	<-m.done
}

func (m *groupMember) ownedNow() map[uint32]uint64 {
	m.mu.Lock()
	defer m.mu.Unlock()
	return m.owned
}

func (m *groupMember) processedNow() int {
	m.mu.Lock()
	defer m.mu.Unlock()
	return m.processed
}

// commitWatch describes a group on every shard of a stream until it is
// stopped and records any committed offset that moved backwards between
// two descriptions (from whichever broker leads the shard).
type commitWatch struct {
	mu     sync.Mutex
	last   map[uint32]wire.GroupState
	errs   []string
	reads  int
	stop   chan struct{}
	done   chan struct{}
	stream string
	group  string
}

func watchCommits(cl *felixclient.Cluster, stream, group string) *commitWatch {
	w := &commitWatch{last: map[uint32]wire.GroupState{}, stop: make(chan struct{}), done: make(chan struct{}), stream: stream, group: group}
	go func() {
		defer close(w.done)
		tick := time.NewTicker(50 * time.Millisecond)
		defer tick.Stop()
		for {
			select {
			case <-w.stop:
				return
			case <-tick.C:
			}
			for s := uint32(0); s < groupShards; s++ {
				ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
				d, err := cl.GroupDescribe(ctx, record.ShardID{Stream: stream, Shard: s}, group)
				cancel()
				if err != nil || len(d.Groups) != 1 {
					continue // failing over, or not yet claimed
				}
				g := d.Groups[0]
				w.mu.Lock()
				w.reads++
				if prev, ok := w.last[s]; ok && g.Committed < prev.Committed {
					w.errs = append(w.errs, fmt.Sprintf("shard %d: committed %d (generation %d, owner %s) after %d (generation %d, owner %s)",
						s, g.Committed, g.Generation, g.Owner, prev.Committed, prev.Generation, prev.Owner))
				}
				w.last[s] = g
				w.mu.Unlock()
			}
		}
	}()
	return w
}

func (w *commitWatch) state(s uint32) (wire.GroupState, bool) {
	w.mu.Lock()
	defer w.mu.Unlock()
	g, ok := w.last[s]
	return g, ok
}

func (w *commitWatch) finish(t *testing.T) {
	t.Helper()
	close(w.stop)
	<-w.done
	w.mu.Lock()
	defer w.mu.Unlock()
	for _, e := range w.errs {
		t.Errorf("committed offset moved backwards: %s", e)
	}
	t.Logf("%s/%s: %d descriptions, no committed offset moved backwards: %v", w.stream, w.group, w.reads, len(w.errs) == 0)
}

// newGroupClient is a client of the whole cluster as the admin user.
func (c *cluster) newGroupClient(t *testing.T, ctx context.Context) *felixclient.Cluster {
	t.Helper()
	conf, err := c.clientTLSAs(adminUser)
	if err != nil {
		t.Fatal(err)
	}
	var addrs []string
	for _, a := range c.bootstrapArgs() {
		if a != "--bootstrap" {
			addrs = append(addrs, a)
		}
	}
	cl, err := felixclient.NewCluster(ctx, felixclient.ClusterOptions{Options: felixclient.Options{TLS: conf}, Attempts: 20, Idempotent: true}, addrs...)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = cl.Close() })
	return cl
}

// appendWave appends per records to every shard of stream in batches of
// 50 (idempotently, so a resend after a failover never doubles one), and
// adds them to want. A record named in poison (shard and index in the
// wave) carries poisonPayload and a header instead.
func appendWave(t *testing.T, ctx context.Context, cl *felixclient.Cluster, stream, tag string, per int, want map[uint32]map[uint64]string, poison map[uint32]int) map[uint32]uint64 {
	t.Helper()
	poisoned := map[uint32]uint64{}
	for s := uint32(0); s < groupShards; s++ {
		if want[s] == nil {
			want[s] = map[uint64]string{}
		}
		for i := 0; i < per; i += 50 {
			var recs []record.Record
			for j := i; j < min(i+50, per); j++ {
				r := record.Record{Payload: []byte(fmt.Sprintf("%s-%d-%d", tag, s, j))}
				if k, ok := poison[s]; ok && k == j {
					r = record.Record{Payload: []byte(poisonPayload), Headers: []record.Header{{Key: "kind", Value: []byte("poison")}}}
				}
				recs = append(recs, r)
			}
			ok, err := cl.Append(ctx, record.ShardID{Stream: stream, Shard: s}, recs, nil)
			if err != nil {
				t.Fatalf("append to %s-%d: %v", stream, s, err)
			}
			for k, r := range recs {
				off := ok.First + uint64(k)
				if string(r.Payload) == poisonPayload {
					poisoned[s] = off
					continue
				}
				want[s][off] = string(r.Payload)
			}
		}
	}
	return poisoned
}

// waitAllServing waits until every shard of stream has a leader serving
// at its assigned epoch.
func (c *cluster) waitAllServing(t *testing.T, stream string) {
	t.Helper()
	for i := 0; i < groupShards; i++ {
		c.eventually(fmt.Sprintf("a serving leader for %s-%d", stream, i), 90*time.Second, func() (bool, string) {
			sh := c.shard(stream, i)
			if sh == nil || sh.Status.Assignment == nil || sh.Status.Report == nil {
				return false, shardState(sh)
			}
			return sh.Status.Report.Epoch == sh.Status.Assignment.Epoch, shardState(sh)
		})
	}
}

// TestConsumerGroups_MemberKilledMemberJoinedBrokerKilled is issue #28's
// scenario on three broker processes, twice: a group acknowledging per
// record (stream events, a poison record always nak'd) and a group
// committing cumulatively (stream orders, the leader broker of a shard
// killed with SIGKILL in the middle as well). Three members consume the
// 4-shard stream: a on shards 0 and 1, b on 2, c on 3. Member a is killed
// between processing a batch and settling it (it stops heartbeating, and
// never leaves); member d joins, asking for every shard, and takes a's
// shards over once a's lease ran out. Then more records are appended.
//
// It checks that every record is processed at least once, that no
// committed offset seen by describe ever moves backwards, that the
// killed member's late commit or ack is refused by the group log
// (GroupFenced), that d's takeover comes within the lease bound, and, per
// record, that the poison record is in the dead-letter log after
// MaxDeliveries with its group, offset, epoch, timestamp, headers and
// payload intact and the delivery count and reason set, and that a
// redrive of it, sent twice, appends it to the data log once.
func TestConsumerGroups_MemberKilledMemberJoinedBrokerKilled(t *testing.T) {
	c := newCluster(t, 3, felixv1.FsyncPeriodic)
	for i := 0; i < 3; i++ {
		c.startBroker(i, "--group-lease", groupLease.String())
	}
	c.createStreamShards(t, "events", 3, groupShards)
	c.createStreamShards(t, "orders", 3, groupShards)
	c.waitAllServing(t, "events")
	c.waitAllServing(t, "orders")
	// One after the other on one cluster (the harness's helpers fail the
	// test itself, so no subtests).
	start := time.Now()
	c.runGroupScenario(t, "events", true)
	t.Logf("per record: %s", time.Since(start).Round(time.Millisecond))
	start = time.Now()
	c.runGroupScenario(t, "orders", false)
	t.Logf("cumulative, a broker killed: %s", time.Since(start).Round(time.Millisecond))
}

func (c *cluster) runGroupScenario(t *testing.T, stream string, ack bool) {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	const group = "billing"
	admin := c.newGroupClient(t, ctx)
	want := map[uint32]map[uint64]string{}
	var poison map[uint32]int
	var ackOpts *felixclient.AckOptions
	if ack {
		poison = map[uint32]int{1: 7}
		ackOpts = &felixclient.AckOptions{MaxDeliveries: 3, AckWait: time.Second, MaxInFlight: 64}
	}
	poisoned := appendWave(t, ctx, admin, stream, "w1", 300, want, poison)
	log := newProcessedLog()
	watch := watchCommits(admin, stream, group)

	member := func(name string, killAfter int, shards ...uint32) *groupMember {
		// Each member has its own connections, as separate processes do.
		return startGroupMember(t, c.newGroupClient(t, ctx), felixclient.GroupConsumerOptions{
			Stream: stream, Group: group, Member: name, Shards: shards, MaxRecords: 10, Ack: ackOpts}, killAfter, log)
	}
	a, b, cm := member("a", 60, 0, 1), member("b", 0, 2), member("c", 0, 3)
	select {
	case <-a.done:
	case <-ctx.Done():
		t.Fatalf("member a did not process 60 records: %d", a.processedNow())
	}
	killedAt := time.Now()
	aOwned := a.ownedNow()
	if len(aOwned) != 2 {
		t.Fatalf("member a owned %v when killed, want shards 0 and 1", aOwned)
	}
	t.Logf("killed member a (owning %v) after it processed %d records", aOwned, a.processedNow())
	if !ack {
		// The leader of a's first shard goes too: the group log's new
		// leader must serve the same committed offsets and generations.
		leader := c.leaderOf(stream)
		if leader == "" {
			t.Fatalf("no leader assigned for %s-0", stream)
		}
		t.Logf("killing broker %s, the leader of %s-0", leader, stream)
		c.kill9(leader)
	}
	d := member("d", 0, 0, 1, 2, 3)
	var tookOver time.Duration
	c.eventually("d owning a's shards", 90*time.Second, func() (bool, string) {
		o := d.ownedNow()
		for s := range aOwned {
			if o[s] <= aOwned[s] {
				return false, fmt.Sprintf("d owns %v", o)
			}
		}
		tookOver = time.Since(killedAt)
		return true, ""
	})
	t.Logf("d took over %v %s after a was killed (lease %s)", d.ownedNow(), tookOver.Round(time.Millisecond), groupLease)
	if ack && tookOver > 2*groupLease+10*time.Second {
		// Without a leadership change, a's lease ran out on the leader
		// that granted it: a claim succeeds one lease after a's last
		// heartbeat. The slack is this busy machine's polling.
		t.Errorf("takeover took %s, want about the lease %s", tookOver, groupLease)
	}

	// The killed member's late settlement is refused by the log, not by
	// a timer: its generation is superseded.
	shard0 := record.ShardID{Stream: stream, Shard: 0}
	var late error
	if ack {
		late = a.g.Ack(ctx, shard0, 0)
	} else {
		late = a.g.Commit(ctx, shard0, 1)
	}
	if !errors.Is(late, wire.ErrGroupFenced) {
		t.Errorf("the killed member's late settlement: %v, want GroupFenced", late)
	}

	tails := map[uint32]uint64{}
	appendWave(t, ctx, admin, stream, "w2", 100, want, nil)
	for s := uint32(0); s < groupShards; s++ {
		d, err := admin.GroupDescribe(ctx, record.ShardID{Stream: stream, Shard: s}, group)
		if err != nil {
			t.Fatal(err)
		}
		tails[s] = d.Tail
	}
	c.eventually("every record processed and committed", 120*time.Second, func() (bool, string) {
		if n := log.missing(want); n > 0 {
			return false, fmt.Sprintf("%d records not processed", n)
		}
		for s := uint32(0); s < groupShards; s++ {
			g, ok := watch.state(s)
			if !ok || g.Committed < tails[s] {
				return false, fmt.Sprintf("shard %d: %+v, tail %d", s, g, tails[s])
			}
		}
		return true, ""
	})
	watch.finish(t)
	for _, m := range []*groupMember{b, cm, d} {
		m.leave()
	}
	total := 0
	for _, offs := range want {
		total += len(offs)
	}
	again := log.again()
	t.Logf("%d records processed at least once on %d shards, %d of them more than once (after the kill)", total, groupShards, again)
	if again == 0 {
		// a was killed after processing a batch it never settled: d
		// processes it again (from a's commit, or as its ack waits run
		// out).
		t.Errorf("no record was processed twice, want a's unsettled batch processed again by d")
	}
	if !ack {
		return
	}

	// The poison record, nak'd at each of its deliveries, is in the
	// dead-letter log with its fields intact.
	ps := record.ShardID{Stream: stream, Shard: 1}
	off := poisoned[1]
	orig, err := admin.Read(ctx, wire.ReadRequest{Shard: ps, From: wire.FromOffset, Offset: off, MaxRecords: 1})
	if err != nil || len(orig.Records) != 1 || orig.Records[0].Offset != off {
		t.Fatalf("read the poison record at %d: %+v %v", off, orig, err)
	}
	dl, err := admin.DeadLetterRead(ctx, ps, 0, 0)
	if err != nil {
		t.Fatal(err)
	}
	if len(dl.Entries) != 1 {
		t.Fatalf("dead-letter log of %s: %+v, want the poison record alone", ps, dl.Entries)
	}
	e, r := dl.Entries[0], orig.Records[0]
	if e.Group != group || e.Offset != off || e.Epoch != r.Epoch || e.Timestamp != r.Timestamp ||
		e.Deliveries != ackOpts.MaxDeliveries || deadletter.Reason(e.Reason) != deadletter.ReasonMaxDeliveries ||
		!bytes.Equal(e.Payload, r.Payload) || len(e.Headers) != 1 || e.Headers[0].Key != "kind" || string(e.Headers[0].Value) != "poison" || e.Redriven {
		t.Errorf("dead-letter entry %+v, want group %s, offset %d, epoch %d, timestamp %d, %d deliveries, max-deliveries, the header and payload",
			e, group, off, r.Epoch, r.Timestamp, ackOpts.MaxDeliveries)
	}
	for s := uint32(0); s < groupShards; s++ {
		if s == 1 {
			continue
		}
		if dl, err := admin.DeadLetterRead(ctx, record.ShardID{Stream: stream, Shard: s}, 0, 0); err != nil || len(dl.Entries) != 0 {
			t.Errorf("dead-letter log of shard %d: %+v %v, want empty", s, dl.Entries, err)
		}
	}
	t.Logf("poison record %s@%d dead-lettered after %d deliveries, fields intact", ps, off, e.Deliveries)

	// A redrive appends it to the data log once: the second answers with
	// the first one's offset.
	first, err := admin.DeadLetterRedrive(ctx, ps, e.Entry)
	if err != nil || first.Already {
		t.Fatalf("redrive of entry %d: %+v %v", e.Entry, first, err)
	}
	dup, err := admin.DeadLetterRedrive(ctx, ps, e.Entry)
	if err != nil || !dup.Already || dup.DataOffset != first.DataOffset {
		t.Fatalf("second redrive of entry %d: %+v %v, want already at %d", e.Entry, dup, err, first.DataOffset)
	}
	back, err := admin.Read(ctx, wire.ReadRequest{Shard: ps, From: wire.FromOffset, Offset: first.DataOffset, MaxRecords: 10})
	if err != nil || len(back.Records) != 1 {
		t.Fatalf("read from the redrive's offset %d: %+v %v, want the redriven record alone", first.DataOffset, back.Records, err)
	}
	rr := back.Records[0]
	if rr.Offset != first.DataOffset || string(rr.Payload) != poisonPayload || len(rr.Headers) != 2 ||
		rr.Headers[0].Key != "kind" || rr.Headers[1].Key != deadletter.RedriveHeader || string(rr.Headers[1].Value) != fmt.Sprint(e.Entry) {
		t.Errorf("redriven record %+v, want the poison record with %s: %d", rr, deadletter.RedriveHeader, e.Entry)
	}
	t.Logf("entry %d redriven once, to %s@%d", e.Entry, ps, first.DataOffset)
}
