// Package controlplane is the broker's side of the Kubernetes API: the only
// way a broker speaks to the Felix operator (docs/operator.md, docs/storage-identity.md).
//
// A broker uses it in the startup order of [ID-4]:
//
//	cp, _ := controlplane.New(controlplane.Config{...})
//	seen, _ := cp.CurrentIncarnation(ctx)         // holds while unreachable
//	// datadir: CheckIncarnation(seen), may rotate the storage id
//	inc, _ := cp.Register(ctx, id, seen, address) // operator grants seen+1
//	// datadir: RecordRegistration(inc), open stores, serve
//	reports := cp.NewReportWriter(controlplane.ReportOptions{})
//	go reports.Run(ctx)                           // status.report, bounded rate
//	go cp.RunHeartbeat(ctx, reports.Current)      // renews its Lease
//	w, _ := cp.NewShardWatcher()
//	go w.Run(ctx)
//	w.WaitForSync(ctx)                            // current epochs first
//	as, _ := w.Assignments(ctx)                   // act only on these
//
// A leader calls reports.Set(shard, report) whenever its view of a shard
// changes, reports.Drop(shard) when it stops leading it, and
// reports.Invalidate(shard) when its watch shows a stored report that is
// not the one it wrote.
//
// While the API server cannot be reached the broker holds: Holding reports
// true, so the broker's /ready is down and /live stays up.
package controlplane

// Names shared with the operator.
const (
	// FieldManager is the server-side-apply field manager of every broker
	// write of FelixShard status.report. The operator applies assignment,
	// caughtUp and conditions as "felix-operator".
	FieldManager = "felix-broker"

	// LeaseAnnotationIncarnation on a heartbeat Lease is the incarnation of
	// the broker that renewed it.
	LeaseAnnotationIncarnation = "felix.dev/incarnation"

	// LeaseAnnotationReports on a heartbeat Lease is "current" when, at the
	// renewal, every report the broker leads has been written to the API
	// within one heartbeat of its last change, and "behind" otherwise. A
	// "current" renewal vouches for the broker's unchanged reports, so they
	// need no periodic rewrite to stay alive (see docs/operator.md); it
	// does not make them taken at the renewal [CP-1].
	LeaseAnnotationReports = "felix.dev/reports"

	// ReportsCurrent and ReportsBehind are the values of
	// LeaseAnnotationReports.
	ReportsCurrent = "current"
	ReportsBehind  = "behind"
)
