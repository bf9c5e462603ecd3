package server

import (
	"context"
	"errors"
	"testing"

	"felix.dev/felix/broker/logstore"
	"felix.dev/felix/broker/record"
	"felix.dev/felix/broker/wire"
)

// unreadyLog is a leader that has records but does not know yet which are
// committed: its committed mark is still 0 and it is not readable.
type unreadyLog struct {
	readable error
	reads    int
}

func (g *unreadyLog) Append(context.Context, []record.Record, *uint64) (logstore.AppendResult, error) {
	return logstore.AppendResult{}, errors.New("not used")
}
func (g *unreadyLog) Read(uint64, logstore.ReadOptions) (logstore.ReadResult, error) {
	g.reads++
	if g.readable != nil {
		return logstore.ReadResult{}, g.readable
	}
	return logstore.ReadResult{Records: []record.Record{{Offset: 0, Payload: []byte("acknowledged")}}, Next: 1}, nil
}
func (g *unreadyLog) Trim(context.Context, logstore.TrimRequest) (logstore.TrimResult, error) {
	return logstore.TrimResult{}, errors.New("not used")
}
func (g *unreadyLog) Describe() logstore.Info {
	return logstore.Info{Tail: 20, Durable: 20, Committed: 0} // the mark is learnt a pass later
}
func (g *unreadyLog) WaitCommitted(context.Context, uint64) error { return nil }
func (g *unreadyLog) Readable() error                             { return g.readable }

// TestTR4_UngatedReadNeverAnswersEmpty: a leader whose committed mark is
// still 0 while it holds records (a follower promoted before it learnt the
// mark) answered a read from earliest with no records and Next 0 without
// asking the log, so `felix read` printed an empty log and exited 0 right
// after a failover. A log that is a ReadGate is asked first: the read is
// refused with its retryable error.
func TestTR4_UngatedReadNeverAnswersEmpty(t *testing.T) {
	unavailable := &wire.Error{Code: wire.CodeUnavailable, Message: "fence not committed"}
	l := &unreadyLog{readable: unavailable}
	res, err := readCommitted(l, logstore.FromEarliest, logstore.ReadOptions{})
	var we *wire.Error
	if !errors.As(err, &we) || we.Code != wire.CodeUnavailable {
		t.Fatalf("read at a leader that does not know its committed end: %+v, %v; want Unavailable", res, err)
	}
	// Readable again: the read is answered.
	l.readable = nil
	if _, err := readCommitted(l, logstore.FromEarliest, logstore.ReadOptions{}); err != nil {
		t.Fatalf("read once readable: %v", err)
	}
}
