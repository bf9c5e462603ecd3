package logstore

import (
	"testing"

	"github.com/google/go-cmp/cmp"

	"felix.dev/felix/broker/record"
)

// Decoders of stored bytes (outside input after a disk or a bug has had its
// way with them) must never panic, and what they accept must round-trip.

func FuzzDecodeBatch(f *testing.F) {
	f.Add(encodeBatch(0, data("a")))
	f.Add(encodeBatch(42, []record.Record{
		{Epoch: 3, Timestamp: -1, Kind: record.KindTrim, Floor: 40, Headers: []record.Header{{Key: "epoch", Value: []byte("3")}}},
		{Epoch: 3, Kind: record.KindFence},
		{Epoch: 4, Kind: record.KindData, Payload: []byte("payload")},
	}))
	f.Add([]byte{1, 0, 0, 0, 0})
	f.Fuzz(func(t *testing.T, b []byte) {
		first, recs, err := decodeBatch(b)
		if err != nil {
			return
		}
		again, recs2, err := decodeBatch(encodeBatch(first, recs))
		if err != nil || again != first {
			t.Fatalf("re-encoded batch does not decode: %v", err)
		}
		if diff := cmp.Diff(recs, recs2); diff != "" {
			t.Fatalf("round trip differs:\n%s", diff)
		}
	})
}

func FuzzDecodeTrimEntry(f *testing.F) {
	f.Add(encodeTrimEntry(trimEntry{Offset: 7, Floor: 5, Epoch: 2, Headers: []record.Header{{Key: "epoch", Value: []byte("2")}}}))
	f.Add(encodeTrimEntry(trimEntry{}))
	f.Add(encodeTrimMark(3))
	f.Fuzz(func(t *testing.T, b []byte) {
		if n, err := decodeTrimMark(b); err == nil {
			if m, err := decodeTrimMark(encodeTrimMark(n)); err != nil || m != n {
				t.Fatalf("marker round trip: %d %v", m, err)
			}
		}
		e, err := decodeTrimEntry(b)
		if err != nil {
			return
		}
		if e.Floor > e.Offset {
			t.Fatalf("accepted an entry with floor %d above offset %d", e.Floor, e.Offset)
		}
		e2, err := decodeTrimEntry(encodeTrimEntry(e))
		if err != nil {
			t.Fatal(err)
		}
		if diff := cmp.Diff(e, e2); diff != "" {
			t.Fatalf("round trip differs:\n%s", diff)
		}
	})
}

func FuzzDecodeLogMeta(f *testing.F) {
	f.Add(encodeMeta(logMeta{num: 3, base: 10, segRecs: 64, start: 10, committed: 12}, false))
	f.Add(encodeMeta(logMeta{num: 1, segRecs: 1, fenced: true, retention: RetentionPolicy{MaxAge: 5, MaxBytes: 9}}, false))
	f.Add(encodeMeta(logMeta{num: 2, base: 4, segRecs: 8, start: 4}, true))
	f.Fuzz(func(t *testing.T, b []byte) {
		m, err := decodeMeta(b)
		if err != nil {
			return
		}
		for _, refs := range []bool{false, true} {
			m2, err := decodeMeta(encodeMeta(m, refs))
			if err != nil || m2 != m {
				t.Fatalf("round trip (refs %t): %+v %+v %v", refs, m, m2, err)
			}
		}
	})
}

func FuzzParseKeys(f *testing.F) {
	f.Add(catalogKey(testLog))
	f.Add(dataKey(1, 2, 3))
	f.Add(trimKey(1, 9))
	f.Add(filePinKey(7, 2))
	f.Fuzz(func(t *testing.T, b []byte) {
		if id, err := parseCatalogKey(b); err == nil {
			if string(catalogKey(id)) != string(b) {
				t.Fatalf("catalog key round trip: %x -> %v", b, id)
			}
		}
		if seg, first, err := parseDataKey(b); err == nil && b[1] == 0 && b[2] == 0 && b[3] == 0 && b[4] == 0 {
			if string(dataKey(0, seg, first)) != string(b) {
				t.Fatalf("data key round trip: %x", b)
			}
		}
		_, _ = parseTrimKey(b)
		if seq, num, err := parseFilePinKey(b); err == nil && string(filePinKey(seq, num)) != string(b) {
			t.Fatalf("pin key round trip: %x", b)
		}
	})
}

func FuzzCommitLogFrames(f *testing.F) {
	// Frames of a file numbered 0 checksummed from frameSeed(0); the
	// corpus in testdata holds frames of legacy files (seed 0).
	seed := frameSeed(0)
	f.Add(appendFrame(nil, seed, []frameEntry{{op: opSet, k: dataKey(1, 0, 0), v: encodeBatch(0, data("a"))}}))
	f.Add(appendFrame(appendFrame(nil, seed, []frameEntry{{op: opDelete, k: []byte("k")}}), seed, []frameEntry{{op: opSet, k: []byte("x"), v: []byte("y")}}))
	f.Add([]byte{3, 0, 0, 0, 0, 0, 0, 0, 1, 2, 3})
	f.Fuzz(func(t *testing.T, b []byte) {
		// Both seeds: legacy files (0) and files numbered 0.
		for _, seed := range []uint32{0, frameSeed(0)} {
			checkFrames(t, b, seed)
		}
	})
}

// checkFrames parses the frames of b checksummed from seed and checks that
// each re-encodes to the same entries, and checks only under its own seed.
func checkFrames(t *testing.T, b []byte, seed uint32) {
	for len(b) >= 8 {
		body, rest, ok := nextFrame(b, seed)
		if !ok {
			return
		}
		kvs, err := decodeFrame(body)
		if err != nil {
			return
		}
		frame := appendFrame(nil, seed, kvs)
		again, _, ok := nextFrame(frame, seed)
		if !ok {
			t.Fatal("re-encoded frame does not parse")
		}
		if _, _, ok := nextFrame(frame, frameSeed(1)); ok {
			t.Fatal("a frame checks in a file it was not written for")
		}
		kvs2, err := decodeFrame(again)
		if err != nil || len(kvs2) != len(kvs) {
			t.Fatalf("round trip: %v", err)
		}
		for i := range kvs {
			if kvs[i].op != kvs2[i].op || string(kvs[i].k) != string(kvs2[i].k) || string(kvs[i].v) != string(kvs2[i].v) {
				t.Fatalf("entry %d differs", i)
			}
		}
		b = rest
	}
}

func FuzzDecodeRef(f *testing.F) {
	f.Add(encodeRef(batchRef{seq: 3, off: 4096, n: 1100, crc: 0xdeadbeef}))
	f.Add([]byte{refTag, 1, 2})
	f.Fuzz(func(t *testing.T, b []byte) {
		r, err := decodeRef(b)
		if err != nil {
			if isRef(b) {
				t.Fatalf("isRef(%x) but decodeRef fails: %v", b, err)
			}
			return
		}
		if string(encodeRef(r)) != string(b) {
			t.Fatalf("ref round trip: %x -> %+v", b, r)
		}
		if _, _, err := batchHeader(b); err == nil {
			t.Fatalf("ref %x also decodes as a batch", b)
		}
	})
}
