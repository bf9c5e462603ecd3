package replication

import "felix.dev/felix/broker/record"

// stepRequest handles a request from a (recovering) leader: the epoch
// check first, then the request itself.
func (r *Replica) stepRequest(m Message) {
	if !r.epochKnown {
		// A restarted replica answers nothing until the control plane has
		// told it the current epoch.
		return
	}
	if m.Epoch < r.epoch {
		r.send(Message{Type: MsgRefuse, To: m.From, Conn: m.Conn, Epoch: r.epoch, Pass: m.Pass, Log: m.Log})
		return
	}
	if m.Epoch > r.epoch {
		r.observeEpoch(m.Epoch, m.From)
	} else if r.role != RoleFollower || (r.leader != "" && r.leader != m.From) {
		return // this epoch has another leader; never two
	}
	r.leader = m.From
	switch m.Type {
	case MsgAppend:
		r.onAppend(m)
	case MsgProbe:
		r.onProbe(m)
	case MsgFetch:
		r.onFetch(m)
	}
}

// onAppend checks the previous record, truncates a divergent suffix,
// appends, and answers with the follower's true position once the records
// are persisted.
//
// Catch-up from the leader's start. An Append with Index == Base comes
// from a leader that holds no record before Index (its log starts there:
// everything below was deleted under its committed floor), so there is no
// PrevEpoch to check. The follower accepts it without change when Index
// is its own base, or when it holds the record at Index at the epoch of
// the first shipped record (same offset and epoch means the same prefix,
// by log matching). Otherwise, if Index is above its own base and the
// leader vouches Index <= Commit, it resets its log to start empty at
// Index (WriteReset), then appends the shipped records (there must be
// some) as usual. That is safe:
//
//   - every record it drops below Index is below the leader's committed
//     position, and the leader's log starts at Index only because records
//     below it were deleted under a committed floor, so they are trimmed
//     for the whole shard (and a follower record there that differed from
//     the committed one was divergent anyway);
//   - every record it drops at or above Index is absent from the leader's
//     log or differs from it at Index (it held Index at another epoch, or
//     the leader's log ends at Index), so by log matching none of them is
//     in the leader's log, which holds every committed record: none is
//     committed, none was counted for an acknowledgement;
//   - its committed position moves up to Index (every offset below is
//     committed), never back.
//
// An Append that fails these conditions (Index above Commit, or no Base)
// is refused with mismatch as before, never reset for.
func (r *Replica) onAppend(m Message) {
	l := m.Log
	v := &r.logs[l]
	fromStart := m.Base == m.Index && m.Index > v.base
	prevOK := m.Index == v.base
	if m.Index > v.base && m.Index <= v.tail {
		if !fromStart || m.PrevEpoch != 0 {
			prevOK = v.prevEpoch(m.Index) == m.PrevEpoch
		}
		if !prevOK && fromStart && len(m.Records) > 0 && m.Index < v.tail {
			// No previous record to compare: the first shipped record
			// decides, since we hold its offset.
			e, _ := v.epochAt(m.Index)
			prevOK = e == m.Records[0].Epoch
		}
	}
	// A reset needs records to append at once, so the log it leaves is
	// never empty for longer than one Ready (an empty log's last epoch is
	// not known after a restart).
	reset := !prevOK && fromStart && m.Index <= m.Commit && len(m.Records) > 0
	if !prevOK && !reset {
		pos := v.position()
		r.send(Message{Type: MsgAppendResp, To: m.From, Conn: m.Conn, Epoch: r.epoch, Pass: m.Pass, Log: l,
			Match: false, Base: pos.Base, Tail: pos.Tail, Epochs: pos.Epochs})
		return
	}
	if !validRun(m.Records, m.Index, m.PrevEpoch, m.Epoch) {
		return // malformed; no answer
	}
	if reset {
		r.resetLocal(l, m.Index, m.PrevEpoch)
	}
	i := 0
	for i < len(m.Records) && m.Records[i].Offset < v.tail {
		if e, _ := v.epochAt(m.Records[i].Offset); e != m.Records[i].Epoch {
			// A divergent suffix: it cannot be committed, because the
			// leader of a newer epoch holds every committed record.
			r.truncateLocal(l, m.Records[i].Offset)
			break
		}
		i++
	}
	if i < len(m.Records) {
		r.appendLocal(l, m.Records[i:])
	}
	end := m.Index + uint64(len(m.Records))
	if t := min(m.Commit, end); t > r.commitTarget[l] {
		r.commitTarget[l] = t
	}
	resp := Message{Type: MsgAppendResp, To: m.From, Conn: m.Conn, Epoch: r.epoch, Pass: m.Pass, Log: l,
		Match: true, MatchEnd: end}
	if v.stable >= end {
		r.send(resp)
	} else {
		r.deferred = append(r.deferred, resp)
	}
	r.followerCommits()
}

// releaseDeferred sends the answers whose records are now persisted.
func (r *Replica) releaseDeferred() {
	keep := r.deferred[:0]
	for _, m := range r.deferred {
		if r.logs[m.Log].stable >= m.MatchEnd {
			r.send(m)
		} else {
			keep = append(keep, m)
		}
	}
	r.deferred = keep
}

// followerCommits publishes the committed positions learned from the
// leader, limited to what is persisted here.
func (r *Replica) followerCommits() {
	for _, l := range record.LogKinds {
		c := min(r.commitTarget[l], r.logs[l].stable)
		if c > r.lastCommits[l] {
			r.lastCommits[l] = c
			r.out.Commits = append(r.out.Commits, CommitAdvance{Log: l, Committed: c})
		}
	}
}

// onProbe answers a new epoch's probe with every log's persisted position.
func (r *Replica) onProbe(m Message) {
	resp := Message{Type: MsgProbeResp, To: m.From, Conn: m.Conn, Epoch: r.epoch, Pass: m.Pass}
	for i := range r.logs {
		resp.Logs[i] = r.logs[i].position()
	}
	r.send(resp)
}

// onFetch answers a recovering leader with persisted records.
func (r *Replica) onFetch(m Message) {
	l := m.Log
	v := &r.logs[l]
	resp := Message{Type: MsgFetchResp, To: m.From, Conn: m.Conn, Epoch: r.epoch, Pass: m.Pass, Log: l,
		Index: m.Index, Base: v.base, Tail: v.stable}
	if m.Index >= v.base && m.Index <= v.stable {
		resp.PrevEpoch = v.prevEpoch(m.Index)
		max := m.Max
		if max <= 0 || max > r.cfg.MaxBatch {
			max = r.cfg.MaxBatch
		}
		if recs, err := v.read(r.cfg.Log, l, m.Index, v.stable, max); err == nil {
			resp.Records = recs
		}
	}
	r.send(resp)
}

// validRun checks that records are consecutive from index, with epochs that
// never decrease, start at or above prevEpoch and stay at or below max.
func validRun(recs []record.Record, index, prevEpoch, max uint64) bool {
	e := prevEpoch
	for i, rec := range recs {
		if rec.Offset != index+uint64(i) || rec.Epoch < e || rec.Epoch > max {
			return false
		}
		e = rec.Epoch
	}
	return true
}
