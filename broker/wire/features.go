package wire

import (
	"fmt"
	"strings"
)

// Features is the set of optional protocol features, one bit each. A side
// offers the bits it understands in its Hello; the broker answers with the
// intersection, and only the bits in that intersection change any frame on
// the connection. A peer that offers no bit sees exactly the version-1
// frames.
type Features uint64

const (
	// FeatureStorageID: the Hello and HelloOK carry the sender's 16-byte
	// storage id as an extension, so a leader can ask which copy of the
	// data a follower's connection describes [RP-2].
	FeatureStorageID Features = 1 << 0
	// FeatureTrimTag: a CursorTooOld error carries the headers of the trim
	// that set the floor [TR-4].
	FeatureTrimTag Features = 1 << 1
	// FeatureLogPolicy: a DescribeOK carries the data log's policy, whether
	// it is fenced and whether its retention is on [FD-4].
	FeatureLogPolicy Features = 1 << 2
	// FeatureStorageErrors: the broker may answer with the error codes
	// Corrupt (10) and StorageFull (11). A connection without it gets
	// Unavailable in their place, with the same message, so a client that
	// predates them retries as it does for any Unavailable.
	FeatureStorageErrors Features = 1 << 3
	// FeatureAuth: the broker may answer with the error codes
	// NotAuthorized (12) and Unauthenticated (13). A connection without it
	// gets BadRequest in their place, its message prefixed with "not
	// authorized: " or "unauthenticated: ", so a client that predates them
	// does not retry a refusal that retrying cannot heal.
	FeatureAuth Features = 1 << 4
	// FeatureMetadata: the broker serves the Metadata request (the
	// cluster's brokers, each shard's leader, epoch and replicas), and a
	// ShardUnknown error carries the shard's leader and epoch, as
	// NotLeader does, when the broker knows them. A connection without it
	// gets BadRequest for a Metadata request and a ShardUnknown without
	// fields.
	FeatureMetadata Features = 1 << 5
	// FeatureIdempotent: an Append may carry a producer id and sequence
	// number (flag bit 1), and the broker may answer with the error code
	// OutOfSequence (14). The leader de-duplicates a retried batch and
	// answers it with its original offsets, across leader changes, since
	// the producer and sequence are stored in the replicated log
	// (broker/producer). A connection without it cannot send the fields
	// (flag bit 1 is BadRequest) and never gets the code.
	FeatureIdempotent Features = 1 << 6
	// FeatureShipBundle: replication frames (MsgShip, MsgShipAnswer) sent
	// to the side that offered it may be bundles, several replication
	// messages in one frame (body version 2, broker/peer), so the
	// requests and answers of a pass cost one frame per peer rather than
	// one per log (issue 31). Only brokers offer it; a connection without
	// it carries only version-1 bodies, one message each.
	FeatureShipBundle Features = 1 << 7
	// FeatureCounters: the broker serves the CounterAdd, CounterGet and
	// CounterSnapshot requests on a shard's counter log, and may answer
	// with the error code CounterLimit (15). A connection without it gets
	// BadRequest for the requests and never gets the code.
	FeatureCounters Features = 1 << 8
	// FeatureGroups: the broker serves the GroupClaim, GroupHeartbeat,
	// GroupCommit, GroupLeave and GroupDescribe requests on a shard's group
	// log, and may answer with the error codes GroupFenced (16) and
	// GroupLimit (17). A connection without it gets BadRequest for the
	// requests and never gets the codes.
	FeatureGroups Features = 1 << 9
	// FeatureAcks: the broker serves the GroupAckConfig, GroupFetch,
	// GroupAck and GroupNak requests (per-record acknowledgement with
	// redelivery, on a shard's group log) and the DeadLetterRead,
	// DeadLetterRedrive and DeadLetterTrim requests (on a shard's
	// dead-letter log). Its error
	// codes are those of FeatureGroups: a connection offers both. A
	// connection without it gets BadRequest for the requests.
	FeatureAcks Features = 1 << 10
)

// KnownFeatures is every bit this implementation understands.
const KnownFeatures = FeatureStorageID | FeatureTrimTag | FeatureLogPolicy | FeatureStorageErrors | FeatureAuth | FeatureMetadata | FeatureIdempotent | FeatureShipBundle | FeatureCounters | FeatureGroups | FeatureAcks

// Has reports whether every bit of b is set in f.
func (f Features) Has(b Features) bool { return f&b == b }

// String lists the set bits by name, e.g. "storage-id|trim-tag".
func (f Features) String() string {
	if f == 0 {
		return "none"
	}
	var parts []string
	for bit := 0; bit < 64; bit++ {
		b := Features(1) << bit
		if f&b == 0 {
			continue
		}
		switch b {
		case FeatureStorageID:
			parts = append(parts, "storage-id")
		case FeatureTrimTag:
			parts = append(parts, "trim-tag")
		case FeatureLogPolicy:
			parts = append(parts, "log-policy")
		case FeatureStorageErrors:
			parts = append(parts, "storage-errors")
		case FeatureAuth:
			parts = append(parts, "auth")
		case FeatureMetadata:
			parts = append(parts, "metadata")
		case FeatureIdempotent:
			parts = append(parts, "idempotent")
		case FeatureShipBundle:
			parts = append(parts, "ship-bundle")
		case FeatureCounters:
			parts = append(parts, "counters")
		case FeatureGroups:
			parts = append(parts, "groups")
		case FeatureAcks:
			parts = append(parts, "acks")
		default:
			parts = append(parts, fmt.Sprintf("bit%d", bit))
		}
	}
	return strings.Join(parts, "|")
}
