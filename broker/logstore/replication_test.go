package logstore

import (
	"context"
	"errors"
	"testing"

	"github.com/google/go-cmp/cmp"

	"felix.dev/felix/broker/record"
)

// Only committed trims move the floor; a truncated trim leaves no floor
// behind (issue 4.6).
func TestTR2_OnlyCommittedTrimsMoveTheFloor(t *testing.T) {
	s := openTest(t, Options{}) // not AutoCommit: replication sets the mark
	l := mustLog(t, s, testLog)
	mustAppend(t, l, data("a", "b", "c"), nil)
	res := mustTrim(t, l, TrimRequest{Floor: 2, ExpectTail: 3, Headers: epochHeader("2")})
	if res.Offset != 3 || res.Floor != 2 {
		t.Fatalf("trim %+v", res)
	}
	if info := l.Describe(); info.Floor != 0 || info.Committed != 0 {
		t.Fatalf("uncommitted trim moved the floor: %+v", info)
	}
	if _, err := l.Read(0, ReadOptions{}); err != nil {
		t.Fatalf("read below an uncommitted trim refused: %v", err)
	}
	if err := l.SetCommitted(3); err != nil { // the trim at 3 not yet committed
		t.Fatal(err)
	}
	if info := l.Describe(); info.Floor != 0 {
		t.Fatalf("floor moved before its trim committed: %+v", info)
	}
	// Truncating the uncommitted trim leaves no floor behind.
	if err := l.TruncateFrom(3); err != nil {
		t.Fatal(err)
	}
	if info := l.Describe(); info.Floor != 0 || info.Tail != 3 {
		t.Fatalf("after truncate: %+v", info)
	}
	s = reopen(t, s)
	l = mustLog(t, s, testLog)
	if info := l.Describe(); info.Floor != 0 || info.Tail != 3 || info.Committed != 3 {
		t.Fatalf("after reopen: %+v", info)
	}
	// A committed trim moves the floor, and the mark persists it.
	mustTrim(t, l, TrimRequest{Floor: 2, ExpectTail: 3, Headers: epochHeader("3")})
	if err := l.SetCommitted(4); err != nil {
		t.Fatal(err)
	}
	if info := l.Describe(); info.Floor != 2 {
		t.Fatalf("committed trim did not move the floor: %+v", info)
	}
	if err := l.SetCommitted(1); err != nil || l.Describe().Committed != 4 {
		t.Fatalf("committed moved back: %v %+v", err, l.Describe())
	}
	if err := l.SetCommitted(9); !errors.Is(err, ErrBeyondTail) {
		t.Fatalf("commit beyond tail: %v", err)
	}
	if err := l.TruncateFrom(3); !errors.Is(err, ErrTruncateCommitted) {
		t.Fatalf("truncate below committed: %v", err)
	}
	s = reopen(t, s)
	l = mustLog(t, s, testLog)
	_, err := l.Read(1, ReadOptions{WithTrimTag: true})
	if too := wantTooOld(t, err); too.Floor != 2 || headerValue(too.TrimHeaders, "epoch") != "3" {
		t.Fatalf("after reopen: %+v", too)
	}
}

func TestAppendReplicatedKeepsOffsetsAndKinds(t *testing.T) {
	leader := mustLog(t, openTest(t, Options{AutoCommit: true}), testLog)
	mustAppend(t, leader, data("a", "b"), nil)
	mustTrim(t, leader, TrimRequest{Floor: 1, ExpectTail: 2, Headers: epochHeader("1"), Epoch: 1})
	mustAppend(t, leader, []record.Record{{Kind: record.KindFence, Epoch: 2}}, nil)
	mustAppend(t, leader, data("c"), nil)
	recs := readAll(t, leader, 0, true)

	follower := mustLog(t, openTest(t, Options{}), testLog)
	if err := follower.AppendReplicated(context.Background(), recs[1:]); !errors.Is(err, record.ErrOffsetMismatch) {
		t.Fatalf("replicated append not at the tail: %v", err)
	}
	if err := follower.AppendReplicated(context.Background(), recs[:3]); err != nil {
		t.Fatal(err)
	}
	if err := follower.AppendReplicated(context.Background(), recs[3:]); err != nil {
		t.Fatal(err)
	}
	got := readAll(t, follower, 0, true)
	if diff := cmp.Diff(recs, got); diff != "" {
		t.Fatalf("follower differs:\n%s", diff)
	}
	if e, err := follower.LastEpochAt(3); err != nil || e != 2 {
		t.Fatalf("LastEpochAt(3) = %d, %v", e, err)
	}
	if e, err := follower.LastEpochAt(2); err != nil || e != 1 {
		t.Fatalf("LastEpochAt(2) = %d, %v", e, err)
	}
	if _, err := follower.LastEpochAt(5); !errors.Is(err, ErrBeyondTail) {
		t.Fatalf("LastEpochAt beyond tail: %v", err)
	}
	if info := follower.Describe(); info.Floor != 0 {
		t.Fatalf("uncommitted replicated trim moved the floor: %+v", info)
	}
	if err := follower.SetCommitted(5); err != nil {
		t.Fatal(err)
	}
	if info := follower.Describe(); info.Floor != 1 {
		t.Fatalf("committed replicated trim: %+v", info)
	}
}

func TestTruncateFromDropsSuffixInsideABatch(t *testing.T) {
	s := openTest(t, Options{SegmentRecords: 4})
	l := mustLog(t, s, testLog)
	mustAppend(t, l, []record.Record{{Epoch: 1, Payload: []byte("a")}, {Epoch: 1, Payload: []byte("b")}, {Epoch: 2, Payload: []byte("c")}}, nil)
	mustAppend(t, l, []record.Record{{Epoch: 3, Payload: []byte("d")}, {Epoch: 3, Payload: []byte("e")}, {Epoch: 3, Payload: []byte("f")}}, nil)
	if err := l.TruncateFrom(2); err != nil {
		t.Fatal(err)
	}
	if e, err := l.LastEpochAt(1); err != nil || e != 1 {
		t.Fatalf("last epoch after truncate: %d %v", e, err)
	}
	mustAppend(t, l, data("x", "y", "z"), ptr(2))
	s = reopen(t, s)
	l = mustLog(t, s, testLog)
	if diff := cmp.Diff([]string{"a", "b", "x", "y", "z"}, payloads(readAll(t, l, 0, true))); diff != "" {
		t.Fatal(diff)
	}
	if info := l.Describe(); info.Tail != 5 {
		t.Fatalf("%+v", info)
	}
}

func TestWaitCommittedWakesOnSetCommitted(t *testing.T) {
	s := openTest(t, Options{})
	l := mustLog(t, s, testLog)
	mustAppend(t, l, data("a", "b"), nil)
	done := make(chan error, 1)
	go func() { done <- l.WaitCommitted(context.Background(), 1) }()
	if err := l.SetCommitted(1); err != nil {
		t.Fatal(err)
	}
	select {
	case err := <-done:
		t.Fatalf("WaitCommitted(1) returned at committed 1: %v", err)
	default:
	}
	if err := l.SetCommitted(2); err != nil {
		t.Fatal(err)
	}
	if err := <-done; err != nil {
		t.Fatal(err)
	}
}

func TestTR6_MaintainDeletesBelowEveryFloor(t *testing.T) {
	s := openTest(t, Options{AutoCommit: true, SegmentRecords: 4})
	a := mustLog(t, s, testLog)
	b := mustLog(t, s, record.LogID{ShardID: testLog.ShardID, Log: record.LogGroup})
	for _, l := range []*Log{a, b} {
		fill(t, l, 10, "r")
		mustTrim(t, l, TrimRequest{Floor: 9, ExpectTail: 10})
	}
	res, err := s.Maintain(context.Background())
	if err != nil || res.Segments != 4 || res.Records != 16 {
		t.Fatalf("Maintain: %+v %v", res, err)
	}
	for _, l := range []*Log{a, b} {
		if got := l.Describe().Start; got != 8 {
			t.Fatalf("%s start %d, want 8", l.ID(), got)
		}
	}
}

func TestResetAtLetsAnEmptyFollowerBeginAtTheLeadersStart(t *testing.T) {
	leader := mustLog(t, openTest(t, Options{AutoCommit: true, SegmentRecords: 4}), testLog)
	fill(t, leader, 10, "r")
	mustTrim(t, leader, TrimRequest{Floor: 9, ExpectTail: 10, Headers: epochHeader("2")})
	if _, err := leader.DeleteBelowFloor(context.Background()); err != nil {
		t.Fatal(err)
	}
	start := leader.Describe().Start // 8
	recs := readAll(t, leader, start, true)

	fs := openTest(t, Options{})
	f := mustLog(t, fs, testLog)
	if err := f.AppendReplicated(context.Background(), recs); !errors.Is(err, record.ErrOffsetMismatch) {
		t.Fatalf("copy at the leader's start into an empty log at 0: %v", err)
	}
	if err := f.ResetAt(start); err != nil {
		t.Fatal(err)
	}
	if err := f.AppendReplicated(context.Background(), recs); err != nil {
		t.Fatal(err)
	}
	if err := f.SetCommitted(f.Describe().Tail); err != nil {
		t.Fatal(err)
	}
	fs = reopen(t, fs)
	f = mustLog(t, fs, testLog)
	info := f.Describe()
	if info.Start != start || info.Floor != 9 || info.Tail != 11 {
		t.Fatalf("follower after reopen %+v", info)
	}
	_, err := f.Read(0, ReadOptions{WithTrimTag: true})
	if too := wantTooOld(t, err); too.Floor != 9 || headerValue(too.TrimHeaders, "epoch") != "2" {
		t.Fatalf("follower refusal %+v", too)
	}
}
