package sim

import (
	"fmt"

	"felix.dev/felix/broker/placement"
	"felix.dev/felix/broker/record"
	"felix.dev/felix/broker/replication"
)

// check verifies the invariants after an event.
func (s *simulation) check() {
	if s.fail != nil {
		return
	}
	faulty := 0
	for _, n := range s.nodes {
		if s.faulty(n) {
			faulty++
		}
	}
	if faulty > s.f {
		s.failf(InvCore, "simulator broke its fault budget: %d faulty > %d", faulty, s.f)
		return
	}
	leaders := map[uint64]replication.NodeID{}
	for _, n := range s.nodes {
		if !n.up {
			continue
		}
		st := n.r.Status()
		// At most one replica leads (or recovers as leader of) an epoch.
		if st.Role != replication.RoleFollower {
			if o, ok := leaders[st.Epoch]; ok {
				s.failf(InvTwoLeaders, "%s and %s both lead epoch %d", o, n.id, st.Epoch)
				return
			}
			leaders[st.Epoch] = n.id
		}
		for l := range st.Committed {
			// The committed position never moves back.
			if st.Committed[l] < n.lastCommitted[l] {
				s.failLog(InvCommitBack, record.LogKind(l), "%s: %s committed %d after %d", n.id, record.LogKind(l), st.Committed[l], n.lastCommitted[l])
				return
			}
			n.lastCommitted[l] = st.Committed[l]
			// Replicas agree on every committed offset, across time too.
			// Offsets below the replica's base are gone (compacted below
			// the floor, or dropped by a reset) and are skipped.
			d := n.vol.disk
			for o := max(n.checked[l], d.base(l)); o < st.Committed[l]; o++ {
				rec, ok := d.at(l, o)
				if !ok {
					s.failLog(InvCommittedDisagree, record.LogKind(l), "%s: committed %s offset %d is not in its log [%d,%d)", n.id, record.LogKind(l), o, d.base(l), d.tail(l))
					return
				}
				g := s.committed[l]
				if prev, ok := g[o]; ok {
					if !sameRecord(prev, rec) {
						s.failLog(InvCommittedDisagree, record.LogKind(l), "%s: committed %s offset %d holds %q@e%d, committed before as %q@e%d",
							n.id, record.LogKind(l), o, rec.Payload, rec.Epoch, prev.Payload, prev.Epoch)
						return
					}
				} else {
					g[o] = rec
				}
			}
			n.checked[l] = max(n.checked[l], st.Committed[l])
		}
	}
	// No record acknowledged under Quorum or All is lost: the serving
	// leader of the newest epoch holds every one of them.
	if l := s.servingLeader(); l != nil {
		for lk := range s.acked {
			for _, rec := range s.acked[lk] {
				if rec.Offset < s.floor[lk] {
					continue // trimmed: legitimately gone
				}
				if !l.vol.disk.holds(record.LogKind(lk), rec) {
					s.failLog(InvAckedLost, record.LogKind(lk), "serving leader %s of e%d lacks acknowledged %s record %q at %d (acked at e%d); its log is [%d,%d), floor %d",
						l.id, s.cp.epoch(), record.LogKind(lk), rec.Payload, rec.Offset, rec.Epoch, l.vol.disk.base(lk), l.vol.disk.tail(lk), s.floor[lk])
					return
				}
			}
		}
	}
}

// checkPromotion is [CP-3] from the ground truth: placement may promote a
// follower only if it really holds every acknowledged record below the
// position of the report that called it caught up, on every log of the
// shard, and may re-promote a restarted leader only if it still holds
// every record it acknowledged under its current storage id; otherwise the
// shard must wait. (The new leader's recovery copies the rest from a
// quorum.) Placement reads only the data log's position of a report (as
// the FelixShard's status.report carries), but the core calls a follower
// caught up only once it confirmed every log up to that log's committed
// position [RP-6]: each log is held to the position of the core report the
// control plane's report was written from (controlPlane.reportPos). Only a
// promotion the broker can act on is checked: its process runs at the
// promoted incarnation.
func (s *simulation) checkPromotion(d placement.Decision) {
	n := s.nodeByName(d.Leader)
	if n == nil || s.cp.assign == nil || !n.up || n.inc != d.LeaderIncarnation {
		// A broker that died since its last heartbeat never acts on a
		// promotion made for its old incarnation.
		return
	}
	restarted := d.Leader == s.cp.assign.Leader
	// The assigned leader may also be promoted on a report that calls it a
	// caught-up follower (one an earlier leader wrote): then it is held
	// to that report's positions as well as to its own acknowledgements.
	viaReport := !restarted
	for _, c := range d.Candidates {
		if c.Broker == d.Leader && c.Verdict == placement.Eligible {
			viaReport = true
		}
	}
	var pos [numLogs]uint64
	if s.cp.report != nil {
		pos = s.cp.reportPos
	}
	for lk := range s.acked {
		for i, rec := range s.acked[lk] {
			by := s.ackers[lk][i]
			own := restarted && by.node == n.id && by.sid == n.sid
			reported := viaReport && rec.Offset < pos[lk]
			switch {
			case !own && !reported:
				continue
			case rec.Offset < s.floor[lk]:
				continue // trimmed: legitimately gone
			}
			if !n.vol.disk.holds(record.LogKind(lk), rec) {
				why := fmt.Sprintf("below the report's %s position %d", record.LogKind(lk), pos[lk])
				if own {
					why = fmt.Sprintf("which it acknowledged under its id %s", n.sid)
				}
				s.failLog(InvPromotedIneligible, record.LogKind(lk), "placement promoted %s (%s) at e%d but it lacks acknowledged %s record %q at %d, %s",
					n.id, d.Reason, d.Epoch, record.LogKind(lk), rec.Payload, rec.Offset, why)
				return
			}
		}
	}
}
