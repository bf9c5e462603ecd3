package felixd

import (
	"context"
	"errors"
	"testing"

	"github.com/go-logr/logr"

	"felix.dev/felix/broker/logstore"
)

// The seed 004 trace, adapted to felixd: holder 1 (epoch 1) starts and
// writes, then freezes; holder 2 (epoch 2) takes over and fences; holder 1
// wakes up still believing it leads. Each rule test plays the step its rule
// guards with the rule kept (holder 1 retires and nothing of it lands after
// holder 2's fenced write) and with the rule broken through the test-only
// switch (holder 1 writes after holder 2: StaleTrimRefused broken).

type pair struct {
	l      *logstore.Log
	sl     storeLog
	h1, h2 *Holder
	w1, w2 *Counter
	// fenceAt is the offset of holder 2's fenced write.
	fenceAt uint64
}

func newHolderT(t *testing.T, sl storeLog, epoch uint64, w *Counter, broken brokenRule) *Holder {
	t.Helper()
	h, err := NewHolder(HolderConfig{Log: sl, Epoch: epoch, Workload: w, SnapshotEvery: 5, Logger: logr.Discard(), broken: broken})
	if err != nil {
		t.Fatal(err)
	}
	return h
}

// startPair starts holder 1, lets it write one output, then starts holder
// 2 (its fenced write). Both holders get the broken switch.
func startPair(t *testing.T, broken brokenRule, o logstore.Options, h1Output bool) *pair {
	t.Helper()
	ctx := context.Background()
	p := &pair{w1: &Counter{}, w2: &Counter{}}
	p.l, p.sl = newStoreLog(t, o)
	p.h1 = newHolderT(t, p.sl, 1, p.w1, broken)
	if err := p.h1.Start(ctx); err != nil {
		t.Fatalf("holder 1 start: %v", err)
	}
	if h1Output {
		if err := p.h1.Append(ctx, [][]byte{[]byte("1")}); err != nil {
			t.Fatalf("holder 1 output: %v", err)
		}
	}
	p.h2 = newHolderT(t, p.sl, 2, p.w2, broken)
	if err := p.h2.Start(ctx); err != nil {
		t.Fatalf("holder 2 start: %v", err)
	}
	p.fenceAt = p.h2.Expected() - 1
	return p
}

// staleWrites makes holder 1 try to write as its workload would: up to
// three attempts, going on after ErrNotWritten. It returns the last error.
func (p *pair) staleWrites(t *testing.T) error {
	t.Helper()
	var err error
	for range 3 {
		outs, _ := p.w1.Next(context.Background())
		err = p.h1.Append(context.Background(), outs)
		if !errors.Is(err, ErrNotWritten) {
			return err
		}
	}
	return err
}

// wantRetiredClean asserts the rule held: holder 1 retired and the stream
// satisfies StaleTrimRefused with its tail unchanged since tail.
func (p *pair) wantRetiredClean(t *testing.T, err error, tail uint64) {
	t.Helper()
	if !errors.Is(err, ErrRetired) || !p.h1.Retired() {
		t.Fatalf("holder 1: err %v retired %v, want ErrRetired", err, p.h1.Retired())
	}
	if err := CheckStaleTrimRefused(rawContents(t, p.l)); err != nil {
		t.Fatal(err)
	}
	if got := p.l.Describe().Tail; got != tail {
		t.Fatalf("tail %d, want %d: something landed after holder 2", got, tail)
	}
	// A retired holder never writes again.
	if err := p.h1.Append(context.Background(), [][]byte{[]byte("x")}); !errors.Is(err, ErrRetired) {
		t.Fatalf("append after retiring: %v", err)
	}
}

// wantStaleLanded asserts the broken twin shows the bug.
func (p *pair) wantStaleLanded(t *testing.T, err error) {
	t.Helper()
	if err != nil || p.h1.Retired() {
		t.Fatalf("holder 1: err %v retired %v: the broken rule no longer shows the bug", err, p.h1.Retired())
	}
	if err := CheckStaleTrimRefused(rawContents(t, p.l)); err == nil {
		t.Fatal("StaleTrimRefused held with the rule broken: the twin no longer shows the bug")
	} else {
		t.Logf("as expected with the rule broken: %v", err)
	}
}

// fd1 plays the seed's trace: holder 2 trims with the floor at its own
// position, so only the trim record (which readers skip) is left of epoch 2
// at or above the floor.
func fd1(t *testing.T, broken brokenRule) (*pair, uint64, error) {
	p := startPair(t, broken, logstore.Options{}, true)
	if err := p.h2.Trim(context.Background(), p.h2.Expected()); err != nil {
		t.Fatalf("holder 2 trim: %v", err)
	}
	tail := p.l.Describe().Tail
	return p, tail, p.staleWrites(t)
}

// TestFD1_RereadFromOwnCursor: holder 1 re-reads from its cursor, below the
// floor, is refused with CursorTooOld carrying epoch 2 and retires.
func TestFD1_RereadFromOwnCursor(t *testing.T) {
	p, tail, err := fd1(t, ruleKept)
	p.wantRetiredClean(t, err, tail)
}

// Broken: reading from earliest resolves to the floor, is not refused, the
// trim record is skipped and holder 1 never sees epoch 2.
func TestFD1_Broken_ReadFromEarliestWritesAfterNewHolder(t *testing.T) {
	p, _, err := fd1(t, brokenReadEarliest)
	p.wantStaleLanded(t, err)
}

// fd1First plays the seed's step 1 exactly: holder 1 acquires its lease
// (epoch 1) and freezes before its first read and write; holder 2 starts,
// writes and trims with the floor at its own trim record; holder 1 wakes
// and starts. Its first read must start at the base, not the floor.
func fd1First(t *testing.T, broken brokenRule) (*pair, uint64, error) {
	ctx := context.Background()
	p := &pair{w1: &Counter{}, w2: &Counter{}}
	p.l, p.sl = newStoreLog(t, logstore.Options{})
	p.h1 = newHolderT(t, p.sl, 1, p.w1, broken) // acquired, then frozen
	p.h2 = newHolderT(t, p.sl, 2, p.w2, broken)
	if err := p.h2.Start(ctx); err != nil {
		t.Fatalf("holder 2 start: %v", err)
	}
	p.fenceAt = p.h2.Expected() - 1
	if err := p.h2.Append(ctx, [][]byte{[]byte("1")}); err != nil {
		t.Fatalf("holder 2 output: %v", err)
	}
	if err := p.h2.Trim(ctx, p.h2.Expected()); err != nil {
		t.Fatalf("holder 2 trim: %v", err)
	}
	if info := p.l.Describe(); info.ReadableStart() != info.Tail-1 {
		t.Fatalf("floor %d is not at holder 2's trim record %d", info.ReadableStart(), info.Tail-1)
	}
	tail := p.l.Describe().Tail
	return p, tail, p.h1.Start(ctx) // holder 1 wakes
}

// TestFD1_FirstReadStartsAtBase: holder 1, frozen between acquiring its
// lease and its first read, starts reading at the base, below holder 2's
// floor: the read is refused with CursorTooOld carrying epoch 2 and holder
// 1 retires without writing. A later holder (epoch 3) meets the same
// refusal with an older epoch, resumes at the floor and fences.
func TestFD1_FirstReadStartsAtBase(t *testing.T) {
	p, tail, err := fd1First(t, ruleKept)
	p.wantRetiredClean(t, err, tail)
	h3 := newHolderT(t, p.sl, 3, &Counter{}, ruleKept)
	if err := h3.Start(context.Background()); err != nil {
		t.Fatalf("holder 3 start after an older trim: %v", err)
	}
	if err := CheckStaleTrimRefused(rawContents(t, p.l)); err != nil {
		t.Fatal(err)
	}
}

// Broken: starting at the floor Describe reports skips holder 2's trim
// record (the only epoch-2 record at or above the floor), so holder 1
// takes the tail and its fenced write lands after holder 2's.
func TestFD1_Broken_StartAtFloorWritesAfterNewHolder(t *testing.T) {
	p, _, err := fd1First(t, brokenStartAtFloor)
	p.wantStaleLanded(t, err)
	if at := p.h1.Expected() - 1; at <= p.fenceAt {
		t.Fatalf("holder 1's fenced write at %d is not after holder 2's at %d", at, p.fenceAt)
	}
}

func fd2(t *testing.T, broken brokenRule) (*pair, uint64, error) {
	p := startPair(t, broken, logstore.Options{}, true)
	tail := p.l.Describe().Tail
	return p, tail, p.staleWrites(t)
}

// TestFD2_NeverTakeTailFromRefusal: holder 1's write is refused with
// OffsetMismatch naming the tail after holder 2's fenced write; it re-reads
// from its cursor instead, sees the fenced write and retires.
func TestFD2_NeverTakeTailFromRefusal(t *testing.T) {
	p, tail, err := fd2(t, ruleKept)
	p.wantRetiredClean(t, err, tail)
	if p.h1.Expected() == tail {
		t.Fatalf("holder 1 expects tail %d, the refusal's tail", tail)
	}
}

// Broken: adopting the refusal's tail lets holder 1 write straight after
// holder 2's fenced write without reading anything.
func TestFD2_Broken_TailFromRefusalWritesAfterFence(t *testing.T) {
	p, _, err := fd2(t, brokenTailFromRefusal)
	p.wantStaleLanded(t, err)
	if got := p.h1.Expected() - 1; got <= p.fenceAt {
		t.Fatalf("stale write at %d, fence at %d", got, p.fenceAt)
	}
}

// fd3: holder 2 snapshots and trims past holder 1's cursor; holder 1 then
// trims to a floor at or below the current one: a no-op.
func fd3(t *testing.T, broken brokenRule) (*pair, uint64, error) {
	ctx := context.Background()
	p := startPair(t, broken, logstore.Options{}, true)
	if err := p.h2.Snapshot(ctx); err != nil {
		t.Fatalf("holder 2 snapshot: %v", err)
	}
	if p.l.Describe().Floor <= p.h1.Cursor() {
		t.Fatalf("holder 2 did not trim past holder 1's cursor")
	}
	tail := p.l.Describe().Tail
	err := p.h1.Trim(ctx, 0)
	if err == nil {
		err = p.staleWrites(t)
	}
	return p, tail, err
}

// TestFD3_NoOpTrimStillChecksTail: holder 1's no-op trim is sent and refused
// (its expected tail is stale); it re-reads from its cursor and retires.
// The current holder's own no-op trim is answered with the tail it checked,
// the only tail taken from a trim.
func TestFD3_NoOpTrimStillChecksTail(t *testing.T) {
	p, tail, err := fd3(t, ruleKept)
	p.wantRetiredClean(t, err, tail)

	ctx := context.Background()
	before := p.h2.Expected()
	if err := p.h2.Trim(ctx, 0); err != nil {
		t.Fatalf("holder 2 no-op trim: %v", err)
	}
	if p.h2.Expected() != before || p.l.Describe().Tail != before {
		t.Fatalf("no-op trim moved the tail: holder %d, log %d, want %d", p.h2.Expected(), p.l.Describe().Tail, before)
	}
	outs, _ := p.w2.Next(ctx)
	if err := p.h2.Append(ctx, outs); err != nil {
		t.Fatalf("holder 2 append after its no-op trim: %v", err)
	}
}

// Broken: a no-op trim skipped locally hands holder 1 the new tail (here
// from Describe) without any check, and it writes after holder 2.
func TestFD3_Broken_NoOpTrimSkippingCheckWritesAfterNewHolder(t *testing.T) {
	p, _, err := fd3(t, brokenNoOpTrimSkipsCheck)
	p.wantStaleLanded(t, err)
}

// retentionOptions makes segments of two offsets so retention can delete
// the segment holding holder 2's fenced write.
var retentionOptions = logstore.Options{SegmentRecords: 2}

func setRetention(t *testing.T, l *logstore.Log) {
	t.Helper()
	if err := l.SetRetention(logstore.RetentionPolicy{MaxBytes: 1}); err != nil {
		t.Fatal(err)
	}
}

// TestFD4_RefusesStreamWithRetention: a holder refuses to start on a log
// that reports retention on; CheckStream refuses a FelixStream with
// retention on, or not marked fenced, read through the real API server.
func TestFD4_RefusesStreamWithRetention(t *testing.T) {
	l, sl := newStoreLog(t, retentionOptions)
	setRetention(t, l)
	h := newHolderT(t, sl, 1, &Counter{}, ruleKept)
	if err := h.Start(context.Background()); !errors.Is(err, ErrRetention) {
		t.Fatalf("start with retention on: %v, want ErrRetention", err)
	}
	if tail := l.Describe().Tail; tail != 0 {
		t.Fatalf("a refused holder wrote: tail %d", tail)
	}
	t.Run("FelixStream", testCheckStreamAPI)
}

// Broken: with retention on, the segment holding holder 2's fenced write is
// deleted with no trim involved; holder 1's refusal carries no tag, it
// resumes where storage starts, finds nothing of epoch 2 and writes after
// holder 2's fenced write.
func TestFD4_Broken_RetentionDeletesFence(t *testing.T) {
	ctx := context.Background()
	p := &pair{w1: &Counter{}, w2: &Counter{}}
	p.l, p.sl = newStoreLog(t, retentionOptions)
	setRetention(t, p.l)
	p.h1 = newHolderT(t, p.sl, 1, p.w1, brokenIgnoreRetention)
	if err := p.h1.Start(ctx); err != nil {
		t.Fatal(err)
	}
	p.h2 = newHolderT(t, p.sl, 2, p.w2, brokenIgnoreRetention)
	if err := p.h2.Start(ctx); err != nil {
		t.Fatal(err)
	}
	p.fenceAt = p.h2.Expected() - 1
	res, err := p.l.ApplyRetention(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if res.Start <= p.fenceAt {
		t.Fatalf("retention kept the fenced write at %d (start %d)", p.fenceAt, res.Start)
	}
	err = p.staleWrites(t)
	if err != nil || p.h1.Retired() {
		t.Fatalf("holder 1: err %v retired %v: the broken rule no longer shows the bug", err, p.h1.Retired())
	}
	if at := p.h1.Expected() - 1; at <= p.fenceAt {
		t.Fatalf("holder 1's write at %d is not after holder 2's fenced write at %d", at, p.fenceAt)
	}
}
