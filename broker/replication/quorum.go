package replication

import "sort"

// QuorumMark returns the highest position that at least q members hold,
// where held[i] is member i's position and a member with counted[i] false
// holds nothing (base) [RP-5]. With fewer than q members it returns base.
// Equivalently: the q-th highest of the counted positions.
func QuorumMark(base uint64, held []uint64, counted []bool, q int) uint64 {
	if q <= 0 || q > len(held) {
		return base
	}
	vals := make([]uint64, len(held))
	for i := range held {
		vals[i] = base
		if counted[i] && held[i] > base {
			vals[i] = held[i]
		}
	}
	sort.Slice(vals, func(i, j int) bool { return vals[i] > vals[j] })
	return vals[q-1]
}
