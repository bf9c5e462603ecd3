// Package replication is the deterministic replication core of ONE replica
// of one shard, in etcd-raft's Step/Ready/Advance style: no goroutines,
// clocks, randomness or I/O inside (the only call out is the read-only
// LogReader, used to fetch persisted record contents to ship). The same
// inputs in the same order produce the same outputs, so a seeded simulator
// can drive many replicas through crashes, wipes and partitions.
//
// The rules it enforces are named in docs/rules.md and
// docs/replication-design.md: cursors per follower per log learned under a
// storage id [RP-1], the id looked up at the start of every exchange [RP-2]
// and a changed id resetting every log's cursor [RP-3], passes that always
// ask the follower [RP-4], a quorum mark that counts only followers
// answered this pass over a connection presenting the cursor's id [RP-5],
// reports [RP-6], the epoch check and the fence (never at an epoch at or
// below a log's last epoch: Status.EpochBehindLog). A follower whose log
// ends below the leader's first stored offset resets its log there
// (WriteReset) when the leader vouches the offsets below are committed;
// see docs/replication-design.md, "Catch-up from the leader's start".
//
// # State it keeps
//
// The core keeps an in-memory view of each local log: base, tail, the
// persisted position, the epoch starts (offset, epoch) of the log, and the
// records written but not yet persisted. It is built from State at New
// (the store supplies the epoch starts; the first record of every epoch is
// a fence record, so a store can index them like trim records). Record
// contents below the persisted position are read through LogReader.
//
// # Drive loop
//
// The runtime owns one Replica per shard replica and serialises calls:
//
//	r, _ := replication.New(cfg, stateFromStore)
//	r.SetKnownEpoch(epochFromControlPlane) // before any shipping is accepted
//	for {
//		select {
//		case m := <-incoming:       // m.Conn = connection it arrived on
//			r.Step(m)
//		case <-ticker.C:
//			r.Tick()
//		case p := <-proposals:
//			r.Propose(p)
//		case ev := <-connEvents:    // handshake presented storage id ev.ID
//			r.Connected(ev.Peer, ev.Conn, ev.ID) // or Disconnected / LookupFailed
//		case a := <-assignments:    // FelixShard status.assignment
//			r.Assign(a)
//		case c := <-compactions:    // segments below the committed floor deleted
//			r.Compacted(c.Log, c.Start)
//		}
//		if r.HasReady() {
//			rd := r.Ready()
//			send(rd.Messages)          // may go before the writes are durable
//			r.Recycle(rd.Messages)     // optional: sent and not kept; the core reuses the array
//			persist(rd.Writes)         // in order, durably per the fsync mode; WriteReset = ResetAt
//			publish(rd.Commits)        // readers of Quorum/All streams
//			if rd.Serving != 0 {
//				serveReads(rd.Serving) // fence committed: reads may be served [TR-4]
//			}
//			complete(rd.Acks)          // client acknowledgements
//			if rd.Report != nil {
//				writeReport(rd.Report) // FelixShard status.report, rate-limited
//			}
//			r.Advance(rd)
//		}
//	}
//
// That loop persists synchronously. A runtime may instead persist
// asynchronously (broker/replica does): hand rd.Writes to a persister and
// go on feeding inputs and taking Readies, delivering each Ready's Commits
// and Acks at once, and call Advance once per Ready, in Ready order, as
// its writes become durable. A Ready holding a WriteReset is the
// exception: its Commits follow the reset. See docs/replication-design.md,
// "Asynchronous persistence".
package replication
