package group

import (
	"bytes"
	"errors"
	"reflect"
	"testing"
)

// FuzzDecodeEntry: DecodeEntry never panics, fails only with
// ErrMalformedEntry, and what it decodes re-encodes to the same bytes.
func FuzzDecodeEntry(f *testing.F) {
	for _, s := range [][]byte{{}, {1}, {4, 0, 0, 0, 0}} {
		f.Add(s)
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
		case e.Claim != nil:
			re, err = EncodeClaim(*e.Claim)
		case e.Commit != nil:
			re, err = EncodeCommit(*e.Commit)
		case e.Release != nil:
			re, err = EncodeRelease(*e.Release)
		case e.Snapshot != nil:
			re, err = EncodeSnapshot(*e.Snapshot)
		case e.Configure != nil:
			re, err = EncodeConfigure(*e.Configure)
		case e.Offsets != nil:
			re, err = EncodeOffsets(*e.Offsets)
		default:
			t.Fatal("decoded an empty entry")
		}
		if err != nil {
			t.Fatal(err)
		}
		if !bytes.Equal(re, b) {
			// Only a snapshot may encode differently (its groups in
			// another order, or an ack snapshot of groups none of which
			// acknowledges per record); it must decode to the same
			// groups.
			back, err := DecodeEntry(re)
			if e.Snapshot == nil || err != nil || !reflect.DeepEqual(back.Snapshot, e.Snapshot) {
				t.Fatalf("re-encoding differs:\n%x\n%x", re, b)
			}
		}
	})
}
