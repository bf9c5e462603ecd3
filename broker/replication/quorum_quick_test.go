package replication

import (
	"fmt"
	"math/rand"
	"reflect"
	"testing"
	"testing/quick"
)

// naiveQuorumMark is the second implementation: the largest candidate
// position x (any member's position, or base) such that at least q
// members hold x or more, where a member not counted holds base [RP-5].
func naiveQuorumMark(base uint64, held []uint64, counted []bool, q int) uint64 {
	if q <= 0 || q > len(held) {
		return base
	}
	best := base
	for i := range held {
		x := held[i]
		if !counted[i] || x <= best {
			continue
		}
		n := 0
		for j := range held {
			if counted[j] && held[j] >= x {
				n++
			}
		}
		if n >= q {
			best = x
		}
	}
	return best
}

type markInput struct {
	Base    uint64
	Held    []uint64
	Counted []bool
	Q       int
}

// Generate makes small replica sets with clustered positions so ties and
// uncounted members are common.
func (markInput) Generate(r *rand.Rand, _ int) reflect.Value {
	n := 1 + r.Intn(7)
	in := markInput{Base: uint64(r.Intn(3)), Held: make([]uint64, n), Counted: make([]bool, n), Q: r.Intn(n + 2)}
	for i := range in.Held {
		in.Held[i] = uint64(r.Intn(8))
		in.Counted[i] = r.Intn(3) != 0
	}
	return reflect.ValueOf(in)
}

// TestRP5_QuorumMarkMatchesNaive checks QuorumMark against the naive
// definition with testing/quick.
func TestRP5_QuorumMarkMatchesNaive(t *testing.T) {
	f := func(in markInput) bool {
		return QuorumMark(in.Base, in.Held, in.Counted, in.Q) == naiveQuorumMark(in.Base, in.Held, in.Counted, in.Q)
	}
	if err := quick.Check(f, &quick.Config{MaxCount: 5000, Rand: rand.New(rand.NewSource(1))}); err != nil {
		t.Fatal(err)
	}
}

// TestRP5_QuorumMarkUncountedHoldNothing: an uncounted member, however far
// it claims to be, never raises the mark.
func TestRP5_QuorumMarkUncountedHoldNothing(t *testing.T) {
	cases := []struct {
		held    []uint64
		counted []bool
		q       int
		want    uint64
	}{
		{[]uint64{10, 10, 10}, []bool{true, true, true}, 2, 10},
		{[]uint64{10, 10, 10}, []bool{true, false, false}, 2, 0},
		{[]uint64{10, 7, 99}, []bool{true, true, false}, 2, 7},
		{[]uint64{10, 7, 5, 99, 99}, []bool{true, true, true, false, false}, 3, 5},
		{[]uint64{10}, []bool{true}, 1, 10},
		{[]uint64{10, 10}, []bool{true, true}, 3, 0},
	}
	for _, tc := range cases {
		if got := QuorumMark(0, tc.held, tc.counted, tc.q); got != tc.want {
			t.Errorf("QuorumMark(%v, %v, %d) = %d, want %d", tc.held, tc.counted, tc.q, got, tc.want)
		}
	}
}

// BenchmarkQuorumMark measures one recount for three and five replicas:
// the leader runs two per log on every proposal and every answer.
func BenchmarkQuorumMark(b *testing.B) {
	for _, n := range []int{3, 5} {
		held := make([]uint64, n)
		counted := make([]bool, n)
		for i := range held {
			held[i], counted[i] = uint64(100+7*i%5), true
		}
		b.Run(fmt.Sprintf("replicas=%d", n), func(b *testing.B) {
			b.ReportAllocs()
			var sink uint64
			for i := 0; i < b.N; i++ {
				sink += QuorumMark(0, held, counted, n/2+1)
			}
			if sink == 0 {
				b.Fatal("no mark")
			}
		})
	}
}
