// Package datadir owns a broker's data directory and the storage identity
// that names the data in it (rules [ID-1]..[ID-5], docs/rules.md).
//
// The directory holds, beside the log store:
//
//   - storage-id: a random 16-byte id naming the DATA, not the node [ID-1].
//   - registration: the node incarnation the control plane gave at the last
//     registration [ID-2].
//   - run-state: running or clean stop, the boot id and the fsync mode of
//     the run that wrote it.
//   - lock: an flock(2) target so two brokers never share a directory.
//
// Whether a start keeps the id or makes a new one is decided by Decide, a
// pure function of what was found at start [ID-3]. Dir applies that
// decision in the startup order of [ID-4] through one type per step:
//
//	d, _ := datadir.Open(path, opts)          // lock
//	id, _ := d.Identify()                     // (a) local facts, may rotate
//	cp := askControlPlane()                   // (b) caller
//	v, _ := id.CheckIncarnation(cp)           // (c) may rotate
//	inc := register(v.StorageID())            // caller registers the final id
//	p, _ := v.RecordRegistration(inc)         // (d) write registration
//	run, _ := p.MarkRunning()                 // (e) before any store opens
//	// open stores, serve ...; close stores
//	_ = run.MarkCleanStop()                   // (f) after stores are closed
//	_ = d.Close()
//
// A broker without a control plane uses id.Standalone() in place of steps
// (b)..(d). RestorePoint deletes storage-id before anything cuts a log
// [ID-5].
//
// File formats and the reasoning behind each rotation rule are in
// docs/storage-identity.md.
package datadir
