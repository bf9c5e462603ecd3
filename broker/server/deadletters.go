package server

import (
	"errors"
	"fmt"
	"strconv"
	"sync"
	"time"

	"felix.dev/felix/broker/deadletter"
	"felix.dev/felix/broker/group"
	"felix.dev/felix/broker/logstore"
	"felix.dev/felix/broker/record"
	"felix.dev/felix/broker/wire"
)

// DeadLetterShards is an optional interface of Shards: it serves each
// shard's dead-letter log (record.LogDeadLetter) under the same rules as
// DataLog. A Shards without it dead-letters nothing (a fetch that would
// is Unavailable) and answers the dead-letter requests Unavailable.
type DeadLetterShards interface {
	DeadLetterLog(shard record.ShardID) (Log, error)
}

// DefaultMaxDeadLetters is the default of Options.MaxDeadLetters.
const DefaultMaxDeadLetters = 10000

// deadLetterTrimHeader names the trims of dead-letter logs.
const deadLetterTrimHeader = "felix.dead-letter-trim"

// deadShard is one shard's fold of its dead-letter log. mu is held for a
// whole request, appends included. A fetch holds its group shard's mu
// and then takes this one; nothing takes them the other way round.
type deadShard struct {
	mu    sync.Mutex
	state *deadletter.State
	gen   uint64
	built bool
}

func (s *Server) deadShard(id record.ShardID) *deadShard {
	return s.dead.get(id, func() *deadShard { return &deadShard{} })
}

// deadLetterLog returns the shard's dead-letter log, or the refusal.
func (s *Server) deadLetterLog(shard record.ShardID) (Log, error) {
	dl, ok := s.shards.(DeadLetterShards)
	if !ok {
		return nil, &wire.Error{Code: wire.CodeUnavailable, Message: "this broker serves no dead-letter logs"}
	}
	return dl.DeadLetterLog(shard)
}

// errDeadTailMoved: the dead-letter log's tail is not where the fold
// ended; the fold is dropped, to be rebuilt from the log.
var errDeadTailMoved = errors.New("server: the dead-letter log's tail moved under this leader")

// ensure makes ds the fold of l's committed entries under l's current
// generation. Called with ds.mu held.
func (ds *deadShard) ensure(s *Server, l Log) error {
	gen, err := logGeneration(l)
	if err != nil {
		return err
	}
	if ds.built && ds.gen == gen {
		return nil
	}
	ds.built = false
	st, err := refold(s, l, "dead-letter", func(from uint64, _ bool) *deadletter.State { return deadletter.NewState(from) })
	if err != nil {
		return err
	}
	ds.state, ds.gen, ds.built = st, gen, true
	return nil
}

// appendEntry appends one dead-letter-log record at the fold's tail (a
// conditional append [TR-1]) and folds it; on any failure the fold is
// dropped. Called with ds.mu held.
func (ds *deadShard) appendEntry(s *Server, l Log, rec record.Record) (logstore.AppendResult, error) {
	tail := ds.state.Next()
	rec.Kind, rec.Epoch, rec.Timestamp = record.KindData, s.opts.Epoch, s.opts.Now().UnixNano()
	res, err := l.Append(s.storeCtx, []record.Record{rec}, &tail)
	if err != nil {
		ds.built = false
		var om *record.OffsetMismatchError
		if errors.As(err, &om) {
			return res, fmt.Errorf("%w: from %d to %d; nothing written", errDeadTailMoved, om.Expected, om.Tail)
		}
		return res, err
	}
	rec.Offset = res.First
	if err := ds.state.Apply(rec); err != nil {
		ds.built = false
		return res, fmt.Errorf("server: folding the dead-letter entry just written at %d: %w", res.First, err)
	}
	ds.state.AdvanceTo(res.Tail)
	return res, nil
}

// withDeadShard runs fn on the shard's dead-letter fold, built, with
// ds.mu held; when fn finds the log's tail moved, the fold is rebuilt and
// fn runs once more.
func (s *Server) withDeadShard(shard record.ShardID, fn func(ds *deadShard, l Log) error) error {
	l, err := s.deadLetterLog(shard)
	if err != nil {
		return err
	}
	ds := s.deadShard(shard)
	ds.mu.Lock()
	defer ds.mu.Unlock()
	for attempt := 0; ; attempt++ {
		if err := ds.ensure(s, l); err != nil {
			return err
		}
		err := fn(ds, l)
		if attempt == 0 && errors.Is(err, errDeadTailMoved) {
			continue
		}
		if errors.Is(err, errDeadTailMoved) {
			return &wire.Error{Code: wire.CodeUnavailable, Message: err.Error() + "; retry"}
		}
		return err
	}
}

// deadLetter gives up on the due offsets dead of the fetch's group: each
// is appended to the dead-letter log (unless the log's fold already holds
// it for the group: a fetch that stopped between the two appends), then
// all are settled in the group log by one dead-lettered entry. It returns
// how many it dead-lettered and the offsets the data log no longer holds
// (settled by the caller as acknowledged). A record too large to be
// dead-lettered, or one more than Options.MaxDeadLetters, stays
// outstanding, is logged, and is not tried again before another ack wait.
// Called with gs.mu held.
func (s *Server) deadLetter(gs *groupShard, gl, data Log, req wire.GroupFetchRequest, in group.Info, dead []uint64) (n int, gone []uint64, err error) {
	var settle []uint64
	keep := func(off uint64) {
		gs.dueOf(req.Group)[off] = s.opts.Now().Add(time.Duration(in.Ack.AckWaitMillis) * time.Millisecond)
	}
	err = s.withDeadShard(req.Shard, func(ds *deadShard, l Log) error {
		n, gone, settle = 0, nil, nil
		for _, off := range dead {
			if _, ok := ds.state.Find(req.Group, off); ok {
				settle = append(settle, off)
				continue
			}
			if ds.state.Len() >= s.opts.MaxDeadLetters {
				s.log.Error(errDeadLettersFull, "record stays outstanding; trim the dead-letter log (felix deadletter trim)", "shard", req.Shard.String(),
					"group", req.Group, "offset", off, "limit", s.opts.MaxDeadLetters)
				keep(off)
				continue
			}
			r, ok, err := readAt(data, off)
			if err != nil {
				return err
			}
			if !ok {
				gone = append(gone, off)
				continue
			}
			rec, err := deadletter.EncodeRecord(deadletter.Record{Group: req.Group, Offset: off, Epoch: r.Epoch, Timestamp: r.Timestamp,
				Deliveries: in.Ack.Deliveries[off], Reason: deadletter.ReasonMaxDeliveries, Headers: r.Headers, Payload: r.Payload})
			if err != nil {
				return err
			}
			if _, err := ds.appendEntry(s, l, rec); err != nil {
				if errors.Is(err, record.ErrRecordTooLarge) {
					s.log.Error(err, "record too large to dead-letter; it stays outstanding", "shard", req.Shard.String(), "group", req.Group, "offset", off)
					keep(off)
					continue
				}
				return err
			}
			n++
			settle = append(settle, off)
		}
		return nil
	})
	if err != nil {
		return 0, nil, err
	}
	if n > 0 {
		s.opts.Metrics.deadLettered(req.Shard, req.Group, n)
		s.log.V(1).Info("records dead-lettered", "shard", req.Shard.String(), "group", req.Group, "count", n)
	}
	if len(settle) > 0 {
		err = gs.settle(s, gl, group.EntryDeadLettered, req.Group, req.Member, req.Generation, settle)
	}
	return n, gone, err
}

// errDeadLettersFull: the dead-letter log holds Options.MaxDeadLetters
// records.
var errDeadLettersFull = errors.New("server: the dead-letter log is full")

// deadLetterTrim serves a DeadLetterTrim: a conditional trim of the
// dead-letter log on the fold's tail [TR-2]; the fold is then rebuilt
// from the new floor.
func (s *Server) deadLetterTrim(req wire.DeadLetterTrimRequest) (wire.DeadLetterTrimOK, error) {
	var out wire.DeadLetterTrimOK
	err := s.withDeadShard(req.Shard, func(ds *deadShard, l Log) error {
		tail := ds.state.Next()
		if req.Floor > tail {
			return &wire.Error{Code: wire.CodeBadRequest, Message: fmt.Sprintf("%s: dead-letter floor %d above the log's tail %d", req.Shard, req.Floor, tail)}
		}
		res, err := l.Trim(s.storeCtx, logstore.TrimRequest{Floor: req.Floor, ExpectTail: tail, Timestamp: s.opts.Now().UnixNano(),
			Headers: []record.Header{{Key: deadLetterTrimHeader, Value: []byte(strconv.FormatUint(req.Floor, 10))}}})
		ds.built = false
		if err != nil {
			var om *record.OffsetMismatchError
			if errors.As(err, &om) {
				return fmt.Errorf("%w: %v", errDeadTailMoved, err)
			}
			return err
		}
		out.Floor = res.Floor
		return nil
	})
	return out, err
}

// DefaultDeadLetterReadRecords bounds the entries of one DeadLetterRead.
const DefaultDeadLetterReadRecords = 1000

// deadLetterRead serves a DeadLetterRead: the dead-lettered records from
// req.From, with their redrive state.
func (s *Server) deadLetterRead(req wire.DeadLetterReadRequest) (wire.DeadLetterReadOK, error) {
	var out wire.DeadLetterReadOK
	err := s.withDeadShard(req.Shard, func(ds *deadShard, l Log) error {
		maxRecs := int(req.MaxRecords)
		if maxRecs <= 0 || maxRecs > DefaultDeadLetterReadRecords {
			maxRecs = DefaultDeadLetterReadRecords
		}
		info := l.Describe()
		from := max(req.From, info.ReadableStart())
		out = wire.DeadLetterReadOK{Next: from}
		used := 0
		for from < info.Committed && len(out.Entries) < maxRecs && used < MaxAnswerBytes {
			res, err := readCommitted(l, from, logstore.ReadOptions{MaxRecords: maxRecs - len(out.Entries), MaxBytes: MaxAnswerBytes - used})
			if err != nil {
				return err
			}
			for _, r := range res.Records {
				used += recordBytes(r)
				e, err := deadletter.DecodeEntry(r)
				if err != nil {
					return &wire.Error{Code: wire.CodeCorrupt, Offset: r.Offset, Message: err.Error()}
				}
				if e.Record == nil {
					continue
				}
				m, _ := ds.state.Entry(r.Offset)
				out.Entries = append(out.Entries, wire.DeadLetter{Entry: r.Offset, Group: e.Record.Group, Offset: e.Record.Offset,
					Epoch: e.Record.Epoch, Timestamp: e.Record.Timestamp, Deliveries: e.Record.Deliveries, Reason: uint8(e.Record.Reason),
					Headers: e.Record.Headers, Payload: e.Record.Payload, Redriven: m.Redriven, DataOffset: m.DataOffset})
			}
			if res.Next <= from {
				break
			}
			from = res.Next
			out.Next = from
		}
		return nil
	})
	return out, err
}

// errDataTailMoved: a redrive's conditional append found the data log's
// tail past its intent.
var errDataTailMoved = errors.New("server: the data log's tail moved past the redrive's intent")

// maxRedriveIntents bounds the intents one DeadLetterRedrive writes: a
// redrive whose conditional append loses to other appends of the data log
// writes a new intent at the new tail and tries again, at most this many
// intents in all; then it answers Unavailable (nothing more written; the
// client may retry).
const maxRedriveIntents = 2

// deadLetterRedrive serves a DeadLetterRedrive: the dead-lettered record
// appended to the data log exactly once (see package deadletter): an
// intent naming the data log's tail, a conditional append there carrying
// deadletter.RedriveHeader, then the redriven entry. An intent left
// without its redriven entry is finished (the record is in the data log
// at the intent's offset with the header), reused (the data log's tail is
// still at its offset) or replaced by a new intent. Intents are bounded
// [TR-10]: at most maxRedriveIntents per request, and a new intent that
// replaces an entry's earlier one (that intent's append lost to another
// append) is refused with GroupLimit once the shard's dead-letter log
// holds Options.MaxDeadLetters such replaced intents above its floor,
// until a DeadLetterTrim makes room: a client that keeps losing the race,
// or makes itself lose it by appending, cannot grow the log without bound.
func (s *Server) deadLetterRedrive(req wire.DeadLetterRedriveRequest) (wire.DeadLetterRedriveOK, error) {
	data, err := s.shards.DataLog(req.Shard)
	if err != nil {
		return wire.DeadLetterRedriveOK{}, err
	}
	var out wire.DeadLetterRedriveOK
	intents := 0 // written by this request, across withDeadShard's attempts
	err = s.withDeadShard(req.Shard, func(ds *deadShard, l Log) error {
		for {
			err := s.redriveAttempt(ds, l, data, req, &intents, &out)
			if !errors.Is(err, errDataTailMoved) {
				return err
			}
			if intents >= maxRedriveIntents && !s.opts.twin.unboundedRedrive {
				return &wire.Error{Code: wire.CodeUnavailable, Message: fmt.Sprintf("%s: dead-letter entry %d: %v (%d intents written, the most one redrive writes); retry",
					req.Shard, req.Entry, err, intents)}
			}
		}
	})
	return out, err
}

// redriveAttempt is one attempt of deadLetterRedrive: it finishes or
// answers the redrive (setting *out), or writes (or reuses) an intent and
// tries the conditional append, answering errDataTailMoved when another
// append took the intent's offset. *intents counts the intents the
// request wrote. Called with ds.mu held.
func (s *Server) redriveAttempt(ds *deadShard, l, data Log, req wire.DeadLetterRedriveRequest, intents *int, out *wire.DeadLetterRedriveOK) error {
	m, ok := ds.state.Entry(req.Entry)
	if !ok {
		return &wire.Error{Code: wire.CodeBadRequest, Message: fmt.Sprintf("%s: no dead-lettered record at entry %d of the dead-letter log", req.Shard, req.Entry)}
	}
	if m.Redriven {
		*out = wire.DeadLetterRedriveOK{DataOffset: m.DataOffset, Already: true}
		return nil
	}
	mark := strconv.FormatUint(req.Entry, 10)
	redriven := func(at uint64) error {
		rec, err := deadletter.EncodeRedrive(deadletter.EntryRedriven, deadletter.Redrive{Entry: req.Entry, DataOffset: at})
		if err != nil {
			return err
		}
		if _, err := ds.appendEntry(s, l, rec); err != nil {
			return err
		}
		*out = wire.DeadLetterRedriveOK{DataOffset: at}
		return nil
	}
	info := data.Describe()
	if info.Committed < info.Tail {
		return &wire.Error{Code: wire.CodeUnavailable, Message: "server: the data log has records not committed yet; retry"}
	}
	if m.Intent != nil && *m.Intent < info.Tail && *m.Intent < info.ReadableStart() {
		// An earlier redrive got as far as its intent, and the data
		// log was trimmed past the offset it meant to take: whether
		// its append landed can no longer be read back. Appending
		// again could write the record twice, so it is refused.
		return &wire.Error{Code: wire.CodeBadRequest, Message: fmt.Sprintf(
			"%s: an earlier redrive of dead-letter entry %d meant to append at data offset %d, which was trimmed since (floor %d): whether it landed cannot be read back, so the entry is not redriven again (read the record from the dead-letter log to append it by hand)",
			req.Shard, req.Entry, *m.Intent, info.ReadableStart())}
	}
	if m.Intent != nil && *m.Intent < info.Tail {
		// An earlier redrive got as far as its intent: did its append
		// land?
		r, ok, err := readAt(data, *m.Intent)
		if err != nil {
			return err
		}
		if ok && len(r.Headers) > 0 {
			if h := r.Headers[len(r.Headers)-1]; h.Key == deadletter.RedriveHeader && string(h.Value) == mark {
				return redriven(*m.Intent)
			}
		}
	}
	at := info.Tail
	if m.Intent == nil || *m.Intent != at {
		// A pending intent (at the data log's tail still) is reused;
		// any other is replaced, within the bounds.
		if *intents >= maxRedriveIntents && !s.opts.twin.unboundedRedrive {
			return &wire.Error{Code: wire.CodeUnavailable, Message: fmt.Sprintf("%s: dead-letter entry %d: %d intents written, the most one redrive writes; retry",
				req.Shard, req.Entry, *intents)}
		}
		if m.Intent != nil && ds.state.Superseded() >= s.opts.MaxDeadLetters && *intents > 0 && !s.opts.twin.unboundedRedrive {
			// This request wrote an intent already: GroupLimit promises
			// nothing was written, so the answer is a retry.
			return &wire.Error{Code: wire.CodeUnavailable, Message: fmt.Sprintf("%s: dead-letter entry %d: the shard's redrive intents reached their limit after this redrive wrote one; retry later or trim",
				req.Shard, req.Entry)}
		}
		if m.Intent != nil && ds.state.Superseded() >= s.opts.MaxDeadLetters && !s.opts.twin.unboundedRedrive {
			return &wire.Error{Code: wire.CodeGroupLimit, Limit: uint64(s.opts.MaxDeadLetters), Message: fmt.Sprintf(
				"%s: dead-letter entry %d: the dead-letter log holds %d redrive intents replaced after losing to other appends, its limit: nothing written; trim the dead-letter log (felix deadletter trim)",
				req.Shard, req.Entry, ds.state.Superseded())}
		}
		rec, err := deadletter.EncodeRedrive(deadletter.EntryRedriving, deadletter.Redrive{Entry: req.Entry, DataOffset: at})
		if err != nil {
			return err
		}
		if _, err := ds.appendEntry(s, l, rec); err != nil {
			return err
		}
		*intents++
	}
	dr, err := readCommitted(l, req.Entry, logstore.ReadOptions{MaxRecords: 1})
	if err != nil {
		return err
	}
	if len(dr.Records) == 0 || dr.Records[0].Offset != req.Entry {
		return &wire.Error{Code: wire.CodeUnavailable, Message: fmt.Sprintf("%s: dead-letter entry %d not readable; retry", req.Shard, req.Entry)}
	}
	e, err := deadletter.DecodeEntry(dr.Records[0])
	if err != nil || e.Record == nil {
		return &wire.Error{Code: wire.CodeCorrupt, Offset: req.Entry, Message: fmt.Sprintf("dead-letter entry %d: %v", req.Entry, err)}
	}
	hs := append(append([]record.Header{}, e.Record.Headers...), record.Header{Key: deadletter.RedriveHeader, Value: []byte(mark)})
	rec := record.Record{Kind: record.KindData, Epoch: s.opts.Epoch, Timestamp: s.opts.Now().UnixNano(), Headers: hs, Payload: e.Record.Payload}
	if _, err := data.Append(s.storeCtx, []record.Record{rec}, &at); err != nil {
		var om *record.OffsetMismatchError
		if errors.As(err, &om) {
			// Another append took the offset: the intent can no
			// longer land; a new one is written on the next attempt.
			return fmt.Errorf("%w: %w", errDataTailMoved, err)
		}
		return err
	}
	return redriven(at)
}
