// Package sim is a seeded, deterministic simulator for one shard's
// replication and placement (issue 7). It runs R=3 and R=5 shards made of
// the real replication core (broker/replication), the real placement
// function (broker/placement) and the real storage-identity rotation rule
// (broker/datadir.Decide), over an in-memory disk per replica that keeps
// written and synced marks apart, and a small simulated control plane
// (registry with incarnations and heartbeats on simulated time, leader
// reports, assignments).
//
// One seed decides everything: the shard's shape (replica count, fsync
// mode, loss rate) and a schedule of events (appends under every ack mode,
// ticks, idle periods, message delivery with delay, loss and reordering,
// process and machine crashes, disk wipes, snapshot restores, partitions,
// a leader frozen past its expiry and resumed). Each event carries its own
// sub-seed, so dropping events from a schedule (shrinking) leaves the
// others unchanged.
//
// Ticks also trim, with randomness of their own (so the schedule's draws
// are unchanged): a log's trim floor rises towards the serving leader's
// committed position and replicas delete their records below it (and
// below their own committed position, never their last record), telling
// the core with Replica.Compacted; the disk model keeps a base per log and
// implements WriteReset. Records below the floor are legitimately gone:
// the invariants check acknowledged and committed records at or above it,
// and every WriteReset against the floor (see checkReset).
//
// After every event the simulator checks the replication invariants
// of docs/rules.md (see Invariant); a violation stops the run and is returned as
// a Failure with a replayable trace. Faults are injected only while the
// fault budget allows: at most (R-1)/2 replicas faulty, where a replica is
// faulty while it is down or frozen, and from a start after its volume lost
// data (a wipe, a restore, a machine crash that dropped unsynced writes) or
// rotated its storage id, until a report of the serving leader counts it
// caught up under its current id and its log holds every acknowledged
// record again.
//
// The workload writes all four logs of the shard (data, group,
// dead-letter, counter; Config.ProposeTo aims it at some), and every
// invariant about records holds on each log; a Failure names its log.
//
// Rules can be switched off for twins (Config.Rules, Config.Placement,
// Config.NoRestoreRotation, Config.LogOutsideDir; see Config.ParseOff), and Config.LegacyPeers
// runs some brokers as older builds without storage ids. docs/testing.md
// describes the fault model, the invariants, the twins and how to replay a
// seed.
//
// The simulator has no goroutines, reads no clock and never depends on map
// iteration order: the same Config gives the same Result.
package sim
