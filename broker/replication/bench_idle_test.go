package replication

import (
	"testing"
)

// BenchmarkIdlePass measures one idle pass of the core alone (issue 31):
// three replicas in memory with a committed fence and no traffic; each op
// is one pass as a broker runs it: the leader's Tick starts the pass and
// sends a request per log to each follower [RP-4], each follower steps
// them and answers, the leader steps the answers, and every replica's
// Ready is taken, its messages handed back (Recycle, as the runtime does
// once they are sent) and advanced. Run with -benchmem: allocs/op is what
// one idle pass costs the three cores together (the leader's report among
// it), and must not grow silently.
func BenchmarkIdlePass(b *testing.B) {
	c := newCluster(b, []string{"a", "b", "c"}, 1, Rules{})
	c.promote("a", c.registered())
	c.stabilize()
	c.tick(3)
	if c.leader() != "a" {
		b.Fatalf("no leader: %s", c.statusLines())
	}
	nodes := [3]*Replica{c.nodes["a"].r, c.nodes["b"].r, c.nodes["c"].r}
	for _, r := range nodes[1:] {
		r.Tick() // followers do nothing on a tick; make sure of it below
	}
	byName := func(n NodeID) *Replica {
		for _, r := range nodes {
			if r.cfg.Self == n {
				return r
			}
		}
		return nil
	}
	answers := make([]Message, 0, 16)
	leader := nodes[0]
	pass := leader.Status().Pass
	b.ReportAllocs()
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		leader.Tick()
		rd := leader.Ready()
		for _, m := range rd.Messages {
			byName(m.To).Step(m)
		}
		leader.Recycle(rd.Messages)
		leader.Advance(rd)
		answers = answers[:0]
		for _, f := range nodes[1:] {
			frd := f.Ready()
			answers = append(answers, frd.Messages...)
			f.Recycle(frd.Messages)
			f.Advance(frd)
		}
		for _, m := range answers {
			leader.Step(m)
		}
		clear(answers)
		rd = leader.Ready()
		leader.Recycle(rd.Messages)
		leader.Advance(rd)
	}
	b.StopTimer()
	if got := leader.Status().Pass; got != pass+uint64(b.N) {
		b.Fatalf("pass %d after %d passes from %d", got, b.N, pass)
	}
	if rep := c.nodes["a"].r.report(); !rep.Followers[0].CaughtUp || !rep.Followers[1].CaughtUp {
		b.Fatalf("followers not caught up: %s", renderReport(rep))
	}
}
