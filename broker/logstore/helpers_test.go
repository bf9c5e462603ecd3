package logstore

import (
	"context"
	"errors"
	"fmt"
	"os"
	"strconv"
	"sync"
	"testing"
	"time"

	badger "github.com/dgraph-io/badger/v4"

	"felix.dev/felix/broker/record"
)

var testLog = record.LogID{ShardID: record.ShardID{Stream: "orders", Shard: 3}, Log: record.LogData}

func openTest(t testing.TB, o Options) *Store {
	t.Helper()
	if o.Dir == "" {
		o.Dir = t.TempDir()
	}
	s, err := Open(o)
	if err != nil {
		t.Fatalf("Open: %v", err)
	}
	t.Cleanup(func() { _ = s.Close() })
	return s
}

func reopen(t testing.TB, s *Store) *Store {
	t.Helper()
	o := s.opts
	if err := s.Close(); err != nil {
		t.Fatalf("Close: %v", err)
	}
	o.Metrics = nil
	return openTest(t, o)
}

func mustLog(t testing.TB, s *Store, id record.LogID) *Log {
	t.Helper()
	l, err := s.Log(id)
	if err != nil {
		t.Fatalf("Log(%s): %v", id, err)
	}
	return l
}

func data(payloads ...string) []record.Record {
	out := make([]record.Record, len(payloads))
	for i, p := range payloads {
		out[i] = record.Record{Payload: []byte(p), Epoch: 1}
	}
	return out
}

func ptr(v uint64) *uint64 { return &v }

func mustAppend(t testing.TB, l *Log, recs []record.Record, expect *uint64) AppendResult {
	t.Helper()
	res, err := l.Append(context.Background(), recs, expect)
	if err != nil {
		t.Fatalf("Append: %v", err)
	}
	return res
}

func mustTrim(t testing.TB, l *Log, req TrimRequest) TrimResult {
	t.Helper()
	res, err := l.Trim(context.Background(), req)
	if err != nil {
		t.Fatalf("Trim(%+v): %v", req, err)
	}
	return res
}

// readAll reads [from, durable tail) in pages and returns every record.
func readAll(t testing.TB, l *Log, from uint64, raw bool) []record.Record {
	t.Helper()
	var out []record.Record
	end := l.Describe().Durable
	if from == FromEarliest {
		from = l.Describe().ReadableStart()
		if raw {
			from = l.Describe().Start
		}
	}
	for from < end {
		var res ReadResult
		var err error
		if raw {
			res, err = l.ReadRaw(from, ReadOptions{MaxRecords: 7})
		} else {
			res, err = l.Read(from, ReadOptions{MaxRecords: 7})
		}
		if err != nil {
			t.Fatalf("read from %d: %v", from, err)
		}
		if res.Next <= from {
			t.Fatalf("read from %d did not advance (next %d)", from, res.Next)
		}
		out = append(out, res.Records...)
		from = res.Next
	}
	return out
}

func payloads(recs []record.Record) []string {
	out := make([]string, len(recs))
	for i, r := range recs {
		out[i] = string(r.Payload)
	}
	return out
}

func offsets(recs []record.Record) []uint64 {
	out := make([]uint64, len(recs))
	for i, r := range recs {
		out[i] = r.Offset
	}
	return out
}

func wantMismatch(t testing.TB, err error, tail uint64) {
	t.Helper()
	var om *record.OffsetMismatchError
	if !errors.As(err, &om) {
		t.Fatalf("want OffsetMismatchError, got %v", err)
	}
	if om.Tail != tail {
		t.Fatalf("OffsetMismatch tail = %d, want %d", om.Tail, tail)
	}
}

func wantTooOld(t testing.TB, err error) *record.CursorTooOldError {
	t.Helper()
	var too *record.CursorTooOldError
	if !errors.As(err, &too) {
		t.Fatalf("want CursorTooOldError, got %v", err)
	}
	return too
}

func headerValue(hs []record.Header, key string) string {
	for _, h := range hs {
		if h.Key == key {
			return string(h.Value)
		}
	}
	return ""
}

// rawDB opens the store's badger directory directly (store closed) and runs f.
func rawDB(t testing.TB, dir string, f func(db *badger.DB) error) {
	t.Helper()
	db, err := badger.Open(badger.DefaultOptions(dir).WithLogger(nil))
	if err != nil {
		t.Fatalf("open raw badger: %v", err)
	}
	if err := f(db); err != nil {
		t.Fatalf("raw badger: %v", err)
	}
	if err := db.Close(); err != nil {
		t.Fatalf("close raw badger: %v", err)
	}
}

// countingMetrics records what the store reports.
type countingMetrics struct {
	mu       sync.Mutex
	appends  int
	fanIns   []int
	syncs    int
	deleted  int
	delBytes int64
}

func (m *countingMetrics) ObserveAppend(int, int, time.Duration) {
	m.mu.Lock()
	m.appends++
	m.mu.Unlock()
}
func (m *countingMetrics) ObserveSyncFanIn(n int) {
	m.mu.Lock()
	m.fanIns = append(m.fanIns, n)
	m.mu.Unlock()
}
func (m *countingMetrics) ObserveSync(time.Duration) {
	m.mu.Lock()
	m.syncs++
	m.mu.Unlock()
}
func (m *countingMetrics) ObserveDelete(records int, bytes int64) {
	m.mu.Lock()
	m.deleted += records
	m.delBytes += bytes
	m.mu.Unlock()
}

func fill(t testing.TB, l *Log, n int, prefix string) {
	t.Helper()
	for i := 0; i < n; i++ {
		mustAppend(t, l, data(fmt.Sprintf("%s%d", prefix, i)), nil)
	}
}

// envInt reads a positive integer knob from the environment.
func envInt(t testing.TB, name string, def int) int {
	t.Helper()
	v := os.Getenv(name)
	if v == "" {
		return def
	}
	n, err := strconv.Atoi(v)
	if err != nil || n <= 0 {
		t.Fatalf("%s=%q: want a positive integer", name, v)
	}
	return n
}
