package logstore

import (
	"context"
	"errors"
	"testing"

	badger "github.com/dgraph-io/badger/v4"
	"github.com/google/go-cmp/cmp"

	"felix.dev/felix/broker/record"
)

func epochHeader(e string) []record.Header { return []record.Header{{Key: "epoch", Value: []byte(e)}} }

func TestTR2_TrimIsARecordUnderTheTailCheck(t *testing.T) {
	s := openTest(t, Options{AutoCommit: true})
	l := mustLog(t, s, testLog)
	mustAppend(t, l, data("a", "b", "c", "d"), nil)

	// Wrong tail: refused, nothing written, floor unchanged.
	_, err := l.Trim(context.Background(), TrimRequest{Floor: 2, ExpectTail: 3, Headers: epochHeader("1")})
	wantMismatch(t, err, 4)
	if info := l.Describe(); info.Tail != 4 || info.Floor != 0 {
		t.Fatalf("refused trim changed the log: %+v", info)
	}
	// Floor above the trim's own offset (4): refused.
	if _, err := l.Trim(context.Background(), TrimRequest{Floor: 5, ExpectTail: 4}); !errors.Is(err, ErrFloorAboveTrim) {
		t.Fatalf("floor above own offset: %v", err)
	}
	// Floor equal to its own offset is allowed.
	res := mustTrim(t, l, TrimRequest{Floor: 4, ExpectTail: 4, Headers: epochHeader("1"), Epoch: 1})
	if res != (TrimResult{Tail: 5, Floor: 4, Offset: 4}) {
		t.Fatalf("trim result %+v", res)
	}
	if info := l.Describe(); info.Floor != 4 || info.Tail != 5 {
		t.Fatalf("after trim: %+v", info)
	}
	// The trim record is in the log (raw), with its floor, headers and epoch;
	// readers skip it.
	raw, err := l.ReadRaw(4, ReadOptions{})
	if err != nil || len(raw.Records) != 1 {
		t.Fatalf("raw read: %+v %v", raw, err)
	}
	tr := raw.Records[0]
	if tr.Kind != record.KindTrim || tr.Floor != 4 || tr.Epoch != 1 || headerValue(tr.Headers, "epoch") != "1" {
		t.Fatalf("trim record %+v", tr)
	}
	got, err := l.Read(4, ReadOptions{})
	if err != nil || len(got.Records) != 0 || got.Next != 5 {
		t.Fatalf("reader saw the trim record: %+v %v", got, err)
	}
}

func TestTR3_NoOpTrimStillChecksTail(t *testing.T) {
	s := openTest(t, Options{AutoCommit: true})
	l := mustLog(t, s, testLog)
	mustAppend(t, l, data("a", "b", "c"), nil)
	mustTrim(t, l, TrimRequest{Floor: 2, ExpectTail: 3, Headers: epochHeader("2")}) // trim at 3
	mustAppend(t, l, data("d"), nil)                                                // tail 5
	for _, floor := range []uint64{0, 1, 2} {
		// Wrong tail: refused with the current tail even though the trim would be a no-op.
		_, err := l.Trim(context.Background(), TrimRequest{Floor: floor, ExpectTail: 3})
		wantMismatch(t, err, 5)
		// Right tail: answered with the unchanged tail, nothing written.
		res := mustTrim(t, l, TrimRequest{Floor: floor, ExpectTail: 5})
		if res != (TrimResult{Tail: 5, Floor: 2, NoOp: true}) {
			t.Fatalf("no-op trim to %d: %+v", floor, res)
		}
	}
	if info := l.Describe(); info.Tail != 5 || info.Floor != 2 {
		t.Fatalf("no-op trims wrote: %+v", info)
	}
}

func TestTR4_CursorTooOldCarriesTag(t *testing.T) {
	s := openTest(t, Options{AutoCommit: true})
	l := mustLog(t, s, testLog)
	mustAppend(t, l, data("a", "b", "c"), nil)
	mustTrim(t, l, TrimRequest{Floor: 1, ExpectTail: 3, Headers: epochHeader("1")})
	mustTrim(t, l, TrimRequest{Floor: 3, ExpectTail: 4, Headers: epochHeader("2")})
	mustAppend(t, l, data("d"), nil)

	_, err := l.Read(2, ReadOptions{WithTrimTag: true})
	too := wantTooOld(t, err)
	if too.Floor != 3 || too.From != 2 || headerValue(too.TrimHeaders, "epoch") != "2" {
		t.Fatalf("refusal %+v", too)
	}
	if !errors.Is(err, record.ErrCursorTooOld) {
		t.Fatalf("not ErrCursorTooOld: %v", err)
	}
	// Without negotiating the tag the refusal carries no headers.
	_, err = l.Read(0, ReadOptions{})
	if too := wantTooOld(t, err); too.TrimHeaders != nil || too.Floor != 3 {
		t.Fatalf("untagged refusal %+v", too)
	}
	// Reading from the floor works and skips the trim records.
	res, err := l.Read(3, ReadOptions{WithTrimTag: true})
	if err != nil || !cmp.Equal(payloads(res.Records), []string{"d"}) || res.Next != 6 {
		t.Fatalf("read from floor: %+v %v", res, err)
	}
}

func TestTR4_EarliestResolvesToFloorAndNeverSeesTag(t *testing.T) {
	s := openTest(t, Options{AutoCommit: true})
	l := mustLog(t, s, testLog)
	mustAppend(t, l, data("a", "b"), nil)
	mustTrim(t, l, TrimRequest{Floor: 2, ExpectTail: 2, Headers: epochHeader("2")})
	res, err := l.Read(FromEarliest, ReadOptions{WithTrimTag: true})
	if err != nil {
		t.Fatalf("read from earliest refused: %v", err)
	}
	if len(res.Records) != 0 || res.Next != 3 {
		t.Fatalf("earliest read %+v", res)
	}
}

// The trim index is derived: deleting or corrupting it and reopening gives
// the same floor, tags and refusals [TR-5].
func TestTR5_TrimIndexRebuiltWhenMissingOrCorrupt(t *testing.T) {
	type answer struct {
		Info  Info
		Tag   string
		Trims []trimEntry
	}
	ask := func(t *testing.T, l *Log) answer {
		_, err := l.Read(0, ReadOptions{WithTrimTag: true})
		too := wantTooOld(t, err)
		l.mu.Lock()
		trims := append([]trimEntry(nil), l.trims...)
		l.mu.Unlock()
		return answer{Info: l.Describe(), Tag: headerValue(too.TrimHeaders, "epoch"), Trims: trims}
	}
	for _, damage := range []struct {
		name string
		f    func(txn *badger.Txn, num uint32) error
	}{
		{"marker deleted", func(txn *badger.Txn, num uint32) error { return txn.Delete(trimMarkKey(num)) }},
		{"one entry deleted", func(txn *badger.Txn, num uint32) error { return txn.Delete(trimKey(num, 5)) }},
		{"all deleted", func(txn *badger.Txn, num uint32) error {
			for _, k := range [][]byte{trimKey(num, 3), trimKey(num, 5), trimKey(num, 7), trimMarkKey(num)} {
				if err := txn.Delete(k); err != nil {
					return err
				}
			}
			return nil
		}},
		{"entry corrupt", func(txn *badger.Txn, num uint32) error {
			item, err := txn.Get(trimKey(num, 7))
			if err != nil {
				return err
			}
			v, _ := item.ValueCopy(nil)
			v[len(v)-1] ^= 1
			return txn.Set(trimKey(num, 7), v)
		}},
		{"marker corrupt", func(txn *badger.Txn, num uint32) error { return txn.Set(trimMarkKey(num), []byte{1, 2, 3}) }},
		{"bogus entry added", func(txn *badger.Txn, num uint32) error {
			return txn.Set(trimKey(num, 4), encodeTrimEntry(trimEntry{Offset: 4, Floor: 4}))
		}},
	} {
		t.Run(damage.name, func(t *testing.T) {
			s := openTest(t, Options{AutoCommit: true})
			l := mustLog(t, s, testLog)
			mustAppend(t, l, data("a", "b", "c"), nil)
			mustTrim(t, l, TrimRequest{Floor: 2, ExpectTail: 3, Headers: epochHeader("1")})
			mustAppend(t, l, data("d"), nil)
			mustTrim(t, l, TrimRequest{Floor: 4, ExpectTail: 5, Headers: epochHeader("2")})
			mustAppend(t, l, data("e"), nil)
			mustTrim(t, l, TrimRequest{Floor: 5, ExpectTail: 7, Headers: epochHeader("3")})
			s = reopen(t, s)
			before := ask(t, mustLog(t, s, testLog))
			if before.Tag != "3" || before.Info.Floor != 5 || len(before.Trims) != 3 {
				t.Fatalf("before damage: %+v", before)
			}
			dir := s.opts.Dir
			if err := s.Close(); err != nil {
				t.Fatal(err)
			}
			rawDB(t, dir, func(db *badger.DB) error {
				return db.Update(func(txn *badger.Txn) error { return damage.f(txn, l.num) })
			})
			s = openTest(t, Options{Dir: dir, AutoCommit: true})
			after := ask(t, mustLog(t, s, testLog))
			if diff := cmp.Diff(before, after); diff != "" {
				t.Fatalf("answers changed after rebuilding the index:\n%s", diff)
			}
			// And the rebuilt index is itself valid: a further reopen does not rebuild.
			l2 := mustLog(t, s, testLog)
			if _, ok, why := l2.readTrimIndex(); !ok {
				t.Fatalf("rebuilt index invalid: %s", why)
			}
		})
	}
}
