package replication

import "felix.dev/felix/broker/record"

// recoveryState is a newly promoted leader's progress: it probes every
// replica at its new epoch, and once a quorum whose ids match the
// assignment's Counted has answered, copies the best of their logs (highest
// last epoch, then longest) before writing its fence. Every committed
// record is in that best log: it was held by a majority whose members kept
// their ids (placement counted them), which meets this quorum.
type recoveryState struct {
	planned bool
	target  [numLogs]fetchTarget
}

// fetchTarget is the log one recovering log copies from.
type fetchTarget struct {
	from NodeID
	end  uint64
	done bool
}

// startRecovery begins leading r.epoch.
func (r *Replica) startRecovery() {
	r.role = RoleRecovering
	r.fenceCommitted = false
	r.deferred = nil
	for _, n := range r.order {
		p := r.peers[n]
		p.cursorIDKnown = false
		p.cursors = [numLogs]cursor{}
	}
	for i := range r.logs {
		r.committed[i] = r.lastCommits[i]
		r.allMark[i] = r.logs[i].base
	}
	r.epochBehind = false
	r.startRecoveryRound()
}

// startRecoveryRound probes every peer afresh (on promotion and every pass
// until the fence is written).
func (r *Replica) startRecoveryRound() {
	r.pass++
	r.recovery = recoveryState{}
	for _, n := range r.order {
		p := r.peers[n]
		p.probed = false
		r.sendProbe(p)
	}
	r.maybePlan()
}

func (r *Replica) sendProbe(p *peer) {
	if p.connOK {
		r.send(Message{Type: MsgProbe, To: p.node, Conn: p.conn, Epoch: r.epoch, Pass: r.pass})
	}
}

// onProbeResp records a peer's positions if it answered this round over
// its current connection presenting the id placement counted.
func (r *Replica) onProbeResp(m Message) {
	p := r.peers[m.From]
	if !p.connOK || m.Conn != p.conn || m.Pass != r.pass || !r.idCounted(p.node, p.connID) {
		return
	}
	p.probed = true
	p.probedPos = m.Logs
	r.maybePlan()
}

// better orders logs by last epoch, then length.
func better(a, b LogPosition) bool {
	ea, eb := lastEpochOf(a), lastEpochOf(b)
	return ea > eb || (ea == eb && a.Tail > b.Tail)
}

// maybePlan chooses, per log, the best log of the answered quorum and
// starts copying it.
func (r *Replica) maybePlan() {
	if r.recovery.planned {
		return
	}
	selfOK := r.idCounted(r.cfg.Self, r.cfg.SelfStorageID)
	n := 0
	if selfOK {
		n++
	}
	for _, id := range r.order {
		if r.peers[id].probed {
			n++
		}
	}
	if n < r.quorum {
		return
	}
	var best [numLogs]NodeID
	var bestPos [numLogs]LogPosition
	for _, l := range record.LogKinds {
		v := &r.logs[l]
		if selfOK {
			best[l], bestPos[l] = r.cfg.Self, v.full()
		}
		for _, id := range r.order {
			p := r.peers[id]
			if p.probed && (best[l] == "" || better(p.probedPos[l], bestPos[l])) {
				best[l], bestPos[l] = id, p.probedPos[l]
			}
		}
		if lastEpochOf(bestPos[l]) >= r.epoch || lastEpochOf(v.full()) >= r.epoch {
			// Fence guard: the log we would fence over, or our own,
			// already holds records of our epoch or a later one (epochs
			// restarted, e.g. after a restore from snapshots). Writing
			// nothing (not even a truncation), we stay recovering and say
			// so.
			r.epochBehind = true
			return
		}
	}
	r.recovery.planned = true
	for _, l := range record.LogKinds {
		v := &r.logs[l]
		t := &r.recovery.target[l]
		if best[l] == r.cfg.Self {
			t.done = true
			continue
		}
		// The common prefix counts from the higher base. If the best log
		// starts above our tail, or nothing of ours can be checked against
		// it at its start, the fetch from our tail is answered with the
		// source's base and onFetchResp resets our log there.
		cp := v.commonPrefix(bestPos[l])
		r.truncateLocal(l, cp)
		t.from, t.end = best[l], bestPos[l].Tail
		if v.tail >= t.end {
			t.done = true
			continue
		}
		r.sendFetch(l)
	}
	r.maybeFinishRecovery()
}

func (r *Replica) sendFetch(l record.LogKind) {
	t := &r.recovery.target[l]
	p := r.peers[t.from]
	if p == nil || !p.connOK {
		return
	}
	r.send(Message{Type: MsgFetch, To: p.node, Conn: p.conn, Epoch: r.epoch, Pass: r.pass, Log: l,
		Index: r.logs[l].tail, Max: r.cfg.MaxBatch})
}

// onFetchResp appends records copied from the best log.
func (r *Replica) onFetchResp(m Message) {
	p := r.peers[m.From]
	if !p.connOK || m.Conn != p.conn || !r.recovery.planned || !r.idCounted(p.node, p.connID) {
		return
	}
	l := m.Log
	t := &r.recovery.target[l]
	if t.done || t.from != m.From {
		return
	}
	v := &r.logs[l]
	if m.Index != v.tail {
		r.sendFetch(l)
		return
	}
	switch {
	case m.Index < m.Base:
		// The source no longer stores what we asked for: its log starts
		// above our tail. Everything below its base is committed (a base
		// only rises over committed records), so start our log at its
		// base and copy from there.
		if m.Base > m.Tail {
			return // malformed
		}
		r.resetLocal(l, m.Base, 0)
		r.sendFetch(l)
		return
	case m.Index == m.Base && m.Index > v.base && (m.PrevEpoch == 0 || v.prevEpoch(m.Index) != m.PrevEpoch):
		// The source holds no record before Index to compare with ours:
		// our records below Index cannot be checked. They are below the
		// source's base, so committed (and trimmed for the shard): drop
		// them, and take the source's records from Index. We hold nothing
		// at or above Index (Index is our tail).
		r.resetLocal(l, m.Index, m.PrevEpoch)
	case m.Index > v.base:
		if v.prevEpoch(m.Index) != m.PrevEpoch {
			return // the source changed under us; the next round replans
		}
	}
	if r.epoch == 0 || !validRun(m.Records, m.Index, m.PrevEpoch, r.epoch-1) {
		return
	}
	if len(m.Records) > 0 {
		r.appendLocal(l, m.Records)
	}
	if v.tail >= t.end {
		t.done = true
		r.maybeFinishRecovery()
		return
	}
	if len(m.Records) > 0 {
		r.sendFetch(l)
	}
}

// maybeFinishRecovery writes the fence on every log at the new epoch once
// every log holds the best log of the quorum, and starts leading.
func (r *Replica) maybeFinishRecovery() {
	if r.role != RoleRecovering || !r.recovery.planned {
		return
	}
	for _, t := range r.recovery.target {
		if !t.done {
			return
		}
	}
	for _, l := range record.LogKinds {
		v := &r.logs[l]
		if v.tail > v.base {
			if e, _ := v.epochAt(v.tail - 1); e >= r.epoch {
				// Fence guard: never write a fence at an epoch at or
				// below the last epoch of a log.
				r.epochBehind = true
				return
			}
		}
	}
	r.epochBehind = false
	r.role = RoleLeader
	r.fenceCommitted = false
	for _, l := range record.LogKinds {
		v := &r.logs[l]
		r.fenceOffset[l] = v.tail
		r.appendLocal(l, []record.Record{{Offset: v.tail, Epoch: r.epoch, Kind: record.KindFence}})
	}
	// Followers that answered the probe start from the prefix they share
	// with the new log; they still count only once they answer a pass.
	for _, n := range r.order {
		p := r.peers[n]
		if !p.probed || !p.connOK {
			continue
		}
		p.cursorID, p.cursorIDKnown = p.connID, true
		for _, l := range record.LogKinds {
			v := &r.logs[l]
			cp := v.commonPrefix(p.probedPos[l])
			p.cursors[l] = cursor{next: min(cp, v.tail), confirmed: heldPrefix(cp, p.probedPos[l].Tail, v.tail), known: true}
		}
	}
	r.ticks = 0
	r.startPass()
}
