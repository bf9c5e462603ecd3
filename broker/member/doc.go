// Package member runs a broker as a member of a Felix cluster: it owns the
// startup order of [ID-4] and the glue between the control plane (the
// Kubernetes API through broker/controlplane), the data directory
// (broker/datadir), the log store, the replication runtime (broker/replica)
// and the protocol server.
//
// Startup, in this order and no other:
//
//  1. open the data directory and read or rotate the storage id from local
//     facts [ID-1] [ID-3];
//  2. ask the control plane for this broker's current incarnation, holding
//     while it cannot be reached (/live up, /ready down, nothing opened,
//     nothing announced);
//  3. apply the incarnation check (a control plane ahead of the
//     registration file rotates the id) [ID-3];
//  4. register the storage id; the operator grants incarnation+1; write the
//     registration file [ID-2];
//  5. open the log store, learn the current assignments (epochs) of every
//     shard this broker holds before accepting any shipping, and serve.
//
// The member acts only on the operator's assignments; reports of the shards
// it leads go to FelixShard status.report through a rate-bounded writer.
// With each assignment it applies the stream's spec.retention and
// spec.fenced to the shard's data log (replica.Manager.SetLogPolicy; a
// fenced stream never gets retention); a change of a stream's spec is
// applied like a change of its shards. The replica manager's maintenance
// (Config.MaintainInterval) deletes whole segments below each log's floor
// and applies retention.
package member
