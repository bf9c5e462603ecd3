package replication

import (
	"fmt"
	"math/rand"
	"os"
	"strconv"
	"strings"
	"testing"

	"felix.dev/felix/broker/placement"
	"felix.dev/felix/broker/record"
)

// TestRandomSchedules drives 3- and 5-replica shards with the real core and
// the real placement through seeded random schedules: Quorum appends,
// reordered and lost messages, crashes, restarts and disk wipes (at most
// (R-1)/2 replicas impaired at once; a wiped replica stays impaired until
// it holds every acknowledged record again). After every step it checks:
// the serving leader of the newest epoch holds every acknowledged record;
// replicas agree on every committed offset; committed positions never move
// back; at most one replica leads an epoch. It is a smoke test of the core;
// the full simulator is issue 7. FELIX_REPL_SEEDS raises the seed count.
func TestRandomSchedules(t *testing.T) {
	seeds := 300
	if s, err := strconv.Atoi(os.Getenv("FELIX_REPL_SEEDS")); err == nil && s > 0 {
		seeds = s
	}
	waits = 0
	for seed := 1; seed <= seeds; seed++ {
		for _, r := range []int{3, 5} {
			if err := runSchedule(t, int64(seed), r, 300); err != nil {
				t.Fatalf("seed %d R=%d: %v", seed, r, err)
			}
		}
	}
	t.Logf("%d seeds x 2 sizes; %d schedules ended with placement waiting %v", seeds, waits, waitReasons)
}

// waits counts schedules that ended with placement waiting.
var waits int

var waitReasons = map[string]int{}

func runSchedule(t testing.TB, seed int64, replicas, steps int) error {
	return runScheduleRules(t, seed, replicas, steps, Rules{})
}

func runScheduleRules(t testing.TB, seed int64, replicas, steps int, rules Rules) error {
	rng := rand.New(rand.NewSource(seed))
	names := []string{"a", "b", "c", "d", "e"}[:replicas]
	c := newCluster(t, names, 2, rules)
	c.lateNotice = rng.Intn(2) == 0
	cp := newControlPlane(c)
	cp.decide()
	f := (replicas - 1) / 2
	wiped := map[NodeID]bool{}
	acked := map[string]bool{}
	var nextID ProposalID
	payloadOf := map[ProposalID]string{}
	lastCommit := map[NodeID][numLogs]uint64{}
	inc := map[NodeID]uint64{}
	lossRate := rng.Intn(30)
	cut := map[[2]NodeID]bool{}
	snaps := map[NodeID]*memLog{}
	losses := map[NodeID]loss{}

	var violation error
	c.onReady = func(n NodeID, rd Ready) {
		if violation == nil {
			violation = checkAckAndReportTruth(c, n, rd, losses)
		}
	}
	impaired := func() int {
		n := 0
		for _, id := range c.order {
			if !c.nodes[id].up || wiped[id] {
				n++
			}
		}
		return n
	}
	for step := 0; step < steps; step++ {
		switch k := rng.Intn(100); {
		case k < 30:
			if l := cp.c.assign.Leader; l != "" && c.nodes[l].up {
				nextID++
				p := fmt.Sprintf("s%d-p%d", seed, nextID)
				payloadOf[nextID] = p
				c.propose(l, nextID, AckQuorum, p)
			}
		case k < 60:
			for _, id := range c.order {
				if c.nodes[id].up {
					c.nodes[id].r.Tick()
				}
			}
			cp.step()
			if dbgDecisions {
				t.Logf("tick: %s", c.statusLines())
			}
			if rng.Intn(3) == 0 {
				cp.decide()
			}
		case k < 86:
			c.processReady()
			rng.Shuffle(len(c.queue), func(i, j int) { c.queue[i], c.queue[j] = c.queue[j], c.queue[i] })
			if rng.Intn(10) == 0 && len(c.queue) > 0 {
				c.queue = append(c.queue, c.queue[rng.Intn(len(c.queue))]) // a duplicate
			}
			c.drop = func(m Message) bool { return rng.Intn(100) < lossRate || cut[[2]NodeID{m.From, m.To}] }
			c.deliver()
			c.drop = nil
		case k < 87:
			c.notice()
		case k < 88:
			// Partition one link (both ways) or heal all.
			if rng.Intn(2) == 0 {
				clear(cut)
			} else {
				a, b := c.order[rng.Intn(len(c.order))], c.order[rng.Intn(len(c.order))]
				cut[[2]NodeID{a, b}], cut[[2]NodeID{b, a}] = true, true
			}
		case k < 90:
			// A process dies after sending its Ready's messages but before
			// its writes reached the disk; the storage id is kept (nothing
			// it was told to persist had been promised by it).
			id := c.order[rng.Intn(len(c.order))]
			nd := c.nodes[id]
			if nd.up && nd.r.HasReady() && impaired() < f {
				rd := nd.r.Ready()
				c.queue = append(c.queue, rd.Messages...)
				c.deliver() // the messages left before the process died
				c.crash(id)
			}
		case k < 94:
			id := c.order[rng.Intn(len(c.order))]
			if c.nodes[id].up && impaired() < f {
				c.crash(id)
			}
		case k < 96:
			id := c.order[rng.Intn(len(c.order))]
			if !c.nodes[id].up {
				c.start(id, false)
				cp.restarted(id)
			}
		default:
			// The directory holds less than peers were told: wiped, cut
			// short by a machine crash, or restored from an older copy.
			// Each takes a new storage id [ID-3].
			id := c.order[rng.Intn(len(c.order))]
			nd := c.nodes[id]
			if !nd.up || impaired() >= f {
				break
			}
			losses[id] = lossNow(c)
			c.crash(id)
			switch rng.Intn(3) {
			case 0:
				c.start(id, true)
			case 1:
				for l := range nd.store.logs {
					if n := len(nd.store.logs[l]); n > 0 {
						nd.store.logs[l] = nd.store.logs[l][:rng.Intn(n)]
					}
				}
				nd.sid = c.newSID(id)
				c.start(id, false)
			default:
				if snap, ok := snaps[id]; ok {
					nd.store = snap
				} else {
					nd.store = &memLog{}
				}
				nd.sid = c.newSID(id)
				c.start(id, false)
			}
			cp.restarted(id)
			wiped[id] = true
		}
		if rng.Intn(20) == 0 {
			id := c.order[rng.Intn(len(c.order))]
			snaps[id] = c.nodes[id].store.clone()
		}
		c.processReady()
		for id, a := range c.acks {
			if a.Err == nil {
				acked[payloadOf[id]] = true
			}
		}
		// A wiped replica is whole again once a serving leader has counted
		// it holding that leader's committed log.
		// and the control plane holds a report that says so.
		if l := c.leader(); l != "" && cp.report != nil {
			for id := range wiped {
				for _, fl := range cp.report.Followers {
					if fl.Broker == string(id) && fl.StorageID == string(c.nodes[id].sid) && fl.CaughtUp &&
						holdsAll(c.nodes[id].store, acked) {
						delete(wiped, id)
					}
				}
			}
		}
		if violation != nil {
			return fmt.Errorf("step %d: %w\n%s", step, violation, c.statusLines())
		}
		if err := checkInvariants(c, acked, lastCommit, inc); err != nil {
			return fmt.Errorf("step %d: %w\n%s", step, err, c.statusLines())
		}
	}
	// Liveness smoke check: heal everything and the shard serves again.
	c.notice()
	c.lateNotice = false
	for _, id := range c.order {
		if !c.nodes[id].up {
			c.start(id, false)
			cp.restarted(id)
		}
	}
	for i := 0; i < 40 && c.leader() == ""; i++ {
		cp.run(1)
		cp.decide()
	}
	if d := placement.Decide(cp.input()); c.leader() == "" && d.Action == placement.Keep && !countedQuorum(c) {
		// The assigned leader cannot fence: too few of the replicas its
		// assignment counted still present those ids (a known limit).
		waits++
		waitReasons["FenceStuck"]++
	} else if c.leader() == "" && d.Action == placement.Wait {
		// Placement waits rather than guess (e.g. the leader lost its
		// directory before its first report); that is allowed.
		waits++
		waitReasons[d.Reason.String()+"/"+fmt.Sprint(len(d.Candidates))]++
		if dbgDecisions {
			t.Logf("wait: %+v\n%s", d, c.statusLines())
		}
	} else if c.leader() == "" {
		return fmt.Errorf("no serving leader after healing: assign %+v decision %+v\n%s", c.assign, placement.Decide(cp.input()), c.statusLines())
	}
	return checkInvariants(c, acked, lastCommit, inc)
}

func holdsAll(s *memLog, acked map[string]bool) bool {
	have := map[string]bool{}
	for _, r := range s.logs[record.LogData] {
		have[string(r.Payload)] = true
	}
	for p := range acked {
		if !have[p] {
			return false
		}
	}
	return true
}

func checkInvariants(c *cluster, acked map[string]bool, lastCommit map[NodeID][numLogs]uint64, inc map[NodeID]uint64) error {
	leaders := map[uint64]NodeID{}
	var newest NodeID
	var newestEpoch uint64
	for _, id := range c.order {
		nd := c.nodes[id]
		if !nd.up {
			continue
		}
		st := nd.r.Status()
		if st.Role == RoleLeader {
			if o, ok := leaders[st.Epoch]; ok && o != id {
				return fmt.Errorf("two leaders at epoch %d: %s and %s", st.Epoch, o, id)
			}
			leaders[st.Epoch] = id
			if st.FenceCommitted && st.Epoch > newestEpoch {
				newest, newestEpoch = id, st.Epoch
			}
		}
		if inc[id] != nd.inc {
			inc[id] = nd.inc
			lastCommit[id] = [numLogs]uint64{}
		}
		for l := range st.Committed {
			if st.Committed[l] < lastCommit[id][l] {
				return fmt.Errorf("%s: %s committed moved back", id, record.LogKind(l))
			}
		}
		lastCommit[id] = st.Committed
	}
	if newest != "" && newestEpoch == c.epoch && !holdsAll(c.nodes[newest].store, acked) {
		return fmt.Errorf("serving leader %s at epoch %d lost an acknowledged record", newest, newestEpoch)
	}
	// Committed offsets agree everywhere.
	for i, a := range c.order {
		for _, b := range c.order[i+1:] {
			na, nb := c.nodes[a], c.nodes[b]
			if !na.up || !nb.up {
				continue
			}
			ca := na.r.Status().Committed[record.LogData]
			cb := nb.r.Status().Committed[record.LogData]
			n := min(ca, cb)
			la, lb := na.store.logs[record.LogData], nb.store.logs[record.LogData]
			for o := uint64(0); o < n; o++ {
				if int(o) >= len(la) || int(o) >= len(lb) {
					return fmt.Errorf("%s/%s: committed offset %d missing", a, b, o)
				}
				ra, rb := la[o], lb[o]
				if ra.Epoch != rb.Epoch || string(ra.Payload) != string(rb.Payload) {
					return fmt.Errorf("%s/%s disagree at committed offset %d", a, b, o)
				}
			}
		}
	}
	_ = placement.Keep
	return nil
}

// countedQuorum says whether a quorum of the assignment's counted replicas
// still present the counted ids.
func countedQuorum(c *cluster) bool {
	n := 0
	for id, sid := range c.assign.Counted {
		if c.nodes[id].sid == sid {
			n++
		}
	}
	return n >= len(c.order)/2+1
}

// sameRecord says whether s holds r (same offset, epoch and payload).
func sameRecord(s *memLog, r record.Record) bool {
	recs := s.logs[record.LogData]
	return int(r.Offset) < len(recs) && recs[r.Offset].Epoch == r.Epoch && string(recs[r.Offset].Payload) == string(r.Payload)
}

// checkAckAndReportTruth checks what a leader claims when it claims it: a
// Quorum acknowledgement is held by a quorum of replicas right now (All: by
// every replica); a follower reported caught up under the id it still has
// holds the leader's data log up to the reported position.
//
// This is stricter than "no acknowledged record is lost": the rules let an
// answer given just before a fault (a wipe) count, so in a runtime where
// the leader's own write can land after a follower's answer, a follower
// wiped in between makes an acknowledgement held by one replica fewer (a
// fault the fault budget pays for; recovery still finds the record). This
// harness persists the leader's writes before any answer can arrive, so
// the strict check holds under the real rules and catches the twins of
// [RP-4] and [RP-5], whose damage the id-checked recovery otherwise
// absorbs.
//
// One refinement: a replica whose directory lost data (wiped, cut short,
// restored) still counts as holding an offset that was already committed
// when it lost it (the count was true when made), and any offset
// acknowledged in the same pass of the same leader (its answer of that
// pass counts under [RP-5] until the leader sees the new id; the fault
// budget pays for it).
func checkAckAndReportTruth(c *cluster, n NodeID, rd Ready, losses map[NodeID]loss) error {
	leader := c.nodes[n].store
	for _, a := range rd.Acks {
		if a.Err != nil || a.Log != record.LogData {
			continue
		}
		for o := a.First; o < a.End; o++ {
			r := leader.logs[record.LogData][o]
			holders := 0
			for _, id := range c.order {
				ls, lost := losses[id]
				switch {
				case sameRecord(c.nodes[id].store, r):
					holders++
				case lost && (o < ls.committed || ls.leader == n && ls.pass == c.nodes[n].r.pass):
					holders++
				}
			}
			if holders < len(c.order)/2+1 {
				return fmt.Errorf("%s acknowledged offset %d held by only %d replicas", n, o, holders)
			}
		}
	}
	if rep := rd.Report; rep != nil {
		pos := rep.Position[record.LogData]
		for _, f := range rep.Followers {
			nd := c.nodes[f.Node]
			if !f.CaughtUp || nd.sid != f.StorageID {
				continue
			}
			for o := uint64(0); o < pos; o++ {
				if !sameRecord(nd.store, leader.logs[record.LogData][o]) {
					return fmt.Errorf("%s reported %s caught up to %d under %s, but it lacks offset %d", n, f.Node, pos, f.StorageID, o)
				}
			}
		}
	}
	return nil
}

// TestTwinsAreLoadBearing switches off one rule at a time and requires the
// random schedules to find a violation within a bounded number of seeds
// (the real rules find none above). The twins are detected by different
// invariants: a report or an acknowledgement that claims more than the
// replicas hold ([RP-3], [RP-4], [RP-5]), or a serving leader that lost an
// acknowledged record (the fence id check).
func TestTwinsAreLoadBearing(t *testing.T) {
	twins := []struct {
		name  string
		rules Rules
	}{
		{"RP-3", Rules{DisableIDReset: true}},
		{"RP-4", Rules{DisableIdleProbe: true}},
		{"RP-5", Rules{DisablePassCounting: true}},
		{"fence-id", Rules{DisableFenceIDCheck: true}},
	}
	for _, tw := range twins {
		t.Run(tw.name, func(t *testing.T) {
			for seed := int64(1); seed <= 1500; seed++ {
				for _, r := range []int{3, 5} {
					if err := runScheduleRules(t, seed, r, 300, tw.rules); err != nil {
						first, _, _ := strings.Cut(err.Error(), "\n")
						t.Logf("twin %s fails at seed %d R=%d: %s", tw.name, seed, r, first)
						return
					}
				}
			}
			t.Fatalf("twin %s found no violation in 1500 seeds: the rule is not load-bearing here", tw.name)
		})
	}
}

// loss is what the acknowledging side knew when a replica lost data: the
// leader's committed data position (counted before the loss) and pass.
type loss struct {
	leader    NodeID
	pass      uint64
	committed uint64
}

// lossNow records the current leader's view at a replica's data loss.
func lossNow(c *cluster) loss {
	for _, id := range c.order {
		nd := c.nodes[id]
		if nd.up && nd.r.Status().Role == RoleLeader {
			return loss{leader: id, pass: nd.r.pass, committed: nd.r.committed[record.LogData]}
		}
	}
	return loss{}
}
