package placement

import (
	"sort"
	"time"
)

// ReportExpiry is how long a report is believed [CP-2]: twice the node
// expiry timeout plus one heartbeat, since the leader keeps writing after
// it reports and is only declared Down a node expiry after its last
// heartbeat.
func ReportExpiry(nodeExpiry, heartbeat time.Duration) time.Duration {
	return 2*nodeExpiry + heartbeat
}

// Decide returns what to do with one shard. It is pure: the same input
// gives the same decision.
func Decide(in Input) Decision {
	if in.Assignment == nil || in.Assignment.Epoch == 0 {
		return firstAssignment(in)
	}
	a := *in.Assignment
	lb, known := in.Brokers[a.Leader]
	if known && lb.State == Up && lb.Incarnation == a.LeaderIncarnation {
		if !fenced(in.Report, a) && len(a.Counted) > 0 && holding(in, a.Counted) < quorum(in.Replicas) {
			// [CP-3] The assigned leader has not fenced its epoch (it
			// reports only once it has), and fewer than a quorum of the
			// replicas its recovery may count still hold the ids they
			// were counted under: it can never fence. The assignment
			// stays; the shard says why it does not serve.
			return Decision{Action: Wait, Reason: ReasonTooFewCounted, Leader: a.Leader, Epoch: a.Epoch,
				LeaderIncarnation: a.LeaderIncarnation, Candidates: countedVerdicts(in, a.Counted)}
		}
		return preferredLeader(in, a)
	}
	lost := ReasonLeaderUnavailable
	if known && lb.State == Up {
		lost = ReasonLeaderRestarted
	}
	var cands []Candidate
	counted := map[string]string{}
	tooFew := false
	if in.Report != nil {
		cands, counted = assess(in, a)
		if len(cands) > 0 && cands[0].Verdict == Eligible {
			if holding(in, counted) >= quorum(in.Replicas) {
				best := cands[0]
				return Decision{
					Action: Promote, Reason: lost,
					Leader: best.Broker, Epoch: a.Epoch + 1, LeaderIncarnation: in.Brokers[best.Broker].Incarnation,
					Counted: counted, Candidates: cands,
				}
			}
			// [CP-3] An eligible follower, but its recovery and fence
			// could count fewer than a quorum: every other replica lost
			// the copy it was counted under (or was never attested), so
			// records acknowledged by a quorum may be on none of the
			// counted ones. Promoting it would stall in recovery for
			// ever, serving nothing and saying nothing.
			tooFew = true
		}
	}
	if d, ok, short := restartedLeader(in, a, lost, counted); ok {
		d.Candidates = cands
		return d
	} else if short {
		tooFew = true
	}
	if tooFew {
		return Decision{Action: Wait, Reason: ReasonTooFewCounted, Candidates: cands}
	}
	if in.Report == nil {
		return Decision{Action: Wait, Reason: ReasonNoReport}
	}
	return Decision{Action: Wait, Reason: waitReason(cands), Candidates: cands}
}

// quorum is a majority of the replica set: what a leader's recovery and
// fence must count (broker/replication).
func quorum(replicas []string) int { return len(replicas)/2 + 1 }

// fenced reports whether the assigned leader has fenced its epoch: a
// leader reports only once its fence is committed, so a report of the
// assigned leader's incarnation at the assigned epoch shows it.
func fenced(rep *Report, a Assignment) bool {
	return rep != nil && rep.Leader == a.Leader && rep.Epoch == a.Epoch && rep.LeaderIncarnation == a.LeaderIncarnation
}

// holding counts the replicas of counted still registered under the id
// they were counted under: those a recovering leader can still count.
func holding(in Input, counted map[string]string) int {
	n := 0
	for _, r := range in.Replicas {
		id, ok := counted[r]
		if b, registered := in.Brokers[r]; ok && registered && b.State != Left && b.StorageID == id {
			n++
		}
	}
	return n
}

// countedVerdicts describes, replica by replica, why an assigned leader's
// recovery cannot count a quorum: NotCounted for a replica the assignment
// left out, IDChanged for one registered under another id than it was
// counted under (or gone), Eligible for one that still counts.
func countedVerdicts(in Input, counted map[string]string) []Candidate {
	out := make([]Candidate, 0, len(in.Replicas))
	for _, r := range in.Replicas {
		c := Candidate{Broker: r, Verdict: Eligible}
		id, ok := counted[r]
		b, registered := in.Brokers[r]
		switch {
		case !ok:
			c.Verdict = NotCounted
		case !registered || b.State == Left || b.StorageID != id:
			c.Verdict = IDChanged
		default:
			c.IDMatch = id != ""
		}
		out = append(out, c)
	}
	return out
}

// firstAssignment leads a new shard at epoch 1 with the first Up replica in
// replica-set order that is not draining (a draining one only when no
// other is up). Its logs are empty, so every registered replica counts
// under its registered id. A replica that has not registered yet has no id
// to be counted under: counting it under "" would keep it out of the fence
// forever once it registers, so it is left out, and the shard waits until
// a majority of its replicas can be counted.
func firstAssignment(in Input) Decision {
	counted := map[string]string{}
	leader, draining := "", ""
	for _, n := range in.Replicas {
		b, ok := in.Brokers[n]
		if !ok || b.State == Left || b.Incarnation == 0 {
			continue
		}
		counted[n] = b.StorageID
		switch {
		case b.State != Up:
		case in.Draining[n]:
			if draining == "" {
				draining = n
			}
		case leader == "":
			leader = n
		}
	}
	if leader == "" {
		// Only draining replicas are up: one leads rather than none.
		leader = draining
	}
	if leader == "" {
		return Decision{Action: Wait, Reason: ReasonNoReplicaUp}
	}
	if len(counted) < len(in.Replicas)/2+1 {
		return Decision{Action: Wait, Reason: ReasonTooFewRegistered}
	}
	return Decision{Action: Promote, Reason: ReasonNewShard, Leader: leader, Epoch: 1,
		LeaderIncarnation: in.Brokers[leader].Incarnation, Counted: counted}
}

// line is one replica's entry in the report (the leader's own included).
type line struct {
	id        string
	caughtUp  bool
	confirmed uint64
}

// assess rates every replica [CP-1, CP-2] and returns them best first,
// with the ids the new leader's recovery and fence quorums may count.
func assess(in Input, a Assignment) ([]Candidate, map[string]string) {
	rep := in.Report
	expiry := ReportExpiry(in.NodeExpiry, in.Heartbeat)
	// [CP-2] The report lives from the later of its write and its
	// leader's last vouching renewal; [CP-1] its view was taken no later
	// than its write (and no earlier than ViewAt), whatever renewals came
	// after.
	vouched := rep.TakenAt
	if rep.VouchedAt.After(vouched) {
		vouched = rep.VouchedAt
	}
	viewAt := rep.TakenAt
	if in.Twin.FreshnessFromRenewal {
		viewAt = vouched
	}
	ageNow := in.Now.Sub(vouched)
	// [CP-2] A dead leader cannot refresh its last report: while it is
	// still the assigned leader at the incarnation that made the report,
	// and is Down or Left, the report's age stops at its last heartbeat.
	held := false
	heldAge := ageNow
	if lb, ok := in.Brokers[rep.Leader]; ok && rep.Leader == a.Leader &&
		rep.LeaderIncarnation == a.LeaderIncarnation && lb.Incarnation == rep.LeaderIncarnation &&
		(lb.State == Down || lb.State == Left) {
		held = true
		heldAge = max(lb.LastHeartbeat.Sub(vouched), 0)
	}
	lines := map[string]line{rep.Leader: {id: rep.LeaderStorageID, caughtUp: true, confirmed: rep.Position}}
	for _, f := range rep.Followers {
		lines[f.Broker] = line{id: f.StorageID, caughtUp: f.CaughtUp, confirmed: f.Confirmed}
	}
	counted := map[string]string{}
	var cands []Candidate
	for _, n := range in.Replicas {
		b, registered := in.Brokers[n]
		ln, inReport := lines[n]
		c := Candidate{Broker: n, Confirmed: ln.confirmed}
		idMatch := inReport && registered && ln.id != "" && ln.id == b.StorageID
		// Missing means a broker without ids (the registry has none for
		// it). A registered id the report does not name was never attested
		// by the leader: that is no match, however fresh the report. The
		// report's time is its write, which bounds the leader's view only
		// from above, so "fresh at the follower's incarnation" cannot
		// vouch for a copy the leader never named [CP-1]; the shard waits
		// instead [CP-3].
		idMissing := inReport && registered && b.StorageID == ""
		unattested := inReport && registered && ln.id == "" && b.StorageID != ""
		if in.Twin.DisableIDCheck && inReport && registered {
			idMatch, idMissing, unattested = true, false, false
		}
		c.IDMatch = idMatch
		// A missing id counts only from a fresh report taken at the
		// broker's current incarnation, and never from a held one: a
		// restart is the only sign it may have lost its log. It counts
		// under "" (the registry has no id for it), so the carry-over
		// below never carries it into a later round.
		//
		// The write time (viewAt) bounds the view's time only from above:
		// the view may be a pass, the writer's hold and the write queue
		// older. The leader's own time of the view (ViewAt, the start of
		// the pass it describes, on the leader's clock) bounds it from
		// below once the clock skew is taken off; a report without it
		// never makes a missing id fresh [CP-3].
		missingFresh := idMissing && ageNow <= expiry && !viewAt.Before(b.RegisteredAt) &&
			(in.Twin.FreshnessFromRenewal || viewTakenAfter(rep.ViewAt, in.MaxClockSkew, b.RegisteredAt))
		age := ageNow
		if held {
			age = heldAge
		}
		switch {
		case idMatch:
			counted[n] = b.StorageID
		case missingFresh:
			counted[n] = ""
		}
		switch {
		case !registered || b.State != Up:
			c.Verdict = NotUp
		case !inReport:
			c.Verdict = NotInReport
		case unattested:
			c.Verdict = IDNotReported
		case !idMatch && !idMissing:
			c.Verdict = IDChanged
		case idMissing && !missingFresh:
			c.Verdict = IDMissingStale
		case idMatch && age > expiry:
			c.Verdict = ReportTooOld
		case !ln.caughtUp:
			c.Verdict = NotCaughtUp
		default:
			c.Verdict = Eligible
		}
		cands = append(cands, c)
	}
	// A replica whose registered id is still the one the current
	// assignment counted has kept its copy since before this report (the
	// report was taken by that assignment's leader, after it), so it may
	// count too even when the report could not attest its id. Only a
	// non-empty id the assignment counted carries over: a missing-id
	// count ("") holds for the report it came from alone [CP-1].
	if rep.Epoch == a.Epoch && rep.Leader == a.Leader {
		for n, id := range a.Counted {
			if b, ok := in.Brokers[n]; ok && id != "" && b.StorageID == id {
				if _, set := counted[n]; !set {
					counted[n] = id
				}
			}
		}
	}
	sort.SliceStable(cands, func(i, j int) bool { return less(cands[i], cands[j]) })
	return cands, counted
}

// less ranks candidates: eligible first, then highest confirmed, then an
// id match before a missing id, then by name.
func less(a, b Candidate) bool {
	if (a.Verdict == Eligible) != (b.Verdict == Eligible) {
		return a.Verdict == Eligible
	}
	if a.Confirmed != b.Confirmed {
		return a.Confirmed > b.Confirmed
	}
	if a.IDMatch != b.IDMatch {
		return a.IDMatch
	}
	return a.Broker < b.Broker
}

// waitReason summarises why no replica is eligible.
func waitReason(cands []Candidate) Reason {
	up, tooOld := 0, 0
	for _, c := range cands {
		if c.Verdict != NotUp {
			up++
		}
		if c.Verdict == ReportTooOld || c.Verdict == IDMissingStale {
			tooOld++
		}
	}
	switch {
	case up == 0:
		return ReasonNoReplicaUp
	case tooOld > 0:
		return ReasonReportExpired
	default:
		return ReasonNoEligibleFollower
	}
}

// restartedLeader handles a leader that restarted (Up at a newer
// incarnation) when no follower is eligible, e.g. before its first report
// or after the report expired: it holds everything it acknowledged as long
// as its registered id is still the one its assignment counted (or its
// report, made for this assignment, named), so it is promoted again at a
// new epoch. The recovery and fence quorums count, besides the report's
// id-matching replicas, every replica whose registered id is still the one
// the assignment counted; tooFew says they are fewer than a quorum, so
// the leader could never fence again [CP-3].
func restartedLeader(in Input, a Assignment, lost Reason, counted map[string]string) (d Decision, ok, tooFew bool) {
	lb := in.Brokers[a.Leader]
	if lost != ReasonLeaderRestarted || lb.StorageID == "" {
		return Decision{}, false, false
	}
	unchanged := a.Counted[a.Leader] == lb.StorageID
	if r := in.Report; r != nil && r.Leader == a.Leader && r.Epoch == a.Epoch && r.LeaderIncarnation == a.LeaderIncarnation &&
		r.LeaderStorageID == lb.StorageID {
		unchanged = true
	}
	if !unchanged {
		return Decision{}, false, false
	}
	out := map[string]string{a.Leader: lb.StorageID}
	for n, id := range counted {
		out[n] = id
	}
	for n, id := range a.Counted {
		if b, ok := in.Brokers[n]; ok && id != "" && b.StorageID == id {
			out[n] = id
		}
	}
	if holding(in, out) < quorum(in.Replicas) {
		// [CP-3] Its recovery could never count a quorum.
		return Decision{}, false, true
	}
	return Decision{Action: Promote, Reason: ReasonLeaderRestarted, Leader: a.Leader, Epoch: a.Epoch + 1,
		LeaderIncarnation: lb.Incarnation, Counted: out}, true, false
}

// viewTakenAfter reports whether a view the leader took at viewAt, on its
// own clock, was surely taken at or after registeredAt on the control
// plane's clock, given that the leader's clock runs at most skew ahead
// [CP-1]. An unknown viewAt (zero) never is.
func viewTakenAfter(viewAt time.Time, skew time.Duration, registeredAt time.Time) bool {
	if viewAt.IsZero() {
		return false
	}
	return !viewAt.Add(-max(skew, 0)).Before(registeredAt)
}
