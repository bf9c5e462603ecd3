package replication

import (
	"testing"

	"felix.dev/felix/broker/record"
)

// FuzzStep feeds arbitrary peer messages (built from the fuzz input) to a
// serving leader and to a follower: the core must not panic, must keep its
// committed positions monotone and must never write a log that is not
// dense. Messages come from peers after the wire decoder, so this covers
// what a confused or malicious peer can make the core do.
func FuzzStep(f *testing.F) {
	f.Add([]byte{1, 0, 0, 0, 2, 0, 1, 5, 1})
	f.Add([]byte{2, 1, 0, 1, 9, 9, 9, 9, 9, 9, 9, 9, 3, 4, 5})
	f.Add([]byte{3, 2, 1, 0, 0, 0, 0, 0, 0, 0, 0, 0, 7, 7, 7, 7, 4})
	f.Add([]byte{0, 0, 1, 1, 0, 9, 4, 12, 1, 1}) // an Append at the leader's start: a reset
	f.Fuzz(func(t *testing.T, data []byte) {
		c := started(t, []string{"a", "b", "c"}, "a", 2, Rules{})
		before := map[NodeID][numLogs]uint64{}
		for _, n := range c.order {
			before[n] = c.nodes[n].r.Status().Committed
		}
		for len(data) >= 8 {
			m := Message{
				Type:  MsgType(data[0]%7 + 1),
				From:  c.order[int(data[1])%3],
				Epoch: uint64(data[2] % 4),
				Pass:  uint64(data[3] % 5),
				Log:   record.LogKind(data[4] % 5),
				Index: uint64(data[5] % 16),
			}
			m.To = c.order[(int(data[1])+1+int(data[6])%2)%3]
			m.PrevEpoch = uint64(data[6] % 4)
			m.Commit = uint64(data[7] % 16)
			m.MatchEnd = uint64(data[7] % 32)
			m.Match = data[7]&1 == 0
			m.Tail = uint64(data[5] % 32)
			if data[6]&4 != 0 {
				m.Base = m.Index // an Append at the leader's start; a Resp's base
			}
			data = data[8:]
			for len(data) > 0 && data[0] < 64 && len(m.Records) < 4 {
				m.Records = append(m.Records, record.Record{Offset: m.Index + uint64(len(m.Records)), Epoch: uint64(data[0] % 4)})
				m.Epochs = append(m.Epochs, EpochStart{Epoch: uint64(data[0] % 4), Offset: uint64(data[0] % 8)})
				data = data[1:]
			}
			m.Conn = c.conns[[2]NodeID{m.From, m.To}]
			if m.Type == MsgAppendResp || m.Type == MsgProbeResp || m.Type == MsgFetchResp || m.Type == MsgRefuse {
				m.Conn = c.conns[[2]NodeID{m.To, m.From}]
			}
			c.nodes[m.To].r.Step(m)
			c.processReady()
			c.deliver()
		}
		c.tick(2)
		for _, n := range c.order {
			after := c.nodes[n].r.Status().Committed
			for l := range after {
				if after[l] < before[n][l] {
					t.Fatalf("%s: %s committed moved back", n, record.LogKind(l))
				}
			}
			for l, recs := range c.nodes[n].store.logs {
				for i, r := range recs {
					if r.Offset != c.nodes[n].store.base[l]+uint64(i) {
						t.Fatalf("%s: %s log not dense at %d", n, record.LogKind(l), i)
					}
				}
			}
		}
	})
}
