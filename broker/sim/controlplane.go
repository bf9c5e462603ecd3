package sim

import (
	"fmt"
	"time"

	"felix.dev/felix/broker/placement"
	"felix.dev/felix/broker/record"
	"felix.dev/felix/broker/replication"
)

// registration is the control plane's registry record of one broker.
type registration struct {
	known        bool
	sid          replication.StorageID
	inc          uint64
	registeredAt time.Time
	lastHB       int
	lastHBAt     time.Time
	state        placement.BrokerState
}

// controlPlane is the simulated operator: registry, heartbeats, the latest
// report of the assigned leader, the assignment.
type controlPlane struct {
	reg    []registration
	assign *placement.Assignment
	report *placement.Report
	// reportPos is the committed position per log (record.LogKinds order)
	// of the core report cp.report was written from. Placement, like the
	// FelixShard's status.report, sees only the data log's (Position); a
	// follower the core calls caught up confirmed every log up to its
	// position here [RP-6], which checkPromotion holds it to.
	reportPos [numLogs]uint64
	// waiting is the reason of the current wait streak ("" when none).
	waiting string
}

// clock converts simulated ticks to the control plane's time.
func clock(t int) time.Time {
	return time.Unix(1_000_000, 0).Add(time.Duration(t) * time.Second)
}

// stamp is the control plane's clock now: the tick, plus a microsecond per
// earlier stamp, so that things the control plane records one after the
// other (a report, then a registration) never share an instant.
func (s *simulation) stamp() time.Time {
	s.seq++
	return clock(s.now).Add(time.Duration(s.seq) * time.Microsecond)
}

// epoch is the current assignment's epoch (0 before the first).
func (cp *controlPlane) epoch() uint64 {
	if cp.assign == nil {
		return 0
	}
	return cp.assign.Epoch
}

// coreAssignment converts the control plane's assignment for the core.
func coreAssignment(a *placement.Assignment) replication.Assignment {
	out := replication.Assignment{Leader: replication.NodeID(a.Leader), Epoch: a.Epoch,
		LeaderIncarnation: a.LeaderIncarnation, Counted: map[replication.NodeID]replication.StorageID{}}
	for n, id := range a.Counted {
		out.Counted[replication.NodeID(n)] = replication.StorageID(id)
	}
	return out
}

// placementReport converts a core report, stamped when it is written (an
// upper bound on when the leader's view in it was taken), with ViewAt the
// start of the tick its pass started at (a lower bound; none if viewAt is
// -1) [CP-1]. The simulator's clocks agree, so placement runs with no
// clock skew.
func placementReport(r *replication.Report, viewAt int, at time.Time) *placement.Report {
	p := &placement.Report{Leader: string(r.Leader), LeaderIncarnation: r.LeaderIncarnation,
		LeaderStorageID: string(r.LeaderStorageID), Epoch: r.Epoch, TakenAt: at,
		Position: r.Position[record.LogData]}
	if viewAt >= 0 {
		p.ViewAt = clock(viewAt)
	}
	for _, f := range r.Followers {
		p.Followers = append(p.Followers, placement.FollowerReport{Broker: string(f.Node),
			StorageID: string(f.StorageID), CaughtUp: f.CaughtUp, Confirmed: f.Confirmed[record.LogData]})
	}
	return p
}

// input builds placement's input from the registry.
func (s *simulation) placementInput() placement.Input {
	cp := &s.cp
	in := placement.Input{Now: s.stamp(), NodeExpiry: nodeExpiryTicks * time.Second,
		Heartbeat: heartbeatTicks * time.Second, Report: cp.report, Brokers: map[string]placement.Broker{},
		Twin: s.cfg.Placement}
	for i, n := range s.nodes {
		in.Replicas = append(in.Replicas, string(n.id))
		g := cp.reg[i]
		if !g.known {
			continue
		}
		in.Brokers[string(n.id)] = placement.Broker{StorageID: string(g.sid), Incarnation: g.inc,
			RegisteredAt: g.registeredAt, State: g.state, LastHeartbeat: g.lastHBAt}
	}
	if s.cfg.PreferredLeader {
		in.Preferred = string(s.nodes[s.cfg.Seed%uint64(len(s.nodes))].id)
		in.PreferredAfter = preferredSettleTicks * time.Second
	}
	if s.cfg.DrainLeader {
		in.Draining = map[string]bool{string(s.nodes[(s.cfg.Seed+1)%uint64(len(s.nodes))].id): true}
	}
	if cp.assign != nil {
		a := *cp.assign
		in.Assignment = &a
	}
	return in
}

// cpStep is one control-plane reconcile: heartbeats, the leader's report,
// placement, and assignment delivery (with watch lag).
func (s *simulation) cpStep(lag func() bool) {
	cp := &s.cp
	for i, n := range s.nodes {
		g := &cp.reg[i]
		if !g.known {
			continue
		}
		if n.running() && !s.net.cpCut[i] {
			g.lastHB, g.lastHBAt = s.now, s.stamp()
			g.state = placement.Up
		} else if s.now-g.lastHB > nodeExpiryTicks {
			g.state = placement.Down
		}
	}
	if a := cp.assign; a != nil {
		if l := s.nodeByName(a.Leader); l != nil && l.running() && !s.net.cpCut[l.idx] {
			s.takeReport(l, a)
		}
	}
	s.updateWhole()
	s.decide()
	if cp.assign == nil {
		return
	}
	ca := coreAssignment(cp.assign)
	for i, n := range s.nodes {
		if !n.running() || s.net.cpCut[i] || n.assignSeen >= ca.Epoch || lag() {
			continue
		}
		n.assignSeen = ca.Epoch
		n.r.Assign(ca)
		s.notePass(n)
	}
}

// decide runs placement and applies a promotion.
func (s *simulation) decide() {
	cp := &s.cp
	d := placement.Decide(s.placementInput())
	switch d.Action {
	case placement.Wait:
		if cp.waiting != d.Reason.String() {
			cp.waiting = d.Reason.String()
			s.stats.Waits[cp.waiting]++
			s.tracef("  placement waits: %s", d.Reason)
		}
		return
	case placement.Keep:
		cp.waiting = ""
		return
	}
	cp.waiting = ""
	if !s.cfg.noPromotionCheck {
		s.checkPromotion(d)
	}
	s.stats.Promotions++
	if d.Reason == placement.ReasonPreferredLeader || d.Reason == placement.ReasonLeaderDrain {
		s.stats.Switchovers++
	}
	a := &placement.Assignment{Leader: d.Leader, Epoch: d.Epoch, LeaderIncarnation: d.LeaderIncarnation,
		Counted: d.Counted}
	cp.assign = a
	s.tracef("  placement promotes %s at e%d inc%d (%s) counted=%s", d.Leader, d.Epoch, d.LeaderIncarnation,
		d.Reason, renderCounted(d.Counted))
}

func renderCounted(m map[string]string) string {
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	sortStrings(keys)
	out := "{"
	for i, k := range keys {
		if i > 0 {
			out += " "
		}
		out += k + ":" + m[k]
	}
	return out + "}"
}

// renderReport renders a report placement reads, with the per-log
// positions of the core report it was written from when any log but the
// data log has records (placement reads the data log's only).
func renderReport(r *placement.Report, core *replication.Report) string {
	others := false
	for _, l := range record.LogKinds {
		others = others || l != record.LogData && core.Position[l] > 0
	}
	out := fmt.Sprintf("position=%d", r.Position)
	if others {
		out += fmt.Sprintf(" logs=%v", core.Position)
	}
	for i, f := range r.Followers {
		state := "behind"
		if f.CaughtUp {
			state = "caught-up"
		}
		out += fmt.Sprintf(" %s[id=%q %s confirmed=%d", f.Broker, f.StorageID, state, f.Confirmed)
		if others {
			out += fmt.Sprintf(" logs=%v", core.Followers[i].Confirmed)
		}
		out += "]"
	}
	return out
}
