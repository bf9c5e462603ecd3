package sim

import (
	"felix.dev/felix/broker/placement"
	"felix.dev/felix/broker/replication"
)

// holdTicks is how long a change of caught-up flags alone waits before it
// is written (the broker's writer holds such a flip for half a heartbeat;
// one tick is the simulator's smallest delay after the heartbeat that
// sees it).
const holdTicks = 1

// reportWriter is a leader process's writer of its shard report, as in
// broker/controlplane.ReportWriter: a change placement reads is written at
// once, a change of caught-up flags alone once it has held for holdTicks,
// and the writer tells its heartbeat whether every change was written
// within a heartbeat (current), which lets the control plane keep an
// unchanged report alive. The stored report may therefore lag the
// leader's view by up to a heartbeat while renewals vouch for it.
type reportWriter struct {
	want *replication.Report
	// wantAt is the tick want's pass started at (-1: unknown), written as
	// its ViewAt whenever want is written [CP-1].
	wantAt  int
	written *replication.Report
	// dirty: want differs from written in what placement reads, since
	// dirtySince; flipsOnly: only in caught-up flags.
	dirty      bool
	dirtySince int
	flipsOnly  bool
}

// set records the leader's current view, taken at tick viewAt (the start
// of its pass), at tick now.
func (w *reportWriter) set(r *replication.Report, viewAt, now int) {
	w.want, w.wantAt = r, viewAt
	switch {
	case w.written != nil && sameReadings(w.written, r, true):
		w.dirty, w.flipsOnly = false, false
	case !w.dirty:
		w.dirty, w.dirtySince = true, now
		w.flipsOnly = w.written != nil && sameReadings(w.written, r, false)
	default:
		w.flipsOnly = w.flipsOnly && sameReadings(w.written, r, false)
	}
}

// due reports whether the view is to be written at tick now.
func (w *reportWriter) due(now int) bool {
	return w.dirty && !(w.flipsOnly && now-w.dirtySince < holdTicks)
}

// wrote records that want was written.
func (w *reportWriter) wrote() {
	w.written, w.dirty, w.flipsOnly = w.want, false, false
}

// current reports whether every change was written within a heartbeat.
func (w *reportWriter) current(now int) bool {
	return !w.dirty || now-w.dirtySince <= heartbeatTicks
}

// sameReadings compares what placement reads of two reports (the
// followers' caught-up flags only if caughtUp), as the broker's writer
// does.
func sameReadings(a, b *replication.Report, caughtUp bool) bool {
	if a.Leader != b.Leader || a.LeaderIncarnation != b.LeaderIncarnation || a.LeaderStorageID != b.LeaderStorageID ||
		a.Epoch != b.Epoch || len(a.Followers) != len(b.Followers) {
		return false
	}
	type line struct {
		id replication.StorageID
		up bool
	}
	seen := make(map[replication.NodeID]line, len(a.Followers))
	for _, f := range a.Followers {
		seen[f.Node] = line{f.StorageID, f.CaughtUp && caughtUp}
	}
	for _, f := range b.Followers {
		if l, ok := seen[f.Node]; !ok || l != (line{f.StorageID, f.CaughtUp && caughtUp}) {
			return false
		}
	}
	return true
}

// takeReport runs the assigned leader l's report writer and heartbeat at
// this control-plane step: its latest view is set, written if due (the
// operator keeps only the report of the assigned leader at the
// assignment's epoch and incarnation, stamped as written now), and a
// "reports current" renewal vouches for the stored report if it is l's.
func (s *simulation) takeReport(l *node, a *placement.Assignment) {
	cp := &s.cp
	w := &l.writer
	if l.report != nil {
		w.set(l.report, l.reportViewAt, s.now)
		l.report = nil
	}
	if w.due(s.now) {
		if w.want.Epoch == a.Epoch && l.inc == a.LeaderIncarnation {
			cp.report, cp.reportPos = placementReport(w.want, w.wantAt, s.stamp()), w.want.Position
			s.tracef("  control plane takes report of %s e%d: %s", l.id, w.want.Epoch, renderReport(cp.report, w.want))
		}
		w.wrote()
	} else if w.dirty {
		s.tracef("  %s holds back a caught-up flip of its report", l.id)
	}
	if rep := cp.report; rep != nil && w.current(s.now) && rep.Leader == string(l.id) &&
		rep.LeaderIncarnation == l.inc && rep.Epoch == a.Epoch {
		rep.VouchedAt = s.stamp()
	}
}
