// Package server serves the Felix wire protocol (package wire) over TCP or
// TLS and the broker's HTTP endpoints (/live, /ready, /metrics).
//
// It owns one decision: how requests arriving on a connection become calls
// on shard logs and how their answers go back, under the connection limits
// (maximum frame size, records per batch, in-flight bytes per connection,
// a frame memory budget shared by all connections, connections in all and
// per remote address, handshake, frame and idle deadlines), and who may
// send them: a connection's principal is learned once, after the TLS
// handshake (Options.Authenticate), every request is checked by an
// auth.Authorizer before any work, and the port's Role decides which half
// of the protocol it carries (the client port never hands replication
// frames on; the peer port serves only brokers and only replication).
// Storage is reached through the Shards and
// Log interfaces declared here, so replication can later sit between the
// server and the log store.
//
// Ordering: appends and trims of one connection to one shard are applied in
// the order they arrived. Consecutive unconditional appends waiting in that
// order are merged into one store append (each still gets its own answer);
// conditional appends and trims are applied alone. Reads and describes run
// concurrently and may be answered out of order: responses carry the
// request id.
//
// Goroutines per connection: one reader (handshake, frame decoding,
// dispatch, backpressure), one writer (answers in queue order, one flush
// for many answers), one per shard queue while it has work, one per read or
// describe in flight, and on a connection that carries replication one that
// moves the bounded replication send queue to the writer.
//
// Lock order: Server.mu before conn.dmu; conn.qmu, budget.mu and
// storeShards.mu are taken alone (storeShards.mu before the store's own
// lock).
package server
