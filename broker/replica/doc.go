// Package replica is the runtime around the pure replication core
// (broker/replication) for a broker in cluster mode: one goroutine per
// shard replica runs the core's drive loop, persists its writes through the
// log store, carries its messages over broker/peer connections (outgoing,
// as leader) and the server's replication hook (incoming, as follower),
// applies its commits, completes client appends with its acks and hands
// its reports to the control plane.
//
// # Drive loop
//
// Every event of a shard (a peer's message, a tick, a client proposal, a
// connection event, an assignment or known epoch from the control plane)
// goes through the shard's inbox to its goroutine, which feeds the core and
// then, while the core has a Ready: sends its Messages (requests over the
// pool's current connection to the follower, answers over the accepted
// connection the request came on, Message.Conn), applies its Commits with
// Log.SetCommitted (so the floor moves only on committed trims), completes
// the waiting client calls with its Acks, passes its Report to
// Options.OnReport, and hands its Writes to the shard's persister.
//
// Persisting is asynchronous. The persister goroutine queues the writes of
// the Readies it is handed in order (appends through Log.SubmitReplicated,
// the leader's own too since the core assigns offsets, without waiting, so
// the store writes the next batch while it syncs the previous one;
// truncations through Log.TruncateFrom and resets through Log.ResetAt once
// the appends queued before them are durable), several Readies waiting
// together as one store append, and a completer goroutine hands each Ready
// back once its writes are durable; the drive loop then calls Advance
// with it. Meanwhile the loop keeps feeding
// the core: a leader ships new proposals and counts followers' answers
// while its own write syncs, and a follower takes the next Append. At most
// maxPersisting Readies are in flight; beyond that the core gathers (and
// batches) its output. Commits and Acks never cover records of a Ready not
// yet advanced, so delivering them before the Ready's writes are durable is
// safe; the core lowers an in-flight Ready's persisted position to any
// later truncation point. A Ready holding a reset is persisted in the loop
// once everything before it is, since its commit follows the reset.
//
// A store write refused for want of space (record.ErrStorageFull: below
// the free-space floor, or after ENOSPC) does not stop the replica, as
// other store errors do. The persister holds the refused Ready and every
// one behind it, unadvanced, so the core counts none of their records: a
// follower answers no Append that needs them, a leader commits and
// acknowledges none. The waiting client calls are refused with
// StorageFull (not acknowledged; they may or may not survive). While it
// holds, the loop drops the Appends it receives and takes Readies beyond
// maxPersisting into an ordered queue, so nothing piles up. Once the
// store takes writes again the held writes are written, in order,
// skipping what an earlier attempt stored, and the Readies are advanced:
// a follower answers, and the leader's next pass copies what it missed.
//
// A pass starts every Options.PassInterval (one core Tick); a client append
// ships at once. One clock per Manager ticks every shard at the same
// moment (pass.go), so the requests of all its shards' passes to a peer
// leave in one write, and their answers come back together (issue 31).
// Followers get no ticks: their core does nothing on one. Where a peer
// connection accepted wire.FeatureShipBundle, the messages without records
// that one Ready sends over one connection (an idle pass's request per
// log, the answers to them) go out as one bundle frame (bundle.go); every
// message is still sent and stepped on its own [RP-4].
// The inbox holds at most 4096 events but memory only for those waiting
// (inbox.go).
//
// Idle shards are the exception to the drive loop (idle.go): while a shard
// has nothing waiting in its inbox, nothing with its persister and shipped
// no records in its last messages, the pass clock ticks its core on the
// clock's goroutine and the peer connections' readers step the requests
// and answers they decoded into it on theirs, under the lock that the run
// goroutine otherwise holds for each round; the shard's goroutine sleeps
// through idle passes. Readies with writes, records to copy, proposals and
// control-plane events go to the goroutine as before (issue 31).
//
// # Starting state
//
// A shard's replication.State comes from its four logs: base (the first
// stored offset), tail, and the epoch starts, found by scanning every
// stored record with ReadRaw at EnsureShard. The scan reads the whole log
// once, so EnsureShard costs about one full read of the shard's logs; an
// epoch index of fence records in the log store would remove it.
//
// Catch-up: a follower with a new storage id (wiped, or new) is reset to
// the shard's base [RP-3] and copied from the leader's first stored offset.
// When the leader has deleted segments (below the floor, or retention) the
// core asks the follower's runtime to reset the log to start empty there
// (WriteReset, persisted in Ready order with Log.ResetAt; the recent-record
// cache of that log is dropped) and copies from that offset on.
//
// # Maintenance
//
// Every Options.MaintainInterval a goroutine of the Manager runs Maintain:
// for every log of every shard it runs, outside the shard's goroutine,
// Log.DeleteBelowFloor (whole segments below the committed floor [TR-6])
// and Log.ApplyRetention (the stream's retention [TR-7]; the store deletes
// only committed records and never the active segment), then posts the
// log's new first stored offset into the shard's loop, which feeds it to
// the core as Compacted: the leader ships from there and resets a follower
// that lacks it. Each replica deletes on its own schedule; the floor and
// the committed mark it deletes under are the shard's. Retention and
// fencing come from the stream (SetLogPolicy, data log only); a fenced
// stream never gets retention. Options.Metrics counts passes and deletions
// by reason; a pass that deleted something logs one line.
//
// # Serving clients
//
// Manager.Shards implements server.Shards for the replicated mode. Only the
// leader serves a shard's data log; a follower refuses with NotLeader and
// the leader's client address as a hint, a recovering leader with
// Unavailable. Appends become proposals with the stream's ack mode and the
// optional expected tail [TR-1]; trims become KindTrim record proposals
// under the tail check, and a trim at or below the current floor proposes
// no record but still checks the tail against the leader's tail [TR-3].
// Reads of Quorum and All streams serve only committed records.
//
// # Wiring (felix broker, cluster mode)
//
//	mgr, _ := replica.NewManager(replica.Options{
//		Store: store, Self: nodeName, SelfStorageID: id, Incarnation: inc,
//		Resolve: peerAddr, // NodeID -> host:port of its peer port
//		ClientAddr: clientAddr, // NodeID -> host:port of its client port
//		Dial: mtlsDial, // TLS with this broker's certificate
//		OnReport: reports.Publish, // non-blocking hand-off to controlplane
//	})
//	// Client port: refuses replication frames.
//	srv := server.New(mgr.Shards(), server.Options{
//		StorageID: id[:], Replication: mgr.ReplicationHandler(),
//		Authenticate: verifyClient, Authorizer: grants, ...})
//	// Peer port: mutual TLS, brokers only; the handler applies a frame
//	// only if its sender is the broker on the certificate.
//	peerSrv := server.New(mgr.Shards(), server.Options{Role: server.RolePeer,
//		StorageID: id[:], Replication: mgr.ReplicationHandler(),
//		TLS: peerTLS, Authenticate: verifyBroker, ...})
//	// For every FelixShard this broker is a replica of:
//	mgr.EnsureShard(shard, replicas, ackMode, base)
//	mgr.SetKnownEpoch(shard, epoch)     // from the control plane, before shipping
//	mgr.SetAssignment(shard, assignment) // whenever status.assignment changes
//	mgr.SetLogPolicy(shard, replica.LogPolicy{Retention: r, Fenced: f}) // from the FelixStream
//	...
//	srv.Shutdown(ctx); mgr.Close(); store.Close()
//
// The server's StorageID must be the Manager's SelfStorageID: followers
// present it in the HelloOK a leader reads [RP-2].
package replica
