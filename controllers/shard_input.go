package controllers

import (
	"sort"
	"time"

	felixv1 "felix.dev/felix/api/v1alpha1"
	"felix.dev/felix/broker/controlplane"
	"felix.dev/felix/broker/placement"
)

// registryEntry is one broker as placement sees it, built from its
// FelixBroker and the heartbeat tracker.
func registryEntry(b *felixv1.FelixBroker, hb Heartbeat, hbOK bool) placement.Broker {
	out := placement.Broker{
		StorageID:   b.Status.StorageID,
		Incarnation: uint64(max(b.Status.Incarnation, 0)),
		State:       placementState(b.Status.State),
	}
	if b.Status.RegisteredAt != nil {
		out.RegisteredAt = registeredBy(b.Status.RegisteredAt.Time)
	}
	switch {
	case hbOK:
		out.LastHeartbeat = hb.ObservedAt
	case b.Status.LastHeartbeat != nil:
		out.LastHeartbeat = b.Status.LastHeartbeat.Time
	}
	return out
}

// registeredBy is the latest instant a registration stored at t may have
// happened: API times are whole seconds, so the registration happened
// before the end of t's second. [CP-1] compares it with the time a
// report's view was taken (also whole seconds, rounded down), so "taken at
// or after the end of the registration's second" implies "taken after the
// registration", never the reverse.
func registeredBy(t time.Time) time.Time {
	return t.Truncate(time.Second).Add(time.Second)
}

// placementState maps the API's state; a broker never seen alive is Down.
func placementState(s felixv1.BrokerState) placement.BrokerState {
	switch s {
	case felixv1.BrokerUp:
		return placement.Up
	case felixv1.BrokerLeft:
		return placement.Left
	default:
		return placement.Down
	}
}

// reportWrittenAt is when the leader last changed status.report, on the
// API server's clock: the time of the "felix-broker" entry in the shard's
// managed fields. Without one (a report written some other way) it falls
// back to the broker's own takenAt.
func reportWrittenAt(sh *felixv1.FelixShard) time.Time {
	for _, mf := range sh.ManagedFields {
		if mf.Manager == controlplane.FieldManager && mf.Subresource == "status" && mf.Time != nil {
			return mf.Time.Time
		}
	}
	if sh.Status.Report != nil {
		return sh.Status.Report.TakenAt.Time
	}
	return time.Time{}
}

// reportVouchedAt is when the report's leader last vouched for the stored
// report (placement.Report VouchedAt, on the control plane's clock): its
// last heartbeat that attested its reports current, provided the reporter
// is the assigned leader at the assigned epoch, attested at the incarnation
// that made the report, and attested after the report was written; zero
// otherwise. A live leader rewrites its report within a heartbeat of every
// change and says so on its Lease, so its renewals keep an unchanged
// report from expiring [CP-2] as a rewrite would (docs/operator.md,
// "Report write rate"). They never move when the view was taken
// (reportWrittenAt): a vouched-for report may lag its leader's view by up
// to a heartbeat, so it is not fresh at an incarnation that began after
// its write [CP-1].
func reportVouchedAt(sh *felixv1.FelixShard, leaderHB Heartbeat, hbOK bool) time.Time {
	t := reportWrittenAt(sh)
	rep, a := sh.Status.Report, sh.Status.Assignment
	if rep == nil || a == nil || !hbOK {
		return time.Time{}
	}
	if rep.Leader == a.Leader && rep.Epoch == a.Epoch && leaderHB.AttestedIncarnation == rep.LeaderIncarnation &&
		!leaderHB.AttestedAt.IsZero() && leaderHB.AttestedAt.After(t) {
		return leaderHB.AttestedAt
	}
	return time.Time{}
}

// placementReport converts status.report: takenAt is when its view was
// written (an upper bound on when it was taken), vouchedAt its leader's
// last vouching renewal, and the report's own viewAt the leader's time of
// the view (a lower bound, on the leader's clock) [CP-1].
func placementReport(rep *felixv1.ShardReport, takenAt, vouchedAt time.Time) *placement.Report {
	if rep == nil {
		return nil
	}
	out := &placement.Report{
		Leader:            rep.Leader,
		LeaderIncarnation: uint64(max(rep.LeaderIncarnation, 0)),
		LeaderStorageID:   rep.LeaderStorageID,
		Epoch:             uint64(max(rep.Epoch, 0)),
		TakenAt:           takenAt,
		VouchedAt:         vouchedAt,
		Position:          uint64(max(rep.Position, 0)),
	}
	if rep.ViewAt != nil {
		out.ViewAt = rep.ViewAt.Time
	}
	for _, f := range rep.Followers {
		out.Followers = append(out.Followers, placement.FollowerReport{
			Broker: f.Name, StorageID: f.StorageID, CaughtUp: f.CaughtUp, Confirmed: uint64(max(f.Confirmed, 0)),
		})
	}
	return out
}

// placementAssignment converts status.assignment.
func placementAssignment(a *felixv1.Assignment) *placement.Assignment {
	if a == nil {
		return nil
	}
	out := &placement.Assignment{Leader: a.Leader, Epoch: uint64(max(a.Epoch, 0)), LeaderIncarnation: uint64(max(a.LeaderIncarnation, 0))}
	if len(a.Counted) > 0 {
		out.Counted = make(map[string]string, len(a.Counted))
		for _, c := range a.Counted {
			out.Counted[c.Name] = c.StorageID
		}
	}
	return out
}

// countedReplicas converts placement's Counted to the API's list, by name.
func countedReplicas(counted map[string]string) []felixv1.CountedReplica {
	out := make([]felixv1.CountedReplica, 0, len(counted))
	for n, id := range counted {
		out = append(out, felixv1.CountedReplica{Name: n, StorageID: id})
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Name < out[j].Name })
	return out
}

// caughtUpCount counts the replicas the current report shows caught up:
// the leader, when the report is the assigned leader's at the assigned
// epoch under the storage id the leader is registered with now, plus each
// follower of the replica set reported caught up under the storage id it
// is registered with now [CP-1]. A report from before its leader's data
// directory was wiped counts nothing: the leader no longer holds what it
// reported.
func caughtUpCount(sh *felixv1.FelixShard, registered map[string]string) int {
	rep, a := sh.Status.Report, sh.Status.Assignment
	if rep == nil || a == nil || rep.Leader != a.Leader || rep.Epoch != a.Epoch {
		return 0
	}
	if id, ok := registered[rep.Leader]; !ok || id == "" || id != rep.LeaderStorageID {
		return 0
	}
	inSet := map[string]bool{}
	for _, r := range sh.Spec.Replicas {
		inSet[r] = true
	}
	n := 1
	for _, f := range rep.Followers {
		id, ok := registered[f.Name]
		if f.CaughtUp && inSet[f.Name] && f.Name != rep.Leader && ok && id != "" && f.StorageID == id {
			n++
		}
	}
	return n
}
