package sim

import (
	"fmt"
	"slices"

	"felix.dev/felix/broker/record"
	"felix.dev/felix/broker/replication"
)

const numLogs = len(record.LogKinds)

// disk is one replica's log store: what was written (the page cache) and
// what was synced (the platter), per log, each a dense run of records
// from that copy's base (records below a base were deleted by compaction
// or dropped by a reset). A process crash keeps what was written; a
// machine crash keeps only what was synced.
type disk struct {
	written [numLogs][]record.Record
	synced  [numLogs][]record.Record
	wbase   [numLogs]uint64
	sbase   [numLogs]uint64
}

// base returns the first stored (written) offset of log l.
func (d *disk) base(l int) uint64 { return d.wbase[l] }

// tail returns the written tail of log l.
func (d *disk) tail(l int) uint64 { return d.wbase[l] + uint64(len(d.written[l])) }

// at returns the written record at offset o of log l, if stored.
func (d *disk) at(l int, o uint64) (record.Record, bool) {
	if o < d.wbase[l] || o >= d.tail(l) {
		return record.Record{}, false
	}
	return d.written[l][o-d.wbase[l]], true
}

// Read implements replication.LogReader over the written records.
func (d *disk) Read(l record.LogKind, from, to uint64, max int) ([]record.Record, error) {
	b, t := d.wbase[l], d.tail(int(l))
	if to > t {
		to = t
	}
	if from < b || from >= to {
		return nil, fmt.Errorf("sim: %s [%d,%d) not on disk (base %d, tail %d)", l, from, to, b, t)
	}
	if uint64(max) < to-from {
		to = from + uint64(max)
	}
	return slices.Clone(d.written[l][from-b : to-b]), nil
}

// apply writes one LogWrite into the page cache. It reports an error when
// the core asks for a write that does not continue the log, or a reset
// below the log's base.
func (d *disk) apply(w replication.LogWrite) error {
	l := int(w.Log)
	recs, b := d.written[l], d.wbase[l]
	switch w.Op {
	case replication.WriteTruncate:
		if w.Offset < b {
			return fmt.Errorf("truncate %s at %d below its base %d", w.Log, w.Offset, b)
		}
		if w.Offset < d.tail(l) {
			n := w.Offset - b
			d.written[l] = recs[:n:n]
		}
	case replication.WriteAppend:
		if len(w.Records) == 0 {
			return nil
		}
		if w.Records[0].Offset != d.tail(l) {
			return fmt.Errorf("append to %s at %d, tail %d", w.Log, w.Records[0].Offset, d.tail(l))
		}
		d.written[l] = append(recs, w.Records...)
	case replication.WriteReset:
		// logstore's ResetAt: every record dropped, an empty log at
		// Offset, persisted and synced before it returns (a crash never
		// brings a record back).
		if w.Offset < b {
			return fmt.Errorf("reset %s at %d below its base %d", w.Log, w.Offset, b)
		}
		d.written[l], d.wbase[l] = nil, w.Offset
		d.synced[l], d.sbase[l] = nil, w.Offset
	default:
		return fmt.Errorf("unknown write op %d", w.Op)
	}
	return nil
}

// compact deletes the records of log l below start (segments below the
// floor), from the page cache and the platter alike. It returns the new
// base (start clamped to the written tail; never lower than the base).
func (d *disk) compact(l int, start uint64) uint64 {
	start = min(start, d.tail(l))
	if start <= d.wbase[l] {
		return d.wbase[l]
	}
	d.written[l] = slices.Clone(d.written[l][start-d.wbase[l]:])
	d.wbase[l] = start
	if st := d.sbase[l] + uint64(len(d.synced[l])); start >= st {
		d.synced[l], d.sbase[l] = nil, start
	} else if start > d.sbase[l] {
		d.synced[l] = slices.Clone(d.synced[l][start-d.sbase[l]:])
		d.sbase[l] = start
	}
	return start
}

// sync makes everything written durable (fsync / syncfs).
func (d *disk) sync() {
	for l := range d.written {
		d.synced[l] = slices.Clone(d.written[l])
		d.sbase[l] = d.wbase[l]
	}
}

// dirty reports whether something written is not synced.
func (d *disk) dirty() bool {
	for l := range d.written {
		if len(d.written[l]) != len(d.synced[l]) || d.wbase[l] != d.sbase[l] {
			return true
		}
	}
	return false
}

// powerLoss drops everything not synced (a machine crash). It reports
// whether anything was lost.
func (d *disk) powerLoss() bool {
	lost := d.dirty()
	for l := range d.synced {
		if !lost && !sameRecords(d.written[l], d.synced[l]) {
			lost = true
		}
		d.written[l] = slices.Clone(d.synced[l])
		d.wbase[l] = d.sbase[l]
	}
	return lost
}

// drop destroys log l (written and synced) as a lost volume would: the
// log is empty from offset 0.
func (d *disk) drop(l int) {
	d.written[l], d.synced[l] = nil, nil
	d.wbase[l], d.sbase[l] = 0, 0
}

// snapshot copies the synced state (a crash-consistent volume snapshot).
func (d *disk) snapshot() *disk {
	c := &disk{wbase: d.sbase, sbase: d.sbase}
	for l := range d.synced {
		c.synced[l] = slices.Clone(d.synced[l])
		c.written[l] = slices.Clone(d.synced[l])
	}
	return c
}

// state is the durable state the core is built from at start.
func (d *disk) state() replication.State {
	var s replication.State
	for l, recs := range d.written {
		s.Logs[l].Base = d.wbase[l]
		s.Logs[l].Tail = d.tail(l)
		for _, r := range recs {
			es := s.Logs[l].Epochs
			if len(es) == 0 || es[len(es)-1].Epoch != r.Epoch {
				s.Logs[l].Epochs = append(s.Logs[l].Epochs, replication.EpochStart{Epoch: r.Epoch, Offset: r.Offset})
			}
		}
	}
	return s
}

// holds reports whether the written log l holds rec at its offset.
func (d *disk) holds(l record.LogKind, rec record.Record) bool {
	r, ok := d.at(int(l), rec.Offset)
	return ok && sameRecord(r, rec)
}

func sameRecord(a, b record.Record) bool {
	return a.Offset == b.Offset && a.Epoch == b.Epoch && a.Kind == b.Kind && string(a.Payload) == string(b.Payload)
}

func sameRecords(a, b []record.Record) bool {
	return slices.EqualFunc(a, b, sameRecord)
}
