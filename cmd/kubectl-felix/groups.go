package main

import (
	"fmt"
	"io"
	"text/tabwriter"
	"time"

	felixv1 "felix.dev/felix/api/v1alpha1"
)

// hasGroups reports whether any shard's report lists consumer groups.
func hasGroups(shards []felixv1.FelixShard) bool {
	for _, sh := range shards {
		if r := sh.Status.Report; r != nil && (len(r.Groups) > 0 || r.GroupsOmitted > 0) {
			return true
		}
	}
	return false
}

// writeGroups writes the consumer groups of each shard's report: the
// groups its leader listed (the largest lag first), how many it left out,
// and the report's age. The lag is as of that report, which a change of
// lag alone does not rewrite; the live value is the broker's
// felix_broker_group_lag_records metric or `felix groups`.
func writeGroups(w io.Writer, now time.Time, shards []felixv1.FelixShard) error {
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "SHARD\tGROUP\tCOMMITTED\tLAG\tAS OF")
	for _, sh := range shards {
		r := sh.Status.Report
		if r == nil {
			continue
		}
		asOf := age(now, r.TakenAt.Time)
		for _, g := range r.Groups {
			fmt.Fprintf(tw, "%s\t%s\t%d\t%d\t%s\n", sh.Name, g.Name, g.Committed, g.Lag, asOf)
		}
		if r.GroupsOmitted > 0 {
			fmt.Fprintf(tw, "%s\t(+%d more)\t\t\t%s\n", sh.Name, r.GroupsOmitted, asOf)
		}
	}
	return tw.Flush()
}
