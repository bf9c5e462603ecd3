package sim

import (
	"fmt"
	"slices"

	"felix.dev/felix/broker/record"
	"felix.dev/felix/broker/replication"
)

const numLogs = len(record.LogKinds)

// disk is one replica's log store: what was written (the page cache) and
// what was synced (the platter), per log, each a dense run of records from
// offset 0. A process crash keeps what was written; a machine crash keeps
// only what was synced.
type disk struct {
	written [numLogs][]record.Record
	synced  [numLogs][]record.Record
}

// Read implements replication.LogReader over the written records.
func (d *disk) Read(l record.LogKind, from, to uint64, max int) ([]record.Record, error) {
	recs := d.written[l]
	if to > uint64(len(recs)) {
		to = uint64(len(recs))
	}
	if from >= to {
		return nil, fmt.Errorf("sim: %s [%d,%d) not on disk (tail %d)", l, from, to, len(recs))
	}
	if uint64(max) < to-from {
		to = from + uint64(max)
	}
	return slices.Clone(recs[from:to]), nil
}

// apply writes one LogWrite into the page cache. It reports an error when
// the core asks for a write that does not continue the log.
func (d *disk) apply(w replication.LogWrite) error {
	recs := d.written[w.Log]
	switch w.Op {
	case replication.WriteTruncate:
		if w.Offset < uint64(len(recs)) {
			d.written[w.Log] = recs[:w.Offset:w.Offset]
		}
	case replication.WriteAppend:
		if len(w.Records) == 0 {
			return nil
		}
		if w.Records[0].Offset != uint64(len(recs)) {
			return fmt.Errorf("append to %s at %d, tail %d", w.Log, w.Records[0].Offset, len(recs))
		}
		d.written[w.Log] = append(recs, w.Records...)
	default:
		return fmt.Errorf("unknown write op %d", w.Op)
	}
	return nil
}

// sync makes everything written durable (fsync / syncfs).
func (d *disk) sync() {
	for l := range d.written {
		d.synced[l] = slices.Clone(d.written[l])
	}
}

// dirty reports whether something written is not synced.
func (d *disk) dirty() bool {
	for l := range d.written {
		if len(d.written[l]) != len(d.synced[l]) {
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
	}
	return lost
}

// clone copies the synced state (a crash-consistent volume snapshot).
func (d *disk) snapshot() *disk {
	c := &disk{}
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
		s.Logs[l].Tail = uint64(len(recs))
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
	recs := d.written[l]
	return rec.Offset < uint64(len(recs)) && sameRecord(recs[rec.Offset], rec)
}

func sameRecord(a, b record.Record) bool {
	return a.Offset == b.Offset && a.Epoch == b.Epoch && a.Kind == b.Kind && string(a.Payload) == string(b.Payload)
}

func sameRecords(a, b []record.Record) bool {
	return slices.EqualFunc(a, b, sameRecord)
}
