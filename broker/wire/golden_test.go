package wire

import (
	"bufio"
	"bytes"
	"encoding/hex"
	"flag"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"

	"felix.dev/felix/broker/record"
)

var update = flag.Bool("update", false, "rewrite the golden vectors in testdata/golden and the fuzz seed corpus")

// goldenCase is one message pinned byte for byte in testdata/golden.
type goldenCase struct {
	name  string
	feats Features // connection features the body is encoded under
	frame func() (Frame, error)
	// decode decodes the body back; its result must equal value.
	decode func([]byte, Features) (any, error)
	value  any
}

func u64p(v uint64) *uint64 { return &v }

var sampleID = []byte{0x00, 0x11, 0x22, 0x33, 0x44, 0x55, 0x66, 0x77, 0x88, 0x99, 0xaa, 0xbb, 0xcc, 0xdd, 0xee, 0xff}

func msg(t MsgType, id uint32, body []byte, err error) (Frame, error) {
	return Frame{Type: t, ReqID: id, Body: body}, err
}

func goldenCases() []goldenCase {
	shard := ShardRef{Stream: "orders", Shard: 3}
	hello0 := Hello{Version: 1}
	helloAll := Hello{Version: 1, Features: FeatureStorageID | FeatureTrimTag, StorageID: sampleID}
	ok0 := HelloOK{Version: 1, MaxFrameSize: DefaultMaxFrameSize, MaxBatchRecords: 10000}
	okAll := HelloOK{Version: 1, Features: FeatureStorageID | FeatureTrimTag, MaxFrameSize: DefaultMaxFrameSize, MaxBatchRecords: 10000, StorageID: sampleID}
	app := AppendRequest{Shard: shard, Records: []record.Record{
		{Kind: record.KindData, Payload: []byte("hello")},
		{Kind: record.KindData, Headers: []record.Header{{Key: "epoch", Value: []byte("7")}}, Payload: []byte("world")},
	}}
	appIdem := AppendRequest{Shard: shard, Producer: &Producer{ID: [16]byte(sampleID), Seq: 5}, Records: []record.Record{{Kind: record.KindData, Payload: []byte("x")}}}
	appIdemCond := AppendRequest{Shard: shard, ExpectTail: u64p(42), Producer: &Producer{ID: [16]byte(sampleID), Seq: 0}, Records: []record.Record{{Kind: record.KindData, Payload: []byte("x")}}}
	appCond := AppendRequest{Shard: shard, ExpectTail: u64p(42), Records: []record.Record{{Kind: record.KindData, Payload: []byte("x")}}}
	rd := ReadRequest{Shard: shard, From: FromOffset, Offset: 10, MaxRecords: 100, MaxBytes: 1 << 20}
	rdFollow := ReadRequest{Shard: shard, From: FromLatest, MaxRecords: 100, MaxBytes: 1 << 20, WaitMillis: 5000}
	rok := ReadOK{Next: 12, Records: []record.Record{
		{Kind: record.KindData, Offset: 10, Epoch: 1, Timestamp: 1700000000000000000, Payload: []byte("a")},
		{Kind: record.KindData, Offset: 11, Epoch: 1, Timestamp: 1700000000000000001, Headers: []record.Header{{Key: "k", Value: []byte("v")}}, Payload: []byte{0xff, 0x00}},
	}}
	trim := TrimRequest{Shard: shard, Floor: 500, ExpectTail: 512, Headers: []record.Header{{Key: "epoch", Value: []byte("2")}}}
	tooOld := &Error{Code: CodeCursorTooOld, Message: "cursor too old", From: 1, Floor: 2}
	tooOldTag := &Error{Code: CodeCursorTooOld, Message: "cursor too old", From: 1, Floor: 2, HasTag: true, TrimHeaders: []record.Header{{Key: "epoch", Value: []byte("2")}}}

	metaReq := MetadataRequest{Streams: []string{"orders"}}
	metaOK := MetadataOK{
		Brokers: []BrokerInfo{{Name: "b-0", Address: "b-0.felix:7100"}, {Name: "b-1", Address: "b-1.felix:7100"}},
		Shards:  []ShardInfo{{Shard: shard, Leader: "b-1", Epoch: 4, Replicas: []string{"b-0", "b-1"}}},
	}

	dHello := func(b []byte, _ Features) (any, error) { return DecodeHello(b) }
	dHelloOK := func(b []byte, _ Features) (any, error) { return DecodeHelloOK(b) }
	dErr := func(b []byte, f Features) (any, error) { return DecodeError(b, f) }
	errCase := func(name string, f Features, e *Error, want *Error) goldenCase {
		return goldenCase{name: name, feats: f,
			frame:  func() (Frame, error) { b, err := EncodeError(e, f); return msg(MsgError, 9, b, err) },
			decode: dErr, value: want}
	}
	return append([]goldenCase{
		{name: "hello_no_features", frame: func() (Frame, error) { b, err := EncodeHello(hello0); return msg(MsgHello, 0, b, err) }, decode: dHello, value: hello0},
		{name: "hello_all_features", frame: func() (Frame, error) { b, err := EncodeHello(helloAll); return msg(MsgHello, 0, b, err) }, decode: dHello, value: helloAll},
		{name: "hello_ok_no_features", frame: func() (Frame, error) { b, err := EncodeHelloOK(ok0); return msg(MsgHelloOK, 0, b, err) }, decode: dHelloOK, value: ok0},
		{name: "hello_ok_all_features", frame: func() (Frame, error) { b, err := EncodeHelloOK(okAll); return msg(MsgHelloOK, 0, b, err) }, decode: dHelloOK, value: okAll},
		{name: "append", frame: func() (Frame, error) { b, err := EncodeAppend(app); return msg(MsgAppend, 1, b, err) },
			decode: func(b []byte, _ Features) (any, error) { return DecodeAppend(b) }, value: app},
		{name: "append_expect_tail", frame: func() (Frame, error) { b, err := EncodeAppend(appCond); return msg(MsgAppend, 2, b, err) },
			decode: func(b []byte, _ Features) (any, error) { return DecodeAppend(b) }, value: appCond},
		{name: "append_ok", frame: func() (Frame, error) { return msg(MsgAppendOK, 1, EncodeAppendOK(AppendOK{First: 40, Tail: 42}), nil) },
			decode: func(b []byte, _ Features) (any, error) { return DecodeAppendOK(b) }, value: AppendOK{First: 40, Tail: 42}},
		{name: "read_offset", frame: func() (Frame, error) { b, err := EncodeRead(rd); return msg(MsgRead, 3, b, err) },
			decode: func(b []byte, _ Features) (any, error) { return DecodeRead(b) }, value: rd},
		{name: "read_latest_follow", frame: func() (Frame, error) { b, err := EncodeRead(rdFollow); return msg(MsgRead, 4, b, err) },
			decode: func(b []byte, _ Features) (any, error) { return DecodeRead(b) }, value: rdFollow},
		{name: "read_ok", frame: func() (Frame, error) { b, err := EncodeReadOK(rok); return msg(MsgReadOK, 3, b, err) },
			decode: func(b []byte, _ Features) (any, error) { return DecodeReadOK(b) }, value: rok},
		{name: "trim", frame: func() (Frame, error) { b, err := EncodeTrim(trim); return msg(MsgTrim, 5, b, err) },
			decode: func(b []byte, _ Features) (any, error) { return DecodeTrim(b) }, value: trim},
		{name: "trim_ok", frame: func() (Frame, error) { return msg(MsgTrimOK, 5, EncodeTrimOK(TrimOK{Tail: 513, Floor: 500}), nil) },
			decode: func(b []byte, _ Features) (any, error) { return DecodeTrimOK(b) }, value: TrimOK{Tail: 513, Floor: 500}},
		{name: "describe", frame: func() (Frame, error) {
			b, err := EncodeDescribe(DescribeRequest{Shard: shard})
			return msg(MsgDescribe, 6, b, err)
		},
			decode: func(b []byte, _ Features) (any, error) { return DecodeDescribe(b) }, value: DescribeRequest{Shard: shard}},
		{name: "describe_ok", frame: func() (Frame, error) {
			return msg(MsgDescribeOK, 6, EncodeDescribeOK(DescribeOK{Base: 0, Floor: 500, Tail: 513, Committed: 513}), nil)
		}, decode: func(b []byte, _ Features) (any, error) { return DecodeDescribeOK(b) }, value: DescribeOK{Base: 0, Floor: 500, Tail: 513, Committed: 513}},
		{name: "describe_ok_policy", feats: FeatureLogPolicy, frame: func() (Frame, error) {
			return msg(MsgDescribeOK, 6, EncodeDescribeOKFor(DescribeOK{Base: 0, Floor: 500, Tail: 513, Committed: 513, Fenced: true}, FeatureLogPolicy), nil)
		}, decode: func(b []byte, f Features) (any, error) { return DecodeDescribeOKFor(b, f) },
			value: DescribeOK{Base: 0, Floor: 500, Tail: 513, Committed: 513, Fenced: true}},
		// Without the feature the policy is not sent, whatever the broker knows.
		{name: "describe_ok_policy_unnegotiated", feats: 0, frame: func() (Frame, error) {
			return msg(MsgDescribeOK, 6, EncodeDescribeOKFor(DescribeOK{Base: 0, Floor: 500, Tail: 513, Committed: 513, Fenced: true, Retention: true}, 0), nil)
		}, decode: func(b []byte, f Features) (any, error) { return DecodeDescribeOKFor(b, f) }, value: DescribeOK{Base: 0, Floor: 500, Tail: 513, Committed: 513}},
		errCase("error_offset_mismatch", 0, &Error{Code: CodeOffsetMismatch, Message: "offset mismatch", Expected: 40, Tail: 42},
			&Error{Code: CodeOffsetMismatch, Message: "offset mismatch", Expected: 40, Tail: 42}),
		// The same refusal under no features and under trim-tag [TR-4]: a
		// peer that did not negotiate the tag gets no tag field at all.
		errCase("error_cursor_too_old_untagged", 0, tooOldTag, tooOld),
		errCase("error_cursor_too_old_tagged", FeatureTrimTag, tooOldTag, tooOldTag),
		errCase("error_cursor_too_old_tag_absent", FeatureTrimTag, tooOld, tooOld),
		errCase("error_not_leader", 0, &Error{Code: CodeNotLeader, Message: "not leader", Leader: "10.0.0.2:7070", Epoch: 4},
			&Error{Code: CodeNotLeader, Message: "not leader", Leader: "10.0.0.2:7070", Epoch: 4}),
		errCase("error_fenced", 0, &Error{Code: CodeFenced, Message: "fenced", Epoch: 5}, &Error{Code: CodeFenced, Message: "fenced", Epoch: 5}),
		errCase("error_record_too_large", 0, &Error{Code: CodeRecordTooLarge, Message: "too large", Limit: 1024},
			&Error{Code: CodeRecordTooLarge, Message: "too large", Limit: 1024}),
		errCase("error_shard_unknown", 0, &Error{Code: CodeShardUnknown, Message: "orders/3"}, &Error{Code: CodeShardUnknown, Message: "orders/3"}),
		errCase("error_bad_request", 0, &Error{Code: CodeBadRequest, Message: "bad"}, &Error{Code: CodeBadRequest, Message: "bad"}),
		errCase("error_corrupt", 0, &Error{Code: CodeCorrupt, Message: "corrupt", Offset: 999},
			&Error{Code: CodeCorrupt, Message: "corrupt", Offset: 999}),
		errCase("error_unavailable", 0, &Error{Code: CodeUnavailable, Message: "draining"}, &Error{Code: CodeUnavailable, Message: "draining"}),
		errCase("error_storage_full", 0, &Error{Code: CodeStorageFull, Message: "storage full"}, &Error{Code: CodeStorageFull, Message: "storage full"}),
		// What a connection without FeatureStorageErrors is sent instead.
		errCase("error_storage_full_downgraded", 0, ErrorFor(&Error{Code: CodeStorageFull, Message: "below floor"}, 0),
			&Error{Code: CodeUnavailable, Message: "storage full: below floor"}),
		errCase("error_not_authorized", FeatureAuth, &Error{Code: CodeNotAuthorized, Message: "user/alice may not Trim on stream \"orders\""},
			&Error{Code: CodeNotAuthorized, Message: "user/alice may not Trim on stream \"orders\""}),
		errCase("error_unauthenticated", FeatureAuth, &Error{Code: CodeUnauthenticated, Message: "no client certificate"},
			&Error{Code: CodeUnauthenticated, Message: "no client certificate"}),
		// What a connection without FeatureAuth is sent instead.
		errCase("error_not_authorized_downgraded", 0, ErrorFor(&Error{Code: CodeNotAuthorized, Message: "no grant"}, 0),
			&Error{Code: CodeBadRequest, Message: "not authorized: no grant"}),
		errCase("error_unauthenticated_downgraded", 0, ErrorFor(&Error{Code: CodeUnauthenticated, Message: "no client certificate"}, 0),
			&Error{Code: CodeBadRequest, Message: "unauthenticated: no client certificate"}),
		{name: "metadata", feats: FeatureMetadata, frame: func() (Frame, error) { b, err := EncodeMetadata(metaReq); return msg(MsgMetadata, 7, b, err) },
			decode: func(b []byte, _ Features) (any, error) { return DecodeMetadata(b) }, value: metaReq},
		{name: "metadata_all_streams", feats: FeatureMetadata, frame: func() (Frame, error) { b, err := EncodeMetadata(MetadataRequest{}); return msg(MsgMetadata, 8, b, err) },
			decode: func(b []byte, _ Features) (any, error) { return DecodeMetadata(b) }, value: MetadataRequest{}},
		{name: "metadata_ok", feats: FeatureMetadata, frame: func() (Frame, error) { b, err := EncodeMetadataOK(metaOK); return msg(MsgMetadataOK, 7, b, err) },
			decode: func(b []byte, _ Features) (any, error) { return DecodeMetadataOK(b) }, value: metaOK},
		// ShardUnknown carries the leader hint only under metadata.
		errCase("error_shard_unknown_hint", FeatureMetadata, &Error{Code: CodeShardUnknown, Message: "orders/3", Leader: "b-1.felix:7100", Epoch: 4},
			&Error{Code: CodeShardUnknown, Message: "orders/3", Leader: "b-1.felix:7100", Epoch: 4}),
		errCase("error_shard_unknown_hint_unnegotiated", 0, &Error{Code: CodeShardUnknown, Message: "orders/3", Leader: "b-1.felix:7100", Epoch: 4},
			&Error{Code: CodeShardUnknown, Message: "orders/3"}),
		errCase("error_corrupt_downgraded", 0, ErrorFor(&Error{Code: CodeCorrupt, Message: "crc", Offset: 999}, 0),
			&Error{Code: CodeUnavailable, Message: "corrupt (not retryable on this broker): crc"}),
		// An idempotent append: producer id sampleID, sequence 5, one record.
		{name: "append_idempotent", feats: FeatureIdempotent, frame: func() (Frame, error) { b, err := EncodeAppend(appIdem); return msg(MsgAppend, 10, b, err) },
			decode: func(b []byte, f Features) (any, error) { return DecodeAppendFor(b, f) }, value: appIdem},
		// Conditional and idempotent: expectTail comes before the producer.
		{name: "append_idempotent_expect_tail", feats: FeatureIdempotent, frame: func() (Frame, error) {
			b, err := EncodeAppend(appIdemCond)
			return msg(MsgAppend, 11, b, err)
		}, decode: func(b []byte, f Features) (any, error) { return DecodeAppendFor(b, f) }, value: appIdemCond},
		errCase("error_out_of_sequence", FeatureIdempotent, &Error{Code: CodeOutOfSequence, Message: "expected 3", Next: 3},
			&Error{Code: CodeOutOfSequence, Message: "expected 3", Next: 3}),
		// What a connection without FeatureIdempotent is sent instead.
		errCase("error_out_of_sequence_downgraded", 0, ErrorFor(&Error{Code: CodeOutOfSequence, Message: "expected 3", Next: 3}, 0),
			&Error{Code: CodeBadRequest, Message: "out of sequence: expected 3"}),
	}, append(append(counterGoldenCases(shard), groupGoldenCases(shard)...), ackGoldenCases(shard)...)...)
}

// counterGoldenCases pins the counter messages (FeatureCounters).
func counterGoldenCases(shard ShardRef) []goldenCase {
	add := CounterAddRequest{Shard: shard, Key: "hits", Delta: -3}
	addIdem := CounterAddRequest{Shard: shard, Key: "hits", Delta: 5, Producer: &Producer{ID: [16]byte(sampleID), Seq: 2}}
	addOK := CounterAddOK{Value: -1, Offset: 17}
	get := CounterGetRequest{Shard: shard, Key: "hits"}
	getOK := CounterGetOK{Value: 42, Through: 18}
	snap := CounterSnapshotRequest{Shard: shard, Trim: true}
	snapOK := CounterSnapshotOK{Offset: 18, Floor: 18, Keys: 2}
	dErr := func(b []byte, f Features) (any, error) { return DecodeError(b, f) }
	limit := &Error{Code: CodeCounterLimit, Message: "10000 counters, limit 10000", Limit: 10000}
	return []goldenCase{
		{name: "counter_add", feats: FeatureCounters, frame: func() (Frame, error) { b, err := EncodeCounterAdd(add); return msg(MsgCounterAdd, 12, b, err) },
			decode: func(b []byte, _ Features) (any, error) { return DecodeCounterAdd(b) }, value: add},
		{name: "counter_add_idempotent", feats: FeatureCounters, frame: func() (Frame, error) {
			b, err := EncodeCounterAdd(addIdem)
			return msg(MsgCounterAdd, 13, b, err)
		}, decode: func(b []byte, _ Features) (any, error) { return DecodeCounterAdd(b) }, value: addIdem},
		{name: "counter_add_ok", feats: FeatureCounters, frame: func() (Frame, error) { return msg(MsgCounterAddOK, 12, EncodeCounterAddOK(addOK), nil) },
			decode: func(b []byte, _ Features) (any, error) { return DecodeCounterAddOK(b) }, value: addOK},
		{name: "counter_get", feats: FeatureCounters, frame: func() (Frame, error) { b, err := EncodeCounterGet(get); return msg(MsgCounterGet, 14, b, err) },
			decode: func(b []byte, _ Features) (any, error) { return DecodeCounterGet(b) }, value: get},
		{name: "counter_get_ok", feats: FeatureCounters, frame: func() (Frame, error) { return msg(MsgCounterGetOK, 14, EncodeCounterGetOK(getOK), nil) },
			decode: func(b []byte, _ Features) (any, error) { return DecodeCounterGetOK(b) }, value: getOK},
		{name: "counter_snapshot", feats: FeatureCounters, frame: func() (Frame, error) {
			b, err := EncodeCounterSnapshot(snap)
			return msg(MsgCounterSnapshot, 15, b, err)
		}, decode: func(b []byte, _ Features) (any, error) { return DecodeCounterSnapshot(b) }, value: snap},
		{name: "counter_snapshot_ok", feats: FeatureCounters, frame: func() (Frame, error) {
			return msg(MsgCounterSnapshotOK, 15, EncodeCounterSnapshotOK(snapOK), nil)
		}, decode: func(b []byte, _ Features) (any, error) { return DecodeCounterSnapshotOK(b) }, value: snapOK},
		{name: "error_counter_limit", feats: FeatureCounters, frame: func() (Frame, error) {
			b, err := EncodeError(limit, FeatureCounters)
			return msg(MsgError, 12, b, err)
		}, decode: dErr, value: limit},
		// What a connection without FeatureCounters is sent instead.
		{name: "error_counter_limit_downgraded", frame: func() (Frame, error) {
			b, err := EncodeError(ErrorFor(limit, 0), 0)
			return msg(MsgError, 12, b, err)
		}, decode: dErr, value: &Error{Code: CodeBadRequest, Message: "counter limit: 10000 counters, limit 10000"}},
	}
}

// formatHex renders bytes as 16 hex bytes per line.
func formatHex(b []byte) string {
	var sb strings.Builder
	for i := 0; i < len(b); i += 16 {
		end := min(i+16, len(b))
		parts := make([]string, 0, 16)
		for _, c := range b[i:end] {
			parts = append(parts, fmt.Sprintf("%02x", c))
		}
		sb.WriteString(strings.Join(parts, " "))
		sb.WriteString("\n")
	}
	return sb.String()
}

func parseHex(t *testing.T, s string) []byte {
	t.Helper()
	var clean strings.Builder
	for _, line := range strings.Split(s, "\n") {
		if i := strings.IndexByte(line, '#'); i >= 0 {
			line = line[:i]
		}
		clean.WriteString(strings.ReplaceAll(line, " ", ""))
	}
	b, err := hex.DecodeString(clean.String())
	if err != nil {
		t.Fatalf("bad hex: %v", err)
	}
	return b
}

// TestGoldenVectors pins every message's bytes (docs/protocol.md) and checks
// the golden bytes decode back to the value. Run with -update to rewrite.
func TestGoldenVectors(t *testing.T) {
	for _, tc := range goldenCases() {
		t.Run(tc.name, func(t *testing.T) {
			f, err := tc.frame()
			if err != nil {
				t.Fatalf("encode: %v", err)
			}
			got := AppendFrame(nil, f)
			path := filepath.Join("testdata", "golden", tc.name+".hex")
			if *update {
				hdr := fmt.Sprintf("# %s: %s frame, request id %d, decoded under connection features: %s\n", tc.name, f.Type, f.ReqID, tc.feats)
				if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
					t.Fatal(err)
				}
				if err := os.WriteFile(path, []byte(hdr+formatHex(got)), 0o644); err != nil {
					t.Fatal(err)
				}
			}
			raw, err := os.ReadFile(path)
			if err != nil {
				t.Fatalf("read golden (run go test -update): %v", err)
			}
			want := parseHex(t, string(raw))
			if !bytes.Equal(got, want) {
				t.Fatalf("encoding changed:\n got %s\nwant %s", formatHex(got), formatHex(want))
			}
			back, err := ReadFrame(bufio.NewReader(bytes.NewReader(want)), DefaultMaxFrameSize)
			if err != nil {
				t.Fatalf("read frame: %v", err)
			}
			if back.Type != f.Type || back.ReqID != f.ReqID {
				t.Fatalf("frame header: got %v/%d want %v/%d", back.Type, back.ReqID, f.Type, f.ReqID)
			}
			v, err := tc.decode(back.Body, tc.feats)
			if err != nil {
				t.Fatalf("decode: %v", err)
			}
			if diff := cmp.Diff(tc.value, v); diff != "" {
				t.Fatalf("decoded value (-want +got):\n%s", diff)
			}
		})
	}
}
