package sim

import (
	"fmt"
	"strconv"
	"strings"
)

// Shrink looks for a shorter schedule of cfg that still fails with the
// same invariant, by dropping chunks of events (halving the chunk size down
// to single events) while the failure persists. It makes at most maxRuns
// runs and returns the smallest failing Keep list found (the events up to
// the failing step when nothing smaller fails).
func Shrink(cfg Config, f *Failure, maxRuns int) []int {
	var keep []int
	if cfg.Keep != nil {
		keep = append(keep, cfg.Keep...)
	} else {
		last := f.Step
		if last < 0 {
			last = cfg.Steps - 1
		}
		for i := 0; i <= last; i++ {
			keep = append(keep, i)
		}
	}
	fails := func(k []int) bool {
		c := cfg
		c.Keep, c.Trace = k, false
		r := Run(c)
		return r.Failure != nil && r.Failure.Invariant == f.Invariant
	}
	runs := 0
	for chunk := len(keep) / 2; chunk >= 1 && runs < maxRuns; chunk /= 2 {
		for start := 0; start < len(keep) && runs < maxRuns; {
			end := min(start+chunk, len(keep))
			cand := append(append([]int{}, keep[:start]...), keep[end:]...)
			runs++
			if len(cand) > 0 && fails(cand) {
				keep = cand
				continue
			}
			start = end
		}
	}
	return keep
}

// FormatKeep renders a Keep list compactly ("0-4,7,9-12") for the
// -sim.keep flag.
func FormatKeep(keep []int) string {
	var parts []string
	for i := 0; i < len(keep); {
		j := i
		for j+1 < len(keep) && keep[j+1] == keep[j]+1 {
			j++
		}
		if j == i {
			parts = append(parts, strconv.Itoa(keep[i]))
		} else {
			parts = append(parts, fmt.Sprintf("%d-%d", keep[i], keep[j]))
		}
		i = j + 1
	}
	return strings.Join(parts, ",")
}

// ParseKeep parses FormatKeep's output. The empty string is nil (run every
// event).
func ParseKeep(s string) ([]int, error) {
	if s == "" {
		return nil, nil
	}
	var out []int
	for _, p := range strings.Split(s, ",") {
		lo, hi, rng := strings.Cut(p, "-")
		a, err := strconv.Atoi(lo)
		if err != nil {
			return nil, fmt.Errorf("sim: bad keep item %q: %w", p, err)
		}
		b := a
		if rng {
			if b, err = strconv.Atoi(hi); err != nil {
				return nil, fmt.Errorf("sim: bad keep item %q: %w", p, err)
			}
		}
		if b < a {
			return nil, fmt.Errorf("sim: bad keep range %q", p)
		}
		for i := a; i <= b; i++ {
			out = append(out, i)
		}
	}
	return out, nil
}
