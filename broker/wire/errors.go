package wire

import (
	"errors"
	"fmt"
	"math"

	"felix.dev/felix/broker/record"
)

// Code is a stable numeric error code carried by an Error frame. Numbers are
// never reused or renumbered; the name is what the CLI prints as "error".
type Code uint16

// The error codes. codeTable below is the one source of truth for their
// numbers, names and meaning; docs/protocol.md reproduces it.
const (
	// CodeOffsetMismatch: a conditional append or trim saw another tail [TR-1].
	CodeOffsetMismatch Code = 1
	// CodeCursorTooOld: a read started below the floor [TR-4].
	CodeCursorTooOld Code = 2
	// CodeNotLeader: this broker does not lead the shard.
	CodeNotLeader Code = 3
	// CodeFenced: the request's epoch is older than the shard's.
	CodeFenced Code = 4
	// CodeShardUnknown: this broker does not hold the shard.
	CodeShardUnknown Code = 5
	// CodeRecordTooLarge: a frame, record or batch over a limit.
	CodeRecordTooLarge Code = 6
	// CodeBadRequest: an undecodable or invalid request.
	CodeBadRequest Code = 7
	// CodeUnavailable: the broker cannot serve the request now.
	CodeUnavailable Code = 8
	// CodeUnsupportedVersion: the Hello's version is below the minimum.
	CodeUnsupportedVersion Code = 9
	// CodeCorrupt: the data asked for is damaged on this broker's disk
	// (a checksum failed), or the log is refused as a whole because it
	// is. Not retryable against this broker; see Offset.
	CodeCorrupt Code = 10
	// CodeStorageFull: the broker's disk is below its free-space floor
	// (or a write hit ENOSPC); writes resume by themselves.
	CodeStorageFull Code = 11
	// CodeNotAuthorized: the connection's principal may not perform the
	// request (or a replication frame arrived where replication is not
	// allowed). Nothing was done.
	CodeNotAuthorized Code = 12
	// CodeUnauthenticated: the connection presented no acceptable
	// identity; sent in answer to the Hello, then the connection closes.
	CodeUnauthenticated Code = 13
	// CodeOutOfSequence: an idempotent append's sequence is neither the
	// next one of its producer on the shard nor a batch the leader
	// remembers; Next is the sequence the leader expects (0 for a
	// producer it does not know). Nothing was written.
	CodeOutOfSequence Code = 14
	// CodeCounterLimit: a counter add would pass a bound of the shard's
	// counters (too many keys, a key too long, an int64 overflow).
	// Nothing was written.
	CodeCounterLimit Code = 15
	// CodeGroupFenced: the member does not own the shard for the group at
	// the generation it names, or another member owns it (FeatureGroups).
	CodeGroupFenced Code = 16
	// CodeGroupLimit: a group request would pass a bound of the shard's
	// groups (FeatureGroups).
	CodeGroupLimit Code = 17
)

// CodeInfo describes one error code.
type CodeInfo struct {
	Code Code
	// Name is the stable name printed by the CLI in the "error" field.
	Name string
	// Fields names the code-specific fields after the message, in wire order.
	Fields []string
	// Doc says when the code is returned.
	Doc string
}

var codeTable = []CodeInfo{
	{CodeOffsetMismatch, "OffsetMismatch", []string{"expected u64", "tail u64"},
		"A conditional append or trim expected a tail other than the log's next offset; tail is the current one [TR-1]. Nothing was written."},
	{CodeCursorTooOld, "CursorTooOld", []string{"from u64", "floor u64", "(trim-tag) hasTag u8", "(trim-tag, hasTag=1) trimHeaders headers"},
		"A read started below the readable start (floor). With the trim-tag feature the headers of the trim that set the floor follow [TR-4]."},
	{CodeNotLeader, "NotLeader", []string{"leader str", "epoch u64"},
		"This broker does not lead the shard; leader is a host:port hint, empty when unknown."},
	{CodeFenced, "Fenced", []string{"epoch u64"},
		"The request's epoch is older than the shard's current epoch."},
	{CodeShardUnknown, "ShardUnknown", []string{"(metadata) leader str", "(metadata) epoch u64"},
		"This broker does not hold the shard. With the metadata feature, the leader's host:port (empty when unknown) and its epoch follow."},
	{CodeRecordTooLarge, "RecordTooLarge", []string{"limit u64"},
		"A frame, record or batch is over a limit; limit is the limit that was exceeded. Nothing of the batch was written."},
	{CodeBadRequest, "BadRequest", nil,
		"The request cannot be decoded or is invalid (unknown type, empty batch, trailing bytes, ...)."},
	{CodeUnavailable, "Unavailable", nil,
		"The broker cannot serve the request now (starting, draining, storage failing). Safe to retry an unconditional request elsewhere or later."},
	{CodeUnsupportedVersion, "UnsupportedVersion", nil,
		"The Hello asked for a protocol version this broker does not speak; the connection is closed."},
	{CodeCorrupt, "Corrupt", []string{"offset u64"},
		"The log's stored data failed its checksum at offset (the first damaged offset known), or the broker refuses the whole log because part of it is damaged. Retrying here returns the same; an operator inspects and repairs the log (docs/operator.md)."},
	{CodeStorageFull, "StorageFull", nil,
		"The broker's disk is below its free-space floor, or a write ran out of space: appends are refused (reads are served) until space returns, then resume by themselves. The append was not acknowledged; retry later or elsewhere, re-reading first if it was conditional."},
	{CodeNotAuthorized, "NotAuthorized", nil,
		"The connection's principal may not perform this operation on this stream, or the frame may not be sent on this port (replication frames on the client port, client requests on the peer port). Nothing was done. Not retryable until the grants change."},
	{CodeUnauthenticated, "Unauthenticated", nil,
		"The connection presented no acceptable identity (no client certificate where one is required, or one that does not verify). Sent with request id 0 in answer to the Hello; the connection is closed and nothing else is processed."},
	{CodeOutOfSequence, "OutOfSequence", []string{"next u64"},
		"An idempotent append's sequence is neither its producer's next one on the shard nor a batch the leader remembers (a gap, a batch older than the leader's window, or a producer the leader does not know sending a sequence above 0); next is the sequence expected, 0 for an unknown producer. Nothing was written. Only sent to connections that accepted idempotent."},
	{CodeCounterLimit, "CounterLimit", []string{"limit u64"},
		"A counter add would pass a bound of the shard's counters: a new key beyond the shard's key cap, a key longer than the key-length cap (limit is the cap), or a value leaving the int64 range (limit 0). Nothing was written. Not retryable as is. Only sent to connections that accepted counters."},
	{CodeGroupFenced, "GroupFenced", []string{"owner str", "generation u64"},
		"The member does not own the shard for the group at the generation it named: another member claimed it since (a commit, heartbeat or leave of a superseded generation), or, for a claim, another member owns it and its lease runs. owner and generation are the group's current ones on the shard (owner empty when the shard is free). Nothing was written. The member stops processing the shard; it may claim it again."},
	{CodeGroupLimit, "GroupLimit", []string{"limit u64"},
		"A group request would pass a bound of the shard's groups: a new group beyond the shard's group cap, or a group or member name longer than the name-length cap (limit is the cap); or (acks) a group's max in flight above the broker's cap, or a fetch that finds the group's window of outstanding records full with nothing due (limit is the cap or the window). Nothing was written. Not retryable as is. Only sent to connections that accepted groups."},
}

// Codes returns the table of error codes, in numeric order.
func Codes() []CodeInfo { return append([]CodeInfo(nil), codeTable...) }

// Info returns the table entry for c.
func (c Code) Info() (CodeInfo, bool) {
	for _, ci := range codeTable {
		if ci.Code == c {
			return ci, true
		}
	}
	return CodeInfo{}, false
}

// String returns the code's stable name, or "Code(n)" for an unknown code.
func (c Code) String() string {
	if ci, ok := c.Info(); ok {
		return ci.Name
	}
	return fmt.Sprintf("Code(%d)", uint16(c))
}

// Error is a decoded Error frame, and the error value brokers and the client
// use for protocol errors. Only the fields of its Code are meaningful.
type Error struct {
	Code    Code
	Message string

	// OffsetMismatch.
	Expected uint64
	Tail     uint64
	// CursorTooOld; From is shared with no other code.
	From  uint64
	Floor uint64
	// HasTag is true when the trim tag was negotiated and a trim set the
	// floor; TrimHeaders are that trim's headers [TR-4].
	HasTag      bool
	TrimHeaders []record.Header
	// NotLeader and Fenced; Leader also for ShardUnknown under
	// FeatureMetadata (a HOST:PORT hint, empty when unknown).
	Leader string
	Epoch  uint64
	// RecordTooLarge, CounterLimit and GroupLimit.
	Limit uint64
	// GroupFenced: the group's current owner (empty when the shard is
	// free) and generation on the shard.
	Owner      string
	Generation uint64
	// Corrupt: the first damaged offset known.
	Offset uint64
	// OutOfSequence: the sequence the leader expects next.
	Next uint64
}

func (e *Error) Error() string {
	if e.Message == "" {
		return e.Code.String()
	}
	return e.Code.String() + ": " + e.Message
}

// Is matches the record package's sentinels, so errors.Is(err,
// record.ErrOffsetMismatch) holds for a wire OffsetMismatch.
func (e *Error) Is(target error) bool {
	switch e.Code {
	case CodeOffsetMismatch:
		return target == record.ErrOffsetMismatch
	case CodeCursorTooOld:
		return target == record.ErrCursorTooOld
	case CodeShardUnknown:
		return target == record.ErrShardUnknown
	case CodeRecordTooLarge:
		return target == record.ErrRecordTooLarge
	case CodeStorageFull:
		return target == record.ErrStorageFull
	case CodeCorrupt:
		return target == record.ErrCorrupt
	case CodeOutOfSequence:
		return target == ErrOutOfSequence
	case CodeCounterLimit:
		return target == ErrCounterLimit
	case CodeGroupFenced:
		return target == ErrGroupFenced
	case CodeGroupLimit:
		return target == ErrGroupLimit
	}
	return false
}

// RecordError returns the record package's typed error for codes that have
// one (*record.OffsetMismatchError, *record.CursorTooOldError), else e.
func (e *Error) RecordError() error {
	switch e.Code {
	case CodeOffsetMismatch:
		return &record.OffsetMismatchError{Expected: e.Expected, Tail: e.Tail}
	case CodeCursorTooOld:
		return &record.CursorTooOldError{From: e.From, Floor: e.Floor, TrimHeaders: e.TrimHeaders}
	}
	return e
}

// ErrOutOfSequence is matched (errors.Is) by an OutOfSequence *Error.
var ErrOutOfSequence = errors.New("wire: out of sequence")

// ErrCounterLimit is matched (errors.Is) by a CounterLimit *Error.
var ErrCounterLimit = errors.New("wire: counter limit")

// ErrGroupFenced is matched (errors.Is) by a GroupFenced *Error.
var ErrGroupFenced = errors.New("wire: group member fenced")

// ErrGroupLimit is matched (errors.Is) by a GroupLimit *Error.
var ErrGroupLimit = errors.New("wire: group limit")

// ErrorFrom maps an error from storage or the server to the Error sent on
// the wire. Unrecognised errors become Unavailable, with their text.
func ErrorFrom(err error) *Error {
	var we *Error
	if errors.As(err, &we) {
		return we
	}
	var om *record.OffsetMismatchError
	if errors.As(err, &om) {
		return &Error{Code: CodeOffsetMismatch, Message: err.Error(), Expected: om.Expected, Tail: om.Tail}
	}
	var ct *record.CursorTooOldError
	if errors.As(err, &ct) {
		return &Error{Code: CodeCursorTooOld, Message: err.Error(), From: ct.From, Floor: ct.Floor,
			HasTag: ct.TrimHeaders != nil, TrimHeaders: ct.TrimHeaders}
	}
	var ce *record.CorruptError
	if errors.As(err, &ce) {
		return &Error{Code: CodeCorrupt, Message: err.Error(), Offset: ce.Offset}
	}
	switch {
	case errors.Is(err, record.ErrShardUnknown):
		return &Error{Code: CodeShardUnknown, Message: err.Error()}
	case errors.Is(err, record.ErrRecordTooLarge):
		return &Error{Code: CodeRecordTooLarge, Message: err.Error()}
	case errors.Is(err, record.ErrStorageFull):
		return &Error{Code: CodeStorageFull, Message: err.Error()}
	case errors.Is(err, ErrMalformed):
		return &Error{Code: CodeBadRequest, Message: err.Error()}
	}
	return &Error{Code: CodeUnavailable, Message: err.Error()}
}

// EncodeError returns the body of an Error frame. feats are the features
// negotiated on the connection: the CursorTooOld tag fields are written only
// when FeatureTrimTag is among them [TR-4]. It encodes any code as given;
// a sender uses EncodeErrorFor, so that no code newer than the connection's
// features goes out.
func EncodeError(e *Error, feats Features) ([]byte, error) {
	if err := checkStr("error message", e.Message); err != nil {
		return nil, err
	}
	en := enc{b: make([]byte, 0, 32+len(e.Message))}
	en.u16(uint16(e.Code))
	en.str(e.Message)
	switch e.Code {
	case CodeOffsetMismatch:
		en.u64(e.Expected)
		en.u64(e.Tail)
	case CodeCursorTooOld:
		en.u64(e.From)
		en.u64(e.Floor)
		if feats.Has(FeatureTrimTag) {
			if e.HasTag {
				if err := checkHeaders(e.TrimHeaders); err != nil {
					return nil, err
				}
				en.u8(1)
				en.headers(e.TrimHeaders)
			} else {
				en.u8(0)
			}
		}
	case CodeNotLeader:
		if err := checkStr("leader", e.Leader); err != nil {
			return nil, err
		}
		en.str(e.Leader)
		en.u64(e.Epoch)
	case CodeFenced:
		en.u64(e.Epoch)
	case CodeShardUnknown:
		if feats.Has(FeatureMetadata) {
			if err := checkStr("leader", e.Leader); err != nil {
				return nil, err
			}
			en.str(e.Leader)
			en.u64(e.Epoch)
		}
	case CodeRecordTooLarge:
		en.u64(e.Limit)
	case CodeCorrupt:
		en.u64(e.Offset)
	case CodeOutOfSequence:
		en.u64(e.Next)
	case CodeCounterLimit, CodeGroupLimit:
		en.u64(e.Limit)
	case CodeGroupFenced:
		if err := checkStr("owner", e.Owner); err != nil {
			return nil, err
		}
		en.str(e.Owner)
		en.u64(e.Generation)
	}
	return en.b, nil
}

// EncodeErrorFor encodes the error a connection that negotiated feats may
// be sent: EncodeError(ErrorFor(e, feats), feats). Senders use it.
func EncodeErrorFor(e *Error, feats Features) ([]byte, error) {
	return EncodeError(ErrorFor(e, feats), feats)
}

// ErrorFor returns the error a connection that negotiated feats may be
// sent: without FeatureStorageErrors, Corrupt and StorageFull become
// Unavailable with the same message, prefixed with what happened, so a
// client that predates those codes retries as for any Unavailable.
// Without FeatureAuth, NotAuthorized and Unauthenticated become BadRequest
// the same way: a refusal on grounds of identity does not heal by retrying
// (an older client does not retry a BadRequest), and the prefix says why.
// Without FeatureIdempotent, OutOfSequence becomes BadRequest the same way
// (such a connection cannot send a sequence, so this is a safeguard), and
// so does CounterLimit without FeatureCounters, and GroupFenced and
// GroupLimit without FeatureGroups.
func ErrorFor(e *Error, feats Features) *Error {
	var (
		prefix string
		code   Code
	)
	switch {
	case e.Code == CodeCorrupt && !feats.Has(FeatureStorageErrors):
		prefix, code = "corrupt (not retryable on this broker): ", CodeUnavailable
	case e.Code == CodeStorageFull && !feats.Has(FeatureStorageErrors):
		prefix, code = "storage full: ", CodeUnavailable
	case e.Code == CodeNotAuthorized && !feats.Has(FeatureAuth):
		prefix, code = "not authorized: ", CodeBadRequest
	case e.Code == CodeUnauthenticated && !feats.Has(FeatureAuth):
		prefix, code = "unauthenticated: ", CodeBadRequest
	case e.Code == CodeOutOfSequence && !feats.Has(FeatureIdempotent):
		prefix, code = "out of sequence: ", CodeBadRequest
	case e.Code == CodeCounterLimit && !feats.Has(FeatureCounters):
		prefix, code = "counter limit: ", CodeBadRequest
	case e.Code == CodeGroupFenced && !feats.Has(FeatureGroups):
		prefix, code = "group fenced: ", CodeBadRequest
	case e.Code == CodeGroupLimit && !feats.Has(FeatureGroups):
		prefix, code = "group limit: ", CodeBadRequest
	default:
		return e
	}
	msg := e.Message
	if len(prefix)+len(msg) <= math.MaxUint16 {
		msg = prefix + msg
	}
	return &Error{Code: code, Message: msg}
}

// DecodeError decodes an Error body under the connection's features.
// Unknown codes decode with their message and no fields; bytes after the
// known fields of an unknown code are ignored so newer codes stay readable.
func DecodeError(b []byte, feats Features) (*Error, error) {
	d := newDec(b)
	e := &Error{Code: Code(d.U16("code")), Message: d.str("message")}
	switch e.Code {
	case CodeOffsetMismatch:
		e.Expected = d.U64("expected")
		e.Tail = d.U64("tail")
	case CodeCursorTooOld:
		e.From = d.U64("from")
		e.Floor = d.U64("floor")
		if feats.Has(FeatureTrimTag) {
			switch d.U8("hasTag") {
			case 0:
			case 1:
				e.HasTag = true
				e.TrimHeaders = d.headers("trim headers")
				if e.TrimHeaders == nil {
					e.TrimHeaders = []record.Header{}
				}
			default:
				d.Fail("hasTag must be 0 or 1")
			}
		}
	case CodeNotLeader:
		e.Leader = d.str("leader")
		e.Epoch = d.U64("epoch")
	case CodeFenced:
		e.Epoch = d.U64("epoch")
	case CodeShardUnknown:
		if feats.Has(FeatureMetadata) {
			e.Leader = d.str("leader")
			e.Epoch = d.U64("epoch")
		}
	case CodeRecordTooLarge:
		e.Limit = d.U64("limit")
	case CodeCorrupt:
		e.Offset = d.U64("offset")
	case CodeOutOfSequence:
		e.Next = d.U64("next")
	case CodeCounterLimit, CodeGroupLimit:
		e.Limit = d.U64("limit")
	case CodeGroupFenced:
		e.Owner = d.str("owner")
		e.Generation = d.U64("generation")
	default:
		if _, known := e.Code.Info(); !known && d.Err == nil {
			return e, nil
		}
	}
	if err := d.end("error"); err != nil {
		return nil, err
	}
	return e, nil
}
