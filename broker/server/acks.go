package server

import (
	"errors"
	"fmt"
	"time"

	"felix.dev/felix/broker/group"
	"felix.dev/felix/broker/logstore"
	"felix.dev/felix/broker/record"
	"felix.dev/felix/broker/wire"
)

// Per-record acknowledgement (wire.FeatureAcks) on the group log.
//
// The log holds each outstanding offset's delivery count (a deliver entry
// is appended before the records are handed out), so a leader change
// never resets a count: a record is delivered at most MaxDeliveries
// times, and fewer when an answer carrying it was lost (the count counts
// it all the same). When each delivery's ack wait runs out is the
// leader's memory, like the leases: a fold rebuilt (a new leader, an
// unknown outcome) starts the ack wait of every outstanding offset afresh,
// so after a leadership change a record is redelivered at most two ack
// waits after its last delivery. A nak is the leader's memory too: it
// makes the offset due at once, and a nak lost to a leader change only
// costs the ack wait.
//
// A record due again after MaxDeliveries deliveries is dead-lettered: it
// is appended to the shard's dead-letter log (deadLetter), then settled in
// the group log by a dead-lettered entry. A crash between the two leaves
// the offset outstanding and due; the next fetch finds it in the
// dead-letter log's fold (deadletter.State.Find) and only settles it, so
// a record is dead-lettered for a group at most once.

// MaxAnswerBytes bounds the record bytes (payloads and headers) of one
// GroupFetchOK or DeadLetterReadOK: a fetch or read stops adding records
// once it reached it, and always carries at least one record, so an
// answer stays well below the 16 MiB frame limit (a record is at most
// 1 MiB).
const MaxAnswerBytes = 8 << 20

// dueOf returns the group's redelivery times (offset -> when the
// outstanding offset is due again); an offset without one is due now.
// Called with gs.mu held.
func (gs *groupShard) dueOf(g string) map[uint64]time.Time {
	if gs.due == nil {
		gs.due = map[string]map[uint64]time.Time{}
	}
	d := gs.due[g]
	if d == nil {
		d = map[uint64]time.Time{}
		gs.due[g] = d
	}
	return d
}

// resetDue starts the ack wait of every outstanding offset at now: the
// fold was just rebuilt. Called with gs.mu held.
func (gs *groupShard) resetDue(now time.Time) {
	gs.due = map[string]map[uint64]time.Time{}
	for _, g := range gs.state.Groups() {
		in, _ := gs.state.Group(g)
		if in.Ack == nil {
			continue
		}
		d := gs.dueOf(g)
		for off := range in.Ack.Deliveries {
			d[off] = now.Add(time.Duration(in.Ack.AckWaitMillis) * time.Millisecond)
		}
	}
}

// ackGroup returns the group's state after checking that member owns the
// shard at gen and that the group acknowledges per record. Called with
// gs.mu held.
func (gs *groupShard) ackGroup(g, member string, gen uint64) (group.Info, error) {
	if err := gs.state.CheckOwner(g, member, gen); err != nil {
		return group.Info{}, err
	}
	in, _ := gs.state.Group(g)
	if in.Ack == nil {
		return group.Info{}, fmt.Errorf("%w: group %q commits cumulatively; configure per-record acknowledgement first", group.ErrNotAckMode, g)
	}
	return in, nil
}

// readAt returns the data record at off; ok is false when the data log
// no longer holds it (trimmed away, deleted by retention).
func readAt(l Log, off uint64) (r record.Record, ok bool, err error) {
	if off < l.Describe().ReadableStart() {
		return record.Record{}, false, nil
	}
	res, err := readCommitted(l, off, logstore.ReadOptions{MaxRecords: 1})
	if errors.Is(err, record.ErrCursorTooOld) {
		return record.Record{}, false, nil
	}
	if err != nil {
		return record.Record{}, false, err
	}
	if len(res.Records) == 0 || res.Records[0].Offset != off {
		return record.Record{}, false, nil
	}
	return stripProducer(res.Records[:1])[0], true, nil
}

// groupAckConfig serves a GroupAckConfig: an ack-config entry, by the
// owner at the current generation.
func (s *Server) groupAckConfig(req wire.GroupAckConfigRequest) (wire.GroupAckConfigOK, error) {
	var out wire.GroupAckConfigOK
	err := s.withGroupShard(req.Shard, func(gs *groupShard, l Log) error {
		if err := gs.state.CheckOwner(req.Group, req.Member, req.Generation); err != nil {
			return err
		}
		cfg := group.AckConfig{MaxDeliveries: req.MaxDeliveries, AckWaitMillis: req.AckWaitMillis, MaxInFlight: req.MaxInFlight}
		if err := gs.state.CheckConfigure(cfg); err != nil {
			return err
		}
		p, err := group.EncodeConfigure(group.Configure{Group: req.Group, Member: req.Member, Generation: req.Generation, AckConfig: cfg})
		if err != nil {
			return &wire.Error{Code: wire.CodeBadRequest, Message: err.Error()}
		}
		res, err := gs.appendEntry(s, l, p)
		if err != nil {
			return err
		}
		gs.leases[req.Group] = s.opts.Now().Add(s.opts.GroupLease)
		out.Entry = res.First
		return nil
	})
	return out, err
}

// groupFetch serves a GroupFetch; see wire.GroupFetchRequest.
func (s *Server) groupFetch(req wire.GroupFetchRequest) (wire.GroupFetchOK, error) {
	dl, err := s.shards.DataLog(req.Shard)
	if err != nil {
		return wire.GroupFetchOK{}, err
	}
	var out wire.GroupFetchOK
	err = s.withGroupShard(req.Shard, func(gs *groupShard, l Log) error {
		out = wire.GroupFetchOK{}
		in, err := gs.ackGroup(req.Group, req.Member, req.Generation)
		if err != nil {
			return err
		}
		now := s.opts.Now()
		gs.leases[req.Group] = now.Add(s.opts.GroupLease)
		maxRecs := int(req.MaxRecords)
		if maxRecs <= 0 || maxRecs > group.MaxOffsetsPerEntry {
			maxRecs = group.MaxOffsetsPerEntry
		}
		due := gs.dueOf(req.Group)
		var dead, again []uint64
		for _, off := range in.Ack.Outstanding() {
			if at, ok := due[off]; ok && at.After(now) {
				continue
			}
			if in.Ack.Deliveries[off] >= in.Ack.MaxDeliveries {
				dead = append(dead, off)
			} else {
				again = append(again, off)
			}
		}
		var gone []uint64 // outstanding offsets the data log no longer holds
		if len(dead) > 0 {
			n, lost, err := s.deadLetter(gs, l, dl, req, in, dead)
			if err != nil {
				return err
			}
			out.DeadLettered, gone = uint32(n), lost
		}
		var offs []uint64
		used := 0
		for _, off := range again {
			if len(out.Deliveries) == maxRecs || used >= MaxAnswerBytes {
				break
			}
			r, ok, err := readAt(dl, off)
			if err != nil {
				return err
			}
			if !ok {
				gone = append(gone, off)
				continue
			}
			out.Deliveries = append(out.Deliveries, wire.Delivery{Record: r})
			offs = append(offs, off)
			used += recordBytes(r)
		}
		if len(gone) > 0 {
			// Nothing is left to deliver or dead-letter: the offsets are
			// settled as acknowledged.
			if err := gs.settle(s, l, group.EntryAck, req.Group, req.Member, req.Generation, gone); err != nil {
				return err
			}
		}
		in, _ = gs.state.Group(req.Group)
		// The redelivered offsets are outstanding already: only new ones
		// take room in the window.
		room := int(in.Ack.MaxInFlight) - len(in.Ack.Deliveries)
		if want := min(room, maxRecs-len(out.Deliveries)); want > 0 && used < MaxAnswerBytes {
			info := dl.Describe()
			if from := max(in.Ack.Delivered, info.ReadableStart()); from < info.Committed {
				res, err := readCommitted(dl, from, logstore.ReadOptions{MaxRecords: want, MaxBytes: MaxAnswerBytes - used})
				if err != nil {
					return err
				}
				for _, r := range stripProducer(res.Records) {
					out.Deliveries = append(out.Deliveries, wire.Delivery{Record: r})
					offs = append(offs, r.Offset)
				}
			}
		}
		out.Committed = in.Committed
		if len(offs) == 0 {
			if room <= 0 && len(again) == 0 {
				return &wire.Error{Code: wire.CodeGroupLimit, Limit: uint64(in.Ack.MaxInFlight),
					Message: fmt.Sprintf("%v: group %q has %d outstanding records on %s, its limit; acknowledge first", group.ErrInFlightLimit, req.Group, len(in.Ack.Deliveries), req.Shard)}
			}
			return nil
		}
		p, err := group.EncodeOffsets(group.Offsets{Kind: group.EntryDeliver, Group: req.Group, Member: req.Member, Generation: req.Generation, Offsets: offs})
		if err != nil {
			return err
		}
		if _, err := gs.appendEntry(s, l, p); err != nil {
			return err
		}
		in, _ = gs.state.Group(req.Group)
		wait := now.Add(time.Duration(in.Ack.AckWaitMillis) * time.Millisecond)
		for i, off := range offs {
			due[off] = wait
			out.Deliveries[i].Deliveries = in.Ack.Deliveries[off]
		}
		out.Committed = in.Committed
		gs.autoSnapshot(s, l, req.Shard)
		return nil
	})
	return out, err
}

// settle appends one entry of kind (ack or dead-lettered) settling offs.
// Called with gs.mu held.
func (gs *groupShard) settle(s *Server, l Log, kind group.EntryKind, g, member string, gen uint64, offs []uint64) error {
	for len(offs) > 0 {
		n := min(len(offs), group.MaxOffsetsPerEntry)
		p, err := group.EncodeOffsets(group.Offsets{Kind: kind, Group: g, Member: member, Generation: gen, Offsets: offs[:n]})
		if err != nil {
			return err
		}
		if _, err := gs.appendEntry(s, l, p); err != nil {
			return err
		}
		for _, off := range offs[:n] {
			delete(gs.dueOf(g), off)
		}
		offs = offs[n:]
	}
	return nil
}

// groupAck serves a GroupAck: an ack entry of the offsets still
// outstanding.
func (s *Server) groupAck(req wire.GroupAckRequest) (wire.GroupAckOK, error) {
	var out wire.GroupAckOK
	err := s.withGroupShard(req.Shard, func(gs *groupShard, l Log) error {
		in, err := gs.ackGroup(req.Group, req.Member, req.Generation)
		if err != nil {
			return err
		}
		if len(req.Offsets) > group.MaxOffsetsPerEntry {
			return &wire.Error{Code: wire.CodeBadRequest, Message: fmt.Sprintf("%d offsets in one ack, limit %d", len(req.Offsets), group.MaxOffsetsPerEntry)}
		}
		gs.leases[req.Group] = s.opts.Now().Add(s.opts.GroupLease)
		var settle []uint64
		seen := make(map[uint64]bool, len(req.Offsets))
		for _, off := range req.Offsets {
			if _, out := in.Ack.Deliveries[off]; out && !seen[off] {
				settle = append(settle, off)
				seen[off] = true
			} else if off >= in.Ack.Delivered {
				return &wire.Error{Code: wire.CodeBadRequest, Message: fmt.Sprintf("group %q: offset %d was never delivered (delivered up to %d)", req.Group, off, in.Ack.Delivered)}
			}
		}
		if len(settle) > 0 {
			if err := gs.settle(s, l, group.EntryAck, req.Group, req.Member, req.Generation, settle); err != nil {
				return err
			}
			gs.autoSnapshot(s, l, req.Shard)
		}
		in, _ = gs.state.Group(req.Group)
		out.Committed = in.Committed
		return nil
	})
	if err == nil {
		s.observeGroupLag(req.Shard, req.Group, out.Committed)
	}
	return out, err
}

// groupNak serves a GroupNak: the outstanding offsets named are due at
// once. Nothing is written.
func (s *Server) groupNak(req wire.GroupNakRequest) (wire.GroupNakOK, error) {
	err := s.withGroupShard(req.Shard, func(gs *groupShard, _ Log) error {
		in, err := gs.ackGroup(req.Group, req.Member, req.Generation)
		if err != nil {
			return err
		}
		now := s.opts.Now()
		gs.leases[req.Group] = now.Add(s.opts.GroupLease)
		due := gs.dueOf(req.Group)
		for _, off := range req.Offsets {
			if _, out := in.Ack.Deliveries[off]; out {
				due[off] = time.Time{}
			}
		}
		return nil
	})
	return wire.GroupNakOK{}, err
}
