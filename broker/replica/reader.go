package replica

import (
	"felix.dev/felix/broker/logstore"
	"felix.dev/felix/broker/record"
)

// DefaultRecentBytes bounds the recently persisted records a shard keeps in
// memory per log when Options.RecentBytes is zero.
const DefaultRecentBytes = 16 << 20

// recent keeps the last persisted records of one log, so shipping what was
// just written (the common case: followers a few batches behind, and the
// re-sends of a new pass) does not read the store. It is used only from the
// shard's goroutine.
type recent struct {
	buf   []record.Record // buf[head:] holds consecutive offsets
	head  int
	bytes int
	limit int
}

func (c *recent) held() []record.Record { return c.buf[c.head:] }

// add appends records persisted at the log's tail, evicting the oldest
// beyond the byte limit.
func (c *recent) add(recs []record.Record) {
	if len(recs) == 0 || c.limit <= 0 {
		return
	}
	if h := c.held(); len(h) > 0 && h[len(h)-1].Offset+1 != recs[0].Offset {
		c.reset()
	}
	c.buf = append(c.buf, recs...)
	c.bytes += recsBytes(recs)
	for c.bytes > c.limit && c.head < len(c.buf)-1 {
		c.bytes -= recsBytes(c.buf[c.head : c.head+1])
		c.buf[c.head] = record.Record{} // let the payload go
		c.head++
	}
	if c.head > len(c.buf)/2 {
		// Compact once half is dead: amortised O(1) per record.
		c.buf = append(c.buf[:0:0], c.buf[c.head:]...)
		c.head = 0
	}
}

// truncate forgets the records at or above off.
func (c *recent) truncate(off uint64) {
	for len(c.buf) > c.head && c.buf[len(c.buf)-1].Offset >= off {
		c.bytes -= recsBytes(c.buf[len(c.buf)-1:])
		c.buf = c.buf[:len(c.buf)-1]
	}
}

func (c *recent) reset() { c.buf, c.head, c.bytes = nil, 0, 0 }

// get returns records [from, min(to, end of cache)), at most max, if from
// is cached.
func (c *recent) get(from, to uint64, max int) ([]record.Record, bool) {
	h := c.held()
	if len(h) == 0 || from < h[0].Offset || from > h[len(h)-1].Offset {
		return nil, false
	}
	lo := int(from - h[0].Offset)
	hi := len(h)
	if end := h[0].Offset + uint64(hi); to < end {
		hi = int(to - h[0].Offset)
	}
	if hi-lo > max {
		hi = lo + max
	}
	return append([]record.Record(nil), h[lo:hi]...), true
}

// logReader gives the core read access to the persisted logs: from the
// recent records when it can, from the store otherwise.
type logReader struct {
	logs   *[len(record.LogKinds)]*logstore.Log
	recent *[len(record.LogKinds)]recent
}

func (r logReader) Read(l record.LogKind, from, to uint64, max int) ([]record.Record, error) {
	if recs, ok := r.recent[l].get(from, to, max); ok {
		return recs, nil
	}
	res, err := r.logs[l].ReadRaw(from, logstore.ReadOptions{MaxRecords: max, UpTo: to})
	if err != nil {
		return nil, err
	}
	return res.Records, nil
}
