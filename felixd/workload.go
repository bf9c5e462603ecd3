package felixd

import "context"

// Workload is what a workload author writes: a deterministic state machine
// whose state is rebuilt from the latest snapshot plus the output records
// after it. felixd calls it from one goroutine.
type Workload interface {
	// Restore resets the state to a snapshot's payload; nil means the
	// initial state.
	Restore(snapshot []byte) error
	// Apply folds one output record's payload into the state. It is called
	// for every output read back from the stream (any epoch) and for the
	// holder's own outputs once they are acknowledged, in offset order.
	Apply(output []byte) error
	// Snapshot encodes the current state; Restore of it must give the same
	// state.
	Snapshot() ([]byte, error)
	// Next returns the outputs to append next, computed from the current
	// state. It is called only while the holder holds the lease and after
	// its fenced write; the outputs reach Apply only if they land.
	Next(ctx context.Context) ([][]byte, error)
}
