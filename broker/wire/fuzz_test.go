package wire

import (
	"bytes"
	"fmt"
	"os"
	"path/filepath"
	"testing"
)

// decodeBody decodes a body by message type under feats and re-encodes it.
// ok is false when the body does not decode or the type carries no message.
func decodeBody(f Frame, feats Features) (re []byte, ok bool) {
	var err error
	switch f.Type {
	case MsgHello:
		var h Hello
		if h, err = DecodeHello(f.Body); err == nil {
			_, err = EncodeHello(h)
		}
		return nil, err == nil // extensions are skipped: no canonical form
	case MsgHelloOK:
		var h HelloOK
		if h, err = DecodeHelloOK(f.Body); err == nil {
			_, err = EncodeHelloOK(h)
		}
		return nil, err == nil
	case MsgAppend:
		var r AppendRequest
		if r, err = DecodeAppendFor(f.Body, feats); err == nil {
			re, err = EncodeAppend(r)
		}
	case MsgAppendOK:
		var r AppendOK
		if r, err = DecodeAppendOK(f.Body); err == nil {
			re = EncodeAppendOK(r)
		}
	case MsgRead:
		var r ReadRequest
		if r, err = DecodeRead(f.Body); err == nil {
			re, err = EncodeRead(r)
		}
	case MsgReadOK:
		var r ReadOK
		if r, err = DecodeReadOK(f.Body); err == nil {
			re, err = EncodeReadOK(r)
		}
	case MsgTrim:
		var r TrimRequest
		if r, err = DecodeTrim(f.Body); err == nil {
			re, err = EncodeTrim(r)
		}
	case MsgTrimOK:
		var r TrimOK
		if r, err = DecodeTrimOK(f.Body); err == nil {
			re = EncodeTrimOK(r)
		}
	case MsgDescribe:
		var r DescribeRequest
		if r, err = DecodeDescribe(f.Body); err == nil {
			re, err = EncodeDescribe(r)
		}
	case MsgDescribeOK:
		var r DescribeOK
		if r, err = DecodeDescribeOKFor(f.Body, feats); err == nil {
			re = EncodeDescribeOKFor(r, feats)
		}
	case MsgMetadata:
		var r MetadataRequest
		if r, err = DecodeMetadata(f.Body); err == nil {
			re, err = EncodeMetadata(r)
		}
	case MsgMetadataOK:
		var r MetadataOK
		if r, err = DecodeMetadataOK(f.Body); err == nil {
			re, err = EncodeMetadataOK(r)
		}
	case MsgCounterAdd, MsgCounterAddOK, MsgCounterGet, MsgCounterGetOK, MsgCounterSnapshot, MsgCounterSnapshotOK:
		return counterBody(f.Type, f.Body)
	case MsgGroupClaim, MsgGroupClaimOK, MsgGroupHeartbeat, MsgGroupHeartbeatOK, MsgGroupCommit, MsgGroupCommitOK,
		MsgGroupLeave, MsgGroupLeaveOK, MsgGroupDescribe, MsgGroupDescribeOK:
		return groupBody(f.Type, f.Body)
	case MsgGroupAckConfig, MsgGroupAckConfigOK, MsgGroupFetch, MsgGroupFetchOK, MsgGroupAck, MsgGroupAckOK,
		MsgGroupNak, MsgGroupNakOK, MsgDeadLetterRead, MsgDeadLetterReadOK, MsgDeadLetterRedrive, MsgDeadLetterRedriveOK,
		MsgDeadLetterTrim, MsgDeadLetterTrimOK:
		return ackBody(f.Type, f.Body)
	case MsgError:
		var e *Error
		if e, err = DecodeError(f.Body, feats); err == nil {
			if _, known := e.Code.Info(); !known {
				return nil, true // unknown codes keep no fields
			}
			re, err = EncodeError(e, feats)
		}
	default:
		return nil, false
	}
	return re, err == nil
}

// fuzzFeatures are the features that change body encodings; the fuzz
// input's bool turns them all on.
const fuzzFeatures = FeatureTrimTag | FeatureLogPolicy | FeatureMetadata | FeatureIdempotent

// FuzzDecodeFrame feeds outside bytes to the frame decoder and every body
// decoder. Nothing may panic or allocate beyond the input's size, and every
// body that decodes must re-encode to exactly the same bytes.
func FuzzDecodeFrame(f *testing.F) {
	for _, tc := range goldenCases() {
		fr, err := tc.frame()
		if err != nil {
			f.Fatal(err)
		}
		f.Add(AppendFrame(nil, fr), tc.feats&fuzzFeatures != 0)
	}
	f.Fuzz(func(t *testing.T, in []byte, on bool) {
		const limit = 1 << 16
		feats := Features(0)
		if on {
			feats = fuzzFeatures
		}
		for len(in) > 0 {
			fr, n, err := DecodeFrame(in, limit)
			if err != nil {
				return
			}
			if n < FrameHeaderSize || n > len(in) {
				t.Fatalf("consumed %d of %d", n, len(in))
			}
			in = in[n:]
			re, ok := decodeBody(fr, feats)
			if ok && re != nil && !bytes.Equal(re, fr.Body) {
				t.Fatalf("%v body is not canonical:\n in %x\nout %x", fr.Type, fr.Body, re)
			}
		}
	})
}

// TestWriteFuzzSeedCorpus keeps testdata/fuzz/FuzzDecodeFrame in step with
// the golden vectors; it writes only with -update.
func TestWriteFuzzSeedCorpus(t *testing.T) {
	dir := filepath.Join("testdata", "fuzz", "FuzzDecodeFrame")
	if !*update {
		entries, err := os.ReadDir(dir)
		if err != nil || len(entries) < len(goldenCases()) {
			t.Fatalf("seed corpus missing or short (%d files, err %v); run go test -update", len(entries), err)
		}
		return
	}
	if err := os.MkdirAll(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	extra := map[string][]byte{
		"garbage":               []byte("GET / HTTP/1.1\r\n\r\n"),
		"half_frame":            {0, 0, 0, 40, 0x10, 0, 0},
		"huge_count":            AppendFrame(nil, Frame{Type: MsgAppend, ReqID: 1, Body: []byte{0, 1, 'x', 0, 0, 0, 0, 0, 0xff, 0xff, 0xff, 0xff}}),
		"huge_headers":          AppendFrame(nil, Frame{Type: MsgTrim, ReqID: 1, Body: append([]byte{0, 1, 'x', 0, 0, 0, 0}, append(make([]byte, 16), 0xff, 0xff)...)}),
		"unknown_type":          AppendFrame(nil, Frame{Type: 0x55, ReqID: 1}),
		"reserved_ship":         AppendFrame(nil, Frame{Type: MsgShip, ReqID: 1, Body: []byte{1, 2, 3}}),
		"unknown_code":          AppendFrame(nil, Frame{Type: MsgError, ReqID: 1, Body: []byte{0x01, 0x00, 0, 0, 9, 9}}),
		"short_length":          {0, 0, 0, 1, 0},
		"two_frames":            append(AppendFrame(nil, Frame{Type: MsgAppendOK, ReqID: 1, Body: make([]byte, 16)}), AppendFrame(nil, Frame{Type: MsgTrimOK, ReqID: 2, Body: make([]byte, 16)})...),
		"too_large_frame":       {0x7f, 0xff, 0xff, 0xff, 0x10},
		"metadata_huge_counts":  AppendFrame(nil, Frame{Type: MsgMetadataOK, ReqID: 1, Body: []byte{0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff}}),
		"metadata_huge_streams": AppendFrame(nil, Frame{Type: MsgMetadata, ReqID: 1, Body: []byte{0xff, 0xff, 0, 1, 'x'}}),
	}
	write := func(name string, b []byte, tag bool) {
		content := fmt.Sprintf("go test fuzz v1\n[]byte(%q)\nbool(%v)\n", b, tag)
		if err := os.WriteFile(filepath.Join(dir, name), []byte(content), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	for _, tc := range goldenCases() {
		fr, err := tc.frame()
		if err != nil {
			t.Fatal(err)
		}
		write(tc.name, AppendFrame(nil, fr), tc.feats&fuzzFeatures != 0)
	}
	for name, b := range extra {
		write(name, b, false)
	}
}

// FuzzDecodeMetadata feeds outside bytes to the Metadata and MetadataOK
// body decoders directly: nothing may panic, no count may allocate more
// than the body could hold, and a body that decodes re-encodes to the
// same bytes.
func FuzzDecodeMetadata(f *testing.F) {
	for _, tc := range goldenCases() {
		fr, err := tc.frame()
		if err != nil {
			f.Fatal(err)
		}
		if fr.Type == MsgMetadata || fr.Type == MsgMetadataOK {
			f.Add(fr.Body, fr.Type == MsgMetadataOK)
		}
	}
	f.Fuzz(func(t *testing.T, body []byte, answer bool) {
		var (
			re  []byte
			err error
		)
		if answer {
			var r MetadataOK
			if r, err = DecodeMetadataOK(body); err != nil {
				return
			}
			if len(r.Brokers)*minBrokerEntry+len(r.Shards)*minShardEntry > len(body) {
				t.Fatalf("decoded more entries than %d bytes hold", len(body))
			}
			re, err = EncodeMetadataOK(r)
		} else {
			var r MetadataRequest
			if r, err = DecodeMetadata(body); err != nil {
				return
			}
			re, err = EncodeMetadata(r)
		}
		if err != nil {
			t.Fatalf("re-encode: %v", err)
		}
		if !bytes.Equal(re, body) {
			t.Fatalf("body is not canonical:\n in %x\nout %x", body, re)
		}
	})
}

// TestWriteMetadataFuzzSeeds keeps testdata/fuzz/FuzzDecodeMetadata in
// step with the golden vectors; it writes only with -update.
func TestWriteMetadataFuzzSeeds(t *testing.T) {
	dir := filepath.Join("testdata", "fuzz", "FuzzDecodeMetadata")
	seeds := map[string]struct {
		body   []byte
		answer bool
	}{
		"huge_broker_count":  {[]byte{0xff, 0xff, 0xff, 0xff, 0, 0, 0, 0}, true},
		"huge_shard_count":   {[]byte{0, 0, 0, 0, 0xff, 0xff, 0xff, 0xff}, true},
		"huge_replica_count": {[]byte{0, 0, 0, 0, 0, 0, 0, 1, 0, 1, 'x', 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0xff}, true},
		"huge_stream_count":  {[]byte{0xff, 0xff}, false},
		"bad_stream_name":    {[]byte{0, 1, 0, 1, '/'}, false},
	}
	for _, tc := range goldenCases() {
		fr, err := tc.frame()
		if err != nil {
			t.Fatal(err)
		}
		if fr.Type == MsgMetadata || fr.Type == MsgMetadataOK {
			seeds[tc.name] = struct {
				body   []byte
				answer bool
			}{fr.Body, fr.Type == MsgMetadataOK}
		}
	}
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
		content := fmt.Sprintf("go test fuzz v1\n[]byte(%q)\nbool(%v)\n", s.body, s.answer)
		if err := os.WriteFile(filepath.Join(dir, name), []byte(content), 0o644); err != nil {
			t.Fatal(err)
		}
	}
}

// FuzzDecodeAppend feeds outside bytes to the Append body decoder, with
// and without FeatureIdempotent: nothing may panic, a producer is decoded
// only under the feature and never with a zero id, and a body that decodes
// re-encodes to the same bytes.
func FuzzDecodeAppend(f *testing.F) {
	for _, tc := range goldenCases() {
		fr, err := tc.frame()
		if err != nil {
			f.Fatal(err)
		}
		if fr.Type == MsgAppend {
			f.Add(fr.Body, tc.feats.Has(FeatureIdempotent))
		}
	}
	f.Fuzz(func(t *testing.T, body []byte, idem bool) {
		feats := Features(0)
		if idem {
			feats = FeatureIdempotent
		}
		r, err := DecodeAppendFor(body, feats)
		if err != nil {
			return
		}
		if r.Producer != nil && (!idem || r.Producer.ID == [16]byte{}) {
			t.Fatalf("decoded producer %+v with features %v", r.Producer, feats)
		}
		re, err := EncodeAppend(r)
		if err != nil {
			t.Fatalf("re-encode: %v", err)
		}
		if !bytes.Equal(re, body) {
			t.Fatalf("body is not canonical:\n in %x\nout %x", body, re)
		}
	})
}

// TestWriteAppendFuzzSeeds keeps testdata/fuzz/FuzzDecodeAppend in step
// with the golden vectors; it writes only with -update.
func TestWriteAppendFuzzSeeds(t *testing.T) {
	dir := filepath.Join("testdata", "fuzz", "FuzzDecodeAppend")
	type seed struct {
		body []byte
		idem bool
	}
	seeds := map[string]seed{
		"producer_without_feature": {[]byte{0, 1, 'x', 0, 0, 0, 0, 2, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15, 16, 0, 0, 0, 0, 0, 0, 0, 1, 0, 0, 0, 1, 0, 0, 0, 0, 0, 0}, false},
		"zero_producer":            {append(append([]byte{0, 1, 'x', 0, 0, 0, 0, 2}, make([]byte, 24)...), 0, 0, 0, 1, 0, 0, 0, 0, 0, 0), true},
		"producer_cut_short":       {[]byte{0, 1, 'x', 0, 0, 0, 0, 3, 0, 0, 0, 0, 0, 0, 0, 1, 9, 9}, true},
		"unknown_flag":             {[]byte{0, 1, 'x', 0, 0, 0, 0, 4, 0, 0, 0, 1, 0, 0, 0, 0, 0, 0}, true},
	}
	for _, tc := range goldenCases() {
		fr, err := tc.frame()
		if err != nil {
			t.Fatal(err)
		}
		if fr.Type == MsgAppend {
			seeds[tc.name] = seed{fr.Body, tc.feats.Has(FeatureIdempotent)}
		}
	}
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
		content := fmt.Sprintf("go test fuzz v1\n[]byte(%q)\nbool(%v)\n", s.body, s.idem)
		if err := os.WriteFile(filepath.Join(dir, name), []byte(content), 0o644); err != nil {
			t.Fatal(err)
		}
	}
}
