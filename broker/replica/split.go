package replica

import "felix.dev/felix/broker/replication"

// DefaultMaxMessageBytes bounds the record bytes of one replication frame
// when Options.MaxMessageBytes is zero: half the default frame limit, so a
// peer never refuses a frame this broker sends.
const DefaultMaxMessageBytes = 8 << 20

// whole reports whether m goes out as it is: split would return it alone.
func whole(m replication.Message, limit int) bool {
	return (m.Type != replication.MsgAppend && m.Type != replication.MsgFetchResp) || len(m.Records) < 2 ||
		recsBytes(m.Records) <= limit
}

// split cuts a message carrying records (Append, FetchResp) whose records
// exceed limit bytes into several messages of consecutive records, each
// naming the epoch of the record before its first (PrevEpoch), in order.
// Receiving the parts in order is the same as receiving the whole: each
// part continues the log exactly where the previous one ended, and each is
// answered on its own. A single record over the limit travels alone.
// Other messages are returned as they are.
func split(m replication.Message, limit int) []replication.Message {
	if whole(m, limit) {
		return []replication.Message{m}
	}
	var out []replication.Message
	start, size := 0, 0
	emit := func(end int) {
		p := m
		p.Records = m.Records[start:end]
		p.Index = m.Records[start].Offset
		if start > 0 {
			p.PrevEpoch = m.Records[start-1].Epoch
		}
		out = append(out, p)
		start, size = end, 0
	}
	for i := range m.Records {
		n := recsBytes(m.Records[i : i+1])
		if i > start && size+n > limit {
			emit(i)
		}
		size += n
	}
	emit(len(m.Records))
	return out
}
