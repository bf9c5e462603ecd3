package server

import (
	"errors"
	"time"

	"felix.dev/felix/broker/logstore"
	"felix.dev/felix/broker/record"
	"felix.dev/felix/broker/wire"
)

// pending is an append or a trim waiting in its shard's queue.
type pending struct {
	reqID uint32
	start time.Time
	held  charge
	app   *wire.AppendRequest
	trim  *wire.TrimRequest
}

func (p *pending) mergeable() bool {
	return p.app != nil && p.app.ExpectTail == nil && p.app.Producer == nil
}

// shardQueue holds one connection's appends and trims to one shard in
// arrival order; one goroutine applies them while the queue is non-empty.
type shardQueue struct {
	shard record.ShardID
	items []*pending
}

// enqueue adds p to its shard's queue and starts the queue's goroutine if
// it is not running.
func (c *conn) enqueue(shard record.ShardID, p *pending) {
	c.qmu.Lock()
	defer c.qmu.Unlock()
	q, running := c.queues[shard]
	if !running {
		q = &shardQueue{shard: shard}
		c.queues[shard] = q
	}
	q.items = append(q.items, p)
	if !running {
		go c.runQueue(q)
	}
}

// next takes the next run from q: consecutive unconditional appends within
// the batch limits, or one conditional append, or one trim. It removes the
// queue and returns nil when q is empty.
func (c *conn) next(q *shardQueue) []*pending {
	o := &c.s.opts
	c.qmu.Lock()
	defer c.qmu.Unlock()
	if len(q.items) == 0 {
		delete(c.queues, q.shard)
		return nil
	}
	n := runLength(q.items, o.MaxBatchRecords, o.MaxBatchBytes)
	run := q.items[:n:n]
	q.items = q.items[n:]
	return run
}

// runLength decides how many of items, from the front, go to the store as
// one append: a run of consecutive unconditional appends whose records and
// estimated bytes fit the batch limits (at least one), or else the first
// item alone (a conditional append or a trim).
func runLength(items []*pending, maxRecords, maxBytes int) int {
	n := 1
	if !items[0].mergeable() {
		return n
	}
	recs := len(items[0].app.Records)
	size := storeBytes(items[0].app.Records)
	for n < len(items) && items[n].mergeable() {
		r := items[n].app.Records
		if recs+len(r) > maxRecords || size+storeBytes(r) > maxBytes {
			break
		}
		recs += len(r)
		size += storeBytes(r)
		n++
	}
	return n
}

func (c *conn) runQueue(q *shardQueue) {
	for run := c.next(q); run != nil; run = c.next(q) {
		if run[0].trim != nil {
			c.applyTrim(q.shard, run[0])
		} else if run[0].app.Producer != nil {
			c.applyIdempotent(q.shard, run[0])
		} else {
			c.applyAppends(q.shard, run)
		}
	}
}

func (c *conn) applyTrim(shard record.ShardID, p *pending) {
	l, err := c.s.shards.DataLog(shard)
	if err != nil {
		c.fail(p.reqID, "trim", p.start, p.held, err)
		return
	}
	res, err := l.Trim(c.s.storeCtx, logstore.TrimRequest{Floor: p.trim.Floor, ExpectTail: p.trim.ExpectTail,
		Headers: p.trim.Headers, Epoch: c.s.opts.Epoch})
	if err != nil {
		c.fail(p.reqID, "trim", p.start, p.held, err)
		return
	}
	c.ok(wire.MsgTrimOK, p.reqID, "trim", p.start, p.held, wire.EncodeTrimOK(wire.TrimOK{Tail: res.Tail, Floor: res.Floor}))
}

// maxSubmitted bounds the appends one connection has submitted to
// Submitter logs and not yet seen answered, across its shards.
const maxSubmitted = 64

// applyAppends writes a run as one append and answers each request with
// its own part of the batch. On a Submitter log it submits the run and
// returns: a goroutine answers when it is acknowledged, so the next run of
// the queue is submitted behind it without waiting (appends on one
// connection to one shard are still applied in the order they were sent).
func (c *conn) applyAppends(shard record.ShardID, run []*pending) {
	l, err := c.s.shards.DataLog(shard)
	if err != nil {
		for _, p := range run {
			c.fail(p.reqID, "append", p.start, p.held, err)
		}
		return
	}
	var recs []record.Record
	if len(run) == 1 {
		recs = run[0].app.Records
	} else {
		total := 0
		for _, p := range run {
			total += len(p.app.Records)
		}
		recs = make([]record.Record, 0, total)
		for _, p := range run {
			recs = append(recs, p.app.Records...)
		}
	}
	for i := range recs {
		recs[i].Epoch = c.s.opts.Epoch
	}
	sub, async := l.(Submitter)
	if !async {
		res, err := l.Append(c.s.storeCtx, recs, run[0].app.ExpectTail)
		if err != nil && c.splitRefused(shard, run, err) {
			return
		}
		c.appended(run, res, err)
		return
	}
	c.submitted <- struct{}{}
	wait, err := sub.SubmitAppend(c.s.storeCtx, recs, run[0].app.ExpectTail)
	if err != nil {
		<-c.submitted
		if !c.splitRefused(shard, run, err) {
			c.appended(run, logstore.AppendResult{}, err)
		}
		return
	}
	go func() {
		res, err := wait(c.s.storeCtx)
		<-c.submitted
		c.appended(run, res, err)
	}()
}

// splitRefused handles a run of several requests refused before anything
// was written because of one bad request: each is applied alone, so it
// does not fail its neighbours. It reports whether it did so.
func (c *conn) splitRefused(shard record.ShardID, run []*pending, err error) bool {
	if len(run) < 2 || !(errors.Is(err, record.ErrRecordTooLarge) || errors.Is(err, logstore.ErrBadRecord)) {
		return false
	}
	for _, p := range run {
		c.applyAppends(shard, []*pending{p})
	}
	return true
}

// appended answers every request of a run with the outcome of its append.
func (c *conn) appended(run []*pending, res logstore.AppendResult, err error) {
	if err != nil {
		for _, p := range run {
			c.fail(p.reqID, "append", p.start, p.held, err)
		}
		return
	}
	first := res.First
	for _, p := range run {
		n := uint64(len(p.app.Records))
		c.ok(wire.MsgAppendOK, p.reqID, "append", p.start, p.held, wire.EncodeAppendOK(wire.AppendOK{First: first, Tail: first + n}))
		first += n
	}
}
