package server

import (
	"testing"

	"felix.dev/felix/broker/record"
	"felix.dev/felix/broker/wire"
)

func TestRunLengthMergesOnlyUnconditionalAppendsInOrder(t *testing.T) {
	app := func(n int) *pending {
		return &pending{app: &wire.AppendRequest{Records: make([]record.Record, n)}}
	}
	cond := func(n int) *pending {
		p := app(n)
		p.app.ExpectTail = u64(0)
		return p
	}
	trim := &pending{trim: &wire.TrimRequest{}}
	oneRec := storeBytes(make([]record.Record, 1)) // bytes of a 1-record batch
	tests := []struct {
		name     string
		items    []*pending
		maxRecs  int
		maxBytes int
		want     int
	}{
		{"unconditional run", []*pending{app(1), app(2), app(3)}, 100, 1 << 20, 3},
		{"stops at a conditional append", []*pending{app(1), app(1), cond(1), app(1)}, 100, 1 << 20, 2},
		{"stops at a trim", []*pending{app(1), trim, app(1)}, 100, 1 << 20, 1},
		{"conditional append goes alone", []*pending{cond(1), app(1)}, 100, 1 << 20, 1},
		{"trim goes alone", []*pending{trim, app(1)}, 100, 1 << 20, 1},
		{"record limit", []*pending{app(2), app(2), app(2)}, 5, 1 << 20, 2},
		{"byte limit", []*pending{app(1), app(1), app(1)}, 100, 2 * oneRec, 2},
		{"first alone over the limit still goes", []*pending{app(10), app(1)}, 5, 1 << 20, 1},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			if got := runLength(tc.items, tc.maxRecs, tc.maxBytes); got != tc.want {
				t.Fatalf("runLength = %d, want %d", got, tc.want)
			}
		})
	}
}
