package counter

import (
	"bytes"
	"errors"
	"testing"
)

// FuzzDecodeEntry: DecodeEntry never panics, fails only with
// ErrMalformedEntry, and what it decodes re-encodes to the same bytes.
func FuzzDecodeEntry(f *testing.F) {
	for _, s := range [][]byte{{}, {1}, {2, 0, 0, 0, 0, 0, 0, 0, 0}} {
		f.Add(s)
	}
	if p, err := EncodeAdd(Add{Key: "k", Delta: -1, Value: 4}); err == nil {
		f.Add(p)
	}
	if p, err := EncodeSnapshot(Snapshot{Values: map[string]int64{"a": 1, "b": 2}, Marks: []Mark{{Producer: pid, Seq: 3, Offset: 9, Value: 1}}}); err == nil {
		f.Add(p)
	}
	f.Fuzz(func(t *testing.T, b []byte) {
		e, err := DecodeEntry(b)
		if err != nil {
			if !errors.Is(err, ErrMalformedEntry) {
				t.Fatalf("error %v does not match ErrMalformedEntry", err)
			}
			return
		}
		var re []byte
		switch {
		case e.Add != nil:
			re, err = EncodeAdd(*e.Add)
		case e.Snapshot != nil:
			re, err = EncodeSnapshot(*e.Snapshot)
		default:
			t.Fatal("decoded an entry with neither add nor snapshot")
		}
		if err != nil {
			t.Fatal(err)
		}
		if e.Snapshot == nil && !bytes.Equal(re, b) {
			t.Fatalf("re-encoding differs:\n%x\n%x", re, b)
		}
		if e.Snapshot != nil {
			back, err := DecodeEntry(re)
			if err != nil || len(back.Snapshot.Values) != len(e.Snapshot.Values) || len(back.Snapshot.Marks) != len(e.Snapshot.Marks) {
				t.Fatalf("snapshot does not survive re-encoding: %v", err)
			}
		}
	})
}
