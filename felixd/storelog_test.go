package felixd

import (
	"context"
	"testing"

	"felix.dev/felix/broker/logstore"
	"felix.dev/felix/broker/record"
)

// storeLog adapts an in-process logstore log to Log, so the rules run
// against the real storage code (the same code the broker serves).
type storeLog struct{ l *logstore.Log }

func (s storeLog) Append(ctx context.Context, recs []record.Record, expectTail uint64) (uint64, error) {
	in := make([]record.Record, len(recs))
	for i, r := range recs {
		in[i] = record.Record{Epoch: 1, Headers: r.Headers, Payload: r.Payload}
	}
	res, err := s.l.Append(ctx, in, &expectTail)
	if err != nil {
		return 0, err
	}
	return res.Tail, nil
}

func (s storeLog) Read(_ context.Context, pos Position, max int) (ReadResult, error) {
	from := pos.Offset
	if pos.Earliest {
		from = logstore.FromEarliest
	}
	res, err := s.l.Read(from, logstore.ReadOptions{MaxRecords: max, WithTrimTag: true})
	if err != nil {
		return ReadResult{}, err
	}
	return ReadResult{Records: res.Records, Next: res.Next}, nil
}

func (s storeLog) Trim(ctx context.Context, floor, expectTail uint64, headers []record.Header) (TrimResult, error) {
	res, err := s.l.Trim(ctx, logstore.TrimRequest{Floor: floor, ExpectTail: expectTail, Headers: headers, Epoch: 1})
	if err != nil {
		return TrimResult{}, err
	}
	return TrimResult{Tail: res.Tail, Floor: res.Floor}, nil
}

func (s storeLog) Describe(context.Context) (Info, error) {
	i := s.l.Describe()
	r := RetentionOff
	if i.Retention.Enabled() {
		r = RetentionOn
	}
	return Info{Base: i.Base, Floor: i.ReadableStart(), Tail: i.Tail, Retention: r}, nil
}

var testShard = record.LogID{ShardID: record.ShardID{Stream: "workload", Shard: 0}, Log: record.LogData}

// newStoreLog opens a store in a temp dir and returns its log of testShard.
func newStoreLog(t *testing.T, o logstore.Options) (*logstore.Log, storeLog) {
	t.Helper()
	o.Dir = t.TempDir()
	o.AutoCommit = true
	o.Fsync = logstore.FsyncNone
	s, err := logstore.Open(o)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = s.Close() })
	l, err := s.Log(testShard)
	if err != nil {
		t.Fatal(err)
	}
	return l, storeLog{l}
}

// rawContents returns every stored record, trims included, in offset order.
func rawContents(t *testing.T, l *logstore.Log) []record.Record {
	t.Helper()
	var out []record.Record
	from := l.Describe().Start
	for {
		res, err := l.ReadRaw(from, logstore.ReadOptions{})
		if err != nil {
			t.Fatal(err)
		}
		out = append(out, res.Records...)
		if res.Next == from {
			return out
		}
		from = res.Next
	}
}
