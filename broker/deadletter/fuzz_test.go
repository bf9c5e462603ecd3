package deadletter

import (
	"errors"
	"reflect"
	"testing"

	"felix.dev/felix/broker/record"
)

// FuzzDecodeEntry: DecodeEntry never panics, fails only with
// ErrMalformedEntry, and what it decodes re-encodes to the same record.
// The fuzzed bytes are the meta header's value; the record also carries
// payload and, when extra is set, one header before the meta header.
func FuzzDecodeEntry(f *testing.F) {
	for _, s := range [][]byte{{}, {1}, {2, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0}} {
		f.Add(s, []byte{}, false)
	}
	f.Fuzz(func(t *testing.T, meta, payload []byte, extra bool) {
		r := record.Record{Kind: record.KindData, Payload: payload}
		if extra {
			r.Headers = append(r.Headers, record.Header{Key: "k", Value: []byte("v")})
		}
		r.Headers = append(r.Headers, record.Header{Key: MetaHeader, Value: meta})
		e, err := DecodeEntry(r)
		if err != nil {
			if !errors.Is(err, ErrMalformedEntry) {
				t.Fatalf("error %v does not match ErrMalformedEntry", err)
			}
			return
		}
		var re record.Record
		switch {
		case e.Record != nil:
			re, err = EncodeRecord(*e.Record)
		case e.Redriving != nil:
			re, err = EncodeRedrive(EntryRedriving, *e.Redriving)
		case e.Redriven != nil:
			re, err = EncodeRedrive(EntryRedriven, *e.Redriven)
		default:
			t.Fatal("decoded an empty entry")
		}
		if err != nil {
			t.Fatal(err)
		}
		norm := func(hs []record.Header) []record.Header {
			if len(hs) == 0 {
				return nil
			}
			return hs
		}
		if !reflect.DeepEqual(norm(re.Headers), norm(r.Headers)) || string(re.Payload) != string(r.Payload) {
			t.Fatalf("re-encoding differs:\n%+v\n%+v", re, r)
		}
	})
}
