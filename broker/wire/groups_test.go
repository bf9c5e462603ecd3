package wire

import (
	"bytes"
	"path/filepath"
	"testing"
)

// groupGoldenCases pins the group messages (FeatureGroups).
func groupGoldenCases(shard ShardRef) []goldenCase {
	claim := GroupClaimRequest{Shard: shard, Group: "billing", Member: "worker-1"}
	claimOK := GroupClaimOK{Generation: 3, Committed: 120, LeaseMillis: 10000}
	hb := GroupHeartbeatRequest{Shard: shard, Group: "billing", Member: "worker-1", Generation: 3}
	hbOK := GroupHeartbeatOK{LeaseMillis: 10000}
	commit := GroupCommitRequest{Shard: shard, Group: "billing", Member: "worker-1", Generation: 3, Offset: 125}
	commitOK := GroupCommitOK{Entry: 41}
	leave := GroupLeaveRequest{Shard: shard, Group: "billing", Member: "worker-1", Generation: 3}
	leaveOK := GroupLeaveOK{Entry: 42}
	desc := GroupDescribeRequest{Shard: shard, Group: ""}
	descOK := GroupDescribeOK{Tail: 130, Through: 43, Groups: []GroupState{
		{Group: "audit", Generation: 1, Committed: 130},
		{Group: "billing", Owner: "worker-2", Generation: 4, Committed: 125, Lag: 5, LeaseMillis: 8000},
	}}
	dErr := func(b []byte, f Features) (any, error) { return DecodeError(b, f) }
	fenced := &Error{Code: CodeGroupFenced, Message: "worker-1 at generation 3", Owner: "worker-2", Generation: 4}
	limit := &Error{Code: CodeGroupLimit, Message: "100 groups, limit 100", Limit: 100}
	req := func(name string, t MsgType, id uint32, enc func() ([]byte, error), dec func([]byte) (any, error), v any) goldenCase {
		return goldenCase{name: name, feats: FeatureGroups, frame: func() (Frame, error) { b, err := enc(); return msg(t, id, b, err) },
			decode: func(b []byte, _ Features) (any, error) { return dec(b) }, value: v}
	}
	ok := func(b []byte) func() ([]byte, error) { return func() ([]byte, error) { return b, nil } }
	errCase := func(name string, feats Features, e, want *Error) goldenCase {
		return goldenCase{name: name, feats: feats, frame: func() (Frame, error) {
			b, err := EncodeError(ErrorFor(e, feats), feats)
			return msg(MsgError, 20, b, err)
		}, decode: dErr, value: want}
	}
	return []goldenCase{
		req("group_claim", MsgGroupClaim, 20, func() ([]byte, error) { return EncodeGroupClaim(claim) },
			func(b []byte) (any, error) { return DecodeGroupClaim(b) }, claim),
		req("group_claim_ok", MsgGroupClaimOK, 20, ok(EncodeGroupClaimOK(claimOK)),
			func(b []byte) (any, error) { return DecodeGroupClaimOK(b) }, claimOK),
		req("group_heartbeat", MsgGroupHeartbeat, 21, func() ([]byte, error) { return EncodeGroupHeartbeat(hb) },
			func(b []byte) (any, error) { return DecodeGroupHeartbeat(b) }, hb),
		req("group_heartbeat_ok", MsgGroupHeartbeatOK, 21, ok(EncodeGroupHeartbeatOK(hbOK)),
			func(b []byte) (any, error) { return DecodeGroupHeartbeatOK(b) }, hbOK),
		req("group_commit", MsgGroupCommit, 22, func() ([]byte, error) { return EncodeGroupCommit(commit) },
			func(b []byte) (any, error) { return DecodeGroupCommit(b) }, commit),
		req("group_commit_ok", MsgGroupCommitOK, 22, ok(EncodeGroupCommitOK(commitOK)),
			func(b []byte) (any, error) { return DecodeGroupCommitOK(b) }, commitOK),
		req("group_leave", MsgGroupLeave, 23, func() ([]byte, error) { return EncodeGroupLeave(leave) },
			func(b []byte) (any, error) { return DecodeGroupLeave(b) }, leave),
		req("group_leave_ok", MsgGroupLeaveOK, 23, ok(EncodeGroupLeaveOK(leaveOK)),
			func(b []byte) (any, error) { return DecodeGroupLeaveOK(b) }, leaveOK),
		req("group_describe", MsgGroupDescribe, 24, func() ([]byte, error) { return EncodeGroupDescribe(desc) },
			func(b []byte) (any, error) { return DecodeGroupDescribe(b) }, desc),
		req("group_describe_ok", MsgGroupDescribeOK, 24, func() ([]byte, error) { return EncodeGroupDescribeOK(descOK) },
			func(b []byte) (any, error) { return DecodeGroupDescribeOK(b) }, descOK),
		errCase("error_group_fenced", FeatureGroups, fenced, fenced),
		errCase("error_group_limit", FeatureGroups, limit, limit),
		// What a connection without FeatureGroups is sent instead.
		errCase("error_group_fenced_downgraded", 0, fenced, &Error{Code: CodeBadRequest, Message: "group fenced: worker-1 at generation 3"}),
	}
}

// groupBody decodes a group message body of type t and re-encodes it; ok
// is false when it does not decode.
func groupBody(t MsgType, b []byte) (re []byte, ok bool) {
	var err error
	switch t {
	case MsgGroupClaim:
		var r GroupClaimRequest
		if r, err = DecodeGroupClaim(b); err == nil {
			re, err = EncodeGroupClaim(r)
		}
	case MsgGroupClaimOK:
		var r GroupClaimOK
		if r, err = DecodeGroupClaimOK(b); err == nil {
			re = EncodeGroupClaimOK(r)
		}
	case MsgGroupHeartbeat:
		var r GroupHeartbeatRequest
		if r, err = DecodeGroupHeartbeat(b); err == nil {
			re, err = EncodeGroupHeartbeat(r)
		}
	case MsgGroupHeartbeatOK:
		var r GroupHeartbeatOK
		if r, err = DecodeGroupHeartbeatOK(b); err == nil {
			re = EncodeGroupHeartbeatOK(r)
		}
	case MsgGroupCommit:
		var r GroupCommitRequest
		if r, err = DecodeGroupCommit(b); err == nil {
			re, err = EncodeGroupCommit(r)
		}
	case MsgGroupCommitOK:
		var r GroupCommitOK
		if r, err = DecodeGroupCommitOK(b); err == nil {
			re = EncodeGroupCommitOK(r)
		}
	case MsgGroupLeave:
		var r GroupLeaveRequest
		if r, err = DecodeGroupLeave(b); err == nil {
			re, err = EncodeGroupLeave(r)
		}
	case MsgGroupLeaveOK:
		var r GroupLeaveOK
		if r, err = DecodeGroupLeaveOK(b); err == nil {
			re = EncodeGroupLeaveOK(r)
		}
	case MsgGroupDescribe:
		var r GroupDescribeRequest
		if r, err = DecodeGroupDescribe(b); err == nil {
			re, err = EncodeGroupDescribe(r)
		}
	case MsgGroupDescribeOK:
		var r GroupDescribeOK
		if r, err = DecodeGroupDescribeOK(b); err == nil {
			re, err = EncodeGroupDescribeOK(r)
		}
	default:
		return nil, false
	}
	return re, err == nil
}

// groupTypes are the group message types, indexed by the fuzz input's
// selector byte.
var groupTypes = []MsgType{MsgGroupClaim, MsgGroupClaimOK, MsgGroupHeartbeat, MsgGroupHeartbeatOK, MsgGroupCommit, MsgGroupCommitOK,
	MsgGroupLeave, MsgGroupLeaveOK, MsgGroupDescribe, MsgGroupDescribeOK}

// FuzzDecodeGroups feeds outside bytes to every group body decoder (the
// selector picks one): nothing may panic, and a body that decodes
// re-encodes to the same bytes.
func FuzzDecodeGroups(f *testing.F) {
	for _, s := range groupSeeds(f) {
		f.Add(s.body, s.sel)
	}
	f.Fuzz(func(t *testing.T, body []byte, sel uint8) {
		typ := groupTypes[int(sel)%len(groupTypes)]
		re, ok := groupBody(typ, body)
		if ok && !bytes.Equal(re, body) {
			t.Fatalf("%v body is not canonical:\n in %x\nout %x", typ, body, re)
		}
	})
}

// groupSeeds are the golden group bodies plus malformed ones.
func groupSeeds(tb testing.TB) map[string]counterSeed {
	tb.Helper()
	seeds := map[string]counterSeed{
		"claim_cut_short":         {[]byte{0, 1, 'x', 0, 0, 0, 0, 0, 9, 'g'}, 0},
		"claim_bad_stream":        {[]byte{0, 1, '/', 0, 0, 0, 0, 0, 1, 'g', 0, 1, 'm'}, 0},
		"describe_ok_huge_count":  {append(make([]byte, 16), 0xff, 0xff, 0xff, 0xff), 9},
		"commit_ok_trailer":       {make([]byte, 9), 5},
		"heartbeat_missing_gen":   {[]byte{0, 1, 'x', 0, 0, 0, 0, 0, 1, 'g', 0, 1, 'm'}, 2},
		"describe_ok_group_short": {append(make([]byte, 16), 0, 0, 0, 1, 0, 5, 'a'), 9},
	}
	return withGoldenSeeds(tb, seeds, groupTypes)
}

// TestWriteGroupFuzzSeeds keeps testdata/fuzz/FuzzDecodeGroups in step with
// the golden vectors; it writes only with -update.
func TestWriteGroupFuzzSeeds(t *testing.T) {
	checkOrWriteSeeds(t, filepath.Join("testdata", "fuzz", "FuzzDecodeGroups"), groupSeeds(t))
}
