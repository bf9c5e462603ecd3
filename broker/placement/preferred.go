package placement

import "slices"

// preferredLeader decides for a shard whose leader is healthy: keep it, or
// move leadership to the preferred replica (Input.Preferred), or away
// from a draining leader (Input.Draining), in a planned promotion.
//
// A planned promotion is a promotion like any other: the new leader
// recovers from a quorum of the replicas counted here and fences at a new
// epoch before it serves, so every record the current leader committed is
// in the log it starts from (the commit's majority and the recovery's
// quorum share a replica that kept its id). What makes it planned is only
// when it is taken, and that it is taken only when nothing is in doubt:
//
//   - the report is the current leader's, at the current epoch and
//     incarnation, so it describes the copies this assignment built;
//   - the preferred replica is Up, has been registered at its current
//     incarnation for Input.PreferredAfter, and is Eligible under [CP-1]
//     and [CP-2] with its reported id equal to its registered id (a
//     broker without an id is never chosen for a planned change: nothing
//     forces the risk);
//   - a majority of the replicas are counted, so the new leader's recovery
//     can complete without waiting for a replica that cannot be counted.
//
// Otherwise the current assignment is kept (with RecheckAfter when only
// the settling time is missing).
func preferredLeader(in Input, a Assignment) Decision {
	keep := Decision{Action: Keep, Leader: a.Leader, Epoch: a.Epoch, LeaderIncarnation: a.LeaderIncarnation}
	rep := in.Report
	if rep == nil || rep.Leader != a.Leader || rep.Epoch != a.Epoch || rep.LeaderIncarnation != a.LeaderIncarnation {
		return keep
	}
	if in.Draining[a.Leader] {
		return drainLeader(in, a, keep)
	}
	p := in.Preferred
	if p == "" || p == a.Leader || !slices.Contains(in.Replicas, p) || in.Draining[p] {
		return keep
	}
	b, ok := in.Brokers[p]
	if !ok || b.State != Up || b.StorageID == "" {
		return keep
	}
	if wait := b.RegisteredAt.Add(in.PreferredAfter).Sub(in.Now); wait > 0 {
		keep.RecheckAfter = wait
		return keep
	}
	cands, counted := assess(in, a)
	i := slices.IndexFunc(cands, func(c Candidate) bool { return c.Broker == p })
	if i < 0 || !plannable(in, cands[i]) || holding(in, counted) < quorum(in.Replicas) {
		return keep
	}
	return Decision{Action: Promote, Reason: ReasonPreferredLeader, Leader: p, Epoch: a.Epoch + 1,
		LeaderIncarnation: b.Incarnation, Counted: counted, Candidates: cands}
}

// drainLeader moves leadership away from a healthy, draining leader to
// the replica a planned promotion may take: the preferred one when it
// qualifies, else the first qualifying candidate in assess's order
// (highest confirmed first). No settle time: the leader is about to go.
func drainLeader(in Input, a Assignment, keep Decision) Decision {
	cands, counted := assess(in, a)
	if holding(in, counted) < quorum(in.Replicas) {
		return keep
	}
	pick := -1
	for i, c := range cands {
		if c.Broker == a.Leader || in.Draining[c.Broker] || !plannable(in, c) {
			continue
		}
		if pick < 0 || c.Broker == in.Preferred {
			pick = i
		}
	}
	if pick < 0 {
		return keep
	}
	to := cands[pick].Broker
	return Decision{Action: Promote, Reason: ReasonLeaderDrain, Leader: to, Epoch: a.Epoch + 1,
		LeaderIncarnation: in.Brokers[to].Incarnation, Counted: counted, Candidates: cands}
}

// plannable says whether a planned promotion may take candidate c: Up
// with a registered id, Eligible under [CP-1] and [CP-2] with its
// reported id equal to its registered one (a broker without an id is
// never chosen for a planned change: nothing forces the risk).
func plannable(in Input, c Candidate) bool {
	b, ok := in.Brokers[c.Broker]
	return ok && b.State == Up && b.StorageID != "" && c.Verdict == Eligible && c.IDMatch
}
