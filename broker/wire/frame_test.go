package wire

import (
	"bufio"
	"bytes"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"runtime"
	"testing"

	"felix.dev/felix/broker/record"
)

func TestReadFrameLimits(t *testing.T) {
	good := AppendFrame(nil, Frame{Type: MsgDescribe, ReqID: 7, Body: []byte{1, 2, 3}})
	tests := []struct {
		name    string
		in      []byte
		max     uint32
		wantErr func(error) bool
	}{
		{"whole frame", good, 64, func(err error) bool { return err == nil }},
		{"clean end", nil, 64, func(err error) bool { return errors.Is(err, io.EOF) }},
		{"half length", good[:2], 64, func(err error) bool { return errors.Is(err, io.ErrUnexpectedEOF) }},
		{"half header", good[:6], 64, func(err error) bool { return errors.Is(err, io.ErrUnexpectedEOF) }},
		{"half body", good[:len(good)-1], 64, func(err error) bool { return errors.Is(err, io.ErrUnexpectedEOF) }},
		{"oversized", good, 7, func(err error) bool {
			var tl *FrameTooLargeError
			return errors.As(err, &tl) && tl.Size == 8 && tl.Limit == 7
		}},
		{"length below fixed part", []byte{0, 0, 0, 4, 1, 0, 0, 0}, 64, func(err error) bool { return errors.Is(err, ErrFrameTooShort) }},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			f, err := ReadFrame(bufio.NewReader(bytes.NewReader(tc.in)), tc.max)
			if !tc.wantErr(err) {
				t.Fatalf("ReadFrame: unexpected error %v", err)
			}
			_, _, derr := DecodeFrame(tc.in, tc.max)
			if tc.in != nil && (err == nil) != (derr == nil) {
				t.Fatalf("DecodeFrame disagrees with ReadFrame: %v vs %v", derr, err)
			}
			if err == nil && (f.Type != MsgDescribe || f.ReqID != 7 || !bytes.Equal(f.Body, []byte{1, 2, 3})) {
				t.Fatalf("frame = %+v", f)
			}
		})
	}
}

// TestRP2_PeerWithoutBitsSeesVersion1Frames: a peer that offers no feature
// bit gets the same HelloOK and CursorTooOld bytes whatever the broker
// supports or knows.
func TestRP2_PeerWithoutBitsSeesVersion1Frames(t *testing.T) {
	v, feats, err := Negotiate(Hello{Version: 1}, KnownFeatures)
	if err != nil || v != 1 || feats != 0 {
		t.Fatalf("Negotiate = %d, %v, %v; want 1, none, nil", v, feats, err)
	}
	withID, err := EncodeHelloOK(HelloOK{Version: v, Features: feats, StorageID: sampleID})
	if err != nil {
		t.Fatal(err)
	}
	without, _ := EncodeHelloOK(HelloOK{Version: v})
	if !bytes.Equal(withID, without) {
		t.Fatalf("HelloOK carries the storage id to a peer that did not offer the bit: %x", withID)
	}
	tagged := &Error{Code: CodeCursorTooOld, From: 1, Floor: 5, HasTag: true, TrimHeaders: []record.Header{{Key: "epoch", Value: []byte("3")}}}
	plain := &Error{Code: CodeCursorTooOld, From: 1, Floor: 5}
	a, _ := EncodeError(tagged, feats)
	b, _ := EncodeError(plain, feats)
	if !bytes.Equal(a, b) {
		t.Fatalf("CursorTooOld carries a tag field to a peer that did not negotiate it")
	}
}

func TestRP2_StorageIDNegotiated(t *testing.T) {
	hb, err := EncodeHello(Hello{Version: 1, Features: FeatureStorageID, StorageID: sampleID})
	if err != nil {
		t.Fatal(err)
	}
	h, err := DecodeHello(hb)
	if err != nil || !bytes.Equal(h.StorageID, sampleID) {
		t.Fatalf("DecodeHello = %+v, %v", h, err)
	}
	_, feats, _ := Negotiate(h, KnownFeatures)
	if !feats.Has(FeatureStorageID) || feats.Has(FeatureTrimTag) {
		t.Fatalf("accepted %v, want storage-id only", feats)
	}
	// A broker that does not support the bit accepts none.
	if _, f, _ := Negotiate(h, 0); f != 0 {
		t.Fatalf("accepted %v from a broker supporting nothing", f)
	}
	// Unknown extensions and unknown bits from a newer peer are skipped.
	newer := append(append([]byte(nil), hb...), 0x7e, 0x00, 0x02, 0xaa, 0xbb)
	newer[4+2] |= 0x80 // an unknown bit (bit 63) in the features
	h2, err := DecodeHello(newer)
	if err != nil || !bytes.Equal(h2.StorageID, sampleID) {
		t.Fatalf("newer hello: %+v, %v", h2, err)
	}
	if _, f, _ := Negotiate(h2, KnownFeatures); f != FeatureStorageID {
		t.Fatalf("accepted %v, want storage-id", f)
	}
}

func TestTR4_CursorTooOldCarriesTagOnlyWhenNegotiated(t *testing.T) {
	e := &Error{Code: CodeCursorTooOld, From: 1, Floor: 5, HasTag: true, TrimHeaders: []record.Header{{Key: "epoch", Value: []byte("3")}}}
	for _, feats := range []Features{0, FeatureStorageID, FeatureTrimTag, FeatureTrimTag | FeatureStorageID} {
		b, err := EncodeError(e, feats)
		if err != nil {
			t.Fatal(err)
		}
		got, err := DecodeError(b, feats)
		if err != nil {
			t.Fatal(err)
		}
		want := feats.Has(FeatureTrimTag)
		if got.HasTag != want || (len(got.TrimHeaders) == 1) != want {
			t.Fatalf("features %v: HasTag=%v headers=%v", feats, got.HasTag, got.TrimHeaders)
		}
		var too *record.CursorTooOldError
		if !errors.As(got.RecordError(), &too) || too.Floor != 5 {
			t.Fatalf("RecordError = %v", got.RecordError())
		}
	}
}

func TestNegotiateRefusesOldVersion(t *testing.T) {
	_, _, err := Negotiate(Hello{Version: 0}, KnownFeatures)
	var we *Error
	if !errors.As(err, &we) || we.Code != CodeUnsupportedVersion {
		t.Fatalf("err = %v, want UnsupportedVersion", err)
	}
	if v, _, err := Negotiate(Hello{Version: 9}, KnownFeatures); err != nil || v != ProtocolVersion {
		t.Fatalf("newer client: v=%d err=%v", v, err)
	}
}

func TestErrorCodeTableIsStable(t *testing.T) {
	want := map[Code]string{1: "OffsetMismatch", 2: "CursorTooOld", 3: "NotLeader", 4: "Fenced", 5: "ShardUnknown",
		6: "RecordTooLarge", 7: "BadRequest", 8: "Unavailable", 9: "UnsupportedVersion",
		10: "Corrupt", 11: "StorageFull", 12: "NotAuthorized", 13: "Unauthenticated", 14: "OutOfSequence", 15: "CounterLimit",
		16: "GroupFenced", 17: "GroupLimit"}
	seen := map[string]bool{}
	for _, ci := range Codes() {
		if want[ci.Code] != ci.Name {
			t.Errorf("code %d is named %q, want %q", ci.Code, ci.Name, want[ci.Code])
		}
		if seen[ci.Name] {
			t.Errorf("name %q used twice", ci.Name)
		}
		seen[ci.Name] = true
	}
	if len(seen) != len(want) {
		t.Fatalf("table has %d codes, want %d", len(seen), len(want))
	}
}

func TestErrorFromRecordErrors(t *testing.T) {
	tests := []struct {
		err  error
		code Code
	}{
		{&record.OffsetMismatchError{Expected: 1, Tail: 2}, CodeOffsetMismatch},
		{&record.CursorTooOldError{From: 1, Floor: 2}, CodeCursorTooOld},
		{record.ErrShardUnknown, CodeShardUnknown},
		{record.ErrRecordTooLarge, CodeRecordTooLarge},
		{ErrMalformed, CodeBadRequest},
		{record.ErrClosed, CodeUnavailable},
		{fmt.Errorf("append: %w", record.ErrStorageFull), CodeStorageFull},
		{fmt.Errorf("read: %w", &record.CorruptError{Offset: 7, Reason: "checksum"}), CodeCorrupt},
	}
	for _, tc := range tests {
		if got := ErrorFrom(tc.err); got.Code != tc.code {
			t.Errorf("ErrorFrom(%v).Code = %v, want %v", tc.err, got.Code, tc.code)
		}
	}
	ce := ErrorFrom(&record.CorruptError{Offset: 7, Reason: "checksum"})
	if !errors.Is(ce, record.ErrCorrupt) || ce.Offset != 7 {
		t.Fatalf("Corrupt lost its offset or sentinel: %+v", ce)
	}
	om := ErrorFrom(&record.OffsetMismatchError{Expected: 1, Tail: 2})
	if !errors.Is(om, record.ErrOffsetMismatch) || om.Tail != 2 {
		t.Fatalf("OffsetMismatch lost its tail or sentinel: %+v", om)
	}
}

func TestAppendAppendFrameEqualsTwoStepEncoding(t *testing.T) {
	tail := uint64(9)
	r := AppendRequest{Shard: ShardRef{Stream: "s", Shard: 1}, ExpectTail: &tail,
		Records: []record.Record{{Payload: []byte("p"), Headers: []record.Header{{Key: "k", Value: []byte("v")}}}}}
	body, err := EncodeAppend(r)
	if err != nil {
		t.Fatal(err)
	}
	want := AppendFrame([]byte("prefix"), Frame{Type: MsgAppend, ReqID: 77, Body: body})
	got, err := AppendAppendFrame([]byte("prefix"), 77, r)
	if err != nil || !bytes.Equal(got, want) {
		t.Fatalf("AppendAppendFrame = %x, %v\nwant %x", got, err, want)
	}
}

// [FD-4] The DescribeOK policy byte exists only under FeatureLogPolicy and
// only with bits this implementation knows; anything else is malformed.
func TestFD4_DescribeOKPolicyByte(t *testing.T) {
	r := DescribeOK{Base: 1, Floor: 2, Tail: 3, Committed: 3, Retention: true}
	b := EncodeDescribeOKFor(r, FeatureLogPolicy)
	if got, err := DecodeDescribeOKFor(b, FeatureLogPolicy); err != nil || got != r {
		t.Fatalf("round trip: %+v, %v; want %+v", got, err, r)
	}
	if _, err := DecodeDescribeOK(b); !errors.Is(err, ErrMalformed) {
		t.Fatalf("policy byte on a connection without the feature: %v, want ErrMalformed", err)
	}
	if _, err := DecodeDescribeOKFor(b[:len(b)-1], FeatureLogPolicy); !errors.Is(err, ErrMalformed) {
		t.Fatalf("policy byte missing: %v, want ErrMalformed", err)
	}
	bad := append(append([]byte(nil), b[:len(b)-1]...), 0x04)
	if _, err := DecodeDescribeOKFor(bad, FeatureLogPolicy); !errors.Is(err, ErrMalformed) {
		t.Fatalf("unknown policy bit: %v, want ErrMalformed", err)
	}
	if s := (FeatureTrimTag | FeatureLogPolicy).String(); s != "trim-tag|log-policy" {
		t.Fatalf("features %q", s)
	}
}

// TestReadFrameBodyAllocatesAsBytesArrive: a peer that announces a
// maximum-size frame and sends only a few bytes of it makes the reader
// allocate far less than the announced size.
func TestReadFrameBodyAllocatesAsBytesArrive(t *testing.T) {
	const announced = DefaultMaxFrameSize
	in := AppendFrame(nil, Frame{Type: MsgAppend, ReqID: 1, Body: []byte("only this")})
	binary.BigEndian.PutUint32(in, announced)
	var before, after runtime.MemStats
	runtime.ReadMemStats(&before)
	_, err := ReadFrame(bufio.NewReader(bytes.NewReader(in)), announced)
	runtime.ReadMemStats(&after)
	if !errors.Is(err, io.ErrUnexpectedEOF) {
		t.Fatalf("ReadFrame of a cut frame: %v", err)
	}
	if got := after.TotalAlloc - before.TotalAlloc; got > 1<<20 {
		t.Fatalf("reading %d bytes of a %d-byte frame allocated %d bytes", len(in), announced, got)
	}
	// Whole frames, small and over the first chunk, read back intact.
	for _, n := range []int{0, 1, bodyFirstChunk, bodyFirstChunk + 1, 3 * bodyFirstChunk} {
		body := bytes.Repeat([]byte{7}, n)
		f, err := ReadFrame(bufio.NewReader(bytes.NewReader(AppendFrame(nil, Frame{Type: MsgRead, ReqID: 3, Body: body}))), announced)
		if err != nil || f.Type != MsgRead || f.ReqID != 3 || !bytes.Equal(f.Body, body) {
			t.Fatalf("body of %d bytes: %v, %d bytes back", n, err, len(f.Body))
		}
	}
}

// TestErrorForDowngradesNewerCodes: a connection that did not negotiate
// FeatureStorageErrors is never sent Corrupt or StorageFull; it gets
// Unavailable with the same message, prefixed. Other codes pass through.
func TestErrorForDowngradesNewerCodes(t *testing.T) {
	for _, tc := range []struct {
		in       *Error
		feats    Features
		wantCode Code
		wantMsg  string
	}{
		{&Error{Code: CodeCorrupt, Message: "bad crc", Offset: 7}, 0, CodeUnavailable, "corrupt (not retryable on this broker): bad crc"},
		{&Error{Code: CodeStorageFull, Message: "below floor"}, FeatureTrimTag, CodeUnavailable, "storage full: below floor"},
		{&Error{Code: CodeCorrupt, Message: "bad crc", Offset: 7}, FeatureStorageErrors, CodeCorrupt, "bad crc"},
		{&Error{Code: CodeStorageFull, Message: "below floor"}, KnownFeatures, CodeStorageFull, "below floor"},
		{&Error{Code: CodeFenced, Message: "fenced", Epoch: 3}, 0, CodeFenced, "fenced"},
		// The auth codes follow FeatureAuth, independently of storage-errors.
		{&Error{Code: CodeNotAuthorized, Message: "no grant"}, FeatureStorageErrors, CodeBadRequest, "not authorized: no grant"},
		{&Error{Code: CodeUnauthenticated, Message: "no certificate"}, 0, CodeBadRequest, "unauthenticated: no certificate"},
		{&Error{Code: CodeNotAuthorized, Message: "no grant"}, FeatureAuth, CodeNotAuthorized, "no grant"},
		{&Error{Code: CodeUnauthenticated, Message: "no certificate"}, KnownFeatures, CodeUnauthenticated, "no certificate"},
		{&Error{Code: CodeStorageFull, Message: "below floor"}, FeatureAuth, CodeUnavailable, "storage full: below floor"},
		// OutOfSequence follows FeatureIdempotent.
		{&Error{Code: CodeOutOfSequence, Message: "expected 3", Next: 3}, FeatureAuth | FeatureStorageErrors, CodeBadRequest, "out of sequence: expected 3"},
		{&Error{Code: CodeOutOfSequence, Message: "expected 3", Next: 3}, FeatureIdempotent, CodeOutOfSequence, "expected 3"},
	} {
		got := ErrorFor(tc.in, tc.feats)
		if got.Code != tc.wantCode || got.Message != tc.wantMsg {
			t.Errorf("ErrorFor(%v, %v) = %v %q, want %v %q", tc.in.Code, tc.feats, got.Code, got.Message, tc.wantCode, tc.wantMsg)
		}
	}
	if s := FeatureStorageErrors.String(); s != "storage-errors" {
		t.Fatalf("feature name %q", s)
	}
	if s := FeatureAuth.String(); s != "auth" {
		t.Fatalf("feature name %q", s)
	}
	if s := FeatureIdempotent.String(); s != "idempotent" {
		t.Fatalf("feature name %q", s)
	}
}

// TestIdempotentAppendOnlyWhenNegotiated: the producer fields of an
// Append are malformed on a connection without FeatureIdempotent, and an
// OutOfSequence error carries its next sequence and matches
// ErrOutOfSequence.
func TestIdempotentAppendOnlyWhenNegotiated(t *testing.T) {
	req := AppendRequest{Shard: ShardRef{Stream: "s"}, Producer: &Producer{ID: [16]byte{1}, Seq: 9},
		Records: []record.Record{{Kind: record.KindData, Payload: []byte("p")}}}
	b, err := EncodeAppend(req)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := DecodeAppendFor(b, KnownFeatures&^FeatureIdempotent); !errors.Is(err, ErrMalformed) {
		t.Fatalf("decode without the feature: %v, want ErrMalformed", err)
	}
	got, err := DecodeAppendFor(b, FeatureIdempotent)
	if err != nil || got.Producer == nil || *got.Producer != *req.Producer {
		t.Fatalf("decode with the feature: %+v %v", got.Producer, err)
	}
	if _, err := EncodeAppend(AppendRequest{Shard: req.Shard, Producer: &Producer{}, Records: req.Records}); !errors.Is(err, ErrMalformed) {
		t.Fatalf("encode of a zero producer id: %v, want ErrMalformed", err)
	}
	eb, err := EncodeErrorFor(&Error{Code: CodeOutOfSequence, Message: "m", Next: 4}, FeatureIdempotent)
	if err != nil {
		t.Fatal(err)
	}
	e, err := DecodeError(eb, FeatureIdempotent)
	if err != nil || e.Next != 4 || !errors.Is(e, ErrOutOfSequence) {
		t.Fatalf("DecodeError = %+v %v", e, err)
	}
}

// TestReadFrameHeaderBufferedAsUnbuffered: from a bufio.Reader the prefix
// is parsed in the reader's buffer, allocating nothing; it returns what
// the io.ReadFull path returns and consumes the same bytes, on every cut
// and error.
func TestReadFrameHeaderBufferedAsUnbuffered(t *testing.T) {
	good := AppendFrame(nil, Frame{Type: MsgDescribe, ReqID: 7, Body: []byte{1, 2, 3}})
	inputs := [][]byte{{0, 0, 0, 4, 1, 0, 0, 0, 0, 9}, {0, 0, 0}}
	for i := 0; i <= len(good); i++ {
		inputs = append(inputs, good[:i])
	}
	for _, in := range inputs {
		for _, max := range []uint32{7, 64} {
			// Unbuffered: a plain reader (not a *bufio.Reader).
			ur := bytes.NewReader(in)
			uh, uerr := ReadFrameHeader(io.MultiReader(ur), max)
			br := bufio.NewReader(bytes.NewReader(in))
			bh, berr := ReadFrameHeader(br, max)
			if uh != bh || fmt.Sprint(uerr) != fmt.Sprint(berr) || errors.Is(uerr, io.EOF) != errors.Is(berr, io.EOF) ||
				errors.Is(uerr, io.ErrUnexpectedEOF) != errors.Is(berr, io.ErrUnexpectedEOF) {
				t.Fatalf("%x max %d: unbuffered %+v, %v; buffered %+v, %v", in, max, uh, uerr, bh, berr)
			}
			if rest, _ := io.ReadAll(br); len(rest) != ur.Len() {
				t.Fatalf("%x max %d: %d bytes left unbuffered, %d buffered", in, max, ur.Len(), len(rest))
			}
		}
	}
	br := bufio.NewReader(bytes.NewReader(bytes.Repeat(good, 200)))
	if n := testing.AllocsPerRun(100, func() {
		h, err := ReadFrameHeader(br, 64)
		if err != nil {
			t.Fatal(err)
		}
		_, _ = br.Discard(h.BodyLen())
	}); n != 0 {
		t.Fatalf("ReadFrameHeader from a bufio.Reader: %v allocations per frame, want 0", n)
	}
}
