package replication

// QuorumMark returns the highest position that at least q members hold,
// where held[i] is member i's position and a member with counted[i] false
// holds nothing (base) [RP-5]. With fewer than q members it returns base.
// Equivalently: the q-th highest of the counted positions.
func QuorumMark(base uint64, held []uint64, counted []bool, q int) uint64 {
	if q <= 0 || q > len(held) {
		return base
	}
	// The leader recounts on every proposal and answer: keep replica sets
	// of usual sizes on the stack.
	var buf [8]uint64
	vals := buf[:0]
	for i := range held {
		v := base
		if counted[i] && held[i] > base {
			v = held[i]
		}
		// Insertion sort: a replica set has a handful of members, and
		// the leader recounts every log on every answer and pass.
		j := len(vals)
		vals = append(vals, v)
		for ; j > 0 && vals[j-1] > v; j-- {
			vals[j] = vals[j-1]
		}
		vals[j] = v
	}
	return vals[len(vals)-q]
}
