package replication

import "felix.dev/felix/broker/record"

// startPass closes the current pass, reporting it [RP-6], and opens the
// next one: every follower gets a new exchange on every log.
func (r *Replica) startPass() {
	if r.fenceCommitted && r.pass > 0 {
		r.out.Report = r.report()
	}
	r.pass++
	for _, p := range r.list {
		r.beginExchange(p)
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
//
// No-resend rule: Appends still in flight over the peer's current
// connection, under the cursor's id, are not shipped again. The cursor
// keeps next and inflight when it was last used on this same connection
// and an answer on this log arrived in this pass or the previous one (a
// pass is longer than a round trip, so a pipeline that answered nothing
// for a whole pass has lost its requests, and starts over from
// confirmed). The pass's own request is then sent at next: records if
// the window has room, else an empty Append (which may exceed the
// MaxInflight window by one; it carries no records). A connection
// delivers in order, so that request is answered after every earlier
// one, and its answer says where the follower really is.
func (r *Replica) beginExchange(p *peer) {
	if !p.connOK {
		return
	}
	if !p.cursorIDKnown || p.connID != p.cursorID {
		r.adoptID(p)
	}
	for _, l := range record.LogKinds {
		c := &p.cursors[l]
		v := &r.logs[l]
		keep := c.known && c.conn == p.conn && (c.inflight == 0 || c.heard+1 >= r.pass)
		if !keep {
			c.inflight = 0
			if c.known {
				c.next = c.confirmed
			} else {
				c.next = v.tail
			}
		}
		c.conn = p.conn
		if r.cfg.Rules.DisableIdleProbe && c.known && c.confirmed >= v.tail {
			// Twin: "up to date" without asking.
			c.answered = r.pass
			continue
		}
		sent := c.inflight
		if c.inflight < r.cfg.MaxInflight {
			r.shipOne(p, l)
		}
		if c.inflight == sent {
			// Window full, or the records could not be read: ask where
			// the follower is without records (the next pass retries
			// the read).
			r.sendAppend(p, l, nil)
		}
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
// when the cursor is at the tail). It never reads below the log's base: a
// cursor below it ships from the base. It reports false when it sent an
// empty Append or sent nothing because the records could not be read
// (the cursor is left as it was, so the next pass retries).
func (r *Replica) shipOne(p *peer, l record.LogKind) bool {
	if !p.connOK {
		return false
	}
	c := &p.cursors[l]
	v := &r.logs[l]
	if c.next > v.tail {
		c.next = v.tail
	}
	if c.next < v.base {
		c.next = v.base
	}
	recs, err := v.read(r.cfg.Log, l, c.next, v.tail, r.cfg.MaxBatch)
	if err != nil {
		return false
	}
	r.sendAppend(p, l, recs)
	return len(recs) > 0
}

// sendAppend sends an Append of recs (possibly none) at the cursor's next
// offset and moves next past them.
func (r *Replica) sendAppend(p *peer, l record.LogKind, recs []record.Record) {
	c := &p.cursors[l]
	v := &r.logs[l]
	if c.next > v.tail {
		c.next = v.tail
	}
	if c.next < v.base {
		c.next = v.base
	}
	m := Message{Type: MsgAppend, To: p.node, Conn: p.conn, Epoch: r.epoch, Pass: r.pass, Log: l,
		Index: c.next, Records: recs, Commit: r.committed[l]}
	m.PrevEpoch = v.prevEpoch(c.next)
	if c.next == v.base {
		// Our log starts here: say so, so a follower that cannot match
		// may start its log here (catch-up from the leader's start).
		// PrevEpoch, when we still know it, lets a follower that holds
		// the previous record match without resetting.
		m.Base = v.base
		if len(recs) > 0 {
			c.offered = r.pass
		}
	}
	r.send(m)
	c.next += uint64(len(recs))
	c.inflight++
	c.conn = p.conn
}

// onAppendResp takes a follower's answer: where it really is.
func (r *Replica) onAppendResp(m Message) {
	p := r.peer(m.From)
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
	c.heard = r.pass
	v := &r.logs[l]
	stalled := false
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
		held := heldPrefix(cp, m.Tail, v.tail)
		if held > c.confirmed || !c.known || p.cursorID == "" {
			c.confirmed = held
		}
		c.next = cp
		c.inflight = 0
		if r.acceptable(c, l, cp, m) {
			r.shipOne(p, l)
		} else {
			// The follower would refuse an Append at cp again (its log
			// starts above our tail, or it lacks our log below our base
			// and we cannot vouch that base is committed, or it refused
			// this pass's reset offer): the next pass asks again, so the
			// exchange never loops within a pass.
			stalled = true
		}
	}
	c.known = true
	if m.Pass == r.pass {
		c.answered, c.answeredOn = r.pass, m.Conn
	}
	if !stalled {
		r.ship(p, l)
	}
	r.updateMarks(l)
}

// heldPrefix is what a follower whose common prefix with us is cp really
// holds of our log: cp, unless its log ends below cp (its tail is below
// our base) or cp is beyond our tail (its base is above our tail).
func heldPrefix(cp, followerTail, ourTail uint64) uint64 {
	return min(cp, followerTail, ourTail)
}

// acceptable says whether a follower that answered mismatch with m would
// accept an Append at our common prefix cp: at its own base, at an offset
// whose previous record it holds at our epoch, or at our base when that is
// committed and records follow it (it may then reset its log there; see
// onAppend).
//
// The reset offer is made at most once per pass per cursor: a follower
// that refuses it anyway (an older broker, or its state changed) is asked
// again by the next pass, never in a loop within one.
func (r *Replica) acceptable(c *cursor, l record.LogKind, cp uint64, m Message) bool {
	v := &r.logs[l]
	lo := max(v.base, m.Base)
	switch {
	case cp > v.tail:
		return false
	case cp == m.Base:
		return true
	case cp > lo && cp <= m.Tail:
		return true
	default:
		return cp == v.base && cp <= r.committed[l] && cp < v.tail && c.offered != r.pass
	}
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
	var heldBuf [8]uint64
	var countedBuf [8]bool
	held, counted := heldBuf[:0], countedBuf[:0]
	held = append(held, v.stable)
	counted = append(counted, r.fenceCommitted || r.idCounted(r.cfg.Self, r.cfg.SelfStorageID))
	for _, p := range r.list {
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
		// The Commits just gathered pass the fence on every log: reads may
		// be served once they are applied [TR-4].
		r.out.Serving = r.epoch
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
		switch {
		case i == len(q):
			r.pending[l][mode] = q[:0] // reuse the array from its start
		case i > 0:
			r.pending[l][mode] = q[i:]
		}
	}
}

// CaughtUpGracePasses is how many passes a follower that presents a
// storage id may go without answering, over the connection it last
// answered on, and still be reported caught up (a second at the default
// pass interval): long enough for a slow disk or a loaded machine, short
// enough that a follower cut off is reported behind within a second or
// two (report).
const CaughtUpGracePasses = 10

// report describes the pass that is ending [RP-6].
//
// A follower is caught up when its confirmed position reaches the
// committed one on every log under the cursor's id and it answered: in
// this pass, or, for a follower presenting a storage id, in one of the
// CaughtUpGracePasses passes before it, in this leadership, over the
// connection it still has. Under one
// storage id the prefix a follower holds only grows ([ID-3] rotates the id
// whenever a directory may hold less), so a pass without its answer (a
// slow disk, a busy machine) takes nothing from what its earlier answers
// proved; reporting it behind for that would, if the leader died then,
// leave placement no follower to promote and the shard waiting for ever
// [CP-3]. A silence longer than the grace (a partition that leaves the
// connection open, a frozen process) is reported behind, as [RP-4] wants
// of a follower that does not answer: placement should not pick a
// follower that cannot be reached. A new connection (a restart, a
// reconnect) must be answered again. A follower without an id must answer
// the pass itself: only
// asking can show it lost its log [RP-4], and placement takes the pass's
// start as a lower bound of when it answered [CP-1].
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
		// held: every log answered over the current connection in some
		// pass of this leadership (the cursors are reset when it starts).
		held := p.connOK && p.cursorIDKnown && p.cursorID != ""
		for _, l := range record.LogKinds {
			c := &p.cursors[l]
			fr.Confirmed[l] = c.confirmed
			if !r.counts(p, l) {
				fr.Answered = false
			}
			if c.answered == 0 || c.answeredOn != p.conn || r.pass-c.answered > CaughtUpGracePasses {
				held = false
			}
			if c.confirmed < r.committed[l] && (l == record.LogData || !r.cfg.Rules.CaughtUpDataLogOnly) {
				fr.CaughtUp = false
			}
		}
		fr.CaughtUp = fr.CaughtUp && (fr.Answered || held) && p.cursorIDKnown
		rep.Followers = append(rep.Followers, fr)
	}
	return rep
}
