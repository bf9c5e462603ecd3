package replication

import (
	"testing"

	"felix.dev/felix/broker/record"
)

// BenchmarkCoreQuorumAppend measures the core alone: three replicas in
// memory, one 1 KiB record per proposal, Quorum, driven to acknowledgement
// (Propose, Ready/Advance on every replica, delivery). It prints the
// figure it exists for: proposals acknowledged per second of core time.
func BenchmarkCoreQuorumAppend(b *testing.B) {
	for _, batch := range []int{1, 64} {
		b.Run(map[int]string{1: "batch=1", 64: "batch=64"}[batch], func(b *testing.B) {
			c := newCluster(b, []string{"a", "b", "c"}, 1000, Rules{})
			for _, n := range c.order {
				c.nodes[n].r.cfg.MaxBatch = 256
			}
			c.promote("a", c.registered())
			c.stabilize()
			payload := make([]byte, 1024)
			recs := make([]record.Record, batch)
			for i := range recs {
				recs[i] = record.Record{Payload: payload}
			}
			b.SetBytes(int64(1024 * batch))
			b.ResetTimer()
			for i := 0; i < b.N; i++ {
				id := ProposalID(i + 1)
				c.nodes["a"].r.Propose(Proposal{ID: id, Log: record.LogData, Records: recs, Mode: AckQuorum})
				c.stabilize()
				if a, ok := c.acks[id]; !ok || a.Err != nil {
					b.Fatalf("proposal %d: %+v", id, a)
				}
				delete(c.acks, id)
			}
			b.StopTimer()
			b.ReportMetric(float64(b.N*batch)/b.Elapsed().Seconds(), "records/s")
		})
	}
}
