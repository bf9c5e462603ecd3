// Package peer carries the replication core's messages between brokers: the
// frame codec for replication.Message (frame types wire.MsgShip for
// requests and wire.MsgShipAnswer for answers, layout in docs/protocol.md,
// "Replication frames") and the outgoing connections a broker keeps to the
// other replicas of its shards.
//
// An outgoing connection opens with a Hello offering
// wire.FeatureStorageID and this broker's storage id; the follower's
// HelloOK presents the follower's own id, which is what the leader's core
// compares with its cursors [RP-2]. Every successful handshake gets a new
// replication.ConnID that is never reused, so an answer that arrives over
// an older connection is recognisable as such. A peer that does not
// negotiate the bit presents "" (an older broker).
//
// It owns one decision: how replication messages travel. What they say is
// the replication package's; what is done with them is broker/replica's.
package peer
