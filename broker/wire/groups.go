package wire

// The group requests (FeatureGroups) address a shard's group log
// (record.LogGroup), where a consumer group's ownership of the shard and
// its committed offset are recorded (broker/group). Ownership is per
// shard: one member of a group owns a shard at a time, at a generation
// that counts the claims of the shard for the group.

// GroupClaimRequest asks for the ownership of a shard for Group by
// Member. The leader grants it when the shard is free for the group
// (never claimed, released), owned by Member already (the answer is the
// current generation, and the lease is renewed), or its owner's lease
// ran out; it then appends a claim at the next generation. A shard owned
// by another member whose lease runs is refused with GroupFenced.
type GroupClaimRequest struct {
	Shard         ShardRef
	Group, Member string
}

// GroupClaimOK answers a GroupClaim: Member owns the shard at Generation
// and reads from Committed (the group's committed offset: the next
// data-log offset to process). LeaseMillis is the lease the leader keeps:
// the member heartbeats well within it.
type GroupClaimOK struct {
	Generation  uint64
	Committed   uint64
	LeaseMillis uint32
}

// GroupHeartbeatRequest renews Member's lease on a shard it owns at
// Generation. It writes nothing.
type GroupHeartbeatRequest struct {
	Shard         ShardRef
	Group, Member string
	Generation    uint64
}

// GroupHeartbeatOK answers a GroupHeartbeat with the lease length.
type GroupHeartbeatOK struct {
	LeaseMillis uint32
}

// GroupCommitRequest records Offset as the group's committed offset on
// the shard (the next data-log offset to process). It is appended only if
// Member owns the shard at Generation in the leader's fold of the group
// log, as a conditional append on the tail of that fold [TR-1]; a member
// that is not the owner at that generation is refused with GroupFenced.
// It renews the lease.
type GroupCommitRequest struct {
	Shard         ShardRef
	Group, Member string
	Generation    uint64
	Offset        uint64
}

// GroupCommitOK answers a GroupCommit: the commit entry sits at Entry in
// the shard's group log.
type GroupCommitOK struct {
	Entry uint64
}

// GroupLeaveRequest releases Member's ownership at Generation: the shard
// is free for the group at once.
type GroupLeaveRequest struct {
	Shard         ShardRef
	Group, Member string
	Generation    uint64
}

// GroupLeaveOK answers a GroupLeave: the release entry sits at Entry in
// the shard's group log.
type GroupLeaveOK struct {
	Entry uint64
}

// GroupDescribeRequest asks for the groups of a shard: Group alone, or
// every group when Group is empty.
type GroupDescribeRequest struct {
	Shard ShardRef
	Group string
}

// GroupDescribeOK answers a GroupDescribe. Tail is the shard's data-log
// tail and Through the group log's position the state is folded up to.
// A group never claimed on the shard is absent.
type GroupDescribeOK struct {
	Tail    uint64
	Through uint64
	Groups  []GroupState
}

// GroupState is one group's state on a shard.
type GroupState struct {
	Group string
	// Owner is the member owning the shard; empty when it is free.
	Owner      string
	Generation uint64
	// Committed is the next data-log offset the group processes.
	Committed uint64
	// Lag is Tail minus Committed (0 when Committed is above Tail).
	Lag uint64
	// LeaseMillis is what remains of the owner's lease on the leader (0
	// when free or expired).
	LeaseMillis uint32
}

func groupMember(e *enc, s ShardRef, group, member string) error {
	if err := checkShard(s); err != nil {
		return err
	}
	if err := checkStr("group", group); err != nil {
		return err
	}
	if err := checkStr("member", member); err != nil {
		return err
	}
	e.shard(s)
	e.str(group)
	e.str(member)
	return nil
}

// EncodeGroupClaim returns the body of a GroupClaim frame.
func EncodeGroupClaim(r GroupClaimRequest) ([]byte, error) {
	e := enc{b: make([]byte, 0, 16+len(r.Shard.Stream)+len(r.Group)+len(r.Member))}
	if err := groupMember(&e, r.Shard, r.Group, r.Member); err != nil {
		return nil, err
	}
	return e.b, nil
}

// DecodeGroupClaim decodes a GroupClaim body.
func DecodeGroupClaim(b []byte) (GroupClaimRequest, error) {
	d := newDec(b)
	r := GroupClaimRequest{Shard: d.shard(), Group: d.str("group"), Member: d.str("member")}
	return r, d.end("group claim")
}

// EncodeGroupClaimOK returns the body of a GroupClaimOK frame.
func EncodeGroupClaimOK(r GroupClaimOK) []byte {
	e := enc{b: make([]byte, 0, 20)}
	e.u64(r.Generation)
	e.u64(r.Committed)
	e.u32(r.LeaseMillis)
	return e.b
}

// DecodeGroupClaimOK decodes a GroupClaimOK body.
func DecodeGroupClaimOK(b []byte) (GroupClaimOK, error) {
	d := newDec(b)
	r := GroupClaimOK{Generation: d.U64("generation"), Committed: d.U64("committed"), LeaseMillis: d.U32("lease")}
	return r, d.end("group claim ok")
}

// EncodeGroupHeartbeat returns the body of a GroupHeartbeat frame.
func EncodeGroupHeartbeat(r GroupHeartbeatRequest) ([]byte, error) {
	e := enc{b: make([]byte, 0, 24+len(r.Shard.Stream)+len(r.Group)+len(r.Member))}
	if err := groupMember(&e, r.Shard, r.Group, r.Member); err != nil {
		return nil, err
	}
	e.u64(r.Generation)
	return e.b, nil
}

// DecodeGroupHeartbeat decodes a GroupHeartbeat body.
func DecodeGroupHeartbeat(b []byte) (GroupHeartbeatRequest, error) {
	d := newDec(b)
	r := GroupHeartbeatRequest{Shard: d.shard(), Group: d.str("group"), Member: d.str("member")}
	r.Generation = d.U64("generation")
	return r, d.end("group heartbeat")
}

// EncodeGroupHeartbeatOK returns the body of a GroupHeartbeatOK frame.
func EncodeGroupHeartbeatOK(r GroupHeartbeatOK) []byte {
	e := enc{b: make([]byte, 0, 4)}
	e.u32(r.LeaseMillis)
	return e.b
}

// DecodeGroupHeartbeatOK decodes a GroupHeartbeatOK body.
func DecodeGroupHeartbeatOK(b []byte) (GroupHeartbeatOK, error) {
	d := newDec(b)
	r := GroupHeartbeatOK{LeaseMillis: d.U32("lease")}
	return r, d.end("group heartbeat ok")
}

// EncodeGroupCommit returns the body of a GroupCommit frame.
func EncodeGroupCommit(r GroupCommitRequest) ([]byte, error) {
	e := enc{b: make([]byte, 0, 32+len(r.Shard.Stream)+len(r.Group)+len(r.Member))}
	if err := groupMember(&e, r.Shard, r.Group, r.Member); err != nil {
		return nil, err
	}
	e.u64(r.Generation)
	e.u64(r.Offset)
	return e.b, nil
}

// DecodeGroupCommit decodes a GroupCommit body.
func DecodeGroupCommit(b []byte) (GroupCommitRequest, error) {
	d := newDec(b)
	r := GroupCommitRequest{Shard: d.shard(), Group: d.str("group"), Member: d.str("member")}
	r.Generation = d.U64("generation")
	r.Offset = d.U64("offset")
	return r, d.end("group commit")
}

// EncodeGroupCommitOK returns the body of a GroupCommitOK frame.
func EncodeGroupCommitOK(r GroupCommitOK) []byte {
	e := enc{b: make([]byte, 0, 8)}
	e.u64(r.Entry)
	return e.b
}

// DecodeGroupCommitOK decodes a GroupCommitOK body.
func DecodeGroupCommitOK(b []byte) (GroupCommitOK, error) {
	d := newDec(b)
	r := GroupCommitOK{Entry: d.U64("entry")}
	return r, d.end("group commit ok")
}

// EncodeGroupLeave returns the body of a GroupLeave frame.
func EncodeGroupLeave(r GroupLeaveRequest) ([]byte, error) {
	e := enc{b: make([]byte, 0, 24+len(r.Shard.Stream)+len(r.Group)+len(r.Member))}
	if err := groupMember(&e, r.Shard, r.Group, r.Member); err != nil {
		return nil, err
	}
	e.u64(r.Generation)
	return e.b, nil
}

// DecodeGroupLeave decodes a GroupLeave body.
func DecodeGroupLeave(b []byte) (GroupLeaveRequest, error) {
	d := newDec(b)
	r := GroupLeaveRequest{Shard: d.shard(), Group: d.str("group"), Member: d.str("member")}
	r.Generation = d.U64("generation")
	return r, d.end("group leave")
}

// EncodeGroupLeaveOK returns the body of a GroupLeaveOK frame.
func EncodeGroupLeaveOK(r GroupLeaveOK) []byte {
	e := enc{b: make([]byte, 0, 8)}
	e.u64(r.Entry)
	return e.b
}

// DecodeGroupLeaveOK decodes a GroupLeaveOK body.
func DecodeGroupLeaveOK(b []byte) (GroupLeaveOK, error) {
	d := newDec(b)
	r := GroupLeaveOK{Entry: d.U64("entry")}
	return r, d.end("group leave ok")
}

// EncodeGroupDescribe returns the body of a GroupDescribe frame.
func EncodeGroupDescribe(r GroupDescribeRequest) ([]byte, error) {
	if err := checkShard(r.Shard); err != nil {
		return nil, err
	}
	if err := checkStr("group", r.Group); err != nil {
		return nil, err
	}
	e := enc{b: make([]byte, 0, 16+len(r.Shard.Stream)+len(r.Group))}
	e.shard(r.Shard)
	e.str(r.Group)
	return e.b, nil
}

// DecodeGroupDescribe decodes a GroupDescribe body.
func DecodeGroupDescribe(b []byte) (GroupDescribeRequest, error) {
	d := newDec(b)
	r := GroupDescribeRequest{Shard: d.shard(), Group: d.str("group")}
	return r, d.end("group describe")
}

// groupStateMin is the smallest encoded GroupState.
const groupStateMin = 2 + 2 + 8 + 8 + 8 + 4

// EncodeGroupDescribeOK returns the body of a GroupDescribeOK frame.
func EncodeGroupDescribeOK(r GroupDescribeOK) ([]byte, error) {
	e := enc{b: make([]byte, 0, 20+len(r.Groups)*(groupStateMin+32))}
	e.u64(r.Tail)
	e.u64(r.Through)
	e.u32(uint32(len(r.Groups)))
	for _, g := range r.Groups {
		if err := checkStr("group", g.Group); err != nil {
			return nil, err
		}
		if err := checkStr("owner", g.Owner); err != nil {
			return nil, err
		}
		e.str(g.Group)
		e.str(g.Owner)
		e.u64(g.Generation)
		e.u64(g.Committed)
		e.u64(g.Lag)
		e.u32(g.LeaseMillis)
	}
	return e.b, nil
}

// DecodeGroupDescribeOK decodes a GroupDescribeOK body.
func DecodeGroupDescribeOK(b []byte) (GroupDescribeOK, error) {
	d := newDec(b)
	r := GroupDescribeOK{Tail: d.U64("tail"), Through: d.U64("through")}
	n := int(d.U32("group count"))
	if d.Err == nil && n*groupStateMin > d.Remaining() {
		d.Fail("%d groups cannot fit in %d bytes", n, d.Remaining())
	}
	for i := 0; i < n && d.Err == nil; i++ {
		g := GroupState{Group: d.str("group"), Owner: d.str("owner")}
		g.Generation = d.U64("generation")
		g.Committed = d.U64("committed")
		g.Lag = d.U64("lag")
		g.LeaseMillis = d.U32("lease")
		r.Groups = append(r.Groups, g)
	}
	return r, d.end("group describe ok")
}
