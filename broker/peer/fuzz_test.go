package peer

import (
	"testing"

	"github.com/google/go-cmp/cmp"
	"github.com/google/go-cmp/cmp/cmpopts"

	"felix.dev/felix/broker/wire"
)

// FuzzDecode feeds arbitrary bodies to the replication frame decoder (the
// first byte picks the frame type). Whatever decodes must re-encode to a
// body that decodes to the same message, and nothing may panic or allocate
// beyond the body's size.
func FuzzDecode(f *testing.F) {
	for _, m := range sampleMessages() {
		fr, err := Encode(codecShard, m)
		if err != nil {
			f.Fatal(err)
		}
		f.Add(append([]byte{byte(fr.Type)}, fr.Body...))
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		if len(data) == 0 {
			return
		}
		fr := wire.Frame{Type: wire.MsgType(data[0]), Body: data[1:]}
		shard, m, err := Decode(fr)
		if err != nil {
			return
		}
		again, err := Encode(shard, m)
		if err != nil {
			t.Fatalf("decoded message does not re-encode: %v", err)
		}
		shard2, m2, err := Decode(again)
		if err != nil {
			t.Fatalf("re-encoded message does not decode: %v", err)
		}
		if shard2 != shard {
			t.Fatalf("shard %v became %v", shard, shard2)
		}
		if d := cmp.Diff(m, m2, cmpopts.EquateEmpty()); d != "" {
			t.Fatalf("re-encoding changed the message:\n%s", d)
		}
	})
}

// FuzzDecodeFrame feeds arbitrary bodies, bundles (body version 2) among
// them, to DecodeFrame (the first byte picks the frame type). What decodes
// must re-encode as a bundle that decodes to the same messages; a refused
// frame hands on nothing; nothing may panic or allocate beyond a small
// multiple of the body's size.
func FuzzDecodeFrame(f *testing.F) {
	for _, ms := range sampleBundles() {
		b, err := AppendBundleFrame(nil, ms)
		if err != nil {
			f.Fatal(err)
		}
		f.Add(append([]byte{b[4]}, b[wire.FrameHeaderSize:]...))
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		if len(data) == 0 {
			return
		}
		fr := wire.Frame{Type: wire.MsgType(data[0]), Body: data[1:]}
		got, err := DecodeFrame(fr, nil)
		if err != nil {
			if len(got) != 0 {
				t.Fatalf("refused frame handed on %d messages", len(got))
			}
			return
		}
		if len(got) == 0 || len(got) > MaxBundle {
			t.Fatalf("%d messages decoded", len(got))
		}
		// With names interned (twice: names new, then held) the
		// messages are the same.
		var names Names
		for range 2 {
			named, err := DecodeFrameNames(fr, nil, &names)
			if err != nil {
				t.Fatalf("decodes without names, not with them: %v", err)
			}
			if d := cmp.Diff(got, named, cmpopts.EquateEmpty()); d != "" {
				t.Fatalf("interned names changed the messages:\n%s", d)
			}
		}
		again, err := AppendBundleFrame(nil, got)
		if err != nil {
			t.Fatalf("decoded messages do not re-encode: %v", err)
		}
		back, err := DecodeFrame(wire.Frame{Type: fr.Type, Body: again[wire.FrameHeaderSize:]}, nil)
		if err != nil {
			t.Fatalf("re-encoded bundle does not decode: %v", err)
		}
		if d := cmp.Diff(got, back, cmpopts.EquateEmpty()); d != "" {
			t.Fatalf("re-encoding changed the messages:\n%s", d)
		}
	})
}
