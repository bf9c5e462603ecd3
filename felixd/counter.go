package felixd

import (
	"context"
	"fmt"
	"math"
	"strconv"
)

// Counter is the example workload: a counter that counts up by one per
// output. Each output record's payload is the counter's new value in
// decimal, a snapshot's payload is the value, so the state is rebuilt from
// the latest snapshot plus the outputs after it.
type Counter struct {
	value uint64
}

// Value returns the counter's current value.
func (c *Counter) Value() uint64 { return c.value }

// Restore implements Workload.
func (c *Counter) Restore(snapshot []byte) error {
	if snapshot == nil {
		c.value = 0
		return nil
	}
	v, err := strconv.ParseUint(string(snapshot), 10, 64)
	if err != nil {
		return fmt.Errorf("counter snapshot %q: %w", snapshot, err)
	}
	c.value = v
	return nil
}

// Apply implements Workload: an output must be the value after the current
// one.
func (c *Counter) Apply(output []byte) error {
	v, err := strconv.ParseUint(string(output), 10, 64)
	if err != nil {
		return fmt.Errorf("counter output %q: %w", output, err)
	}
	if c.value == math.MaxUint64 || v != c.value+1 {
		return fmt.Errorf("counter output %d does not follow %d", v, c.value)
	}
	c.value = v
	return nil
}

// Snapshot implements Workload.
func (c *Counter) Snapshot() ([]byte, error) {
	return []byte(strconv.FormatUint(c.value, 10)), nil
}

// Next implements Workload: one output, the next value.
func (c *Counter) Next(context.Context) ([][]byte, error) {
	return [][]byte{[]byte(strconv.FormatUint(c.value+1, 10))}, nil
}
