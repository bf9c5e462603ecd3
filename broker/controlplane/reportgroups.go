package controlplane

import (
	"math"
	"sort"

	felixv1 "felix.dev/felix/api/v1alpha1"
)

// GroupPosition is one consumer group's position on a shard, as the
// shard's leader has it: its committed offset and its lag behind the
// shard's tail (tail - Committed, zero when caught up).
type GroupPosition struct {
	Group     string
	Committed uint64
	Lag       uint64
}

// withGroups returns rep with the groups of positions: the
// felixv1.MaxReportGroups with the largest lag (ties by name), the rest
// counted in GroupsOmitted. A group whose name the API would refuse (empty,
// or longer than felixv1.MaxReportGroupNameLength) is counted, not listed,
// so that no group name can make the whole report unwritable.
func withGroups(rep felixv1.ShardReport, positions []GroupPosition) felixv1.ShardReport {
	ps := make([]GroupPosition, 0, len(positions))
	for _, p := range positions {
		if p.Group != "" && len(p.Group) <= felixv1.MaxReportGroupNameLength {
			ps = append(ps, p)
		}
	}
	sort.Slice(ps, func(i, j int) bool {
		if ps[i].Lag != ps[j].Lag {
			return ps[i].Lag > ps[j].Lag
		}
		return ps[i].Group < ps[j].Group
	})
	rep.Groups = nil
	for _, p := range ps[:min(len(ps), felixv1.MaxReportGroups)] {
		rep.Groups = append(rep.Groups, felixv1.GroupReport{Name: p.Group, Committed: clampInt64(p.Committed), Lag: clampInt64(p.Lag)})
	}
	rep.GroupsOmitted = int32(min(len(positions)-len(rep.Groups), math.MaxInt32))
	return rep
}

// clampInt64 is v as an int64, at most math.MaxInt64.
func clampInt64(v uint64) int64 {
	if v > math.MaxInt64 {
		return math.MaxInt64
	}
	return int64(v)
}
