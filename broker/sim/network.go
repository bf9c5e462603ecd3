package sim

import (
	"math/rand/v2"

	"felix.dev/felix/broker/replication"
)

// link is an ordered pair of replica indexes: (leader side, follower side)
// for connections, (from, to) for cuts.
type link [2]int

// network holds the messages in flight, the connections and the cuts.
type network struct {
	inflight []flight
	conns    map[link]replication.ConnID
	nextConn replication.ConnID
	cut      map[link]bool
	// cutUntil is the tick at which each cut heals by itself.
	cutUntil map[link]int
	// cpCut marks brokers cut off from the control plane, until the tick
	// in cpCutUntil.
	cpCut      []bool
	cpCutUntil []int
	// relink lists connections to re-establish at the next tick (after a
	// failed id lookup).
	relink []link
}

func newNetwork(n int) network {
	return network{conns: map[link]replication.ConnID{}, cut: map[link]bool{}, cutUntil: map[link]int{},
		cpCut: make([]bool, n), cpCutUntil: make([]int, n)}
}

// expire heals the cuts whose time has come. The outcome does not depend on
// map order.
func (nw *network) expire(now int) {
	for k, until := range nw.cutUntil {
		if now >= until {
			delete(nw.cutUntil, k)
			delete(nw.cut, k)
		}
	}
	for i, until := range nw.cpCutUntil {
		if nw.cpCut[i] && now >= until {
			nw.cpCut[i] = false
		}
	}
}

// cutLink cuts a<->b until the tick until.
func (nw *network) cutLink(a, b, until int) {
	for _, k := range []link{{a, b}, {b, a}} {
		nw.cut[k] = true
		nw.cutUntil[k] = max(nw.cutUntil[k], until)
	}
}

// flight is a message in flight and the tick it was sent at.
type flight struct {
	m  replication.Message
	at int
}

// send puts messages in flight at tick now.
func (nw *network) send(now int, ms []replication.Message) {
	for _, m := range ms {
		nw.inflight = append(nw.inflight, flight{m: m, at: now})
	}
}

// isRequest reports whether m travels from the connection's leader side.
func isRequest(m replication.Message) bool {
	switch m.Type {
	case replication.MsgAppend, replication.MsgProbe, replication.MsgFetch:
		return true
	}
	return false
}

// pick chooses the index of the next message to deliver among those whose
// receiver is deliverable: usually the oldest, sometimes any (reordering).
// It returns -1 when none is deliverable.
func (nw *network) pick(rng *rand.Rand, deliverable func(flight) bool) int {
	var idx []int
	for i, f := range nw.inflight {
		if deliverable(f) {
			idx = append(idx, i)
			if rng.IntN(4) != 0 {
				return i
			}
		}
	}
	if len(idx) == 0 {
		return -1
	}
	return idx[rng.IntN(len(idx))]
}

func (nw *network) remove(i int) replication.Message {
	m := nw.inflight[i].m
	nw.inflight = append(nw.inflight[:i], nw.inflight[i+1:]...)
	return m
}
