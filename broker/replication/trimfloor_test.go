package replication

import (
	"fmt"
	"testing"

	"felix.dev/felix/broker/record"
)

// proposeTrim proposes a trim record asking for floor under mode.
func (c *cluster) proposeTrim(n NodeID, id ProposalID, mode AckMode, floor uint64) {
	c.nodes[n].r.Propose(Proposal{ID: id, Log: record.LogData, Mode: mode,
		Records: []record.Record{{Kind: record.KindTrim, Floor: floor}}})
}

// [TR-2] A trim moves the floor only once committed, so it is acknowledged
// only once committed, whatever the stream's ack mode: under Leader a data
// batch is acknowledged once the leader persisted it, a trim is not. With
// both followers cut off the trim is persisted on the leader and not
// acknowledged; once they answer, its acknowledgement comes in the Ready
// whose commits cover it (the runtime applies the commits, which move the
// floor, before it completes the acknowledgements).
func TestTR2_LeaderModeTrimAcknowledgedOnlyOnceCommitted(t *testing.T) {
	c := started(t, []string{"a", "b", "c"}, "a", 3, Rules{}) // 0 fence, 1..3 data
	cut := true
	c.drop = func(m Message) bool { return cut && (m.From == "a" || m.To == "a") }
	c.propose("a", 10, AckLeader, "d4")
	c.proposeTrim("a", 11, AckLeader, 3)
	c.stabilize()
	if a, ok := c.acks[10]; !ok || a.Err != nil || a.End != 5 {
		t.Fatalf("Leader-mode data batch not acknowledged on the leader's persistence: %+v (ok=%t)", a, ok)
	}
	if st := c.nodes["a"].r.Status(); st.Persisted[record.LogData] != 6 || st.Committed[record.LogData] >= 6 {
		t.Fatalf("want the trim persisted on the leader and not committed: %+v", st)
	}
	if a, ok := c.acks[11]; ok {
		t.Fatalf("Leader-mode trim acknowledged before it committed (the floor has not moved): %+v", a)
	}
	var ackCommit uint64
	c.onReady = func(n NodeID, rd Ready) {
		for _, a := range rd.Acks {
			if a.ID == 11 {
				for _, cm := range rd.Commits {
					if cm.Log == record.LogData {
						ackCommit = cm.Committed
					}
				}
			}
		}
	}
	cut = false
	c.tick(2)
	a, ok := c.acks[11]
	if !ok || a.Err != nil || a.First != 5 || a.End != 6 {
		t.Fatalf("trim not acknowledged after it committed: %+v (ok=%t)", a, ok)
	}
	if ackCommit < 6 {
		t.Fatalf("the trim's acknowledgement came in a Ready committing %d, want a commit covering it (6)", ackCommit)
	}
}

// [TR-4] A new leader serves reads only once its fence is committed: until
// then its committed positions, hence its floor, are what it knew as a
// follower. Ready.Serving comes exactly once per epoch, in the Ready whose
// Commits pass the fence on every log, and never while the fence is
// pending.
func TestTR4_NewLeaderServesOnlyOnceItsFenceCommitted(t *testing.T) {
	c := started(t, []string{"a", "b", "c"}, "a", 2, Rules{}) // 0 fence, 1..2 data
	servings := map[NodeID][]string{}
	c.onReady = func(n NodeID, rd Ready) {
		if rd.Serving == 0 {
			return
		}
		var commits []string
		for _, cm := range rd.Commits {
			commits = append(commits, fmt.Sprintf("%s:%d", cm.Log, cm.Committed))
		}
		servings[n] = append(servings[n], fmt.Sprintf("e%d %v", rd.Serving, commits))
	}
	// b is promoted; c cannot answer b's appends, and a is dead, so b
	// writes its fence (at 3) but cannot commit it.
	c.crash("a")
	blockC := true
	c.drop = func(m Message) bool {
		return blockC && m.From == "c" && m.To == "b" && m.Type == MsgAppendResp
	}
	c.promote("b", c.registered())
	c.stabilize()
	c.tick(2)
	st := c.nodes["b"].r.Status()
	if st.Role != RoleLeader || st.FenceCommitted || st.Tail[record.LogData] != 4 {
		t.Fatalf("want b leading with its fence written and not committed:\n%s", c.statusLines())
	}
	if len(servings["b"]) != 0 {
		t.Fatalf("b may serve reads before its fence committed: %v", servings["b"])
	}
	blockC = false
	c.tick(2)
	if c.leader() != "b" {
		t.Fatalf("b's fence did not commit:\n%s", c.statusLines())
	}
	want := fmt.Sprintf("e%d [data:4 group:2 dead-letter:2 counter:2]", c.epoch)
	if got := servings["b"]; len(got) != 1 || got[0] != want {
		t.Fatalf("b's Serving Readies: %v, want exactly [%s]", got, want)
	}
}
