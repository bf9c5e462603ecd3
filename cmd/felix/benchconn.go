package main

import (
	"context"

	"felix.dev/felix/broker/record"
	"felix.dev/felix/broker/wire"
)

// pendingAppend is an append in flight: *client.PendingAppend (one
// broker's connection) or *client.ClusterPendingAppend (routed).
type pendingAppend interface {
	Wait(ctx context.Context) (wire.AppendOK, error)
}

// benchConn is what one `felix bench` writer or reader sends through: one
// broker's connection (--broker) or a routing client (--bootstrap).
type benchConn struct {
	appendSync  func(ctx context.Context, shard record.ShardID, recs []record.Record) error
	appendAsync func(ctx context.Context, shard record.ShardID, recs []record.Record) (pendingAppend, error)
	read        func(ctx context.Context, req wire.ReadRequest) (wire.ReadOK, error)
}

// appender is what both clients offer bench: one broker's connection
// (*client.Client, pending *client.PendingAppend) and a routing client
// (*client.Cluster, pending *client.ClusterPendingAppend).
type appender[P pendingAppend] interface {
	Append(ctx context.Context, shard record.ShardID, recs []record.Record, expectTail *uint64) (wire.AppendOK, error)
	AppendAsync(ctx context.Context, shard record.ShardID, recs []record.Record, expectTail *uint64) (P, error)
	Read(ctx context.Context, req wire.ReadRequest) (wire.ReadOK, error)
}

// connOf sends through c: directly to one broker (--broker) or routed to
// each shard's leader (--bootstrap).
func connOf[P pendingAppend](c appender[P]) benchConn {
	return benchConn{
		appendSync: func(ctx context.Context, shard record.ShardID, recs []record.Record) error {
			_, err := c.Append(ctx, shard, recs, nil)
			return err
		},
		appendAsync: func(ctx context.Context, shard record.ShardID, recs []record.Record) (pendingAppend, error) {
			p, err := c.AppendAsync(ctx, shard, recs, nil)
			if err != nil {
				return nil, err // not a typed nil inside the interface
			}
			return p, nil
		},
		read: c.Read,
	}
}
