package felixd

import (
	"context"
	"errors"
	"fmt"

	"felix.dev/felix/broker/client"
	"felix.dev/felix/broker/record"
	"felix.dev/felix/broker/wire"
)

// ErrNoTrimTag is returned by NewClientLog for a connection that did not
// negotiate the trim tag: a stale holder trimmed past would be refused
// without learning the newer epoch, so felixd refuses such a connection.
var ErrNoTrimTag = errors.New("felixd: the connection did not negotiate the trim-tag feature")

// ClientLog adapts a broker/client connection to Log for one shard.
// Broker errors are converted to the record package's typed errors
// (*record.OffsetMismatchError, *record.CursorTooOldError) and unanswered
// appends and trims match ErrUnknownOutcome.
type ClientLog struct {
	c     *client.Client
	shard record.ShardID
}

// NewClientLog returns the Log of shard over c. c must have negotiated
// wire.FeatureTrimTag (the client offers it by default).
func NewClientLog(c *client.Client, shard record.ShardID) (*ClientLog, error) {
	if !c.Features().Has(wire.FeatureTrimTag) {
		return nil, ErrNoTrimTag
	}
	return &ClientLog{c: c, shard: shard}, nil
}

// Append implements Log.
func (l *ClientLog) Append(ctx context.Context, recs []record.Record, expectTail uint64) (uint64, error) {
	ok, err := l.c.Append(ctx, l.shard, recs, &expectTail)
	if err != nil {
		return 0, convertErr(err)
	}
	return ok.Tail, nil
}

// Read implements Log.
func (l *ClientLog) Read(ctx context.Context, pos Position, max int) (ReadResult, error) {
	req := wire.ReadRequest{Shard: l.shard, From: wire.FromOffset, Offset: pos.Offset, MaxRecords: uint32(max)}
	if pos.Earliest {
		req.From, req.Offset = wire.FromEarliest, 0
	}
	res, err := l.c.Read(ctx, req)
	if err != nil {
		return ReadResult{}, convertErr(err)
	}
	return ReadResult{Records: res.Records, Next: res.Next}, nil
}

// Trim implements Log.
func (l *ClientLog) Trim(ctx context.Context, floor, expectTail uint64, headers []record.Header) (TrimResult, error) {
	res, err := l.c.Trim(ctx, wire.TrimRequest{Shard: l.shard, Floor: floor, ExpectTail: expectTail, Headers: headers})
	if err != nil {
		return TrimResult{}, convertErr(err)
	}
	return TrimResult{Tail: res.Tail, Floor: res.Floor}, nil
}

// Describe implements Log. Retention is the broker's own setting for the
// shard's data log when the connection negotiated wire.FeatureLogPolicy
// (the client offers it by default), and RetentionUnknown with a broker
// that does not know the feature: CheckStream then stands in for it
// [FD-4].
func (l *ClientLog) Describe(ctx context.Context) (Info, error) {
	res, err := l.c.Describe(ctx, l.shard)
	if err != nil {
		return Info{}, convertErr(err)
	}
	r := RetentionUnknown
	if l.c.Features().Has(wire.FeatureLogPolicy) {
		r = RetentionOff
		if res.Retention {
			r = RetentionOn
		}
	}
	return Info{Base: res.Base, Floor: res.Floor, Tail: res.Tail, Retention: r}, nil
}

// convertErr turns broker errors into the record package's typed errors and
// marks unanswered writes with ErrUnknownOutcome.
func convertErr(err error) error {
	if errors.Is(err, client.ErrUnknownOutcome) {
		return fmt.Errorf("%w: %w", ErrUnknownOutcome, err)
	}
	var we *wire.Error
	if errors.As(err, &we) {
		if re := we.RecordError(); re != error(we) {
			return re
		}
	}
	return err
}
