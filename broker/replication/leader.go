package replication

import "felix.dev/felix/broker/record"

// startPass closes the current pass, reporting it [RP-6], and opens the
// next one: every follower gets a new exchange on every log.
func (r *Replica) startPass() {
	if r.fenceCommitted && r.pass > 0 {
		r.out.Report = r.report()
	}
	r.pass++
	for _, n := range r.order {
		r.beginExchange(r.peers[n])
	}
	for _, l := range record.LogKinds {
		r.updateMarks(l)
	}
}

// beginExchange starts an exchange with a follower. It first looks at the
// storage id the follower's connection presented [RP-2]: a different id
// than the cursor was learned under resets the cursor to the shard's base
// with nothing confirmed, on every log [RP-3]; a failed lookup leaves the
// cursor alone and sends nothing (the shipping would meet the same
// failure). Then it sends at least one request per log, so the exchange
// ends only with the follower saying where it really is [RP-4].
func (r *Replica) beginExchange(p *peer) {
	if !p.connOK {
		return
	}
	if !p.cursorIDKnown || p.connID != p.cursorID {
		r.adoptID(p)
	}
	for _, l := range record.LogKinds {
		c := &p.cursors[l]
		c.inflight = 0
		if c.known {
			c.next = c.confirmed
		} else {
			c.next = r.logs[l].tail
		}
		if r.cfg.Rules.DisableIdleProbe && c.known && c.confirmed >= r.logs[l].tail {
			// Twin: "up to date" without asking.
			c.answered = r.pass
			continue
		}
		r.shipOne(p, l)
		r.ship(p, l)
	}
}

// adoptID makes the connection's id the cursor's id, resetting the
// cursors unless the twin switch keeps them [RP-3].
func (r *Replica) adoptID(p *peer) {
	if !p.cursorIDKnown || !r.cfg.Rules.DisableIDReset {
		for _, l := range record.LogKinds {
			p.cursors[l] = cursor{next: r.logs[l].tail, confirmed: r.logs[l].base}
		}
	}
	p.cursorID, p.cursorIDKnown = p.connID, true
}

// ship sends further Appends to p on log l while there is something to
// ship and room in flight.
func (r *Replica) ship(p *peer, l record.LogKind) {
	if !p.connOK || r.role != RoleLeader {
		return
	}
	c := &p.cursors[l]
	for c.next < r.logs[l].tail && c.inflight < r.cfg.MaxInflight {
		if !r.shipOne(p, l) {
			return
		}
	}
}

// shipOne sends one Append from the cursor's next offset (with no records
// when the cursor is at the tail). It reports false when the records could
// not be read.
func (r *Replica) shipOne(p *peer, l record.LogKind) bool {
	if !p.connOK {
		return false
	}
	c := &p.cursors[l]
	v := &r.logs[l]
	if c.next > v.tail {
		c.next = v.tail
	}
	recs, err := v.read(r.cfg.Log, l, c.next, v.tail, r.cfg.MaxBatch)
	if err != nil {
		return false
	}
	m := Message{Type: MsgAppend, To: p.node, Conn: p.conn, Epoch: r.epoch, Pass: r.pass, Log: l,
		Index: c.next, Records: recs, Commit: r.committed[l]}
	if c.next > v.base {
		m.PrevEpoch, _ = v.epochAt(c.next - 1)
	}
	r.send(m)
	c.next += uint64(len(recs))
	c.inflight++
	return len(recs) > 0
}

// onAppendResp takes a follower's answer: where it really is.
func (r *Replica) onAppendResp(m Message) {
	p := r.peers[m.From]
	if !p.connOK || m.Conn != p.conn {
		return // an answer over a connection that is no longer the peer's
	}
	if !p.cursorIDKnown || p.connID != p.cursorID {
		// The answer describes another copy than the cursor: start over.
		r.beginExchange(p)
		return
	}
	l := m.Log
	c := &p.cursors[l]
	if c.inflight > 0 {
		c.inflight--
	}
	v := &r.logs[l]
	if m.Match {
		end := m.MatchEnd
		if end > v.tail {
			end = v.tail
		}
		// Under one storage id the prefix a follower shares with the
		// leader of the current epoch only grows, so answers that arrive
		// out of order cannot lower it.
		if end > c.confirmed || !c.known {
			c.confirmed = end
		}
		if c.next < c.confirmed {
			c.next = c.confirmed
		}
	} else {
		// Under one storage id the shared prefix only grows ([ID-3]
		// rotates the id whenever a directory may hold less), so a lower
		// refusal is a stale answer and is ignored. A broker that
		// presents no storage id keeps its cursor across a wipe, so for
		// it a refusal is the only news of the loss [RP-4]: take it.
		// Lowering confirmed only claims less; the committed position
		// never moves back.
		cp := v.commonPrefix(LogPosition{Base: m.Base, Tail: m.Tail, Epochs: m.Epochs})
		if cp > c.confirmed || !c.known || p.cursorID == "" {
			c.confirmed = cp
		}
		c.next = cp
		c.inflight = 0
		r.shipOne(p, l)
	}
	c.known = true
	if m.Pass == r.pass {
		c.answered = r.pass
	}
	r.ship(p, l)
	r.updateMarks(l)
}

// counts says whether p's position on l counts for the marks now [RP-5]:
// answered in the current pass over a connection presenting the cursor's
// id (checked when the answer landed), and, until the fence is committed,
// presenting the id placement counted.
func (r *Replica) counts(p *peer, l record.LogKind) bool {
	c := &p.cursors[l]
	ok := c.answered != 0 && c.answered == r.pass
	if r.cfg.Rules.DisablePassCounting {
		ok = c.known
	}
	if !r.fenceCommitted && !r.idCounted(p.node, p.cursorID) {
		ok = false
	}
	return ok
}

// idCounted says whether node presenting id may count for the recovery and
// fence quorums: it must present the id placement counted it under.
func (r *Replica) idCounted(node NodeID, id StorageID) bool {
	if r.cfg.Rules.DisableFenceIDCheck {
		return true
	}
	exp, ok := r.assign.Counted[node]
	return ok && exp == id
}

// updateMarks recounts the committed position and the all-replicas mark of
// log l and releases the acknowledgements they allow. Marks move only up,
// and only past the fence: a position counts only once it includes a
// record of the current epoch.
func (r *Replica) updateMarks(l record.LogKind) {
	if r.role != RoleLeader {
		return
	}
	v := &r.logs[l]
	held := make([]uint64, 0, len(r.order)+1)
	counted := make([]bool, 0, len(r.order)+1)
	held = append(held, v.stable)
	counted = append(counted, r.fenceCommitted || r.idCounted(r.cfg.Self, r.cfg.SelfStorageID))
	for _, n := range r.order {
		p := r.peers[n]
		held = append(held, p.cursors[l].confirmed)
		counted = append(counted, r.counts(p, l))
	}
	// The leader is always one of the quorum: a position is committed only
	// once the leader's own disk holds it too, so a leader that keeps its
	// storage id holds everything it acknowledged.
	if m := min(QuorumMark(v.base, held, counted, r.quorum), v.stable); m > r.fenceOffset[l] && m > r.committed[l] {
		r.committed[l] = m
	}
	if m := QuorumMark(v.base, held, counted, len(held)); m > r.fenceOffset[l] && m > r.allMark[l] {
		r.allMark[l] = m
	}
	if !r.fenceCommitted {
		for _, k := range record.LogKinds {
			if r.committed[k] <= r.fenceOffset[k] {
				return
			}
		}
		r.fenceCommitted = true
		for _, k := range record.LogKinds {
			r.updateMarks(k)
		}
		// Report at once: the control plane learns the ids this epoch
		// counted without waiting for the pass to end.
		r.out.Report = r.report()
		return
	}
	if r.committed[l] > r.lastCommits[l] {
		r.lastCommits[l] = r.committed[l]
		r.out.Commits = append(r.out.Commits, CommitAdvance{Log: l, Committed: r.committed[l]})
	}
	r.releaseAcks(l)
}

// releaseAcks acknowledges the pending proposals of l that their mode now
// allows. Nothing is acknowledged before the fence is committed.
func (r *Replica) releaseAcks(l record.LogKind) {
	if !r.fenceCommitted {
		return
	}
	marks := [3]uint64{r.logs[l].stable, r.committed[l], r.allMark[l]}
	for mode := range r.pending[l] {
		q := r.pending[l][mode]
		i := 0
		for i < len(q) && q[i].End <= marks[mode] {
			r.out.Acks = append(r.out.Acks, q[i])
			i++
		}
		if i > 0 {
			r.pending[l][mode] = append(q[:0:0], q[i:]...)
		}
	}
}

// report describes the pass that is ending [RP-6].
func (r *Replica) report() *Report {
	rep := &Report{
		Shard: r.cfg.Shard, Epoch: r.epoch, Leader: r.cfg.Self,
		LeaderIncarnation: r.cfg.Incarnation, LeaderStorageID: r.cfg.SelfStorageID,
		Pass: r.pass, Position: r.committed,
	}
	for _, n := range r.order {
		p := r.peers[n]
		fr := FollowerReport{Node: n, Answered: true, CaughtUp: true}
		if p.cursorIDKnown {
			fr.StorageID = p.cursorID
		}
		for _, l := range record.LogKinds {
			c := &p.cursors[l]
			fr.Confirmed[l] = c.confirmed
			if !r.counts(p, l) {
				fr.Answered = false
			}
			if c.confirmed < r.committed[l] {
				fr.CaughtUp = false
			}
		}
		fr.CaughtUp = fr.CaughtUp && fr.Answered && p.cursorIDKnown
		rep.Followers = append(rep.Followers, fr)
	}
	return rep
}
