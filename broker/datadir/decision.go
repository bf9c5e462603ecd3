package datadir

import "fmt"

// FileState is what start found for one identity file.
type FileState uint8

const (
	// FileMissing: no such file.
	FileMissing FileState = iota
	// FileCorrupt: the file exists but does not decode (errCorruptFile).
	FileCorrupt
	// FileValid: the file decoded.
	FileValid
)

// String returns "missing", "corrupt" or "valid".
func (s FileState) String() string {
	switch s {
	case FileMissing:
		return "missing"
	case FileCorrupt:
		return "corrupt"
	case FileValid:
		return "valid"
	}
	return fmt.Sprintf("FileState(%d)", uint8(s))
}

// ControlPlaneState says what the control plane answered about this node's
// current incarnation at step (b) of [ID-4].
type ControlPlaneState uint8

const (
	// ControlPlaneNotAsked: standalone broker, or a decision made before
	// step (b). The incarnation check is skipped.
	ControlPlaneNotAsked ControlPlaneState = iota
	// ControlPlaneNoRecord: the control plane has never registered this
	// node (or forgot it). It says nothing about the directory.
	ControlPlaneNoRecord
	// ControlPlaneKnown: the control plane holds Incarnation for this node.
	ControlPlaneKnown
)

// String returns "not-asked", "no-record" or "known".
func (s ControlPlaneState) String() string {
	switch s {
	case ControlPlaneNotAsked:
		return "not-asked"
	case ControlPlaneNoRecord:
		return "no-record"
	case ControlPlaneKnown:
		return "known"
	}
	return fmt.Sprintf("ControlPlaneState(%d)", uint8(s))
}

// ControlPlane is the control plane's answer at step (b) of [ID-4].
// Incarnation is meaningful only when State is ControlPlaneKnown.
type ControlPlane struct {
	State       ControlPlaneState
	Incarnation Incarnation
}

// Facts is everything the rotation decision looks at, as found at start,
// before any store opens [ID-3].
type Facts struct {
	// StorageID is the state of the storage-id file.
	StorageID FileState
	// RunState is the state of the run-state file; Run is meaningful only
	// when it is FileValid.
	RunState FileState
	Run      RunState
	// CurrentBootID is the boot id now; "" when it could not be read.
	CurrentBootID string
	// SyncFSOK is true when syncfs(2) on the data directory succeeded at
	// this start, before the decision.
	SyncFSOK bool
	// Registration is the state of the registration file; Registered is
	// meaningful only when it is FileValid.
	Registration FileState
	Registered   Incarnation
	// ControlPlane is the control plane's answer, or ControlPlaneNotAsked.
	ControlPlane ControlPlane
}

// Action is what happens to the storage id.
type Action uint8

const (
	// Keep the id found in storage-id.
	Keep Action = iota + 1
	// New: make and write a new random id.
	New
)

// String returns "keep" or "new".
func (a Action) String() string {
	switch a {
	case Keep:
		return "keep"
	case New:
		return "new"
	}
	return fmt.Sprintf("Action(%d)", uint8(a))
}

// Reason names the rule of [ID-3] that produced a decision. Its String is
// a stable snake_case token meant for log keys, event reasons and metric
// labels; the set of values only grows.
type Reason uint8

const (
	// ReasonNone is the zero value; no decision carries it.
	ReasonNone Reason = iota

	// Local rules: what the directory itself shows.

	// ReasonStorageIDMissing: no storage-id file (fresh, wiped or replaced
	// volume, or a restore point). New.
	ReasonStorageIDMissing
	// ReasonStorageIDCorrupt: storage-id does not decode. New.
	ReasonStorageIDCorrupt
	// ReasonRunStateMissing: an id but no run-state record, so how the last
	// run ended is unknown. New.
	ReasonRunStateMissing
	// ReasonRunStateCorrupt: run-state does not decode, so how the last run
	// ended and under which fsync mode is unknown. New, whatever the mode.
	ReasonRunStateCorrupt
	// ReasonCleanStop: the last run stopped cleanly. Keep.
	ReasonCleanStop
	// ReasonUncleanOnCommit: the last run did not stop cleanly but ran
	// OnCommit, so everything it acknowledged was synced. Keep.
	ReasonUncleanOnCommit
	// ReasonUncleanSameBootSynced: the last run (Periodic/None) did not
	// stop cleanly, it ran in this same, known boot and syncfs succeeded,
	// so the page cache it left reached the disk. Keep.
	ReasonUncleanSameBootSynced
	// ReasonUncleanBootUnknown: the last run (Periodic/None) did not stop
	// cleanly and the recorded or the current boot id is unknown. New.
	ReasonUncleanBootUnknown
	// ReasonUncleanBootChanged: the last run (Periodic/None) did not stop
	// cleanly and the machine rebooted since (machine crash). New.
	ReasonUncleanBootChanged
	// ReasonUncleanSyncFSFailed: the last run (Periodic/None) did not stop
	// cleanly, same boot, but syncfs failed. New.
	ReasonUncleanSyncFSFailed

	// Incarnation rules: the control plane against the registration file.

	// ReasonIncarnationNotChecked: no control plane was asked (standalone,
	// or before step (b)).
	ReasonIncarnationNotChecked
	// ReasonControlPlaneNoRecord: the control plane has no incarnation for
	// this node; it says nothing about the directory. Keep.
	ReasonControlPlaneNoRecord
	// ReasonControlPlaneBehind: the control plane's incarnation is below
	// the registration file's; it was restored or forgot. Keep.
	ReasonControlPlaneBehind
	// ReasonControlPlaneEqual: the directory saw the latest registration.
	// Keep.
	ReasonControlPlaneEqual
	// ReasonControlPlaneAhead: the node registered since this directory
	// last recorded a registration (restored directory). New.
	ReasonControlPlaneAhead
	// ReasonRegistrationMissing: the control plane knows the node but the
	// directory has no registration file, so it cannot show it saw the
	// latest registration. New.
	ReasonRegistrationMissing
	// ReasonRegistrationCorrupt: as ReasonRegistrationMissing, with a file
	// that does not decode. New.
	ReasonRegistrationCorrupt

	// ReasonLogStoreDamaged: the log store found damage to acknowledged
	// data when it opened, after the decision; the broker gave up its claim
	// (Running.RotateForDamage). New.
	ReasonLogStoreDamaged

	reasonEnd // keep last
)

var reasonNames = [...]string{
	ReasonNone:                  "none",
	ReasonStorageIDMissing:      "storage_id_missing",
	ReasonStorageIDCorrupt:      "storage_id_corrupt",
	ReasonRunStateMissing:       "run_state_missing",
	ReasonRunStateCorrupt:       "run_state_corrupt",
	ReasonCleanStop:             "clean_stop",
	ReasonUncleanOnCommit:       "unclean_stop_on_commit",
	ReasonUncleanSameBootSynced: "unclean_stop_same_boot_synced",
	ReasonUncleanBootUnknown:    "unclean_stop_boot_unknown",
	ReasonUncleanBootChanged:    "unclean_stop_boot_changed",
	ReasonUncleanSyncFSFailed:   "unclean_stop_syncfs_failed",
	ReasonIncarnationNotChecked: "incarnation_not_checked",
	ReasonControlPlaneNoRecord:  "control_plane_no_record",
	ReasonControlPlaneBehind:    "control_plane_behind",
	ReasonControlPlaneEqual:     "control_plane_equal",
	ReasonControlPlaneAhead:     "control_plane_ahead",
	ReasonRegistrationMissing:   "registration_missing",
	ReasonRegistrationCorrupt:   "registration_corrupt",
	ReasonLogStoreDamaged:       "log_store_damaged",
}

// String returns the stable snake_case token of r.
func (r Reason) String() string {
	if r < reasonEnd {
		return reasonNames[r]
	}
	return fmt.Sprintf("reason_%d", uint8(r))
}

// Reasons returns every Reason a decision can carry, for callers that
// pre-create one metric series per reason.
func Reasons() []Reason {
	out := make([]Reason, 0, reasonEnd-1)
	for r := ReasonNone + 1; r < reasonEnd; r++ {
		out = append(out, r)
	}
	return out
}

// Decision is the outcome of Decide.
type Decision struct {
	// Action is Keep or New.
	Action Action
	// Reason is the rule that decided: the first rule that asked for a new
	// id, or, for Keep, the local rule that kept it.
	Reason Reason
	// Local is the outcome of the local rules alone.
	Local Reason
	// Incarnation is the outcome of the incarnation check (or
	// ReasonIncarnationNotChecked).
	Incarnation Reason
}

// Decide is the rotation rule [ID-3]: a new id exactly when the directory
// may hold less than its peers were told, and whenever the evidence is
// unclear. It is pure: same facts, same decision. The local rules come
// first, in this order:
//
//  1. storage-id missing or corrupt: new.
//  2. run-state missing or corrupt: new (how and under which fsync mode the
//     last run ended is unknown; this holds even if the broker is now
//     configured OnCommit, since the recorded mode is what matters).
//  3. clean stop: keep.
//  4. unclean stop under OnCommit: keep.
//  5. unclean stop under Periodic/None: keep only when the recorded boot id
//     and the current one are both known and equal and syncfs succeeded;
//     otherwise new (boot unknown, boot changed, syncfs failed, checked in
//     that order).
//
// Then, when the control plane was asked (ControlPlaneKnown), the
// incarnation check: a control plane ahead of the registration file, or a
// registration file that is missing or corrupt, means new; equal or behind
// means keep. ControlPlaneNoRecord and ControlPlaneNotAsked skip it.
func Decide(f Facts) Decision {
	local := decideLocal(f)
	inc := decideIncarnation(f)
	d := Decision{Action: Keep, Reason: local, Local: local, Incarnation: inc}
	switch {
	case rotates(local):
		d.Action = New
	case rotates(inc):
		d.Action = New
		d.Reason = inc
	}
	return d
}

// rotates reports whether a rule outcome asks for a new id.
func rotates(r Reason) bool {
	switch r {
	case ReasonStorageIDMissing, ReasonStorageIDCorrupt,
		ReasonRunStateMissing, ReasonRunStateCorrupt,
		ReasonUncleanBootUnknown, ReasonUncleanBootChanged, ReasonUncleanSyncFSFailed,
		ReasonControlPlaneAhead, ReasonRegistrationMissing, ReasonRegistrationCorrupt:
		return true
	}
	return false
}

// decideLocal applies the local rules of Decide.
func decideLocal(f Facts) Reason {
	switch f.StorageID {
	case FileMissing:
		return ReasonStorageIDMissing
	case FileValid:
	default:
		return ReasonStorageIDCorrupt
	}
	switch f.RunState {
	case FileMissing:
		return ReasonRunStateMissing
	case FileValid:
	default:
		return ReasonRunStateCorrupt
	}
	switch {
	case f.Run.Phase == PhaseCleanStop:
		return ReasonCleanStop
	case f.Run.Phase != PhaseRunning:
		// Not a decodable record; treat like a corrupt one.
		return ReasonRunStateCorrupt
	}
	switch f.Run.Fsync {
	case FsyncOnCommit:
		return ReasonUncleanOnCommit
	case FsyncPeriodic, FsyncNone:
	default:
		return ReasonRunStateCorrupt
	}
	switch {
	case f.Run.BootID == "" || f.CurrentBootID == "":
		return ReasonUncleanBootUnknown
	case f.Run.BootID != f.CurrentBootID:
		return ReasonUncleanBootChanged
	case !f.SyncFSOK:
		return ReasonUncleanSyncFSFailed
	}
	return ReasonUncleanSameBootSynced
}

// decideIncarnation applies the incarnation check of Decide.
func decideIncarnation(f Facts) Reason {
	switch f.ControlPlane.State {
	case ControlPlaneKnown:
	case ControlPlaneNoRecord:
		return ReasonControlPlaneNoRecord
	default:
		return ReasonIncarnationNotChecked
	}
	switch f.Registration {
	case FileMissing:
		return ReasonRegistrationMissing
	case FileValid:
	default:
		return ReasonRegistrationCorrupt
	}
	switch {
	case f.ControlPlane.Incarnation > f.Registered:
		return ReasonControlPlaneAhead
	case f.ControlPlane.Incarnation < f.Registered:
		return ReasonControlPlaneBehind
	}
	return ReasonControlPlaneEqual
}
