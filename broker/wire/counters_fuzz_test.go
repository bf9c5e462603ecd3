package wire

import (
	"bytes"
	"fmt"
	"os"
	"path/filepath"
	"testing"
)

// counterBody decodes a counter message body of type t and re-encodes it;
// ok is false when it does not decode.
func counterBody(t MsgType, b []byte) (re []byte, ok bool) {
	var err error
	switch t {
	case MsgCounterAdd:
		var r CounterAddRequest
		if r, err = DecodeCounterAdd(b); err == nil {
			if r.Producer != nil && r.Producer.ID == ([16]byte{}) {
				panic("decoded a zero producer id")
			}
			re, err = EncodeCounterAdd(r)
		}
	case MsgCounterAddOK:
		var r CounterAddOK
		if r, err = DecodeCounterAddOK(b); err == nil {
			re = EncodeCounterAddOK(r)
		}
	case MsgCounterGet:
		var r CounterGetRequest
		if r, err = DecodeCounterGet(b); err == nil {
			re, err = EncodeCounterGet(r)
		}
	case MsgCounterGetOK:
		var r CounterGetOK
		if r, err = DecodeCounterGetOK(b); err == nil {
			re = EncodeCounterGetOK(r)
		}
	case MsgCounterSnapshot:
		var r CounterSnapshotRequest
		if r, err = DecodeCounterSnapshot(b); err == nil {
			re, err = EncodeCounterSnapshot(r)
		}
	case MsgCounterSnapshotOK:
		var r CounterSnapshotOK
		if r, err = DecodeCounterSnapshotOK(b); err == nil {
			re = EncodeCounterSnapshotOK(r)
		}
	default:
		return nil, false
	}
	return re, err == nil
}

// counterTypes are the counter message types, indexed by the fuzz input's
// selector byte.
var counterTypes = []MsgType{MsgCounterAdd, MsgCounterAddOK, MsgCounterGet, MsgCounterGetOK, MsgCounterSnapshot, MsgCounterSnapshotOK}

// FuzzDecodeCounters feeds outside bytes to every counter body decoder
// (the selector picks one): nothing may panic, a CounterAdd never decodes
// a zero producer id, and a body that decodes re-encodes to the same
// bytes.
func FuzzDecodeCounters(f *testing.F) {
	for _, s := range counterSeeds(f) {
		f.Add(s.body, s.sel)
	}
	f.Fuzz(func(t *testing.T, body []byte, sel uint8) {
		typ := counterTypes[int(sel)%len(counterTypes)]
		re, ok := counterBody(typ, body)
		if ok && !bytes.Equal(re, body) {
			t.Fatalf("%v body is not canonical:\n in %x\nout %x", typ, body, re)
		}
	})
}

type counterSeed struct {
	body []byte
	sel  uint8
}

// withGoldenSeeds adds to seeds every golden vector whose message type is
// one of types, with that type's index as the selector of a
// selector-driven fuzz target (FuzzDecodeCounters, Groups, Acks).
func withGoldenSeeds(tb testing.TB, seeds map[string]counterSeed, types []MsgType) map[string]counterSeed {
	tb.Helper()
	for _, tc := range goldenCases() {
		fr, err := tc.frame()
		if err != nil {
			tb.Fatal(err)
		}
		for i, typ := range types {
			if fr.Type == typ {
				seeds[tc.name] = counterSeed{fr.Body, uint8(i)}
			}
		}
	}
	return seeds
}

// checkOrWriteSeeds keeps the corpus in dir in step with seeds: without
// -update it fails when the corpus is missing or short; with -update it
// writes every seed (body and selector) in the fuzz corpus format.
func checkOrWriteSeeds(t *testing.T, dir string, seeds map[string]counterSeed) {
	t.Helper()
	if !*update {
		entries, err := os.ReadDir(dir)
		if err != nil || len(entries) < len(seeds) {
			t.Fatalf("seed corpus missing or short (%d files, err %v); run go test -update", len(entries), err)
		}
		return
	}
	if err := os.MkdirAll(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	for name, s := range seeds {
		content := fmt.Sprintf("go test fuzz v1\n[]byte(%q)\nbyte(%d)\n", s.body, s.sel)
		if err := os.WriteFile(filepath.Join(dir, name), []byte(content), 0o644); err != nil {
			t.Fatal(err)
		}
	}
}

// counterSeeds are the golden counter bodies plus malformed ones.
func counterSeeds(tb testing.TB) map[string]counterSeed {
	tb.Helper()
	seeds := map[string]counterSeed{
		"add_zero_producer":   {append([]byte{0, 1, 'x', 0, 0, 0, 0, 0, 1, 'k', 0, 0, 0, 0, 0, 0, 0, 1, 1}, make([]byte, 24)...), 0},
		"add_unknown_flag":    {[]byte{0, 1, 'x', 0, 0, 0, 0, 0, 1, 'k', 0, 0, 0, 0, 0, 0, 0, 1, 2}, 0},
		"add_cut_short":       {[]byte{0, 1, 'x', 0, 0, 0, 0, 0, 9, 'k'}, 0},
		"get_bad_stream":      {[]byte{0, 1, '/', 0, 0, 0, 0, 0, 0}, 2},
		"snapshot_bad_flag":   {[]byte{0, 1, 'x', 0, 0, 0, 0, 0x80}, 4},
		"snapshot_ok_trailer": {make([]byte, 21), 5},
	}
	return withGoldenSeeds(tb, seeds, counterTypes)
}

// TestWriteCounterFuzzSeeds keeps testdata/fuzz/FuzzDecodeCounters in step
// with the golden vectors; it writes only with -update.
func TestWriteCounterFuzzSeeds(t *testing.T) {
	checkOrWriteSeeds(t, filepath.Join("testdata", "fuzz", "FuzzDecodeCounters"), counterSeeds(t))
}
