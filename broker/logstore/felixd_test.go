package logstore

import (
	"context"
	"errors"
	"strconv"
	"testing"

	"felix.dev/felix/broker/record"
)

// The seed 004 trace ("The trim that hid the fence") at the store API, with
// a small simulated felixd holder. The model numbers log positions from 1,
// so the log is created with base 1 and offset n is model position n.

// holderVariant turns one of felixd's rules off, to show the trace it lets
// through.
type holderVariant struct {
	untagged         bool // reads without negotiating the trim tag [TR-4]
	readFromEarliest bool // re-reads from earliest instead of its cursor [FD-1]
	noOpSkipsTail    bool // the store's no-op trim skips the tail check [TR-3]
}

// holder is a lease holder writing tail-conditional records carrying its
// epoch in the record and in an "epoch" header (felixd's habit).
type holder struct {
	t        *testing.T
	l        *Log
	epoch    uint64
	expected uint64 // the tail it believes; only from reads or its own acknowledged answers [FD-2]
	cursor   uint64 // where it re-reads from
	retired  bool
	v        holderVariant
}

func newHolder(t *testing.T, l *Log, epoch uint64, v holderVariant) *holder {
	base := l.Describe().Base
	return &holder{t: t, l: l, epoch: epoch, expected: base, cursor: base, v: v}
}

func (h *holder) headers() []record.Header {
	return []record.Header{{Key: "epoch", Value: []byte(strconv.FormatUint(h.epoch, 10))}}
}

func epochOf(hs []record.Header) uint64 {
	e, _ := strconv.ParseUint(headerValue(hs, "epoch"), 10, 64)
	return e
}

// write makes one tail-conditional write; on a refusal it re-reads and, if
// still in charge, does not retry (the test drives the next step).
func (h *holder) write(payload string) bool {
	if h.retired {
		return false
	}
	res, err := h.l.Append(context.Background(), []record.Record{{Epoch: h.epoch, Headers: h.headers(), Payload: []byte(payload)}}, ptr(h.expected))
	switch {
	case err == nil:
		h.expected, h.cursor = res.Tail, res.Tail
		return true
	case errors.Is(err, record.ErrOffsetMismatch):
		h.catchUp() // never adopt the refusal's tail
		return false
	default:
		h.t.Fatalf("holder %d write: %v", h.epoch, err)
		return false
	}
}

// trim asks for a floor under its expected tail; felixd takes its next
// tail from the answer.
func (h *holder) trim(floor uint64) {
	if h.retired {
		return
	}
	req := TrimRequest{Floor: floor, ExpectTail: h.expected, Headers: h.headers(), Epoch: h.epoch}
	var res TrimResult
	var err error
	if info := h.l.Describe(); h.v.noOpSkipsTail && floor <= info.Floor {
		// The broken store: a no-op answered without the tail check.
		res = TrimResult{Tail: info.Tail, Floor: info.Floor, NoOp: true}
	} else {
		res, err = h.l.Trim(context.Background(), req)
	}
	switch {
	case err == nil:
		h.expected = res.Tail
		if !res.NoOp {
			h.cursor = res.Tail
		}
	case errors.Is(err, record.ErrOffsetMismatch):
		h.catchUp()
	default:
		h.t.Fatalf("holder %d trim: %v", h.epoch, err)
	}
}

// catchUp re-reads from its cursor; a newer epoch in a record or in a
// CursorTooOld tag retires it, otherwise it takes the tail it read to.
func (h *holder) catchUp() {
	from := h.cursor
	if h.v.readFromEarliest {
		from = FromEarliest
	}
	for {
		res, err := h.l.Read(from, ReadOptions{WithTrimTag: !h.v.untagged})
		var too *record.CursorTooOldError
		if errors.As(err, &too) {
			if epochOf(too.TrimHeaders) > h.epoch {
				h.retired = true
				return
			}
			from = too.Floor // resume at the floor
			continue
		}
		if err != nil {
			h.t.Fatalf("holder %d read: %v", h.epoch, err)
		}
		for _, r := range res.Records {
			if epochOf(r.Headers) > h.epoch {
				h.retired = true
				return
			}
		}
		if res.Next == from {
			break
		}
		from = res.Next
	}
	h.cursor, h.expected = from, from
}

// staleAfterNewer reports whether the log holds a record of some epoch
// after a record of a newer epoch: StaleTrimRefused broken.
func staleAfterNewer(t *testing.T, l *Log) bool {
	newest := uint64(0)
	for _, r := range readAll(t, l, FromEarliest, true) {
		if r.Epoch < newest {
			return true
		}
		newest = max(newest, r.Epoch)
	}
	return false
}

// runSeedTrace plays the trace: holder 1 holds the lease but has not
// written; the lease moves to holder 2, which makes its fenced write at 1
// and trims before 2; holder 1 then acts on its stale view.
func runSeedTrace(t *testing.T, v holderVariant, staleTrims bool) (h1 *holder, l *Log) {
	s := openTest(t, Options{AutoCommit: true})
	l, err := s.CreateLog(testLog, LogOptions{Base: 1})
	if err != nil {
		t.Fatal(err)
	}
	h1 = newHolder(t, l, 1, v)
	h2 := newHolder(t, l, 2, v)
	if !h2.write("fenced write") {
		t.Fatal("holder 2's fenced write was refused")
	}
	if got := l.Describe().Tail; got != 2 {
		t.Fatalf("fenced write not at 1: tail %d", got)
	}
	h2.trim(2)
	if info := l.Describe(); info.Floor != 2 || info.Tail != 3 {
		t.Fatalf("holder 2's trim: %+v", info)
	}
	// Holder 1, still believing it leads (expected tail 1, cursor 1).
	if staleTrims {
		h1.trim(1) // at or below the floor: a no-op
	} else {
		h1.write("stale write")
	}
	if !h1.retired {
		h1.write("after catching up")
		h1.trim(4)
	}
	return h1, l
}

func TestTR4_SeedTrace_StaleHolderStopsOnTaggedCursorTooOld(t *testing.T) {
	h1, l := runSeedTrace(t, holderVariant{}, false)
	// Step by step: holder 1 reading from its cursor 1 is refused with the tag.
	_, err := l.Read(1, ReadOptions{WithTrimTag: true})
	too := wantTooOld(t, err)
	if too.Floor != 2 || epochOf(too.TrimHeaders) != 2 {
		t.Fatalf("refusal %+v", too)
	}
	if !h1.retired {
		t.Fatal("holder 1 did not stop")
	}
	if staleAfterNewer(t, l) {
		t.Fatal("holder 1 wrote after holder 2")
	}
	if tail := l.Describe().Tail; tail != 3 {
		t.Fatalf("tail %d, want 3 (nothing after holder 2's trim)", tail)
	}
}

func TestTR3_SeedTrace_StaleNoOpTrimRefused(t *testing.T) {
	h1, l := runSeedTrace(t, holderVariant{}, true)
	if !h1.retired || staleAfterNewer(t, l) {
		t.Fatalf("retired %v; stale write landed %v", h1.retired, staleAfterNewer(t, l))
	}
}

// Each broken variant lets holder 1 write after holder 2.
func TestTR3TR4FD1_SeedTrace_BrokenVariantsLetHolderOneWriteAfterHolderTwo(t *testing.T) {
	for _, tc := range []struct {
		name       string
		v          holderVariant
		staleTrims bool
	}{
		{"TR4 without the tag", holderVariant{untagged: true}, false},
		{"FD1 reading from earliest never sees the tag", holderVariant{readFromEarliest: true}, false},
		{"TR3 no-op trim that skips the tail check hands over the new tail", holderVariant{noOpSkipsTail: true}, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			h1, l := runSeedTrace(t, tc.v, tc.staleTrims)
			if h1.retired {
				t.Fatal("holder 1 stopped: the variant no longer shows the bug")
			}
			if !staleAfterNewer(t, l) {
				t.Fatal("holder 1 did not write after holder 2")
			}
		})
	}
}
