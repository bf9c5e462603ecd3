package sim

import (
	"fmt"

	"felix.dev/felix/broker/datadir"
	"felix.dev/felix/broker/record"
	"felix.dev/felix/broker/replication"
)

// volume is a broker's data directory: the log store and the identity
// files of [ID-1..3].
type volume struct {
	disk     *disk
	sid      replication.StorageID
	sidFile  bool
	run      datadir.RunState
	runFile  bool
	regInc   uint64
	regFile  bool
	takenInc uint64 // snapshots only: the incarnation that was running
}

// node is one broker hosting one replica of the shard.
type node struct {
	id  replication.NodeID
	idx int
	vol volume
	// legacy: an older broker build without storage ids (it presents and
	// registers none).
	legacy bool
	// boot numbers the machine's boots; a machine crash starts a new one.
	boot int

	up     bool
	frozen bool
	thawAt int
	// pending holds Disconnected calls a frozen process has yet to see.
	pending []closed

	r *replication.Replica
	// inflight holds the Readies whose writes the runtime has not yet
	// persisted, oldest first.
	inflight []replication.Ready
	inc      uint64 // incarnation of the running process
	// sid is the storage id the running process presents.
	sid replication.StorageID

	// lostData: the volume lost records it had (ground truth: a wipe, a
	// restore, a power loss of acknowledged writes), whatever the id rule
	// says; the next start makes the replica faulty until whole.
	lostData bool
	// needsCopy: the replica's id rotated (it may hold less than its
	// peers were told); it counts as a fault until it is whole again.
	needsCopy bool

	lastCommitted [numLogs]uint64
	checked       [numLogs]uint64
	assignSeen    uint64
	report        *replication.Report
	// reportViewAt is the tick report's pass started at (-1: not seen),
	// its ViewAt [CP-1]; passes the core's current and previous pass with
	// the tick each started at.
	reportViewAt int
	passes       [2]passStart
	// writer is the process's report writer (a new one at every start).
	writer reportWriter
	snap   *volume
}

func (n *node) bootID() string { return fmt.Sprintf("boot-%s-%d", n.id, n.boot) }

// running reports whether the process runs and is not frozen.
func (n *node) running() bool { return n.up && !n.frozen }

// tails returns the written tail of each log.
func (n *node) tails() [numLogs]uint64 {
	var t [numLogs]uint64
	for l := range t {
		t[l] = n.vol.disk.tail(l)
	}
	return t
}

// holdsAll reports whether the written logs hold every record of acked
// at or above the shard's trim floor of its log (records below the floor
// are legitimately gone).
func (n *node) holdsAll(acked *[numLogs][]record.Record, floor *[numLogs]uint64) bool {
	for l := range acked {
		for _, rec := range acked[l] {
			if rec.Offset >= floor[l] && !n.vol.disk.holds(record.LogKind(l), rec) {
				return false
			}
		}
	}
	return true
}

// closed is a connection that closed while its leader side was frozen.
type closed struct {
	peer replication.NodeID
	conn replication.ConnID
}

// passStart is a core pass and the tick it started at.
type passStart struct {
	pass uint64
	tick int
}

// notePass records n's core pass after a call into it at tick now: a pass
// first seen then started then (every core call is made at its tick).
func (s *simulation) notePass(n *node) {
	if p := n.r.Status().Pass; p != n.passes[0].pass {
		n.passes[1], n.passes[0] = n.passes[0], passStart{pass: p, tick: s.now}
	}
}

// viewAt is the tick pass started at, -1 if not seen (a report names the
// pass that is ending or the current one).
func (n *node) viewAt(pass uint64) int {
	for _, p := range n.passes {
		if p.pass == pass && pass != 0 {
			return p.tick
		}
	}
	return -1
}
