package localcluster_test

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"os"
	"path/filepath"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/anishathalye/porcupine"

	fclient "felix.dev/felix/broker/client"
	"felix.dev/felix/broker/record"
	"felix.dev/felix/broker/wire"
	"felix.dev/felix/internal/history"
)

// Client ids of the recorded nemesis history (one per sequential client).
const (
	clientWriter = iota // startWriterRecorded's appends on the read-back stream
	clientFinalReadBack
	clientAppender
	clientConditional
	clientReader
	clientTrimmer
	clientFinalRead
)

// appendOutcome is the history outcome of an append or trim answered with
// err (nil: acknowledged at ok.First). Only refusals the protocol defines
// as writing nothing are definite; everything else (timeouts, lost
// connections, NotLeader, Unavailable, StorageFull, ...) is unknown.
func appendOutcome(ok wire.AppendOK, err error) history.Output {
	if err == nil {
		return history.Output{Status: history.OK, First: ok.First}
	}
	return refusalOutcome(err)
}

func refusalOutcome(err error) history.Output {
	var we *wire.Error
	if errors.Is(err, fclient.ErrUnknownOutcome) || !errors.As(err, &we) {
		return history.Output{Status: history.Unknown}
	}
	switch we.Code {
	case wire.CodeOffsetMismatch:
		return history.Output{Status: history.Refused, Refusal: history.OffsetMismatch, Tail: we.Tail}
	case wire.CodeCursorTooOld:
		return history.Output{Status: history.Refused, Refusal: history.CursorTooOld, Floor: we.Floor}
	case wire.CodeBadRequest, wire.CodeRecordTooLarge:
		return history.Output{Status: history.Refused}
	}
	return history.Output{Status: history.Unknown}
}

// readOutcome is the history outcome of a read; ok is false for an error
// that says nothing about the log (a read has no effect, so it is left
// out of the history).
func readOutcome(r wire.ReadOK, err error) (history.Output, bool) {
	if err == nil {
		out := history.Output{Status: history.OK, Next: r.Next}
		for _, rec := range r.Records {
			out.Records = append(out.Records, history.Record{Offset: rec.Offset, ID: string(rec.Payload)})
		}
		return out, true
	}
	var we *wire.Error
	if errors.As(err, &we) && we.Code == wire.CodeCursorTooOld {
		return history.Output{Status: history.Refused, Refusal: history.CursorTooOld, Floor: we.Floor}, true
	}
	return history.Output{}, false
}

// recordedRead reads once and records it as client.
func recordedRead(ctx context.Context, rec *history.Recorder, client int, cl *fclient.Client, stream string, in history.Input, maxRecords uint32) (wire.ReadOK, error) {
	req := wire.ReadRequest{Shard: record.ShardID{Stream: stream}, From: wire.FromOffset, Offset: in.From, MaxRecords: maxRecords}
	if in.Earliest {
		req.From, req.Offset = wire.FromEarliest, 0
	}
	in.Shard, in.Kind = stream, history.Read
	call := rec.Invoke(client, in)
	r, err := cl.Read(ctx, req)
	if out, keep := readOutcome(r, err); keep {
		call.Complete(out)
	} else {
		call.Complete(history.Output{Status: history.Unknown})
	}
	return r, err
}

// recordedReadAll reads the whole data log of stream from the broker at
// addr, from earliest, recording each read as client; it retries from
// the start until one pass succeeds.
func (tn *tenant) recordedReadAll(rec *history.Recorder, client int, addr, stream string) map[uint64]record.Record {
	tn.t.Helper()
	var out map[uint64]record.Record
	eventually(tn.t, "a full recorded read of "+stream+" from "+addr, time.Minute, func() (bool, string) {
		ctx, cancel := context.WithTimeout(tn.ctx, 30*time.Second)
		defer cancel()
		cl, err := tn.dial(ctx, addr)
		if err != nil {
			return false, err.Error()
		}
		defer cl.Close()
		out = map[uint64]record.Record{}
		in := history.Input{Earliest: true}
		for {
			r, err := recordedRead(ctx, rec, client, cl, stream, in, 1000)
			if err != nil {
				return false, err.Error()
			}
			for _, x := range r.Records {
				out[x.Offset] = x
			}
			if len(r.Records) == 0 {
				return true, ""
			}
			in = history.Input{From: r.Next}
		}
	})
	return out
}

// historyWorkload runs, on stream, four sequential clients recorded in
// rec: appends of 1-3 records without an expected tail, conditional
// appends at the tail last seen, reads from random offsets around the
// floor and the tail, and conditional head trims behind the committed
// end [TR-2] (the stream is not fenced, so trims are allowed [TR-7]).
type historyWorkload struct {
	tn     *tenant
	stream string
	rec    *history.Recorder
	tail   atomic.Uint64 // highest tail any client saw
	floor  atomic.Uint64
	stop   context.CancelFunc
	wg     sync.WaitGroup
}

func startHistoryWorkload(tn *tenant, stream string, rec *history.Recorder, seed uint64) *historyWorkload {
	ctx, stop := context.WithCancel(tn.ctx)
	hw := &historyWorkload{tn: tn, stream: stream, rec: rec, stop: stop}
	for i, f := range []func(context.Context, *fclient.Client, *rand.Rand, *int) bool{hw.appendOnce, hw.conditionalOnce, hw.readOnce, hw.trimOnce} {
		client := clientAppender + i
		rng := rand.New(rand.NewPCG(seed, uint64(client)))
		hw.wg.Add(1)
		go func() {
			defer hw.wg.Done()
			n := 0
			hw.loop(ctx, func(cl *fclient.Client) bool { return f(ctx, cl, rng, &n) })
		}()
	}
	return hw
}

// loop dials the current leader and runs op until it fails, then looks
// again, until ctx ends.
func (hw *historyWorkload) loop(ctx context.Context, op func(*fclient.Client) bool) {
	for ctx.Err() == nil {
		s := hw.tn.shard(hw.stream)
		if s == nil || s.Status.Assignment == nil {
			time.Sleep(50 * time.Millisecond)
			continue
		}
		dctx, dcancel := context.WithTimeout(ctx, 2*time.Second)
		cl, err := hw.tn.dial(dctx, hw.tn.broker(s.Status.Assignment.Leader).Address)
		dcancel()
		if err != nil {
			time.Sleep(50 * time.Millisecond)
			continue
		}
		for ctx.Err() == nil && op(cl) {
		}
		_ = cl.Close()
		time.Sleep(50 * time.Millisecond)
	}
}

func (hw *historyWorkload) sawTail(t uint64) {
	for {
		cur := hw.tail.Load()
		if t <= cur || hw.tail.CompareAndSwap(cur, t) {
			return
		}
	}
}

func (hw *historyWorkload) appendRecs(ctx context.Context, cl *fclient.Client, client int, ids []string, expect *uint64) (wire.AppendOK, error) {
	in := history.Input{Shard: hw.stream, Kind: history.Append, IDs: ids}
	if expect != nil {
		in.Kind, in.ExpectTail = history.ConditionalAppend, *expect
	}
	recs := make([]record.Record, len(ids))
	for i, id := range ids {
		recs[i].Payload = []byte(id)
	}
	actx, cancel := context.WithTimeout(ctx, 2*time.Second)
	defer cancel()
	call := hw.rec.Invoke(client, in)
	ok, err := cl.Append(actx, record.ShardID{Stream: hw.stream}, recs, expect)
	call.Complete(appendOutcome(ok, err))
	if err == nil {
		hw.sawTail(ok.Tail)
	}
	return ok, err
}

func (hw *historyWorkload) appendOnce(ctx context.Context, cl *fclient.Client, rng *rand.Rand, n *int) bool {
	ids := make([]string, 1+rng.IntN(3))
	for i := range ids {
		ids[i] = fmt.Sprintf("a-%d", *n)
		*n++
	}
	_, err := hw.appendRecs(ctx, cl, clientAppender, ids, nil)
	time.Sleep(5 * time.Millisecond)
	return err == nil
}

func (hw *historyWorkload) conditionalOnce(ctx context.Context, cl *fclient.Client, rng *rand.Rand, n *int) bool {
	expect := hw.tail.Load()
	ids := []string{fmt.Sprintf("c-%d", *n)}
	*n++
	_, err := hw.appendRecs(ctx, cl, clientConditional, ids, &expect)
	time.Sleep(5 * time.Millisecond)
	var we *wire.Error
	if errors.As(err, &we) && we.Code == wire.CodeOffsetMismatch {
		hw.sawTail(we.Tail) // the workload's next guess; the checker does not trust it
		return true
	}
	return err == nil
}

func (hw *historyWorkload) readOnce(ctx context.Context, cl *fclient.Client, rng *rand.Rand, _ *int) bool {
	lo, hi := hw.floor.Load(), hw.tail.Load()
	if lo > 20 {
		lo -= 20 // some reads start below the floor: CursorTooOld
	} else {
		lo = 0
	}
	from := lo
	if hi > lo {
		from += rng.Uint64N(hi - lo + 1)
	}
	rctx, cancel := context.WithTimeout(ctx, 2*time.Second)
	defer cancel()
	_, err := recordedRead(rctx, hw.rec, clientReader, cl, hw.stream, history.Input{From: from}, 20)
	time.Sleep(10 * time.Millisecond)
	var we *wire.Error
	return err == nil || (errors.As(err, &we) && (we.Code == wire.CodeCursorTooOld || we.Code == wire.CodeBadRequest))
}

// trimOnce, about every 2 s, trims to a random offset 50 to 250 behind
// the committed end, at the tail Describe gave (retrying a few times with
// the tail an OffsetMismatch names: the appenders race it).
func (hw *historyWorkload) trimOnce(ctx context.Context, cl *fclient.Client, rng *rand.Rand, _ *int) bool {
	select {
	case <-ctx.Done():
		return false
	case <-time.After(time.Duration(1000+rng.IntN(2000)) * time.Millisecond):
	}
	dctx, cancel := context.WithTimeout(ctx, 2*time.Second)
	d, err := cl.Describe(dctx, record.ShardID{Stream: hw.stream})
	cancel()
	if err != nil {
		return false
	}
	if d.Committed < d.Floor+100 {
		return true // keep at least 50 records readable
	}
	floor := d.Committed - 50 - rng.Uint64N(min(200, d.Committed-d.Floor-50))
	expect := d.Tail
	for try := 0; try < 5 && ctx.Err() == nil; try++ {
		in := history.Input{Shard: hw.stream, Kind: history.Trim, Floor: floor, ExpectTail: expect}
		tctx, cancel := context.WithTimeout(ctx, 2*time.Second)
		call := hw.rec.Invoke(clientTrimmer, in)
		ok, err := cl.Trim(tctx, wire.TrimRequest{Shard: record.ShardID{Stream: hw.stream}, Floor: floor, ExpectTail: expect})
		cancel()
		if err == nil {
			call.Complete(history.Output{Status: history.OK, Floor: ok.Floor})
			hw.floor.Store(ok.Floor)
			return true
		}
		call.Complete(refusalOutcome(err))
		var we *wire.Error
		if !errors.As(err, &we) || we.Code != wire.CodeOffsetMismatch {
			return false
		}
		expect = we.Tail
	}
	return true
}

// finish stops the workload's clients and waits for them.
func (hw *historyWorkload) finish() {
	hw.stop()
	hw.wg.Wait()
}

// checkHistory checks rec's history, failing the test on a violation
// (writing porcupine's visualization to an artifact directory) and
// logging a check that timed out.
func checkHistory(t *testing.T, rec *history.Recorder, timeout time.Duration) (porcupine.CheckResult, int) {
	t.Helper()
	ops, st := rec.Operations()
	start := time.Now()
	res := history.CheckOperations(ops, st, timeout)
	took := time.Since(start)
	t.Logf("history: %d operations (%d acknowledged, %d refused, %d unknown, %d unknown appends read later; ok/refused/unknown per kind: %s), checked in %s: %s",
		st.Ops, st.OK, st.Refused, st.Unknown, st.UnknownLanded, st, took.Round(time.Millisecond), res.Verdict)
	switch res.Verdict {
	case porcupine.Illegal:
		dir := os.Getenv("FELIX_NEMESIS_ARTIFACTS")
		if dir == "" {
			var err error
			if dir, err = os.MkdirTemp("", "felix-nemesis-"); err != nil {
				t.Errorf("artifact directory: %v", err)
			}
		}
		path := filepath.Join(dir, "history.html")
		if err := res.Visualize(path); err != nil {
			t.Errorf("visualization: %v", err)
		}
		t.Errorf("the history is not linearizable against the shard log model (visualization: %s)", path)
	case porcupine.Unknown:
		t.Logf("history check timed out after %s: no violation found in that time", timeout)
	}
	return res.Verdict, st.Ops
}
