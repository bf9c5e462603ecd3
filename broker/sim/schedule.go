package sim

import (
	"fmt"
	"math/rand/v2"

	"felix.dev/felix/broker/datadir"
)

// EventKind is one kind of scheduled event.
type EventKind uint8

const (
	// EvPropose proposes a batch to a replica that leads (or believes it
	// does), under a random ack mode and log.
	EvPropose EventKind = iota + 1
	// EvTick advances simulated time by one tick: every running replica
	// ticks, periodic syncs run, and the control plane takes heartbeats and
	// reports and runs placement.
	EvTick
	// EvDeliver delivers some in-flight messages, mostly oldest first but
	// sometimes out of order, losing some.
	EvDeliver
	// EvIdle runs several ticks with the network drained after each and no
	// proposals: an idle shard.
	EvIdle
	// EvProcessCrash kills a broker process; the page cache survives.
	EvProcessCrash
	// EvMidReadyCrash kills a broker after it sent a Ready's messages and
	// wrote only part of its writes (Arg 1: the machine dies too).
	EvMidReadyCrash
	// EvMachineCrash kills a broker's machine: unsynced writes are lost
	// and the boot id changes.
	EvMachineCrash
	// EvCleanStop stops a broker gracefully.
	EvCleanStop
	// EvWipe destroys a broker's data directory (volume replaced).
	EvWipe
	// EvSnapshot takes a crash-consistent snapshot of a broker's volume.
	EvSnapshot
	// EvRestore puts a broker's last snapshot back and starts it.
	EvRestore
	// EvRestart starts a broker that is down.
	EvRestart
	// EvPartition cuts network links (Arg 0: isolate a broker from its
	// peers; 1: cut one link; 2: isolate a broker from the control plane).
	EvPartition
	// EvHeal heals every partition (Arg 1: the healed links reconnect).
	EvHeal
	// EvFreeze freezes the leader's process for Arg ticks (past its node
	// expiry), then it resumes where it was.
	EvFreeze
	// EvLookupFail makes a leader's id lookup on one follower's connection
	// fail; the connection is re-established at the next tick.
	EvLookupFail
	// EvFailoverBurst runs a short scenario of faults around a failover
	// (see the burst flavours in exec.go; Arg/10 picks the flavour, Arg%10
	// a number of ticks): the windows in which a replica's lost copy may
	// still be counted.
	EvFailoverBurst
)

var eventNames = map[EventKind]string{
	EvPropose: "propose", EvTick: "tick", EvDeliver: "deliver", EvIdle: "idle",
	EvProcessCrash: "process-crash", EvMidReadyCrash: "mid-ready-crash", EvMachineCrash: "machine-crash",
	EvCleanStop: "clean-stop", EvWipe: "wipe", EvSnapshot: "snapshot", EvRestore: "restore",
	EvRestart: "restart", EvPartition: "partition", EvHeal: "heal", EvFreeze: "freeze",
	EvLookupFail: "lookup-fail", EvFailoverBurst: "failover-burst",
}

// String returns the event kind's name.
func (k EventKind) String() string {
	if s, ok := eventNames[k]; ok {
		return s
	}
	return fmt.Sprintf("event(%d)", uint8(k))
}

// Event is one scheduled event. Node and Arg are its parameters (their
// meaning depends on Kind; a Node the event cannot apply to makes it a
// no-op). Sub seeds the event's own randomness, so an event behaves the
// same whichever other events ran before it.
type Event struct {
	Kind EventKind
	Node int
	Arg  int
	Sub  uint64
}

// String renders the event for traces.
func (e Event) String() string {
	return fmt.Sprintf("%s node=%d arg=%d", e.Kind, e.Node, e.Arg)
}

// Shape is what a seed decides about the shard before its schedule.
type Shape struct {
	Replicas int
	Fsync    datadir.FsyncMode
	// LossPct is the percentage of delivered messages lost.
	LossPct int
	// FaultWeight scales the weight of fault events (1..4).
	FaultWeight int
}

// String renders the shape.
func (s Shape) String() string {
	return fmt.Sprintf("R=%d fsync=%s loss=%d%% faults=x%d", s.Replicas, s.Fsync, s.LossPct, s.FaultWeight)
}

// weighted is one row of the schedule's event table.
type weighted struct {
	kind   EventKind
	weight int
	fault  bool
}

var eventTable = []weighted{
	{EvPropose, 24, false},
	{EvTick, 22, false},
	{EvDeliver, 34, false},
	{EvIdle, 2, false},
	{EvProcessCrash, 2, true},
	{EvMidReadyCrash, 1, true},
	{EvMachineCrash, 2, true},
	{EvCleanStop, 1, true},
	{EvWipe, 2, true},
	{EvSnapshot, 1, false},
	{EvRestore, 1, true},
	{EvRestart, 7, false},
	{EvPartition, 2, true},
	{EvHeal, 3, false},
	{EvFreeze, 1, true},
	{EvLookupFail, 1, true},
	{EvFailoverBurst, 2, true},
}

// Generate derives a seed's shape and schedule of n events. It is pure.
func Generate(seed uint64, n int) (Shape, []Event) {
	rng := rand.New(rand.NewPCG(seed, 0x5eed_f311c5))
	sh := Shape{Replicas: 3, FaultWeight: 1 + rng.IntN(4)}
	if rng.IntN(2) == 1 {
		sh.Replicas = 5
	}
	sh.Fsync = []datadir.FsyncMode{datadir.FsyncOnCommit, datadir.FsyncPeriodic, datadir.FsyncNone}[rng.IntN(3)]
	sh.LossPct = []int{0, 0, 2, 5, 10, 20}[rng.IntN(6)]
	total := 0
	for _, w := range eventTable {
		total += w.scaled(sh)
	}
	calmTotal := 0
	for _, w := range eventTable {
		if !w.fault {
			calmTotal += w.weight
		}
	}
	evs := make([]Event, n)
	// The schedule alternates calm stretches (no faults: the shard forms,
	// takes writes and heals) with stormy ones; the first is calm.
	calm, left := true, calmStretch
	for i := range evs {
		if left == 0 {
			calm = rng.IntN(5) < 2
			left = 20 + rng.IntN(40)
		}
		left--
		var kind EventKind
		if calm {
			k := rng.IntN(calmTotal)
			for _, w := range eventTable {
				if w.fault {
					continue
				}
				if k < w.weight {
					kind = w.kind
					break
				}
				k -= w.weight
			}
		} else {
			k := rng.IntN(total)
			for _, w := range eventTable {
				if k < w.scaled(sh) {
					kind = w.kind
					break
				}
				k -= w.scaled(sh)
			}
		}
		evs[i] = newEvent(rng, sh, kind)
	}
	return sh, evs
}

// calmStretch is the length of the calm stretch every schedule starts with.
const calmStretch = 30

// newEvent draws an event's parameters.
func newEvent(rng *rand.Rand, sh Shape, kind EventKind) Event {
	e := Event{Kind: kind, Node: rng.IntN(sh.Replicas), Sub: rng.Uint64()}
	switch kind {
	case EvPropose:
		e.Arg = rng.IntN(10) // 0..7 assigned leader, 8 a self-believed leader, 9 any
	case EvDeliver:
		e.Arg = 1 + rng.IntN(12)
	case EvIdle:
		e.Arg = 3 + rng.IntN(10)
	case EvProcessCrash, EvMachineCrash, EvWipe, EvCleanStop:
		e.Arg = rng.IntN(2) // 1: aim at the assigned leader
	case EvMidReadyCrash:
		e.Arg = rng.IntN(2) // 1: the machine dies too
	case EvPartition:
		e.Arg = rng.IntN(3)
	case EvHeal:
		e.Arg = rng.IntN(2)
	case EvFreeze:
		e.Arg = nodeExpiryTicks + 2 + rng.IntN(12)
	case EvFailoverBurst:
		e.Arg = 10*rng.IntN(burstFlavours) + rng.IntN(6)
	}
	return e
}

func (w weighted) scaled(sh Shape) int {
	if w.fault {
		return w.weight * sh.FaultWeight
	}
	return w.weight
}
