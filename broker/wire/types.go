package wire

import "fmt"

// MsgType is the one-byte message type of a frame. Values are stable: they
// are part of the protocol (docs/protocol.md).
type MsgType uint8

const (
	// MsgHello opens a connection (client to broker).
	MsgHello MsgType = 0x01
	// MsgHelloOK accepts a Hello (broker to client).
	MsgHelloOK MsgType = 0x02

	// MsgAppend asks to append a batch of records to a shard.
	MsgAppend MsgType = 0x10
	// MsgAppendOK answers MsgAppend.
	MsgAppendOK MsgType = 0x11
	// MsgRead asks for records of a shard.
	MsgRead MsgType = 0x12
	// MsgReadOK answers MsgRead.
	MsgReadOK MsgType = 0x13
	// MsgTrim asks for a conditional head trim [TR-2].
	MsgTrim MsgType = 0x14
	// MsgTrimOK answers MsgTrim.
	MsgTrimOK MsgType = 0x15
	// MsgDescribe asks for a shard's positions.
	MsgDescribe MsgType = 0x16
	// MsgDescribeOK answers MsgDescribe.
	MsgDescribeOK MsgType = 0x17
	// MsgMetadata asks a broker for the cluster's brokers and the shards
	// of streams, with their leaders (FeatureMetadata).
	MsgMetadata MsgType = 0x18
	// MsgMetadataOK answers MsgMetadata.
	MsgMetadataOK MsgType = 0x19
	// MsgCounterAdd adds to a counter of a shard (FeatureCounters).
	MsgCounterAdd MsgType = 0x1A
	// MsgCounterAddOK answers MsgCounterAdd.
	MsgCounterAddOK MsgType = 0x1B
	// MsgCounterGet reads a counter of a shard (FeatureCounters).
	MsgCounterGet MsgType = 0x1C
	// MsgCounterGetOK answers MsgCounterGet.
	MsgCounterGetOK MsgType = 0x1D
	// MsgCounterSnapshot snapshots a shard's counters into its counter
	// log, and may trim the log below the snapshot (FeatureCounters).
	MsgCounterSnapshot MsgType = 0x1E
	// MsgCounterSnapshotOK answers MsgCounterSnapshot.
	MsgCounterSnapshotOK MsgType = 0x1F
	// MsgGroupClaim claims a shard for a consumer group (FeatureGroups).
	MsgGroupClaim MsgType = 0x20
	// MsgGroupClaimOK answers MsgGroupClaim.
	MsgGroupClaimOK MsgType = 0x21
	// MsgGroupHeartbeat renews a group member's lease on a shard
	// (FeatureGroups).
	MsgGroupHeartbeat MsgType = 0x22
	// MsgGroupHeartbeatOK answers MsgGroupHeartbeat.
	MsgGroupHeartbeatOK MsgType = 0x23
	// MsgGroupCommit commits a group's offset on a shard (FeatureGroups).
	MsgGroupCommit MsgType = 0x24
	// MsgGroupCommitOK answers MsgGroupCommit.
	MsgGroupCommitOK MsgType = 0x25
	// MsgGroupLeave releases a member's ownership of a shard
	// (FeatureGroups).
	MsgGroupLeave MsgType = 0x26
	// MsgGroupLeaveOK answers MsgGroupLeave.
	MsgGroupLeaveOK MsgType = 0x27
	// MsgGroupDescribe asks for the consumer groups of a shard
	// (FeatureGroups).
	MsgGroupDescribe MsgType = 0x28
	// MsgGroupDescribeOK answers MsgGroupDescribe.
	MsgGroupDescribeOK MsgType = 0x29
	// MsgGroupAckConfig switches a group to per-record acknowledgement on
	// a shard (FeatureAcks).
	MsgGroupAckConfig MsgType = 0x2A
	// MsgGroupAckConfigOK answers MsgGroupAckConfig.
	MsgGroupAckConfigOK MsgType = 0x2B
	// MsgGroupFetch fetches records to process for a per-record group
	// (FeatureAcks).
	MsgGroupFetch MsgType = 0x2C
	// MsgGroupFetchOK answers MsgGroupFetch.
	MsgGroupFetchOK MsgType = 0x2D
	// MsgGroupAck acknowledges records of a per-record group
	// (FeatureAcks).
	MsgGroupAck MsgType = 0x2E
	// MsgGroupAckOK answers MsgGroupAck.
	MsgGroupAckOK MsgType = 0x2F
	// MsgGroupNak asks for records of a per-record group to be
	// redelivered at once (FeatureAcks).
	MsgGroupNak MsgType = 0x30
	// MsgGroupNakOK answers MsgGroupNak.
	MsgGroupNakOK MsgType = 0x31
	// MsgDeadLetterRead reads a shard's dead-letter log (FeatureAcks).
	MsgDeadLetterRead MsgType = 0x32
	// MsgDeadLetterReadOK answers MsgDeadLetterRead.
	MsgDeadLetterReadOK MsgType = 0x33
	// MsgDeadLetterRedrive appends a dead-lettered record to the data log
	// once (FeatureAcks).
	MsgDeadLetterRedrive MsgType = 0x34
	// MsgDeadLetterRedriveOK answers MsgDeadLetterRedrive.
	MsgDeadLetterRedriveOK MsgType = 0x35
	// MsgDeadLetterTrim drops the entries of a shard's dead-letter log
	// below a floor (FeatureAcks).
	MsgDeadLetterTrim MsgType = 0x36
	// MsgDeadLetterTrimOK answers MsgDeadLetterTrim.
	MsgDeadLetterTrimOK MsgType = 0x37

	// MsgShip is reserved for replication: a leader ships records to a
	// follower. Brokers without replication answer it with BadRequest.
	MsgShip MsgType = 0x40
	// MsgShipAnswer is reserved for replication: a follower answers where
	// its log really is [RP-4].
	MsgShipAnswer MsgType = 0x41

	// MsgError answers any request that failed; its request id is the
	// failed request's, or 0 for an error about the connection itself,
	// after which the broker closes the connection.
	MsgError MsgType = 0x7F
)

// ReservedReplication reports whether t lies in the range reserved for
// broker-to-broker replication (0x40..0x4F).
func (t MsgType) ReservedReplication() bool { return t >= 0x40 && t <= 0x4F }

// String returns the message type's name.
func (t MsgType) String() string {
	switch t {
	case MsgHello:
		return "Hello"
	case MsgHelloOK:
		return "HelloOK"
	case MsgAppend:
		return "Append"
	case MsgAppendOK:
		return "AppendOK"
	case MsgRead:
		return "Read"
	case MsgReadOK:
		return "ReadOK"
	case MsgTrim:
		return "Trim"
	case MsgTrimOK:
		return "TrimOK"
	case MsgDescribe:
		return "Describe"
	case MsgDescribeOK:
		return "DescribeOK"
	case MsgMetadata:
		return "Metadata"
	case MsgMetadataOK:
		return "MetadataOK"
	case MsgCounterAdd:
		return "CounterAdd"
	case MsgCounterAddOK:
		return "CounterAddOK"
	case MsgCounterGet:
		return "CounterGet"
	case MsgCounterGetOK:
		return "CounterGetOK"
	case MsgCounterSnapshot:
		return "CounterSnapshot"
	case MsgCounterSnapshotOK:
		return "CounterSnapshotOK"
	case MsgGroupClaim:
		return "GroupClaim"
	case MsgGroupClaimOK:
		return "GroupClaimOK"
	case MsgGroupHeartbeat:
		return "GroupHeartbeat"
	case MsgGroupHeartbeatOK:
		return "GroupHeartbeatOK"
	case MsgGroupCommit:
		return "GroupCommit"
	case MsgGroupCommitOK:
		return "GroupCommitOK"
	case MsgGroupLeave:
		return "GroupLeave"
	case MsgGroupLeaveOK:
		return "GroupLeaveOK"
	case MsgGroupDescribe:
		return "GroupDescribe"
	case MsgGroupDescribeOK:
		return "GroupDescribeOK"
	case MsgGroupAckConfig:
		return "GroupAckConfig"
	case MsgGroupAckConfigOK:
		return "GroupAckConfigOK"
	case MsgGroupFetch:
		return "GroupFetch"
	case MsgGroupFetchOK:
		return "GroupFetchOK"
	case MsgGroupAck:
		return "GroupAck"
	case MsgGroupAckOK:
		return "GroupAckOK"
	case MsgGroupNak:
		return "GroupNak"
	case MsgGroupNakOK:
		return "GroupNakOK"
	case MsgDeadLetterRead:
		return "DeadLetterRead"
	case MsgDeadLetterReadOK:
		return "DeadLetterReadOK"
	case MsgDeadLetterRedrive:
		return "DeadLetterRedrive"
	case MsgDeadLetterRedriveOK:
		return "DeadLetterRedriveOK"
	case MsgDeadLetterTrim:
		return "DeadLetterTrim"
	case MsgDeadLetterTrimOK:
		return "DeadLetterTrimOK"
	case MsgShip:
		return "Ship"
	case MsgShipAnswer:
		return "ShipAnswer"
	case MsgError:
		return "Error"
	default:
		return fmt.Sprintf("MsgType(0x%02x)", uint8(t))
	}
}
